"""Key_Shared consumer selection: which consumer gets the messages of a sticky key.

Theory of operation
-------------------
Every message has a *sticky key* (:func:`sticky_key`): its ordering key if it has one,
else its partition key (base64-decoded when ``partition_key_b64_encoded`` is set), else
the fixed key ``b"NONE_KEY"``. The key is hashed with Murmur3-32 and reduced modulo the
range size (65536): that *slot* picks the consumer. Selectors take the hash as a plain
int, so they are tested without any hashing.

:class:`AutoSplitSelector` (``KeySharedMode.AUTO_SPLIT``) follows Pulsar's
HashRangeAutoSplitStickyKeyConsumerSelector exactly, because which consumer owns which
hash must not depend on the broker implementation:

* The state is a sorted map ``upper bound -> consumer``; a consumer owns the slots from
  just above the previous bound up to and including its own bound. The first consumer
  gets bound ``range_size`` (so the whole range).
* A joining consumer splits the *biggest* range, measured as ``bound - previous bound``
  (the previous bound of the first range counts as 0). On a tie the lowest range wins.
  With that range ``(low, high]`` the newcomer takes the lower half: its bound is
  ``high - (high - low) // 2`` and the old owner keeps the rest. If the range is down to
  one slot, joining fails with :class:`ConsumerAssignError`.
* A leaving consumer's slots go to the owner of the next range up; if it held the top
  range (bound ``range_size``), the owner of the range below takes over that bound.
* ``select(hash)`` takes ``hash % range_size`` and returns the owner of the smallest
  bound at or above it.

:class:`StickySelector` (``KeySharedMode.STICKY``) uses the inclusive hash ranges each
consumer declares in ``KeySharedMeta.hashRanges``; overlap with another consumer's
ranges is refused with Pulsar's messages. Slots no consumer declared select nobody.
(Pulsar's own map can hand a gap between two ranges of one consumer to that consumer;
here only declared ranges count. A consumer's own overlapping ranges are merged.)

Consumers are opaque hashable objects.
"""

from __future__ import annotations

import base64
import binascii
import bisect
from collections.abc import Hashable, Iterable
from typing import Generic, Protocol, TypeVar

__all__ = [
    "DEFAULT_RANGE_SIZE",
    "NONE_KEY",
    "AutoSplitSelector",
    "ConsumerAssignError",
    "StickyKeySelector",
    "StickySelector",
    "key_hash",
    "sticky_key",
]

DEFAULT_RANGE_SIZE = 2 << 15  # 65536
NONE_KEY = b"NONE_KEY"

C = TypeVar("C", bound=Hashable)


class ConsumerAssignError(ValueError):
    """A consumer cannot be given a hash range (Pulsar's ConsumerAssignException)."""


def sticky_key(
    metadata_partition_key: bytes | str | None,
    ordering_key: bytes | None,
    *,
    partition_key_b64_encoded: bool = False,
) -> bytes:
    """The key Key_Shared routes a message by.

    Pass ``None`` for fields absent from the ``MessageMetadata`` (a present but empty
    field is a real, empty key). Order of preference: ordering key, partition key
    (base64-decoded if flagged; undecodable text falls back to ``NONE_KEY`` as in
    Pulsar), then :data:`NONE_KEY`.
    """
    if ordering_key is not None:
        return bytes(ordering_key)
    if metadata_partition_key is not None:
        if partition_key_b64_encoded:
            try:
                return base64.b64decode(metadata_partition_key, validate=True)
            except (binascii.Error, ValueError):
                return NONE_KEY
        if isinstance(metadata_partition_key, str):
            return metadata_partition_key.encode("utf-8")
        return bytes(metadata_partition_key)
    return NONE_KEY


def key_hash(key: bytes) -> int:
    """Sticky hash of ``key`` (Murmur3-32 modulo 65536), from ``magnetar.protocol``."""
    from magnetar.protocol.hashing import sticky_key_hash  # lazy: optional at import time

    return sticky_key_hash(key)


class StickyKeySelector(Protocol[C]):
    """What a Key_Shared dispatcher needs from a selector."""

    def select(self, sticky_hash: int) -> C | None: ...

    def remove_consumer(self, consumer: C) -> None: ...

    def ranges(self) -> dict[C, list[tuple[int, int]]]: ...


def _check_range_size(range_size: int) -> None:
    if range_size < 2:
        raise ValueError("range size must be at least 2")
    if range_size & (range_size - 1):
        raise ValueError("range size must be a power of 2")


class AutoSplitSelector(Generic[C]):
    """Pulsar's auto-split hash-range selector (see the module docstring for the rules)."""

    def __init__(self, range_size: int = DEFAULT_RANGE_SIZE) -> None:
        _check_range_size(range_size)
        self.range_size = range_size
        self._bounds: list[int] = []  # sorted upper bounds
        self._owner: dict[int, C] = {}  # bound -> consumer
        self._bound_of: dict[C, int] = {}  # consumer -> bound

    def __len__(self) -> int:
        return len(self._bounds)

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._bound_of

    @property
    def consumers(self) -> list[C]:
        """Consumers in hash order (lowest range first)."""
        return [self._owner[b] for b in self._bounds]

    def add_consumer(self, consumer: C) -> None:
        if consumer in self._bound_of:
            raise ConsumerAssignError(f"Consumer {consumer} is already assigned a hash range")
        if not self._bounds:
            self._put(self.range_size, consumer)
            return
        high, low = self._biggest_range()
        if high - low <= 1:
            raise ConsumerAssignError(
                "No more range can assigned to new consumer, assigned consumers "
                f"{len(self._bounds)}"
            )
        self._put(high - ((high - low) >> 1), consumer)

    def remove_consumer(self, consumer: C) -> None:
        bound = self._bound_of.pop(consumer, None)
        if bound is None:
            return
        idx = bisect.bisect_left(self._bounds, bound)
        if bound == self.range_size and len(self._bounds) > 1:
            lower = self._bounds[idx - 1]
            heir = self._owner.pop(lower)
            del self._bounds[idx - 1]
            self._owner[bound] = heir
            self._bound_of[heir] = bound
        else:
            del self._bounds[idx]
            del self._owner[bound]

    def select(self, sticky_hash: int) -> C | None:
        if not self._bounds:
            return None
        slot = sticky_hash % self.range_size
        return self._owner[self._bounds[bisect.bisect_left(self._bounds, slot)]]

    def ranges(self) -> dict[C, list[tuple[int, int]]]:
        """Inclusive ``(start, end)`` per consumer, reported as Pulsar's stats do."""
        out: dict[C, list[tuple[int, int]]] = {}
        start = 0
        for bound in self._bounds:
            out.setdefault(self._owner[bound], []).append((start, bound))
            start = bound + 1
        return out

    def _biggest_range(self) -> tuple[int, int]:
        best_high, best_low, best_size = self.range_size, 0, 0
        prev = 0
        for bound in self._bounds:
            if bound - prev > best_size:
                best_high, best_low, best_size = bound, prev, bound - prev
            prev = bound
        return best_high, best_low

    def _put(self, bound: int, consumer: C) -> None:
        bisect.insort(self._bounds, bound)
        self._owner[bound] = consumer
        self._bound_of[consumer] = bound


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


class StickySelector(Generic[C]):
    """Fixed, consumer-declared inclusive hash ranges (``KeySharedMode.STICKY``)."""

    def __init__(self, range_size: int = DEFAULT_RANGE_SIZE) -> None:
        if range_size < 1:
            raise ValueError("range size must be at least 1")
        self.range_size = range_size
        self._starts: list[int] = []  # sorted starts of all ranges
        self._intervals: list[tuple[int, int, C]] = []  # parallel to _starts
        self._by_consumer: dict[C, list[tuple[int, int]]] = {}

    def __len__(self) -> int:
        return len(self._by_consumer)

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._by_consumer

    def add_consumer(self, consumer: C, ranges: Iterable[tuple[int, int]]) -> None:
        """Give ``consumer`` its declared inclusive ranges; all or nothing.

        Raises :class:`ConsumerAssignError` (a ``ValueError``) for an empty list, a range
        with start > end, or one that overlaps another consumer's range.
        """
        if consumer in self._by_consumer:
            raise ConsumerAssignError(f"Consumer {consumer} is already assigned hash ranges")
        wanted = [(int(s), int(e)) for s, e in ranges]
        if not wanted:
            raise ConsumerAssignError("Ranges for KeyShared policy must not be empty.")
        for start, end in wanted:
            if start > end:
                raise ConsumerAssignError("Fixed hash range start > end")
            other = self._overlapping(start, end)
            if other is not None:
                raise ConsumerAssignError(f"Range conflict with consumer {other}")
        merged = _merge(wanted)
        self._by_consumer[consumer] = merged
        for start, end in merged:
            idx = bisect.bisect_right(self._starts, start)
            self._starts.insert(idx, start)
            self._intervals.insert(idx, (start, end, consumer))

    def remove_consumer(self, consumer: C) -> None:
        if self._by_consumer.pop(consumer, None) is None:
            return
        keep = [iv for iv in self._intervals if iv[2] != consumer]
        self._intervals = keep
        self._starts = [iv[0] for iv in keep]

    def select(self, sticky_hash: int) -> C | None:
        slot = sticky_hash % self.range_size
        idx = bisect.bisect_right(self._starts, slot) - 1
        if idx < 0:
            return None
        _start, end, consumer = self._intervals[idx]
        return consumer if slot <= end else None

    def ranges(self) -> dict[C, list[tuple[int, int]]]:
        return {c: list(r) for c, r in self._by_consumer.items()}

    def _overlapping(self, start: int, end: int) -> C | None:
        # intervals never overlap each other, so only the last one starting at or before
        # `end` can reach into [start, end]
        idx = bisect.bisect_right(self._starts, end) - 1
        if idx >= 0:
            s, e, consumer = self._intervals[idx]
            if e >= start and s <= end:
                return consumer
        return None
