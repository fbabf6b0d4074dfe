"""`FileLimiter`: an LRU bound on the segment file descriptors a factory keeps open.

Every descriptor use goes through `use`; past ``max_open`` the least recently used
segments are closed (and reopened on their next use). Clean segments go first; if only
segments with unsynced writes are left, the oldest are *retired*: they leave the LRU at
once, are fdatasynced on a storage thread (``retire_on``) and closed back on the loop
unless used again meanwhile (only when the policy syncs at all). At most ``max_open / 8``
(at least four) are retiring at a time; past that, or with no running loop, a segment is
synced inline before closing, so the bound holds even with thousands of ledgers writing at
once (at the price of blocking syncs when it is far too small). An evicted segment that is
sealed, fully confirmed and has its index sidecar on disk also drops its in-memory offset
index (8 bytes per entry; reloaded from the sidecar on next use), so an idle segment costs
neither a descriptor nor memory proportional to its entries. `close_idle`, called
periodically, closes the clean segments not used since its previous call (a producer that
went away leaves no descriptor behind for long); `close_idle_in_slices` does the same a
slice at a time. Event loop thread only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Executor, Future

from .segment import Segment

log = logging.getLogger(__name__)


class FileLimiter:
    """LRU of segments with an open descriptor."""

    def __init__(
        self, max_open: int, sync_before_close: bool = True, retire_on: Executor | None = None
    ) -> None:
        self.max_open = max_open
        self.sync_before_close = sync_before_close
        # segment -> the `close_idle` round of its last use (oldest use first)
        self._lru: OrderedDict[Segment, int] = OrderedDict()
        self._round = 0
        self._retire_on = retire_on
        self._retire_max = max(4, max_open // 8)
        self._retiring: set[Segment] = set()

    def use(self, seg: Segment) -> Segment:
        """Mark ``seg`` as just used (opening happens lazily in the segment)."""
        lru = self._lru
        if seg in lru:
            lru.move_to_end(seg)
            lru[seg] = self._round
        else:
            lru[seg] = self._round
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
        loop = _running_loop() if dirty and self._retire_on is not None else None
        for seg in dirty:
            if excess <= 0:
                break
            if (loop is not None and len(self._retiring) < self._retire_max
                    and self._retire(seg, loop)):
                del lru[seg]
                excess -= 1
                continue
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

    def _retire(self, seg: Segment, loop: asyncio.AbstractEventLoop) -> bool:
        """Sync ``seg`` on a storage thread, then close it on the loop (`_retired`)."""
        assert self._retire_on is not None
        try:
            job = self._retire_on.submit(seg.sync)
        except RuntimeError:  # shutting down
            return False
        self._retiring.add(seg)

        def synced(f: Future[float]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the fd stays
                loop.call_soon_threadsafe(self._retired, seg, f)

        job.add_done_callback(synced)
        return True

    def _retired(self, seg: Segment, job: Future[float]) -> None:
        """A retiring sync ended (event loop thread): close the descriptor unless the
        segment was used again, or written, meanwhile."""
        self._retiring.discard(seg)
        if seg in self._lru:
            return  # in use again: the LRU has it
        if job.exception() is not None:
            log.debug("%s: sync before closing failed: %s", seg.path, job.exception())
            if seg.fd is not None:  # keep counting it; the flusher reports the failure
                self._lru[seg] = self._round
                self._lru.move_to_end(seg, last=False)
            return
        if not seg.dirty:
            seg.close_fd()
            _release_index(seg)

    def close_idle(self) -> int:
        """Close the clean segments not used since the previous round (unsynced ones are
        left to the flusher and the next round); how many were closed."""
        return sum(self.close_idle_in_slices(len(self._lru) or 1))

    def close_idle_in_slices(self, size: int) -> Iterator[int]:
        """One round of `close_idle`, ``size`` segments at a time: each step closes those
        of its slice still idle and clean, and yields how many, for the caller to let the
        event loop run between two (while topics are created, a round closes every
        segment made a round before: ~20,000 closes, 35-90 ms in one go). A segment used,
        forgotten or written meanwhile is left alone."""
        lru = self._lru
        idle_before = self._round
        self._round += 1
        idle = []
        for seg, last_used in lru.items():
            if last_used >= idle_before:
                break  # the rest were used since the previous round
            idle.append(seg)
        for start in range(0, len(idle), size):
            closed = 0
            for seg in idle[start : start + size]:
                used = lru.get(seg)
                if used is None or used >= idle_before:
                    continue  # forgotten, retired or used since the round began
                if seg.fd is not None and self.sync_before_close and seg.dirty:
                    continue  # left to the flusher and the next round
                del lru[seg]
                seg.close_fd()
                _release_index(seg)
                closed += 1
            yield closed

    def retiring_count(self) -> int:
        return len(self._retiring)

    def forget(self, seg: Segment) -> None:
        """Stop tracking ``seg`` (closing its descriptor)."""
        self._lru.pop(seg, None)
        seg.close_fd()

    def untrack(self, seg: Segment) -> None:
        """Stop tracking ``seg`` without closing its descriptor (its owner takes it away
        and closes it elsewhere, e.g. on a storage thread)."""
        self._lru.pop(seg, None)

    def open_count(self) -> int:
        """Descriptors open: the LRU's and those of segments still retiring."""
        lru = self._lru
        retiring = sum(1 for s in self._retiring if s.fd is not None and s not in lru)
        return sum(1 for s in lru if s.fd is not None) + retiring

    def close_all(self) -> None:
        for seg in list(self._lru):
            seg.close_fd()
        self._lru.clear()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _release_index(seg: Segment) -> None:
    """Drop the offset index of a segment that can reload it from its sidecar."""
    if seg.sealed and seg.index_written and seg.confirmed == seg.count and not seg.dirty:
        seg._offsets = None  # the `offsets` property reloads it on next use
