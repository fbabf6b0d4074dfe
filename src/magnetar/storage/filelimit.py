"""`FileLimiter`: an LRU bound on the segment file descriptors a factory keeps open.

Every descriptor use goes through `use`; past ``max_open`` the least recently used
segment that has no unsynced data is closed (it is reopened on its next use). Segments
with unsynced writes are skipped, so the bound is soft while fsyncs are in flight.
Event loop thread only.
"""

from __future__ import annotations

from collections import OrderedDict

from .segment import Segment


class FileLimiter:
    """LRU of segments with an open descriptor."""

    def __init__(self, max_open: int) -> None:
        self.max_open = max_open
        self._lru: OrderedDict[Segment, None] = OrderedDict()

    def use(self, seg: Segment) -> Segment:
        """Mark ``seg`` as just used (opening happens lazily in the segment)."""
        lru = self._lru
        if seg in lru:
            lru.move_to_end(seg)
        else:
            lru[seg] = None
            if len(lru) > self.max_open:
                self._evict()
        return seg

    def _evict(self) -> None:
        lru = self._lru
        excess = len(lru) - self.max_open
        victims = []
        for seg in lru:
            if excess <= 0:
                break
            if seg.fd is None or not seg.dirty:
                victims.append(seg)
                excess -= 1
        for seg in victims:
            del lru[seg]
            seg.close_fd()

    def forget(self, seg: Segment) -> None:
        """Stop tracking ``seg`` (closing its descriptor)."""
        self._lru.pop(seg, None)
        seg.close_fd()

    def open_count(self) -> int:
        return sum(1 for s in self._lru if s.fd is not None)

    def close_all(self) -> None:
        for seg in list(self._lru):
            seg.close_fd()
        self._lru.clear()
