"""`ManagedLedger`: one topic's append-only log of opaque entries over segment files.

Theory of operation. The ledger is a list of segments (one per ledger id, ascending); the
last one may be *active* (appendable). `append` runs on the event loop thread: it assigns
the position at once, indexes the record, puts the payload in the shared read cache and
queues header + payload in a write buffer. Once per loop iteration (or when the buffer is
big) the buffer goes to the file in one ``pwritev``. Then, per fsync policy, the waiters
are told at once (``never``) or the batch goes to the factory's flusher (``group``), which
tells them after its fdatasync; ``always`` writes and syncs inside `append`. A waiter is
a future (`append`) or a callback (`append_then`: called in order as the batch completes,
then the owner's `after_appends` once per batch, so a broker answers a batch's sends in
one write, in the same loop turn as the sync).

Readers only ever see *confirmed* entries (durable per policy), so an entry whose append
fails is never visible. On a write or fsync error the failed entries, and every unconfirmed entry
behind them, are removed from the index (and from the file, best effort); their futures
fail with `StorageError` in append order; the segment is sealed and the next append
starts a new segment: the ledger stays readable and usable. A segment rolls over by size,
entry count or age; a reopened ledger always starts a new segment for new appends, like a
new Pulsar ledger after a restart.

Roll-over off the loop: the next segment exists in memory at once (positions, index,
cache), its file is made on a ``readers`` thread (`_roll`, `_file_made`) and the write
batches meant for it are held in order (`_unwritten`) until then; the old segment's
sealing (reserve cut, index sidecar) runs on a ``readers`` thread once every entry of it
is confirmed (`_seal_later`). Close, delete and trim wait for these file jobs.

Closing: `close` flushes (fdatasyncs every dirty segment) and seals the segments (cuts the
reserved space, writes the index sidecars) on the calling thread; `close_async`, what the
broker uses, refuses appends at once, lets the flusher commit what is pending and seals on
a ``readers`` thread, while an open of the same name waits for it (see the factory).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import crc32c

from . import record
from .cursor import ManagedCursor
from .errors import (
    CorruptEntryError,
    EntryNotFoundError,
    LedgerClosedError,
    LedgerTerminatedError,
    StorageError,
)
from .flusher import Batch
from .position import EARLIEST, Position
from .segment import ColdSpan, Segment, read_span

if TYPE_CHECKING:
    from .factory import ManagedLedgerFactory

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


#: Told the outcome of one append: its position, or None and the error.
AppendCallback = Callable[[Position | None, BaseException | None], None]
#: Who waits for an append: a future (`append`) or a callback (`append_then`).
Waiter = asyncio.Future[Position] | AppendCallback
_Future = asyncio.Future
#: A write batch held until its segment's file exists (`ManagedLedger._unwritten`).
_Unwritten = tuple[
    Segment, list[bytes | memoryview], int, list[Waiter], list[Position],
    asyncio.AbstractEventLoop, int,
]
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


def _call(callback: AppendCallback, pos: Position | None, exc: BaseException | None) -> None:
    try:
        callback(pos, exc)
    except Exception:  # one failing owner must not keep the others from their outcome
        log.exception("append callback %r failed", callback)


#: The "error" of a marker batch (`ManagedLedger._flusher_barrier`): the flusher syncs
#: nothing for a batch that failed already, and completes it in order.
_BARRIER = LedgerClosedError("flusher barrier (not an append)")


def _seal_files(segments: list[Segment], fds: list[int]) -> None:
    """The disk work of sealing a closed ledger's segments (a ``readers`` thread, for
    `ManagedLedger.close_async`; nothing writes them any more): give back the space
    reserved past the last record, write the index sidecars still missing, close the
    descriptors `_detach_files` took."""
    for seg in segments:
        seg.cut_reserve()
        if seg.confirmed == seg.count and not seg.dirty and not seg.index_written:
            seg.write_index()
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _make_file(seg: Segment, block: Future[Any] | None) -> int:
    """A new segment's file (a ``readers`` thread): once ``block``, the storage.db write
    of its id block, is done (failed: no file)."""
    if block is not None:
        block.result()
    return seg.create_file()


def _segment_mtimes(paths: list[str]) -> dict[str, float | None]:
    """The modification time of each file (None: it cannot be stat'ed). Touches only the
    files: safe on a ``readers`` thread, where `ManagedLedger.trim_async` runs it."""
    out: dict[str, float | None] = {}
    for path in paths:
        try:
            out[path] = os.stat(path).st_mtime
        except OSError:
            out[path] = None
    return out


def _sealing(segments: list[Segment]) -> list[Future[None]]:
    """The sealing jobs (`ManagedLedger._seal_later`) of ``segments`` still under way."""
    return [s.sealing for s in segments if s.sealing is not None and not s.sealing.done()]


def _remove_segment_files(removals: list[tuple[str, str, int | None]]) -> None:
    """Close the descriptors and unlink the files (segment, index sidecar) of segments a
    trim dropped (`ManagedLedger._drop_segment`; a ``readers`` thread for `trim_async`).
    A file already gone is no error; the first other error is raised once every removal
    was tried."""
    first: OSError | None = None
    for path, idx_path, fd in removals:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        for p in (path, idx_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
            except OSError as exc:
                first = first or exc
    if first is not None:
        raise first


async def _stored(future: Future[Any], what: str) -> None:
    """Wait for a storage thread's write (shielded: a waiter that gives up does not cancel
    it); its failure as `StorageError` ``"<what>: <error>"``."""
    try:
        await asyncio.shield(asyncio.wrap_future(future))
    except Exception as exc:  # CancelledError is not an Exception: it passes through
        raise StorageError(f"{what}: {exc}") from exc


class PositionsRead(NamedTuple):
    """What `ManagedLedger.read_positions_cold` read: the entries it could read (in the
    order they were asked for) and the positions it could not, each with its error. A
    position past the read's byte budget is in neither."""

    entries: list[tuple[Position, memoryview]]
    failed: dict[Position, Exception]


def _read_runs(runs: list[ColdSpan], failed: dict[Position, Exception]) -> PositionsRead:
    """The disk work of `ManagedLedger.read_positions_cold` (a ``readers`` thread): each
    run with one pread (`read_span`); a record that fails its checksum is reported and the
    rest of its run read on, a file that is gone (trimmed meanwhile) or an I/O error fails
    what is left of its run."""
    entries: list[tuple[Position, memoryview]] = []
    for run in runs:
        lid, first, offs = run.ledger_id, run.first, run.offsets
        count = len(offs) - 1
        k = 0
        while k < count:
            part = run if k == 0 else ColdSpan(run.path, lid, first + k, offs[k:])
            try:
                got = read_span(part, views=True)
            except CorruptEntryError as exc:  # the first record of ``part``
                failed[Position(lid, first + k)] = exc
                k += 1
                continue
            except Exception as exc:  # OSError and the like: nothing more of this run
                for j in range(k, count):
                    failed[Position(lid, first + j)] = exc
                break
            if not got:
                gone = EntryNotFoundError(f"{run.path}: segment {lid} was deleted (trimmed)")
                for j in range(k, count):
                    failed[Position(lid, first + j)] = gone
                break
            for data in got:
                entries.append((Position(lid, first + k), data))
                k += 1
    return PositionsRead(entries, failed)


def scan_segments(directory: str) -> list[Segment]:
    """Open (and, after a crash, recover) the segments a ledger directory holds, in id order.
    Touches only those files, never state shared with other ledgers: safe in a worker
    thread, which is where `ManagedLedgerFactory.open_async` runs it."""
    ids = sorted(
        int(n[:-4]) for n in os.listdir(directory) if n.endswith(".seg") and n[:-4].isdigit()
    )
    segments = []
    for lid in ids:
        seg = Segment.open_existing(directory, lid)
        if seg is not None:
            segments.append(seg)
    return segments


class ManagedLedger:
    """A named, durable, append-only sequence of entries. Use from one event loop thread."""

    def __init__(
        self,
        factory: ManagedLedgerFactory,
        name: str,
        directory: str,
        meta: dict[str, Any],
        segments: list[Segment] | None = None,
    ) -> None:
        """``segments``: the directory's segments as `scan_segments` found them (scanned
        here when None)."""
        cfg = factory.config
        self.name = name
        self.directory = directory
        self._factory = factory
        self._policy = cfg.fsync
        self._max_bytes = cfg.segment_max_bytes
        self._max_entries = cfg.segment_max_entries
        self._max_age = cfg.segment_max_age_s
        self._wbuf_limit = cfg.write_buffer_bytes
        self._cache = factory._cache
        self._files = factory._files
        self._segments: list[Segment] = []
        self._ids: list[int] = []
        self._by_id: dict[int, Segment] = {}
        self._active: Segment | None = None
        self._roll_at = 0.0
        # write buffer (all for self._wseg, starting at byte offset self._wstart)
        self._wbuf: list[bytes | memoryview] = []
        self._wfuts: list[Waiter] = []
        self._wpos: list[Position] = []
        self._wbytes = 0
        self._wseg: Segment | None = None
        self._wloop: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop of the last append
        self._wstart = 0
        self._write_scheduled = False
        self._pending: deque[Batch] = deque()
        #: Called once after the waiters of each completed batch were told (see `append_then`).
        self.after_appends: Callable[[], None] | None = None
        self._cursors: dict[str, ManagedCursor] = {}
        self._terminated = bool(meta.get("terminated", False))
        # small named values stored with the ledger's row (Pulsar's managed ledger
        # properties): the broker keeps a topic's epoch there
        self._properties: dict[str, str] = dict(meta.get("properties") or {})
        self._terminating: Future[Any] | None = None  # terminate_async's write, under way
        self._state = "open"  # "closing" (close_async under way), "closed", "deleted"
        self._close_task: asyncio.Task[None] | None = None
        self._close_done: Future[None] | None = None  # the factory's: set once closed
        self._seal_job: Future[None] | None = None
        # write batches held until their segment's file exists (in append order):
        # (segment, buffers, file offset, waiters, positions, loop, payload bytes)
        self._unwritten: deque[_Unwritten] = deque()
        # the file jobs on storage threads (segment creation, sealing) maybe under way
        self._file_work: list[Future[Any]] = []
        for seg in scan_segments(directory) if segments is None else segments:
            self._add_segment(seg)

    # ------------------------------------------------------------------ opening

    def _add_segment(self, seg: Segment) -> None:
        self._segments.append(seg)
        self._ids.append(seg.ledger_id)
        self._by_id[seg.ledger_id] = seg

    def _load_cursors(self, states: dict[str, dict[str, Any]]) -> None:
        for cname, state in states.items():
            cur = ManagedCursor(self, cname, EARLIEST)
            cur.load_state(state)
            self._cursors[cname] = cur

    # ------------------------------------------------------------------ appending
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
        self, data: bytes | memoryview, on_done: AppendCallback, part_crc: int | None = None
    ) -> None:
        """`append` without a future: ``on_done(position, None)`` (or ``(None, error)``) is
        called once the entry is durable (or failed), in append order, from the storage's
        completion of its batch, with the other entries of that batch; then
        `after_appends` is called once. ``on_done`` may also be called before this returns
        (a closed ledger, the ``always`` policy). The cheap path for a hot caller: no
        future, and no extra turn of the event loop to run its callbacks."""
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = _get_loop()
        self._append(data, part_crc, on_done, loop)

    def _append(
        self,
        data: bytes | memoryview,
        part_crc: int | None,
        waiter: Waiter,
        loop: asyncio.AbstractEventLoop,
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
            or seg.count >= self._max_entries
            or (seg.end + n > self._max_bytes and seg.count)
            or _monotonic() > self._roll_at
        ):
            try:
                seg = self._roll(loop)
            except (OSError, RuntimeError) as exc:
                self._fail_now(waiter, StorageError(f"cannot create a segment for {self.name}: {exc}"))
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
        if self._policy == "always":
            self._append_always(seg, hdr, data, start, pos, waiter)
            return
        buf = self._wbuf
        if not buf:
            self._wseg = seg
            self._wstart = start
            self._wloop = loop
            if not self._write_scheduled:
                self._write_scheduled = True
                loop.call_soon(self._on_tick)
        buf.append(hdr)
        buf.append(data)
        self._wfuts.append(waiter)
        self._wpos.append(pos)
        self._wbytes += n
        if self._wbytes >= self._wbuf_limit:
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
            self._fail_now(waiter, StorageError(f"append to {self.name} failed: {exc}"))
            return
        seg.confirmed = pos.entry_id + 1
        _resolve([waiter], [pos])
        self._appends_done()

    def _on_tick(self) -> None:
        self._write_scheduled = False
        self._write_pending()

    def _write_pending(self) -> None:
        """Hand the write buffer to the OS (one pwritev), then to the flusher; held back
        (in order) while its segment's file, or an earlier held batch's, is being made."""
        bufs = self._wbuf
        if not bufs:
            return
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
        """Write the held batches whose segment files are made (or failed), in order."""
        held = self._unwritten
        while held:
            seg = held[0][0]
            if not seg.ready and seg.create_error is None:
                return
            self._write_batch(*held.popleft())

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
        if seg.create_error is not None:
            error = StorageError(f"cannot create a segment for {self.name}: {seg.create_error}")
            self._rollback(seg, first)
        else:
            try:
                self._files.use(seg)
                seg.write(bufs, start)
            except OSError as exc:
                log.error("append to %s (segment %d) failed: %s", self.name, seg.ledger_id, exc)
                error = StorageError(f"append to {self.name} failed: {exc}")
                self._rollback(seg, first)
        batch = Batch(seg, first, futs, poss, loop, self._on_batch_done, error)
        if self._policy == "never":
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
            pending.popleft()
        elif batch in pending:
            pending.remove(batch)
        seg = batch.segment
        futs = batch.futures
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

    def _fail_batch(self, batch: Batch, error: BaseException) -> None:
        """``batch`` failed: roll it back and fail its waiters and every one behind it."""
        pending = self._pending
        seg = batch.segment
        futs = batch.futures
        if not isinstance(error, StorageError):
            error = StorageError(f"append to {self.name} failed: {error}")
        self._rollback(seg, batch.first)
        for fut in futs:
            _fail(fut, error)
        # Every append behind a failed one fails too (as in Pulsar), so a producer never
        # sees a later message stored after an earlier one was lost.
        later = StorageError(f"append to {self.name} failed: an earlier append failed")
        while pending:
            b = pending.popleft()
            b.done = True
            self._rollback(b.segment, b.first)
            for fut in b.futures:
                _fail(fut, later)
        if self._wbuf:
            wseg, first, wfuts = self._wseg, self._wpos[0].entry_id, self._wfuts
            self._wbuf, self._wfuts, self._wpos, self._wbytes = [], [], [], 0
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
            if seg.ready:
                seg.truncate_file()
        if seg is self._wseg and self._wbuf:
            # still-buffered appends to this segment were rolled back too: fail them in order
            futs, poss = self._wfuts, self._wpos
            self._wbuf, self._wfuts, self._wpos, self._wbytes = [], [], [], 0
            err = StorageError(f"append to {self.name} failed: an earlier append failed")
            loop = self._wloop
            assert loop is not None
            batch = Batch(seg, poss[0].entry_id, futs, poss, loop, self._on_batch_done, err)
            if self._policy == "group":
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
        when it starts one) and its writes are held until then (`_write_held`)."""
        old = self._active
        if old is not None:
            self._write_pending()
            self._active = None
            old.sealed = True
            if old.confirmed == old.count:
                self._seal_later(old)
        lid, block = self._factory._allocate_ledger_id()
        seg = Segment.planned(self.directory, lid)
        job = self._file_job(_make_file, seg, block)
        seg.creating = job

        def made(_: Future[int]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: a blocking close waits
                loop.call_soon_threadsafe(self._file_made, seg)

        job.add_done_callback(made)
        self._add_segment(seg)
        self._active = seg
        self._roll_at = seg.created + self._max_age
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
            seg.sealing = self._file_job(_seal_files, [seg], [])

    def _seal(self, seg: Segment) -> None:
        seg.sealed = True
        if not seg.ready:
            return  # no file: nothing to seal
        seg.cut_reserve()
        if seg.confirmed == seg.count and not seg.dirty and not seg.index_written:
            seg.write_index()

    # ------------------------------------------------------------------ positions
    def _locate(self, p: Position) -> tuple[int, int] | None:
        """(segment index, entry id) of the first confirmed entry ``>= p``."""
        lid, eid = p
        segs = self._segments
        i = bisect_left(self._ids, lid)
        if eid < 0:
            eid = 0
        while i < len(segs):
            seg = segs[i]
            if seg.ledger_id != lid:
                eid = 0
            if eid < seg.confirmed:
                return i, eid
            i += 1
        return None

    def next_position(self, p: Position) -> Position | None:
        """The first confirmed position after ``p``."""
        lid, eid = p
        seg = self._by_id.get(lid)
        if seg is not None and 0 <= eid + 1 < seg.confirmed:
            return Position(lid, eid + 1)
        loc = self._locate(Position(lid, eid + 1))
        if loc is None:
            return None
        return Position(self._segments[loc[0]].ledger_id, loc[1])

    def contains(self, p: Position) -> bool:
        """Whether ``p`` names a confirmed entry that is still stored."""
        seg = self._by_id.get(p[0])
        return seg is not None and 0 <= p[1] < seg.confirmed

    def first_position(self) -> Position | None:
        """The oldest confirmed entry."""
        loc = self._locate(EARLIEST)
        return None if loc is None else Position(self._segments[loc[0]].ledger_id, loc[1])

    def last_confirmed(self) -> Position | None:
        """The newest confirmed (durable, readable) entry."""
        for seg in reversed(self._segments):
            if seg.confirmed:
                return Position(seg.ledger_id, seg.confirmed - 1)
        return None

    def last_appended(self) -> Position | None:
        """The newest appended entry, confirmed or not."""
        for seg in reversed(self._segments):
            if seg.count:
                return Position(seg.ledger_id, seg.count - 1)
        return None

    def entry_count(self) -> int:
        """Confirmed entries in the ledger."""
        return sum(s.confirmed for s in self._segments)

    def size_bytes(self) -> int:
        """Bytes of the segment files."""
        return sum(s.end for s in self._segments)

    def count_after(self, p: Position) -> int:
        """Confirmed entries ``> p``."""
        lid, eid = p
        segs = self._segments
        i = bisect_left(self._ids, lid)
        n = 0
        if i < len(segs) and segs[i].ledger_id == lid:
            n = max(0, segs[i].confirmed - max(eid + 1, 0))
            i += 1
        for seg in segs[i:]:
            n += seg.confirmed
        return n

    def count_between(self, start: Position, end: Position) -> int:
        """Confirmed entries in ``[start, end]``."""
        if start[0] == end[0]:
            seg = self._by_id.get(start[0])
            if seg is None:
                return 0
            lo = max(start[1], 0)
            hi = min(end[1], seg.confirmed - 1)
            return max(0, hi - lo + 1)
        return self.count_after(Position(start[0], start[1] - 1)) - self.count_after(end)

    def segment_ids(self) -> list[int]:
        """Ledger ids of the segments, ascending."""
        return list(self._ids)

    # ------------------------------------------------------------------ reading
    def read(self, position: Position) -> bytes | memoryview:
        """One confirmed entry (`EntryNotFoundError` if there is none there)."""
        lid, eid = position
        seg = self._by_id.get(lid)
        if seg is None or not 0 <= eid < seg.confirmed:
            raise EntryNotFoundError(f"{self.name}: no entry at {lid}:{eid}")
        data = self._cache.get(position)
        if data is not None:
            return data
        self._files.use(seg)
        return seg.read_records(eid, eid)[0]

    def read_entries(
        self, start: Position, max_entries: int, max_bytes: int | None = None
    ) -> list[tuple[Position, bytes | memoryview]]:
        """Up to ``max_entries`` confirmed entries from ``start`` (inclusive, or the first
        one after it), stopping before ``max_bytes`` of payload (but at least one entry).
        Entries still in the read cache never touch the disk; a run of misses is read
        with one pread."""
        out: list[tuple[Position, bytes | memoryview]] = []
        loc = self._locate(start) if max_entries > 0 else None
        if loc is None:
            return out
        i, eid = loc
        segs = self._segments
        cache_get = self._cache.get
        budget = -1 if max_bytes is None else max_bytes  # -1: unlimited
        while i < len(segs):
            seg = segs[i]
            lid = seg.ledger_id
            last = min(seg.confirmed - 1, eid + max_entries - len(out) - 1)
            while eid <= last:
                pos = Position(lid, eid)
                data = cache_get(pos)
                if data is None:
                    k, nbytes = self._read_disk(seg, eid, last, budget, out)
                    if k == 0:
                        return out
                    eid += k
                    if budget >= 0:
                        budget -= nbytes
                        if budget <= 0:
                            return out
                    continue
                if budget >= 0:
                    n = len(data)
                    if n > budget and out:
                        return out
                    budget -= n
                    out.append((pos, data))
                    if budget <= 0:
                        return out
                else:
                    out.append((pos, data))
                eid += 1
            if len(out) >= max_entries:
                return out
            i += 1
            eid = 0
        return out

    def read_cached(
        self, start: Position, max_entries: int, max_bytes: int | None = None
    ) -> list[tuple[Position, bytes | memoryview]]:
        """Like ``read_entries``, but only the run of entries from ``start`` that the read
        cache holds (empty when the first one is not cached): never touches the disk."""
        out: list[tuple[Position, bytes | memoryview]] = []
        loc = self._locate(start) if max_entries > 0 else None
        if loc is None:
            return out
        i, eid = loc
        segs = self._segments
        cache_get = self._cache.get
        budget = -1 if max_bytes is None else max_bytes
        while i < len(segs) and len(out) < max_entries:
            seg = segs[i]
            lid = seg.ledger_id
            while eid < seg.confirmed and len(out) < max_entries:
                data = cache_get(Position(lid, eid))
                if data is None:
                    return out
                if budget >= 0:
                    if len(data) > budget and out:
                        return out
                    budget -= len(data)
                out.append((Position(lid, eid), data))
                eid += 1
            i += 1
            eid = 0
        return out

    def read_cold(
        self, start: Position, max_entries: int, max_bytes: int | None = None
    ) -> asyncio.Future[list[tuple[Position, memoryview]]]:
        """Entries from ``start`` (as ``read_entries``) read from disk on the factory's
        reader threads: at most one segment's worth, at least one entry when one exists.
        The event loop only plans the read (positions and offsets); the thread opens the
        file itself, so nothing the loop owns is touched there. The run is read with one
        pread and each record checked against its CRC32C; the entries are read-only
        ``memoryview``s of that one buffer (no copy per entry)."""
        loop = asyncio.get_running_loop()
        loc = self._locate(start) if max_entries > 0 else None
        if loc is None:
            done: asyncio.Future[list[tuple[Position, memoryview]]] = loop.create_future()
            done.set_result([])
            return done
        i, first = loc
        seg = self._segments[i]
        last = min(seg.confirmed - 1, first + max_entries - 1)
        offs = seg.offsets
        if max_bytes is not None:
            j = first
            while j < last and offs[j + 2] - offs[first] - _HS * (j + 2 - first) <= max_bytes:
                j += 1
            last = j
        span = seg.span(first, last)
        lid = seg.ledger_id

        def read() -> list[tuple[Position, memoryview]]:
            return [(Position(lid, first + k), data)
                    for k, data in enumerate(read_span(span, views=True))]

        return loop.run_in_executor(self._factory.readers, read)

    def cached_entry(self, position: Position) -> bytes | memoryview | None:
        """The confirmed entry at ``position`` if the read cache holds it; None for a miss
        (or no such entry: `read_positions_cold` tells which). Never touches the disk."""
        lid, eid = position
        seg = self._by_id.get(lid)
        if seg is None or not 0 <= eid < seg.confirmed:
            return None
        return self._cache.get(position)

    def read_positions_cold(
        self, positions: list[Position], max_bytes: int | None = None
    ) -> asyncio.Future[PositionsRead]:
        """The entries at ``positions`` (any confirmed ones, in the order given) read from
        disk on the factory's reader threads, as `read_cold` reads a run: the loop plans
        the read (each run of consecutive entries of a segment is one pread of a thread's
        own descriptor), stopping before ``max_bytes`` of payload (at least one entry);
        each record is checked against its CRC32C and handed back as a read-only
        ``memoryview``. What cannot be read is reported rather than raised: a position
        that names no confirmed entry (`EntryNotFoundError`, known at once), a record
        that fails its checksum (`CorruptEntryError`), a segment deleted meanwhile, an I/O
        error. The positions left out by ``max_bytes`` are in neither list."""
        loop = asyncio.get_running_loop()
        failed: dict[Position, Exception] = {}
        runs: list[ColdSpan] = []
        budget = -1 if max_bytes is None else max_bytes  # -1: unlimited
        planned = 0
        seg: Segment | None = None
        run_last = -1
        for p in positions:
            lid, eid = p
            if seg is None or seg.ledger_id != lid:
                seg = self._by_id.get(lid)
            if seg is None or not 0 <= eid < seg.confirmed:
                failed[Position(lid, eid)] = EntryNotFoundError(f"{self.name}: no entry at {lid}:{eid}")
                continue
            offs = seg.offsets
            if budget >= 0:
                size = offs[eid + 1] - offs[eid] - _HS
                if size > budget and planned:
                    break
                budget = max(0, budget - size)
            planned += 1
            if runs and run_last + 1 == eid and runs[-1].ledger_id == lid:
                runs[-1].offsets.append(offs[eid + 1])  # one more record of the same run
            else:
                runs.append(ColdSpan(seg.path, lid, eid, [offs[eid], offs[eid + 1]]))
            run_last = eid
        if not runs:
            done: asyncio.Future[PositionsRead] = loop.create_future()
            done.set_result(PositionsRead([], failed))
            return done
        return loop.run_in_executor(self._factory.readers, _read_runs, runs, failed)

    def _read_disk(
        self, seg: Segment, first: int, last: int, budget: int, out: list[tuple[Position, bytes | memoryview]]
    ) -> tuple[int, int]:
        """Append ``first..last`` of ``seg`` to ``out`` (fewer if ``budget`` >= 0 bytes
        runs out; at least one if ``out`` is empty), in one pread. Returns (entries, bytes).
        A corrupt entry ends the read before it; it raises only as the read's first entry,
        so a reader gets every good entry before it and then learns which one is bad."""
        offs = seg.offsets
        base = offs[first]
        if budget >= 0:
            if offs[first + 1] - base - _HS > budget and out:
                return 0, 0
            j = first
            while j < last and offs[j + 2] - base - _HS * (j + 2 - first) <= budget:
                j += 1
            last = j
        self._files.use(seg)
        lid = seg.ledger_id
        nbytes = 0
        try:
            records = seg.read_records(first, last)
        except CorruptEntryError as exc:
            bad = exc.position[1] if exc.position is not None else first
            if bad <= first:
                if out:
                    return 0, 0
                raise
            records = seg.read_records(first, bad - 1)
        for k, data in enumerate(records):
            out.append((Position(lid, first + k), data))
            nbytes += len(data)
        return len(records), nbytes

    def read_range(
        self, start: Position, end_inclusive: Position
    ) -> Iterator[tuple[Position, bytes | memoryview]]:
        """Every confirmed entry in ``[start, end_inclusive]``, in order, read in chunks."""
        pos: Position | None = start
        while pos is not None:
            chunk = self.read_entries(pos, 1024, 16 * 1024 * 1024)
            if not chunk:
                return
            for p, data in chunk:
                if p > end_inclusive:
                    return
                yield p, data
            pos = self.next_position(chunk[-1][0])

    def find_position(self, predicate: Callable[[bytes | memoryview], bool]) -> Position | None:
        """Binary search: the first entry whose data satisfies ``predicate``, assuming it is
        false then true along the ledger (e.g. ``publish_time >= t``); None if none does."""
        segs = [s for s in self._segments if s.confirmed]
        if not segs:
            return None
        starts = []
        total = 0
        for s in segs:
            starts.append(total)
            total += s.confirmed

        def at(k: int) -> Position:
            i = bisect_left(starts, k + 1) - 1
            return Position(segs[i].ledger_id, k - starts[i])

        lo, hi = 0, total
        while lo < hi:
            mid = (lo + hi) // 2
            if predicate(self.read(at(mid))):
                hi = mid
            else:
                lo = mid + 1
        return at(lo) if lo < total else None

    def find_position_async(
        self, predicate: Callable[[bytes | memoryview], bool]
    ) -> asyncio.Future[Position | None]:
        """``find_position`` on the factory's reader threads (for searches a client asks
        for, such as a seek by publish time): the loop takes a snapshot of the confirmed
        entries' offsets, the thread reads each probe with its own descriptor."""
        loop = asyncio.get_running_loop()
        segs = [(s.path, s.ledger_id, s.offsets, s.confirmed) for s in self._segments if s.confirmed]
        starts: list[int] = []
        total = 0
        for *_, confirmed in segs:
            starts.append(total)
            total += confirmed

        def at(k: int) -> tuple[int, int]:
            i = bisect_left(starts, k + 1) - 1
            return i, k - starts[i]

        def search() -> Position | None:
            lo, hi = 0, total
            while lo < hi:
                mid = (lo + hi) // 2
                i, eid = at(mid)
                path, lid, offs, _ = segs[i]
                records = read_span(ColdSpan(path, lid, eid, [offs[eid], offs[eid + 1]]))
                if not records:  # trimmed meanwhile: what is left starts later
                    lo = mid + 1
                elif predicate(records[0]):
                    hi = mid
                else:
                    lo = mid + 1
            if lo >= total:
                return None
            i, eid = at(lo)
            return Position(segs[i][1], eid)

        return loop.run_in_executor(self._factory.readers, search)

    # ------------------------------------------------------------------ cursors
    def open_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        """The durable cursor ``name``, created if needed at ``"latest"`` (after the last
        confirmed entry) or ``"earliest"`` (before the first). A new cursor exists in
        memory at once; its first row is written off the loop (`ManagedCursor.creating`),
        after this ledger's queued work (a delete of a cursor of the same name lands
        first) and before any later write of it; nothing here waits for it (see
        `open_cursor_async`)."""
        self._check_open()
        cur = self._cursors.get(name)
        if cur is None:
            if initial_position == "latest":
                md = self.last_confirmed() or EARLIEST
            elif initial_position == "earliest":
                md = EARLIEST
            else:
                raise ValueError(
                    f"initial_position must be latest|earliest, not {initial_position!r}"
                )
            cur = ManagedCursor(self, name, md)
            self._cursors[name] = cur
            self._factory._store_new_cursor(self.name, cur)
        return cur

    async def open_cursor_async(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        """`open_cursor`, returning once the cursor's row is stored (a subscription that
        is answered exists after a crash). A first write that failed is tried again here;
        StorageError if that fails too."""
        cur = self.open_cursor(name, initial_position)
        creating = cur.creating
        if creating is None:
            return cur
        try:
            await asyncio.shield(asyncio.wrap_future(creating))
        except asyncio.CancelledError:
            raise
        except Exception:
            if cur.closed or cur.creating is not creating:
                raise
            again = self._factory._store_new_cursor(self.name, cur)
            if again is None:
                raise
            await _stored(again, f"cannot store cursor {name} of {self.name}")
        if cur.closed:
            raise LedgerClosedError(f"cursor {name} of {self.name} was deleted meanwhile")
        return cur

    def delete_cursor(self, name: str) -> Future[Any]:
        """Forget the cursor ``name`` at once; its row is deleted on the factory's cursor
        writer thread (after its queued writes; a reopen of the ledger and a new cursor of
        the same name wait for it). Returns that deletion's future."""
        cur = self._cursors.pop(name, None)
        creating = None
        if cur is not None:
            cur.closed = True
            creating = cur.creating
            self._factory._forget_cursor(cur)
        return self._factory._cursor_deleted(self.name, name, creating)

    async def delete_cursor_async(self, name: str) -> None:
        """`delete_cursor`, returning once the row is gone (StorageError if that failed)."""
        await _stored(self.delete_cursor(name), f"cannot delete cursor {name} of {self.name}")

    def cursors(self) -> dict[str, ManagedCursor]:
        return dict(self._cursors)

    def cursor(self, name: str) -> ManagedCursor | None:
        """The durable cursor ``name``, if there is one."""
        return self._cursors.get(name)

    def _cursor_changed(self, cursor: ManagedCursor) -> None:
        self._factory._schedule_cursor_persist(cursor)

    def _persist_cursors(self, cursors: list[ManagedCursor]) -> None:
        self._factory._persist_cursors(cursors)

    def _persist_cursor_later(self, cursor: ManagedCursor) -> Future[Any] | None:
        return self._factory._persist_cursor_later(cursor)

    # ------------------------------------------------------------------ retention
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
            mtimes = _segment_mtimes([seg.path for seg in need])
            drop, _ = self._trim_plan(retention_time_s, retention_size_bytes, mtimes)
        removals = [self._drop_segment(seg) for seg in drop]
        deleted = [seg.ledger_id for seg in drop]
        if deleted:
            log.info("ledger %s: trimmed segments %s", self.name, deleted)
        for job in _sealing(drop):  # its sidecar must not reappear after the unlink
            with contextlib.suppress(Exception):
                job.result()
        _remove_segment_files(removals)
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
                self._factory.readers, _segment_mtimes, [seg.path for seg in need])
            if self._state != "open":
                return []
            # (a segment consumed meanwhile and not stat'ed waits for the next trim)
            drop, _ = self._trim_plan(retention_time_s, retention_size_bytes, mtimes)
        if not drop:
            return []
        removals = [self._drop_segment(seg) for seg in drop]
        deleted = [seg.ledger_id for seg in drop]
        log.info("ledger %s: trimmed segments %s", self.name, deleted)
        sealing = _sealing(drop)
        if sealing:  # its sidecar must not reappear after the unlink
            await asyncio.wait([asyncio.wrap_future(f) for f in sealing])
        try:
            try:
                job = self._factory.readers.submit(_remove_segment_files, removals)
            except RuntimeError:  # the factory is shutting down: remove them here
                _remove_segment_files(removals)
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

    def _trimmable(self, seg: Segment, consumed: Position) -> bool:
        """Whether ``seg`` may go as far as the cursors are concerned: not the active one,
        every entry confirmed, the last one consumed (``consumed``)."""
        if seg is self._active or seg.confirmed < seg.count or not seg.ready:
            return False
        return seg.count == 0 or Position(seg.ledger_id, seg.count - 1) <= consumed

    def _drop_segment(self, seg: Segment) -> tuple[str, str, int | None]:
        """Take ``seg`` out of the ledger (readers no longer find it) and its descriptor
        away from the file LRU. Returns what `_remove_segment_files` removes: the segment's
        path, its index sidecar's path and the descriptor to close (None: not open)."""
        i = self._segments.index(seg)
        del self._segments[i]
        del self._ids[i]
        del self._by_id[seg.ledger_id]
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
        mtimes = await _get_loop().run_in_executor(self._factory.readers, _segment_mtimes, [seg.path])
        return mtimes[seg.path]

    # ------------------------------------------------------------------ lifecycle
    @property
    def is_open(self) -> bool:
        """False once the ledger is closed or deleted."""
        return self._state == "open"

    @property
    def is_terminated(self) -> bool:
        return self._terminated

    def terminate(self) -> Position | None:
        """Refuse further appends, persistently. Returns the last appended position
        (appends already accepted still complete). The flag is written to storage.db on
        the calling thread (see `terminate_async`)."""
        self._check_open()
        if not self._terminated:
            self._terminated = True
            self._factory._save_ledger_meta(self.name, self._meta())
        return self.last_appended()

    async def terminate_async(self) -> Position | None:
        """`terminate`, with the durable storage.db write on the factory's cursor writer
        thread: appends are refused at once, this returns once the flag is stored (a reopen
        of the ledger waits for the write). If the write fails the ledger is not
        terminated and the `StorageError` is raised."""
        self._check_open()
        pending = self._terminating
        if pending is None and not self._terminated:
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
        self._properties[key] = value
        pending = self._factory._save_ledger_meta_later(self.name, self._meta())
        try:
            await asyncio.shield(asyncio.wrap_future(pending))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            raise StorageError(f"cannot store property {key} of ledger {self.name}: {exc}") from exc

    def flush(self) -> None:
        """Write the buffer and fdatasync every dirty segment now (blocking), resolving
        every pending append."""
        self._write_pending()
        self._wait_files()
        errors: dict[Segment, OSError] = {}
        for seg in self._segments:
            if seg.dirty and self._policy != "never":
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
            self._factory._ledger_closed(self)

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
            self._close_done, cursors_written = factory._closing_started(self, cursors)
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
                job = self._factory.readers.submit(_seal_files, segs, fds)
            except RuntimeError:  # the factory is shutting down: seal here
                _seal_files(segs, fds)
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
        LRU (a read after this reopens one of its own): what `_seal_files` closes."""
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
        done, self._close_done = self._close_done, None
        self._factory._closing_finished(self, done)

    def delete(self) -> None:
        """Delete the ledger: its segments, cursors and metadata (gone for its users at
        once; the files and rows are removed on storage threads, see the factory)."""
        if self._state == "deleted":
            return
        if self._state == "closing":
            self._finish_closing_now()  # its sealing must not race the removal
        self._write_pending()
        deleted = LedgerClosedError(f"ledger {self.name} deleted")
        held, self._unwritten = list(self._unwritten), deque()
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
        self._factory._ledger_deleted(self)  # its directory and rows go on storage threads

    def _check_open(self) -> None:
        if self._state != "open":
            raise LedgerClosedError(f"ledger {self.name} is {self._state}")

    def __repr__(self) -> str:
        return f"ManagedLedger({self.name!r}, segments={self._ids}, state={self._state})"
