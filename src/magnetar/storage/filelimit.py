"""`FileLimiter`: an LRU bound on the segment file descriptors a factory keeps open.

Every descriptor use goes through `use`; past ``max_open`` the least recently used
segments are closed (and reopened on their next use). Clean segments go first; if only
segments with unsynced writes are left, the oldest is fdatasynced inline before closing
(only when the policy syncs at all), so the bound holds even with thousands of ledgers
writing at once (at the price of blocking syncs when it is too small). An evicted segment that is
sealed, fully confirmed and has its index sidecar on disk also drops its in-memory offset
index (8 bytes per entry; reloaded from the sidecar on next use), so an idle segment costs
neither a descriptor nor memory proportional to its entries. Event loop thread only.
"""

from __future__ import annotations

from collections import OrderedDict

from .segment import Segment


class FileLimiter:
    """LRU of segments with an open descriptor."""

    def __init__(self, max_open: int, sync_before_close: bool = True) -> None:
        self.max_open = max_open
        self.sync_before_close = sync_before_close
        self._lru: OrderedDict[Segment, None] = OrderedDict()

    def use(self, seg: Segment) -> Segment:
        """Mark ``seg`` as just used (opening happens lazily in the segment)."""
        lru = self._lru
        if seg in lru:
            lru.move_to_end(seg)
        else:
            lru[seg] = None
            if len(lru) > self.max_open:
                self._evict(seg)
        return seg

    def _evict(self, keep: Segment) -> None:
        lru = self._lru
        excess = len(lru) - self.max_open
        victims = []
        dirty = []
        for seg in lru:
            if excess <= 0:
                break
            if seg is keep:
                continue
            if seg.fd is None or not self.sync_before_close or not seg.dirty:
                victims.append(seg)
                excess -= 1
            else:
                dirty.append(seg)
        for seg in dirty:
            if excess <= 0:
                break
            try:
                seg.sync()
            except OSError:
                continue  # the flusher reports the failure to the segment's appends
            victims.append(seg)
            excess -= 1
        for seg in victims:
            del lru[seg]
            seg.close_fd()
            _release_index(seg)

    def forget(self, seg: Segment) -> None:
        """Stop tracking ``seg`` (closing its descriptor)."""
        self._lru.pop(seg, None)
        seg.close_fd()

    def untrack(self, seg: Segment) -> None:
        """Stop tracking ``seg`` without closing its descriptor (its owner takes it away
        and closes it elsewhere, e.g. on a storage thread)."""
        self._lru.pop(seg, None)

    def open_count(self) -> int:
        return sum(1 for s in self._lru if s.fd is not None)

    def close_all(self) -> None:
        for seg in list(self._lru):
            seg.close_fd()
        self._lru.clear()


def _release_index(seg: Segment) -> None:
    """Drop the offset index of a segment that can reload it from its sidecar."""
    if seg.sealed and seg.index_written and seg.confirmed == seg.count and not seg.dirty:
        seg._offsets = None  # the `offsets` property reloads it on next use
