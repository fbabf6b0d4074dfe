"""`ReadCache`: recently appended entries, bounded in bytes and in age, shared by a
factory's ledgers.

Keys are positions (ledger ids are unique per factory, so no ledger name is needed).
Appends insert; eviction is first-in first-out, which is what tail readers want: the
newest entries stay, consumers that keep up never read the disk. As in Pulsar
(``managedLedgerCacheEvictionTimeThresholdMillis``), entries older than ``max_age_s`` are
dropped too: a consumer that far behind reads from the segment files (one pread per
range, usually from the OS page cache), and the broker does not hold hundreds of MB of
payloads that nobody will read from memory. Event loop thread only.

Eviction order is insertion order, for both bounds: the bytes bound drops the oldest
insertions first, and the age bound drops a prefix of the insertion order. So an entry
that is gone means every entry inserted before it is gone too; `discard` (a rolled-back
append) is the one removal out of that order, and it takes any checkpoint that named the
discarded entry with it, so the age bound never stops at a hole.

Ages are tracked without a timestamp per entry: at most every ``_TICK_S`` a put records a
checkpoint (time, position). Once a checkpoint is older than ``max_age_s``, its entry and
every entry inserted before it go; entries inserted after it wait for a later checkpoint
(so an entry can outlive the limit by the gap between two checkpoints, never less). When
puts stop, `evict_expired` (the housekeeping timer) checkpoints the newest entry, so the
last entries of an idle cache leave too, one age limit later.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from time import monotonic

from .position import Position

_TICK_S = 0.01


class ReadCache:
    """FIFO cache of entry payloads bounded by total payload bytes and entry age."""

    __slots__ = ("_checkpoints", "_data", "_next_tick", "hits", "max_age_s", "max_bytes", "misses", "size")

    def __init__(self, max_bytes: int, max_age_s: float = 0.0) -> None:
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s  # 0: no age limit
        self.size = 0
        self._data: OrderedDict[Position, bytes | memoryview] = OrderedDict()
        self._checkpoints: deque[tuple[float, Position]] = deque()
        self._next_tick = 0.0
        self.hits = 0
        self.misses = 0

    def put(self, pos: Position, data: bytes | memoryview) -> None:
        n = len(data)
        if n > self.max_bytes:
            return
        d = self._data
        d[pos] = data
        self.size += n
        if self.size > self.max_bytes:
            pop = d.popitem
            while self.size > self.max_bytes:
                self.size -= len(pop(last=False)[1])
        if self.max_age_s > 0:
            now = monotonic()
            if now >= self._next_tick:
                self._next_tick = now + _TICK_S
                self._checkpoints.append((now, pos))
                self.evict_older_than(now - self.max_age_s)

    def evict_older_than(self, limit: float) -> None:
        """Drop every entry inserted up to the newest checkpoint taken before ``limit``."""
        cps = self._checkpoints
        d = self._data
        while cps and cps[0][0] < limit:
            _, mark = cps.popleft()
            if cps and cps[0][0] < limit:
                continue  # a later checkpoint is old enough too: use that one
            if mark not in d:
                return  # evicted by the bytes bound already: nothing older is left
            pop = d.popitem
            while d:  # FIFO: everything up to the mark was inserted by then
                key, data = pop(last=False)
                self.size -= len(data)
                if key == mark:
                    break
            return

    def evict_expired(self) -> None:
        """Apply the age limit now (for a periodic timer: puts alone stop when idle), and
        checkpoint the newest entry if no checkpoint covers it yet (it leaves one age
        limit from now at the latest, never before its time)."""
        if self.max_age_s > 0:
            now = monotonic()
            self.evict_older_than(now - self.max_age_s)
            d = self._data
            if d:
                newest = next(reversed(d))
                cps = self._checkpoints
                if not cps or cps[-1][1] != newest:
                    cps.append((now, newest))

    def get(self, pos: Position) -> bytes | memoryview | None:
        return self._data.get(pos)

    def discard(self, pos: Position) -> None:
        """Remove one entry (a rolled-back append), and any checkpoint that named it:
        the entries before it then leave with the next checkpoint."""
        data = self._data.pop(pos, None)
        if data is not None:
            self.size -= len(data)
            if any(mark == pos for _, mark in self._checkpoints):
                self._checkpoints = deque(cp for cp in self._checkpoints if cp[1] != pos)

    def __len__(self) -> int:
        return len(self._data)
