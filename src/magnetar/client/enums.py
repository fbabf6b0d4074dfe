"""Enumerations with the official client's names and values."""

from __future__ import annotations

from enum import IntEnum


class CompressionType(IntEnum):
    NONE = 0
    LZ4 = 1
    ZLib = 2
    ZSTD = 3
    SNAPPY = 4


class ConsumerType(IntEnum):
    Exclusive = 0
    Shared = 1
    Failover = 2
    KeyShared = 3


class InitialPosition(IntEnum):
    Latest = 0
    Earliest = 1


class PartitionsRoutingMode(IntEnum):
    UseSinglePartition = 0
    RoundRobinDistribution = 1
    CustomPartition = 2


class BatchingType(IntEnum):
    """How a batching producer groups messages (``pulsar.BatchingType``).

    ``Default`` puts messages into batches in send order; ``KeyBased`` keeps one open batch
    per key (ordering key, else partition key), so every batch holds a single key and
    Key_Shared subscriptions can dispatch it to the consumer owning that key.
    """

    Default = 0
    KeyBased = 1


class HashingScheme(IntEnum):
    """How a message key picks a partition (``BoostHash`` is the Python client's default)."""

    BoostHash = 0
    JavaStringHash = 1
    Murmur3_32Hash = 2


class RegexSubscriptionMode(IntEnum):
    PersistentOnly = 0
    NonPersistentOnly = 1
    AllTopics = 2
