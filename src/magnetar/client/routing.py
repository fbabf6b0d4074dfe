"""Partition routing: key hash (BoostHash / JavaStringHash / Murmur3), round robin,
single partition, or a custom ``message_router``."""

from __future__ import annotations

import random
from collections.abc import Callable

from magnetar.client.enums import HashingScheme, PartitionsRoutingMode
from magnetar.protocol import boost_hash, java_string_hash, murmur3_32


def key_hash(scheme: HashingScheme) -> Callable[[str], int]:
    if scheme == HashingScheme.JavaStringHash:
        return lambda key: java_string_hash(key) & 0x7FFFFFFF
    if scheme == HashingScheme.Murmur3_32Hash:
        return murmur3_32
    return boost_hash


class Router:
    """Chooses a partition for each message.

    Keyed messages always go to ``hash(key) % partitions`` (the official clients' rule), so
    a key lands on the same partition whoever sends it. Unkeyed messages follow the mode:
    round robin (switching partition once per batch when batching, so batches stay full),
    or one partition picked at random for the producer's lifetime.
    """

    def __init__(self, partitions: int, mode: PartitionsRoutingMode, scheme: HashingScheme,
                 batching: bool, batch_max: int,
                 custom: Callable[..., int] | None = None) -> None:
        self.partitions = partitions
        self._mode = mode
        self._hash = key_hash(scheme)
        self._custom = custom
        self._single = random.randrange(partitions) if partitions else 0
        self._next = random.randrange(partitions) if partitions else 0
        self._stick = batch_max if batching else 1
        self._count = 0

    def choose(self, key: str | None, message: object = None) -> int:
        if self._custom is not None and self._mode == PartitionsRoutingMode.CustomPartition:
            return self._custom(message, self.partitions) % self.partitions
        if key:
            return self._hash(key) % self.partitions
        if self._mode == PartitionsRoutingMode.UseSinglePartition:
            return self._single
        self._count += 1
        if self._count >= self._stick:
            self._count = 0
            self._next = (self._next + 1) % self.partitions
        return self._next
