"""Appends and group commit, and segment roll-over (`LedgerAppends`).

The hot path of a send: `append_then` assigns the position, indexes the record, puts the
payload in the read cache and queues header + payload; once per loop turn the batch goes
to the file in one ``pwritev`` and, per fsync policy, to the flusher (`_write_batch`,
`_on_batch_done`). A failed write rolls back its entries (`_rollback`). A full or old
segment rolls over (`_roll`): the next one exists in memory at once, its file is made on
a ``readers`` thread and the batches meant for it wait in `_unwritten`. An entry that may
linger (`append_then`'s ``linger_s``: a transaction's marker, which nobody waits for) stays
in the buffer until the next append comes, so that it shares that append's write, sync and
completion, or until its timer (`_on_linger`) writes it alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import crc32c

from .. import record
from ..clean_stop import INDEX_MIN_BYTES
from ..errors import (
    LedgerClosedError,
    LedgerTerminatedError,
    StorageError,
    append_error,
)
from ..fence import FenceUnknownError
from ..flusher import Batch
from ..position import Position
from ..segment import Segment
from .segment_files import make_file, seal_files
from .state import AppendCallback, LedgerState, UnwrittenBatch, Waiter

log = logging.getLogger(__name__)

_get_loop = asyncio.get_running_loop
# append builds a record header inline, as record.encode_header (seeded) and
# record.encode_part_header (part) do: two function calls fewer per entry.
_pack = record.HEADER.pack
_crc = crc32c.crc32c
_SEED = record.SEED
_PART = record.PART_FLAG
_HS = record.HEADER_SIZE
_monotonic = time.monotonic


#: A batch this small may be synced on the loop thread while the flusher idles (a lone
#: send waiting for its receipt). Bigger ones are a stream: the flusher thread syncs them
#: while the loop goes on writing the next.
_INLINE_MAX_ENTRIES = 8
_INLINE_MAX_BYTES = 1024 * 1024

_Future = asyncio.Future
#: how early the linger timer may fire and still write (the loop's timers are in ms)
_LINGER_EARLY = 0.001
T = TypeVar("T")


def _fail(waiter: Waiter, exc: BaseException) -> None:
    if type(waiter) is not _Future:
        _call(waiter, None, exc)  # type: ignore[arg-type]
    elif not waiter.done():
        with contextlib.suppress(RuntimeError):  # event loop closed: nobody is waiting
            waiter.set_exception(exc)


def _resolve(waiters: list[Waiter], positions: list[Position]) -> None:
    for waiter, pos in zip(waiters, positions, strict=True):
        if type(waiter) is not _Future:
            _call(waiter, pos, None)  # type: ignore[arg-type]
        elif not waiter.done():
            with contextlib.suppress(RuntimeError):  # event loop closed: nobody is waiting
                waiter.set_result(pos)


def _merge_held(held: list[UnwrittenBatch]) -> UnwrittenBatch:
    """Take the first held batch and the ones behind it that continue it in the same file:
    one write and one sync for them all. Written one by one, each write would meet the
    sync of the one before it on a file system whose fsync holds the file's lock (FUSE:
    a write waits out a concurrent fsync of its file), the event loop blocked once per
    batch held while the segment's file was made."""
    seg, bufs, start, futs, poss, loop, nbytes = held.pop(0)
    end = start + _HS * len(futs) + nbytes
    while held and held[0][0] is seg and held[0][2] == end and held[0][5] is loop:
        _, more, more_start, more_futs, more_poss, _, more_bytes = held.pop(0)
        bufs.extend(more)  # (the lists are the held batch's own: `_write_pending`)
        futs.extend(more_futs)
        poss.extend(more_poss)
        nbytes += more_bytes
        end = more_start + _HS * len(more_futs) + more_bytes
    return seg, bufs, start, futs, poss, loop, nbytes


def _call(callback: AppendCallback, pos: Position | None, exc: BaseException | None) -> None:
    try:
        callback(pos, exc)
    except Exception:  # one failing owner must not keep the others from their outcome
        log.exception("append callback %r failed", callback)


class LedgerAppends(LedgerState):
    """Appending: position, index, cache, write batch, fsync per policy, roll-over."""

    def append(
        self, data: bytes | memoryview, part_crc: int | None = None
    ) -> asyncio.Future[Position]:
        """Append one entry; the future resolves to its position once it is durable per
        the fsync policy (in append order), or fails with `StorageError`.

        ``part_crc``: the caller's promise that ``data`` is a payload part it has checked
        (magic 0x0e01, then ``part_crc`` big-endian, which is the CRC32C of ``data[6:]``);
        the entry is then stored as a part record carrying that CRC and no checksum is
        computed here (see `record`). A broken promise makes the record fail its check
        when read, and recovery cut its segment there. Without it, the record's CRC is
        computed over ``data``."""
        loop = self._loop
        if loop is None or loop.is_closed():  # get_running_loop costs a getpid syscall
            loop = self._loop = _get_loop()
        fut: asyncio.Future[Position] = loop.create_future()
        self._append(data, part_crc, fut, loop)
        return fut

    def append_then(
        self, data: bytes | memoryview, on_done: AppendCallback, part_crc: int | None = None,
        linger_s: float = 0.0,
    ) -> None:
        """`append` without a future: ``on_done(position, None)`` (or ``(None, error)``) is
        called once the entry is durable (or failed), in append order, from the storage's
        completion of its batch, with the other entries of that batch; then
        `after_appends` is called once. ``on_done`` may also be called before this returns
        (a closed ledger, the ``always`` policy). The cheap path for a hot caller: no
        future, and no extra turn of the event loop to run its callbacks.

        ``linger_s`` > 0: the entry may wait in the write buffer up to that long for the
        next append without it (a transaction's marker: its durability is not waited for
        by anyone who must not wait), so that it is written, synced and completed with
        that append's batch instead of in a batch, a write and an fdatasync of its own;
        after ``linger_s`` it is written alone. Its position is taken at once, as any
        append's, and ``on_done`` is called only once it is durable, as for any other."""
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = _get_loop()
        self._append(data, part_crc, on_done, loop, linger_s)

    def _append(
        self,
        data: bytes | memoryview,
        part_crc: int | None,
        waiter: Waiter,
        loop: asyncio.AbstractEventLoop,
        linger_s: float = 0.0,
    ) -> None:
        if self._state != "open":
            self._fail_now(waiter, LedgerClosedError(f"ledger {self.name} is {self._state}"))
            return
        if self._terminated:
            self._fail_now(waiter, LedgerTerminatedError(f"ledger {self.name} is terminated"))
            return
        if type(data) is not bytes and not (type(data) is memoryview and data.readonly):
            data = bytes(data)  # a read-only view is the caller's promise it won't change
        n = len(data)
        seg = self._active
        if (
            seg is None
            or seg.count >= self._cfg.segment_max_entries
            or (seg.end + n > self._cfg.segment_max_bytes and seg.count)
            or _monotonic() > self._roll_at
        ):
            try:
                seg = self._roll(loop)
            except (OSError, RuntimeError, StorageError) as exc:
                self._fail_now(waiter, append_error(f"cannot create a segment for {self.name}: {exc}", exc))
                return
        start = seg.end
        end = start + _HS + n
        eid = seg.count
        seg.end = end
        seg.offsets.append(end)
        seg.count = eid + 1
        pos = Position(seg.ledger_id, eid)
        self._cache.put(pos, data)
        hdr = _pack(n, _crc(data, _SEED ^ n)) if part_crc is None else _pack(n | _PART, part_crc)
        if self._cfg.fsync == "always":
            self._append_always(seg, hdr, data, start, pos, waiter)
            return
        buf = self._wbuf
        if not buf:
            self._wseg = seg
            self._wstart = start
            self._wloop = loop
            if linger_s > 0.0:  # it may wait for the next append (see `append_then`)
                self._wlinger = True
                self._linger_until = until = loop.time() + linger_s
                if self._linger is None:  # (one armed earlier fires first, and re-arms)
                    self._linger = loop.call_at(until, self._on_linger)
            elif not self._write_scheduled:
                self._write_scheduled = True
                loop.call_soon(self._on_tick)
        elif self._wlinger and linger_s <= 0.0:  # the next append: both go this turn
            self._wlinger = False
            if not self._write_scheduled:
                self._write_scheduled = True
                loop.call_soon(self._on_tick)
        buf.append(hdr)
        buf.append(data)
        self._wfuts.append(waiter)
        self._wpos.append(pos)
        self._wbytes += n
        if self._wbytes >= self._cfg.write_buffer_bytes:
            self._write_pending()

    def _fail_now(self, waiter: Waiter, exc: BaseException) -> None:
        _fail(waiter, exc)
        self._appends_done()

    def _appends_done(self) -> None:
        """Every waiter of a completed batch was told: the owner's once-per-batch step."""
        hook = self.after_appends
        if hook is not None:
            try:
                hook()
            except Exception:
                log.exception("%s: after_appends failed", self.name)

    def _append_always(
        self,
        seg: Segment,
        hdr: bytes,
        data: bytes | memoryview,
        start: int,
        pos: Position,
        waiter: Waiter,
    ) -> None:
        try:
            if not seg.ready:
                self._wait_file(seg)  # this policy syncs on the loop anyway
            if seg.create_error is not None:
                raise OSError(f"cannot create its segment: {seg.create_error}")
            self._files.use(seg)
            seg.write([hdr, data], start)
            seg.sync()
        except OSError as exc:
            self._rollback(seg, pos.entry_id)
            self._fail_now(waiter, append_error(f"append to {self.name} failed: {exc}", exc))
            return
        seg.confirmed = pos.entry_id + 1
        _resolve([waiter], [pos])
        self._appends_done()

    def _on_tick(self) -> None:
        self._write_scheduled = False
        self._write_pending()

    def write_lingering(self) -> None:
        """Write the entries lingering in the write buffer now (someone waits for them),
        with whatever else is buffered."""
        if self._wlinger:
            self._write_pending()

    def _on_linger(self) -> None:
        """The linger timer: an entry that waited ``linger_s`` in the write buffer is
        written now (alone, or with the other lingering ones). The timer is not cancelled
        when the next append takes a lingering entry along (a cancel costs the loop a
        turn, once a transaction): it may fire for an entry written long ago, and then
        waits on for the one lingering now, if any."""
        self._linger = None
        if not self._wlinger:
            return
        loop = self._wloop
        assert loop is not None
        if loop.time() + _LINGER_EARLY < self._linger_until:
            self._linger = loop.call_at(self._linger_until, self._on_linger)
            return
        self._write_pending()

    def _write_pending(self) -> None:
        """Hand the write buffer to the OS (one pwritev), then to the flusher; held back
        (in order) while its segment's file, or an earlier held batch's, is being made."""
        bufs = self._wbuf
        if not bufs:
            return
        if self._wlinger:  # (set only when true: an idle ledger keeps the class's False)
            self._wlinger = False
        seg = self._wseg
        assert seg is not None
        futs, poss = self._wfuts, self._wpos
        nbytes = self._wbytes
        self._wbuf, self._wfuts, self._wpos, self._wbytes = [], [], [], 0
        loop = self._wloop
        assert loop is not None
        if self._unwritten or not seg.ready:
            self._unwritten.append((seg, bufs, self._wstart, futs, poss, loop, nbytes))
            self._write_held()  # (nothing, while the first held one's file is being made)
            return
        self._write_batch(seg, bufs, self._wstart, futs, poss, loop, nbytes)

    def _write_held(self) -> None:
        """Write the held batches whose segment files are made (or failed), in order; the
        ones for the same file as one batch (`_merge_held`)."""
        held = self._unwritten
        while held:
            seg = held[0][0]
            if not seg.ready and seg.create_error is None:
                return
            self._write_batch(*_merge_held(held))

    def _write_batch(
        self,
        seg: Segment,
        bufs: list[bytes | memoryview],
        start: int,
        futs: list[Waiter],
        poss: list[Position],
        loop: asyncio.AbstractEventLoop,
        nbytes: int,
    ) -> None:
        first = poss[0].entry_id
        error: BaseException | None = None
        fenced = self._fence_refuses()
        if fenced is not None:
            error = fenced
            self._rollback(seg, first)
        elif seg.create_error is not None:
            error = append_error(f"cannot create a segment for {self.name}: {seg.create_error}",
                                 seg.create_error)
            self._rollback(seg, first)
        else:
            try:
                self._files.use(seg)
                seg.write(bufs, start)
            except OSError as exc:
                log.error("append to %s (segment %d) failed: %s", self.name, seg.ledger_id, exc)
                error = append_error(f"append to {self.name} failed: {exc}", exc)
                self._rollback(seg, first)
        batch = Batch(seg, first, futs, poss, loop, self._on_batch_done, error)
        if self._cfg.fsync == "never":
            seg.synced = seg.written  # nothing this policy will ever sync
            self._on_batch_done(batch, error)
            return
        self._pending.append(batch)
        flusher = self._factory._flusher
        if (
            len(self._pending) == 1
            and len(futs) <= _INLINE_MAX_ENTRIES
            and nbytes <= _INLINE_MAX_BYTES
            and flusher.try_inline(batch)
        ):
            return
        try:
            flusher.submit(batch)
        except RuntimeError:
            self._pending.pop()
            self._on_batch_done(batch, LedgerClosedError("storage is shutting down"))

    def _on_batch_done(self, batch: Batch, error: BaseException | None) -> None:
        batch.done = True
        pending = self._pending
        if pending and pending[0] is batch:
            del pending[0]
        elif batch in pending:
            pending.remove(batch)
        seg = batch.segment
        futs = batch.futures
        if error is None and self.fence is not None:
            # synced: confirmed only if no other broker took the ledger over meanwhile
            error = self._fence_refuses()
        if error is None:
            end = batch.first + len(futs)
            if end > seg.confirmed:
                seg.confirmed = min(end, seg.count)
            try:
                _resolve(futs, batch.positions)
                if seg.sealed and seg.sealing is None and seg.confirmed == seg.count:
                    self._seal_later(seg)
            finally:  # the owner writes what its callbacks queued, whatever failed here
                self._appends_done()
            return
        try:
            self._fail_batch(batch, error)
        finally:
            self._appends_done()

    def _fence_refuses(self) -> StorageError | None:
        """None while this ledger's fence holds (or it has none); else why nothing may be
        written or confirmed: fenced (another broker took the ledger over), or a storage
        error reading the fence (which says nothing about ownership: not "fenced")."""
        fence = self.fence
        if fence is None:
            return None
        try:
            if fence.holds():
                return None
        except FenceUnknownError as exc:
            log.error("%s: appends refused: %s", self.name, exc)
            return StorageError(f"append to {self.name} failed: {exc}")
        return self._fenced_error()

    def _fenced_error(self) -> StorageError:
        log.error("%s: fenced: another broker took this ledger over; appends refused",
                  self.name)
        return StorageError(f"ledger {self.name} was taken over by another broker (fenced)")

    def _fail_batch(self, batch: Batch, error: BaseException) -> None:
        """``batch`` failed: roll it back and fail its waiters and every one behind it."""
        pending = self._pending
        seg = batch.segment
        futs = batch.futures
        if not isinstance(error, StorageError):
            error = append_error(f"append to {self.name} failed: {error}", error)
        self._rollback(seg, batch.first)
        for fut in futs:
            _fail(fut, error)
        # Every append behind a failed one fails too (as in Pulsar), so a producer never
        # sees a later message stored after an earlier one was lost.
        later = StorageError(f"append to {self.name} failed: an earlier append failed")
        while pending:
            b = pending.pop(0)
            b.done = True
            self._rollback(b.segment, b.first)
            for fut in b.futures:
                _fail(fut, later)
        # and so does every batch still held for a segment file being made: written later,
        # it would be stored (and confirmed) behind the lost one
        held, self._unwritten = self._unwritten, []
        for hseg, _bufs, _start, hfuts, hposs, _loop, _nbytes in held:
            self._rollback(hseg, hposs[0].entry_id)
            for fut in hfuts:
                _fail(fut, later)
        if self._wbuf:
            wseg, first, wfuts = self._wseg, self._wpos[0].entry_id, self._wfuts
            self._wbuf, self._wfuts, self._wpos, self._wbytes = [], [], [], 0
            self._wlinger = False
            assert wseg is not None
            self._rollback(wseg, first)
            for fut in wfuts:
                _fail(fut, later)

    def _rollback(self, seg: Segment, first: int) -> None:
        """Entries ``first..`` of ``seg`` failed: forget them and seal the segment."""
        if seg.count > first:
            lid = seg.ledger_id
            for eid in range(first, seg.count):
                self._cache.discard(Position(lid, eid))
            seg.truncate_index(first)
            if seg.ready and self.fence is None:
                # (fenced, shared storage: never cut a file a new owner may have read; the
                # segment is sealed below, its sidecar bounds it, the next append rolls)
                seg.truncate_file()
        if seg is self._wseg and self._wbuf:
            # still-buffered appends to this segment were rolled back too: fail them in order
            futs, poss = self._wfuts, self._wpos
            self._wbuf, self._wfuts, self._wpos, self._wbytes = [], [], [], 0
            self._wlinger = False
            err = StorageError(f"append to {self.name} failed: an earlier append failed")
            loop = self._wloop
            assert loop is not None
            batch = Batch(seg, poss[0].entry_id, futs, poss, loop, self._on_batch_done, err)
            if self._cfg.fsync == "group":
                self._pending.append(batch)
                try:
                    self._factory._flusher.submit(batch)
                except RuntimeError:
                    self._on_batch_done(batch, err)
            else:
                self._on_batch_done(batch, err)
        if seg is self._active:
            self._active = None
        seg.sealed = True
        if seg.ready:
            seg.write_index()
        elif seg.create_error is not None and seg.count == 0:
            self._forget_segment(seg)  # it has no file and no entry left

    def _forget_segment(self, seg: Segment) -> None:
        if self._by_id.get(seg.ledger_id) is seg:
            i = self._segments.index(seg)
            del self._segments[i]
            del self._ids[i]
            del self._by_id[seg.ledger_id]

    def _roll(self, loop: asyncio.AbstractEventLoop) -> Segment:
        """Seal the active segment and start a new one. The new one takes appends at
        once; its file is made on a ``readers`` thread (after its id block is stored,
        when it starts one) and its writes are held until then (`_write_held`). An id
        that cannot be had (`StorageError`) leaves the active segment as it was."""
        lid, block = self._factory._allocate_ledger_id()
        old = self._active
        if old is not None:
            self._write_pending()
            self._active = None
            old.sealed = True
            if old.confirmed == old.count:
                self._seal_later(old)
        fence = self.fence
        seg = Segment.planned(self.directory, lid, None if fence is None else fence.epoch)
        seg.entry_with_file = self._factory.file_sync_covers_entry
        if fence is not None:
            seg.guard = fence.check  # asked before the file is made (takeover.py)
        job = self._file_job(make_file, seg, block)
        seg.creating = job

        def made(_: Future[int]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: a blocking close waits
                loop.call_soon_threadsafe(self._file_made, seg)

        job.add_done_callback(made)
        self._add_segment(seg)
        self._active = seg
        self._roll_at = seg.created + self._cfg.segment_max_age_s
        log.debug("ledger %s: new segment %d", self.name, lid)
        return seg

    def _file_job(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """``fn(*args)`` on a ``readers`` thread (here, if those are shut down), noted as
        file work a close or delete waits for."""
        factory = self._factory
        job: Future[T] = factory._run_after(None, factory.readers, fn, *args)
        self._file_work = [f for f in self._file_work if not f.done()]
        self._file_work.append(job)
        return job

    def _file_made(self, seg: Segment) -> None:
        """The job making ``seg``'s file ended (event loop thread; idempotent): take the
        descriptor, or note the failure, and write what was held for it."""
        job = seg.creating
        if seg.ready or seg.create_error is not None or job is None or not job.done():
            return
        exc = job.exception()
        if exc is None:
            fd = job.result()
            if self._by_id.get(seg.ledger_id) is not seg:  # deleted meanwhile
                with contextlib.suppress(OSError):
                    os.close(fd)
                seg.create_error = LedgerClosedError(f"ledger {self.name} is {self._state}")
            else:
                seg.file_created(fd)
                self._files.use(seg)
        else:
            log.error("ledger %s: cannot create segment %d: %s", self.name, seg.ledger_id, exc)
            seg.create_error = exc
        # the job's done callback holds this ledger: without it the segment and the ledger
        # are freed by reference counting once closed (and the job's lock goes)
        seg.creating = None
        self._file_work = [f for f in self._file_work if not f.done()]
        self._write_held()

    def _wait_file(self, seg: Segment) -> None:
        """Block until ``seg``'s file job ended and take its outcome (`_file_made`)."""
        job = seg.creating
        if job is not None:
            with contextlib.suppress(BaseException):
                job.result()
        self._file_made(seg)

    def _wait_files(self) -> None:
        """Block until every file job of this ledger ended; write what was held."""
        for seg in [s for s in self._segments if not s.ready]:
            self._wait_file(seg)
        for job in self._file_work:
            with contextlib.suppress(BaseException):
                job.result()
        self._file_work = []
        self._write_held()

    async def _files_settled(self) -> None:
        """`_wait_files` without blocking the loop."""
        while True:
            work = [f for f in self._file_work if not f.done()]
            if not work:
                break
            await asyncio.wait([asyncio.wrap_future(f) for f in work])
        for seg in [s for s in self._segments if not s.ready]:
            self._file_made(seg)
        self._write_held()

    def _seal_later(self, seg: Segment) -> None:
        """Give back ``seg``'s reserved space and write its sidecar on a ``readers``
        thread (it is sealed and every entry is confirmed: nothing writes it any more)."""
        if seg.sealing is None and seg.ready and not seg.dirty:
            seg.sealing = self._file_job(seal_files, [seg], [])

    def _seal(self, seg: Segment) -> None:
        seg.sealed = True
        if not seg.ready:
            return  # no file: nothing to seal
        seg.cut_reserve()
        if seg.confirmed == seg.count and not seg.dirty and not seg.index_written \
                and not (seg.end <= INDEX_MIN_BYTES and seg.written <= seg.end
                         and self._factory.stopping_clean):
            seg.write_index()
