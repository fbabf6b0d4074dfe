"""Trimming and retention (`LedgerRetention`): dropping the oldest segments that every
cursor has consumed once they are past the retention time or size, blocking (`trim`) or
with the file work on a ``readers`` thread (`trim_async`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable

from ..position import Position
from ..segment import Segment
from .segment_files import remove_segment_files, sealing_jobs, segment_mtimes
from .state import LedgerState

log = logging.getLogger(__name__)

_get_loop = asyncio.get_running_loop


class LedgerRetention(LedgerState):
    """Trimming consumed segments past retention."""

    def slowest_mark_delete(self) -> Position | None:
        """The lowest mark-delete position of all cursors (None when there are none)."""
        if not self._cursors:
            return None
        return min(c.mark_delete_position for c in self._cursors.values())

    def trim(self, retention_time_s: float, retention_size_bytes: int) -> list[int]:
        """Delete the oldest segments that every cursor has consumed and that fall outside
        the retention policy (data is kept while within time AND size; -1 = infinite,
        0 = none). The current segment is never deleted. Returns the deleted ledger ids.
        Blocking: the files' ``stat`` and ``unlink`` run on the calling thread (tests,
        tools; the broker uses `trim_async`), and a failure to remove them is raised."""
        self._check_open()
        drop, need = self._trim_plan(retention_time_s, retention_size_bytes, {})
        if need:
            mtimes = segment_mtimes([seg.path for seg in need])
            drop, _ = self._trim_plan(retention_time_s, retention_size_bytes, mtimes)
        removals = [self._drop_segment(seg) for seg in drop]
        deleted = [seg.ledger_id for seg in drop]
        if deleted:
            log.info("ledger %s: trimmed segments %s", self.name, deleted)
        for job in sealing_jobs(drop):  # its sidecar must not reappear after the unlink
            with contextlib.suppress(Exception):
                job.result()
        remove_segment_files(removals, self._guard())
        return deleted

    async def trim_async(self, retention_time_s: float, retention_size_bytes: int) -> list[int]:
        """`trim` without disk work on the event loop. The loop picks the consumed segments;
        when the time rule needs their files' modification times, those are read on the
        factory's ``readers`` threads and the loop decides again from what holds then.
        The segments chosen leave the ledger at once, in one step (a reader never sees a
        half-trimmed ledger); their files (segment, index sidecar) are unlinked and their
        descriptors closed on a ``readers`` thread, which an open of the ledger after its
        close waits for. A failure there is logged, not raised: the segments are gone
        from the ledger either way. Returns the ledger ids dropped ([] when the ledger
        was closed meanwhile)."""
        self._check_open()
        drop, need = self._trim_plan(retention_time_s, retention_size_bytes, {})
        if need:
            loop = _get_loop()
            mtimes = await loop.run_in_executor(
                self._factory.readers, segment_mtimes, [seg.path for seg in need])
            if self._state != "open":
                return []
            # (a segment consumed meanwhile and not stat'ed waits for the next trim)
            drop, _ = self._trim_plan(retention_time_s, retention_size_bytes, mtimes)
        if not drop:
            return []
        removals = [self._drop_segment(seg) for seg in drop]
        deleted = [seg.ledger_id for seg in drop]
        log.info("ledger %s: trimmed segments %s", self.name, deleted)
        sealing = sealing_jobs(drop)
        if sealing:  # its sidecar must not reappear after the unlink
            await asyncio.wait([asyncio.wrap_future(f) for f in sealing])
        try:
            try:
                job = self._factory.readers.submit(remove_segment_files, removals, self._guard())
            except RuntimeError:  # the factory is shutting down: remove them here
                remove_segment_files(removals, self._guard())
            else:
                self._factory._settle(self.name, job)
                # shielded: giving up on the wait must not cancel a removal not yet started
                await asyncio.shield(asyncio.wrap_future(job))
        except Exception as exc:  # CancelledError is not an Exception: it passes through
            log.error("ledger %s: removing the files of trimmed segments %s failed: %s",
                      self.name, deleted, exc)
        return deleted

    def _trim_plan(
        self, retention_time_s: float, retention_size_bytes: int, mtimes: dict[str, float | None]
    ) -> tuple[list[Segment], list[Segment]]:
        """By `trim`'s rules and the ledger's state now: (the segments to drop, oldest
        first; the segments whose file modification times the decision needs and
        ``mtimes`` (by path; None: cannot be stat'ed, counted as modified now) lacks). With the second list
        non-empty, the first is incomplete: stat those files and plan again. Retention
        time 0 keeps nothing, whatever the files' times, so it needs none of them."""
        segs = self._segments
        if len(segs) < 2 or (retention_time_s < 0 and retention_size_bytes < 0):
            return [], []
        if self.fence is not None and not self.fence.allows():
            return [], []  # fenced (or the fence unreadable): the files are not ours
        consumed = self.slowest_mark_delete() if self._cursors else self.last_confirmed()
        if consumed is None:
            return [], []
        total = self.size_bytes()
        now = time.time()
        drop: list[Segment] = []
        for k, seg in enumerate(segs[:-1]):
            if not self._trimmable(seg, consumed):
                break
            if retention_size_bytes < 0 or total <= retention_size_bytes:  # not over the size
                if retention_time_s < 0:
                    break
                if retention_time_s > 0:
                    if seg.path not in mtimes:
                        return drop, list(itertools.takewhile(
                            lambda s: self._trimmable(s, consumed), segs[k:-1]))
                    mtime = mtimes[seg.path]
                    if mtime is None or now - mtime < retention_time_s:
                        break
            total -= seg.end
            drop.append(seg)
        return drop, []

    def _guard(self) -> Callable[[], None] | None:
        """What `remove_segment_files` asks just before it unlinks: the fence's check."""
        return None if self.fence is None else self.fence.check

    def _trimmable(self, seg: Segment, consumed: Position) -> bool:
        """Whether ``seg`` may go as far as the cursors are concerned: not the active one,
        every entry confirmed, the last one consumed (``consumed``)."""
        if seg is self._active or seg.confirmed < seg.count or not seg.ready:
            return False
        return seg.count == 0 or Position(seg.ledger_id, seg.count - 1) <= consumed

    def _drop_segment(self, seg: Segment) -> tuple[str, str, int | None]:
        """Take ``seg`` out of the ledger (readers no longer find it) and its descriptor
        away from the file LRU. Returns what `remove_segment_files` removes: the segment's
        path, its index sidecar's path and the descriptor to close (None: not open)."""
        i = self._segments.index(seg)
        del self._segments[i]
        del self._ids[i]
        del self._by_id[seg.ledger_id]
        if self.on_change is not None:
            self.on_change()
        self._files.untrack(seg)
        with seg.lock:
            fd, seg.fd = seg.fd, None
        return seg.path, seg.idx_path, fd

    async def segment_mtime_async(self, ledger_id: int) -> float | None:
        """The modification time of segment ``ledger_id``'s file, read on the factory's
        ``readers`` threads (None: no such segment, or its file cannot be stat'ed)."""
        seg = self._by_id.get(ledger_id)
        if seg is None:
            return None
        mtimes = await _get_loop().run_in_executor(self._factory.readers, segment_mtimes, [seg.path])
        return mtimes[seg.path]
