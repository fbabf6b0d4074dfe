"""Enumerations with the official client's names and values."""

from __future__ import annotations

from enum import IntEnum
from typing import Any, TypeVar

E = TypeVar("E", bound=IntEnum)


def enum_argument(kind: type[E], value: Any, argument: str) -> E:
    """``value`` as a member of ``kind``: a member, its integer value (the official client's
    enums are integers too), or its name as a string in any case (``"zstd"``). Anything
    else raises ``ValueError`` naming the argument and what it accepts."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        for member in kind:
            if member.name.lower() == value.strip().lower():
                return member
    elif hasattr(type(value), "__int__") and not isinstance(value, (bool, float)):
        try:
            return kind(int(value))
        except ValueError:
            pass
    allowed = ", ".join(f"{kind.__name__}.{m.name}" for m in kind)
    names = ", ".join(repr(m.name) for m in kind)
    raise ValueError(f"{argument} must be one of {allowed} (or a name: {names}), not {value!r}")


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


class ProducerAccessMode(IntEnum):
    """Who may produce to a topic at once (``pulsar.ProducerAccessMode``)."""

    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class HashingScheme(IntEnum):
    """How a message key picks a partition (``BoostHash`` is the Python client's default)."""

    BoostHash = 0
    JavaStringHash = 1
    Murmur3_32Hash = 2


class RegexSubscriptionMode(IntEnum):
    PersistentOnly = 0
    NonPersistentOnly = 1
    AllTopics = 2
