"""`ReadCache`: recently appended entries, bounded in bytes, shared by a factory's ledgers.

Keys are positions (ledger ids are unique per factory, so no ledger name is needed).
Appends insert; eviction is first-in first-out, which is what tail readers want: the
newest entries stay, consumers that keep up never read the disk. Event loop thread only.
"""

from __future__ import annotations

from collections import OrderedDict

from .position import Position


class ReadCache:
    """FIFO cache of entry payloads bounded by total payload bytes."""

    __slots__ = ("_data", "hits", "max_bytes", "misses", "size")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._data: OrderedDict[Position, bytes] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def put(self, pos: Position, data: bytes) -> None:
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

    def get(self, pos: Position) -> bytes | None:
        return self._data.get(pos)

    def discard(self, pos: Position) -> None:
        data = self._data.pop(pos, None)
        if data is not None:
            self.size -= len(data)

    def __len__(self) -> int:
        return len(self._data)
