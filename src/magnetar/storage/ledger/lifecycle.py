"""The ledger's life after opening (`LedgerLifecycle`): terminate (persistently refuse
appends), properties kept with the ledger's row (`set_property_async`), flush, close (`close` on the calling thread, `close_async` with the disk work on
a ``readers`` thread) and delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, cast

from ..clean_stop import INDEX_MIN_BYTES
from ..errors import (
    LedgerClosedError,
    StorageError,
)
from ..flusher import Batch
from ..position import Position
from ..segment import Segment
from .append import LedgerAppends
from .segment_files import seal_files

if TYPE_CHECKING:
    from .managed_ledger import ManagedLedger
    pass

log = logging.getLogger(__name__)

_get_loop = asyncio.get_running_loop

#: The "error" of a marker batch (`ManagedLedger._flusher_barrier`): the flusher syncs
#: nothing for a batch that failed already, and completes it in order.
_BARRIER = LedgerClosedError("flusher barrier (not an append)")


class LedgerLifecycle(LedgerAppends):
    """Terminating, flushing, closing and deleting a ledger."""

    @property
    def _whole(self) -> ManagedLedger:
        """This ledger as the factory knows it (every part is one `ManagedLedger`)."""
        return cast("ManagedLedger", self)

    def terminate(self) -> Position | None:
        """Refuse further appends, persistently. Returns the last appended position
        (appends already accepted still complete). The flag is written to storage.db on
        the calling thread (see `terminate_async`)."""
        self._check_open()
        if not self._terminated:
            self._row_allowed("terminate")
            self._terminated = True
            try:
                self._factory._save_ledger_meta(self.name, self._meta())
                self._row_allowed("terminate")
            except BaseException:
                self._terminated = False
                raise
        return self.last_appended()

    def _row_allowed(self, what: str) -> None:
        """Raise `StorageError` unless this ledger's fence (if any) holds: asked before the
        ledger's row is written (a fenced owner writes nothing) and after (the write
        counts only if it landed before any takeover, which then copied it: see
        `LedgerFilesStore.adopt`; one that did not is reported failed, never done)."""
        fence = self.fence
        if fence is None:
            return
        try:
            holds = fence.holds()
        except StorageError as exc:
            raise StorageError(f"cannot {what} ledger {self.name}: {exc}") from exc
        if not holds:
            raise StorageError(f"cannot {what} ledger {self.name}: another broker took it "
                               f"over (fenced)")

    async def terminate_async(self) -> Position | None:
        """`terminate`, with the durable storage.db write on the factory's cursor writer
        thread: appends are refused at once, this returns once the flag is stored (a reopen
        of the ledger waits for the write). If the write fails the ledger is not
        terminated and the `StorageError` is raised."""
        self._check_open()
        pending = self._terminating
        if pending is None and not self._terminated:
            self._row_allowed("terminate")
            self._terminated = True
            try:
                pending = self._factory._save_ledger_meta_later(self.name, self._meta())
            except BaseException:
                self._terminated = False
                raise
            self._terminating = pending
        if pending is not None:
            try:
                await asyncio.shield(asyncio.wrap_future(pending))
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                if self._terminating is pending:
                    self._terminating = None
                    self._terminated = False
                raise StorageError(f"cannot terminate ledger {self.name}: {exc}") from exc
            if self._terminating is pending:
                self._terminating = None
            try:
                self._row_allowed("terminate")
            except StorageError:
                self._terminated = False
                raise
        return self.last_appended()

    def _meta(self) -> dict[str, Any]:
        """The ledger's storage.db row as it stands in memory."""
        meta: dict[str, Any] = {"dir": os.path.basename(self.directory),
                                "terminated": self._terminated}
        if self._properties:
            meta["properties"] = dict(self._properties)
        return meta

    @property
    def properties(self) -> dict[str, str]:
        """The ledger's properties (a copy)."""
        return dict(self._properties)

    async def set_property_async(self, key: str, value: str) -> None:
        """Store a property with the ledger's row (durably, on the factory's metadata
        writer thread, in order with the ledger's other row writes); in effect in memory
        at once, returns once stored. A `StorageError` if the write failed."""
        self._check_open()
        self._row_allowed("store a property of")
        self._properties[key] = value
        pending = self._factory._save_ledger_meta_later(self.name, self._meta())
        try:
            await asyncio.shield(asyncio.wrap_future(pending))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            raise StorageError(f"cannot store property {key} of ledger {self.name}: {exc}") from exc
        self._row_allowed("store a property of")

    def flush(self) -> None:
        """Write the buffer and fdatasync every dirty segment now (blocking), resolving
        every pending append."""
        self._write_pending()
        self._wait_files()
        errors: dict[Segment, OSError] = {}
        for seg in self._segments:
            if seg.dirty and self._cfg.fsync != "never":
                try:
                    seg.sync()
                except OSError as exc:
                    errors[seg] = exc
        for batch in list(self._pending):
            if not batch.done:
                err = batch.error if batch.error is not None else errors.get(batch.segment)
                if err is None and batch.segment.sync_error is not None:
                    err = batch.segment.sync_error
                self._on_batch_done(batch, err)

    def _segments_to_index(self) -> list[Segment]:
        """The segments whose index sidecar `close` would write, if nothing is being
        written to this open ledger (the factory writes them in parallel at shutdown)."""
        if self._state != "open" or self._wbuf or self._pending or self._unwritten:
            return []
        small = INDEX_MIN_BYTES if self._factory.stopping_clean else -1  # (none written)
        return [seg for seg in self._segments if seg.ready and not seg.index_written
                and not seg.dirty and seg.confirmed == seg.count
                and (seg.end > small or seg.written > seg.end)]

    def close_if_idle(self) -> bool:
        """At a clean stop (`ManagedLedgerFactory.close`, ``stopping_clean``): close this
        open ledger at once if it has nothing to write, sync or seal and no cursor (no
        buffered, pending or held append, no file job under way, every segment synced,
        nothing reserved, its sidecar written or not needed). Its descriptors are left to
        the factory, which closes them all at once. False (nothing done) otherwise: the
        general `close`. With 100,000 idle topics the general path's per-ledger work was
        most of a stop."""
        if (self._state != "open" or self._wbuf or self._pending or self._unwritten
                or self._cursors or any(not f.done() for f in self._file_work)):
            return False
        for seg in self._segments:
            if (not seg.ready or seg.dirty or seg.sync_error is not None or seg.allocated
                    or seg.confirmed != seg.count or seg.written > seg.end
                    or not (seg.index_written or seg.end <= INDEX_MIN_BYTES)):
                return False
        for seg in self._segments:
            seg.sealed = True
        self._file_work = []
        self._active = None
        self._state = "closed"
        return True

    def close(self) -> None:
        """Flush, close the files; the cursors' last states are written on the factory's
        cursor writer thread (a reopen waits for them). Idempotent. Blocking: the flush's
        fdatasyncs and the sealing run on the calling thread (shutdown, tests, tools; the
        broker's run-time paths use `close_async`). On a ledger that `close_async` is
        closing, finishes that close here."""
        if self._state == "closing":
            self._finish_closing_now()
            return
        if self._state != "open":
            return
        try:
            self.flush()
        finally:
            self._factory._ledger_closing(self.name, list(self._cursors.values()))
            for cur in self._cursors.values():
                cur.closed = True
                self._factory._forget_cursor(cur)
            self._active = None
            for seg in self._segments:
                self._seal(seg)
                self._files.forget(seg)
            self._state = "closed"
            self._cursors = {}  # they point back at the ledger: freed without the collector
            self._factory._ledger_closed(self._whole)

    def close_async(self) -> asyncio.Future[None]:
        """`close` without disk work on the event loop; call from the loop. Starts at once:
        appends are refused from now on, the ledger leaves the factory (an open of its name
        waits until this close is done) and the cursors' last states go to the cursor writer
        thread. The appends still buffered are written and committed as any others (by the
        flusher thread; as a lone small batch, inline if syncs are fast, see `Flusher`);
        once every pending append has its outcome, the segments are sealed (reserved space
        given back, index sidecars written) and their descriptors closed on a ``readers``
        thread. The future is done once all of that is, the cursors' rows included
        (awaiting it is optional; it never fails: errors are logged, as `close` logs them). A synchronous `close` meanwhile
        finishes the job on its own thread. Idempotent: calls share one close."""
        if self._state == "open":
            factory = self._factory
            self._state = "closing"
            cursors = list(self._cursors.values())
            self._close_done, cursors_written = factory._closing_started(self._whole, cursors)
            for cur in cursors:
                cur.closed = True
                factory._forget_cursor(cur)
            self._close_task = asyncio.ensure_future(self._close_work(cursors_written))
        task = self._close_task
        if task is None:  # closed (or deleted) already
            done: asyncio.Future[None] = _get_loop().create_future()
            done.set_result(None)
            return done
        return asyncio.shield(task)

    async def _close_work(self, cursors_written: Future[Any] | None) -> None:
        """The part of `close_async` that waits: the pending appends' outcomes, then the
        sealing on a ``readers`` thread, and the cursors' last states being stored."""
        try:
            await self._close_files_off_loop()
        finally:
            if cursors_written is not None:
                with contextlib.suppress(Exception):  # (logged by the factory)
                    await asyncio.shield(asyncio.wrap_future(cursors_written))

    async def _close_files_off_loop(self) -> None:
        try:
            self._write_pending()
            await self._files_settled()  # segment files still being made: their writes
            while self._pending and self._state == "closing":
                await self._flusher_barrier()
            if self._state == "closing":
                await self._files_settled()  # the sealing the last confirmations began
            if self._state != "closing":
                return  # a synchronous close (or a delete) finished it meanwhile
            segs, fds = self._detach_files()
            try:
                job = self._factory.readers.submit(seal_files, segs, fds)
            except RuntimeError:  # the factory is shutting down: seal here
                seal_files(segs, fds)
            else:
                self._seal_job = job
                await asyncio.wrap_future(job)
            if self._state == "closing":
                self._finish_closing()
        except Exception:
            log.exception("closing ledger %s failed", self.name)
            if self._state == "closing":
                self._finish_closing_now()

    def _flusher_barrier(self) -> asyncio.Future[None]:
        """A future done once the flusher has handed back every batch submitted before
        now (a marker batch it completes in order after them, syncing nothing)."""
        loop = _get_loop()
        passed: asyncio.Future[None] = loop.create_future()

        def reached(batch: Batch, error: BaseException | None) -> None:
            if not passed.done():
                passed.set_result(None)

        marker = Batch(self._pending[-1].segment, 0, [], [], loop, reached, _BARRIER)
        try:
            self._factory._flusher.submit(marker)
        except RuntimeError:  # stopped: what it held was handed back already
            passed.set_result(None)
        return passed

    def _detach_files(self) -> tuple[list[Segment], list[int]]:
        """Seal every segment in memory and take its descriptor away from the loop's file
        LRU (a read after this reopens one of its own): what `seal_files` closes."""
        self._active = None
        fds = []
        segs = list(self._segments)
        for seg in segs:
            seg.sealed = True
            self._files.untrack(seg)
            with seg.lock:
                fd, seg.fd = seg.fd, None
            if fd is not None:
                fds.append(fd)
        return segs, fds

    def _finish_closing_now(self) -> None:
        """Finish a close `close_async` began, on the calling thread (blocking)."""
        try:
            self.flush()
        finally:
            job = self._seal_job
            sealed = False
            if job is not None:
                try:
                    job.result()  # a thread is sealing already: let it finish
                    sealed = True
                except BaseException:  # cancelled (shut down) or failed: seal here
                    log.debug("ledger %s: sealing on a storage thread did not happen", self.name)
            if not sealed:
                self._active = None
                for seg in self._segments:
                    self._seal(seg)
                    self._files.forget(seg)
            self._finish_closing()

    def _finish_closing(self) -> None:
        self._state = "closed"
        # the cursors and the file jobs' callbacks point back at the ledger: without them
        # it is freed by reference counting (magnetar.broker.heap freezes it)
        self._cursors = {}
        self._file_work = [f for f in self._file_work if not f.done()]
        done, self._close_done = self._close_done, None
        self._factory._closing_finished(self._whole, done)

    def delete(self) -> None:
        """Delete the ledger: its segments, cursors and metadata (gone for its users at
        once; the files and rows are removed on storage threads, see the factory)."""
        if self._state == "deleted":
            return
        if self._state == "closing":
            self._finish_closing_now()  # its sealing must not race the removal
        self._write_pending()
        deleted = LedgerClosedError(f"ledger {self.name} deleted")
        held, self._unwritten = self._unwritten, []
        for seg, _bufs, _start, futs, poss, loop, _nbytes in held:
            batch = Batch(seg, poss[0].entry_id, futs, poss, loop, self._on_batch_done, deleted)
            self._on_batch_done(batch, deleted)
        for batch in list(self._pending):
            self._on_batch_done(batch, deleted)
        for cur in self._cursors.values():
            cur.closed = True
            self._factory._forget_cursor(cur)
        self._cursors.clear()
        for seg in self._segments:
            seg.synced = max(seg.synced, seg.written)  # nothing left for the flusher to do
            self._files.forget(seg)
        self._segments.clear()
        self._ids.clear()
        self._by_id.clear()
        self._active = None
        self._state = "deleted"
        self._factory._ledger_deleted(self._whole)  # its directory and rows go on storage threads
