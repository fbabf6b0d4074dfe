"""`ManagedLedgerFactory`: owns the data directory and everything ledgers share.

Shared per factory: the read cache, the LRU of open segment files, the group-commit
flusher thread, the ledger id allocator, the cursor persistence timer, and two SQLite
stores: ``storage.db`` (this layer's own bookkeeping: ledger directories, terminated
flags, cursor state, the ledger id high-water mark) and ``metadata.db`` (exposed as
`.metadata` for the broker's keys, unless another `MetadataStore` is passed in). With
``StorageConfig.state_files`` (brokers sharing storage across hosts) the bookkeeping is
kept in files in each ledger's directory instead (`LedgerFilesStore`), not storage.db.

The broker's metadata calls run off its event loop through `read_metadata` (the
``readers`` threads) and `write_metadata` (one writer thread, so writes land in the order
they were made; `close` lets them finish before it closes the store).

Closing and deleting a ledger change memory at once and leave the disk work to threads:
a closed ledger's last cursor states go to the cursor writer thread (after the cursor
writes queued before them), a deleted ledger's directory is removed on a ``readers``
thread and then its storage.db rows on the cursor writer thread (rows last: after a crash
in between, the ledger exists and is empty, never an old directory under a new ledger).
A ledger's `close_async` (the broker's close) takes it out of the registry at once and
leaves its last commits and sealing to the flusher and ``readers`` threads; its
termination flag (`terminate_async`) is written on the cursor writer thread. That work is
the ledger's *settling* (each new piece also waits for what was under way before it): an
open of the same name waits for it (`open_async` awaits it; `open` and `delete` block on
it, finishing a `close_async` under way on their own thread, as the loop may be the one
blocked), and `close` finishes it before the stores close.

Layout: ``<data_dir>/ledgers/<quoted name>-<hash>/<ledger id>.seg`` (+ ``.idx``); a
fenced ledger's segments are ``<ledger id>.e<epoch>.seg``, opened by `takeover.take_over`,
which records where each ends (``takeover.<epoch>.json``).
Ledger ids are allocated in blocks whose upper bound is committed (synchronous=FULL)
before any id of the block is used, so ids never repeat, even after a power loss. In
shared storage the block is reserved in storage.db across processes (one host), or, once
the broker of a cluster hands the factory an `IdSource` (`use_ledger_id_source`: the
metadata store's counter), taken from that source (`SourcedLedgerIds`), and storage.db
holds no ids at all.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

from .clean_stop import leave_mark, take_mark
from .config import StorageConfig
from .cursor import ManagedCursor
from .cursor_rows import CursorRows
from .dir_sync import SharedDirSync
from .errors import LedgerClosedError, StorageError
from .fence import Fence, FencedError
from .filelimit import FileLimiter
from .flusher import Flusher
from .futures import all_done, running_future, running_loop
from .ledger import ManagedLedger, scan_segments
from .ledger_files import LEDGER_PREFIX, LedgerFilesStore, dir_name
from .ledger_ids import IdSource, SourcedLedgerIds
from .metadata import MetadataStore, SqliteMetadataStore
from .mounts import file_sync_covers_new_entries
from .readcache import ReadCache
from .segment import Segment, fsync_dir
from .takeover import take_over

log = logging.getLogger(__name__)

_ID_BLOCK = 1000

T = TypeVar("T")


class _Opened(NamedTuple):
    """What opening a ledger found on disk and in storage.db (see `_prepare`)."""

    meta: dict[str, Any]
    path: str
    segments: builtins.list[Segment]
    cursors: dict[str, Any]
    fence: Fence | None = None  # shared storage: the fence this open wrote


#: at shutdown, index sidecars are written on this many threads at once
CLOSE_THREADS = 8


def _write_indexes(segments: builtins.list[Segment]) -> None:
    """Shutdown: write the index sidecars of ``segments`` (complete, synced, of open
    ledgers: nothing writes them any more) on `CLOSE_THREADS` threads at once. Each is a
    file made, written and renamed (~0.2 ms): one after the other they were most of a stop
    with 100,000 loaded topics. `ManagedLedger.close` then finds them written."""
    if len(segments) < 2 * CLOSE_THREADS:
        return  # (close writes them)
    with ThreadPoolExecutor(CLOSE_THREADS, thread_name_prefix="magnetar-close") as pool:
        list(pool.map(Segment.write_index, segments))


class ManagedLedgerFactory(CursorRows):
    """Opens, lists and deletes managed ledgers under one data directory."""

    def __init__(self, config: StorageConfig, metadata: MetadataStore | None = None) -> None:
        self.config = config
        root = str(config.data_dir)
        self._root = os.path.join(root, "ledgers")
        if not os.path.isdir(self._root):
            os.makedirs(self._root, exist_ok=True)
            fsync_dir(root)
        # the new ledgers' directory entries: one fsync of ledgers/ for those made at once
        self._root_sync = SharedDirSync(self._root)
        #: a new segment's first sync makes its own name in its ledger's directory durable
        #: (``dir_fsync="auto"`` on ext4 or XFS): no fsync of that directory
        self.file_sync_covers_entry = (
            config.dir_fsync == "auto" and file_sync_covers_new_entries(self._root))
        self._store: SqliteMetadataStore | LedgerFilesStore
        if config.state_files:  # brokers sharing storage across hosts: no shared SQLite
            self._store = LedgerFilesStore(root)
            self._store.migrate(os.path.join(root, "storage.db"))
        else:
            self._store = SqliteMetadataStore(os.path.join(root, "storage.db"))
        # the last clean stop's time: segments changed before it were synced (clean_stop)
        mark = take_mark(root)
        self._synced_before = None if config.shared else mark
        #: set by `close` when it will leave the clean-stop mark: small segments then get
        #: no index sidecar (`segment.INDEX_MIN_BYTES`)
        self.stopping_clean = False
        self._owns_metadata = metadata is None
        self.metadata: MetadataStore = metadata or SqliteMetadataStore(
            os.path.join(root, "metadata.db")
        )
        self._cache = ReadCache(config.read_cache_bytes, config.read_cache_max_age_s)
        self._flusher = Flusher(
            inline=config.inline_sync_when_idle,
            slow_sync_s=config.inline_sync_slow_s,
            backoff_s=config.inline_sync_backoff_s,
            busy_elsewhere=self._closes_under_way,
        )
        # reads that miss the cache run here, so a slow disk never holds up the event loop
        self.readers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="magnetar-read")
        # past max_open_files, segments with unsynced writes are synced on those threads
        self._files = FileLimiter(config.max_open_files, config.fsync != "never", self.readers)
        # the periodic cursor writes go to SQLite from this one thread, in order
        self._meta_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="magnetar-meta")
        # the broker's metadata store writes (write_metadata), in order, apart from the
        # cursor writes: the loop waits for those at times (_drain_writes), never for these
        self._metadata_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="magnetar-mdw")
        self._ledgers: dict[str, ManagedLedger] = {}
        # open_async calls whose disk work is under way on the readers threads, by name
        self._opening: dict[str, Future[_Opened]] = {}
        ids = self._store.get("ids") or {}
        self._next_id = int(ids.get("limit", 0))
        self._id_limit = self._next_id
        self._id_block: Future[Any] | None = None  # the last id block's write, if pending
        # cluster: ids from the metadata store's counter, not storage.db (None: storage.db)
        self._sourced_ids: SourcedLedgerIds | None = None
        self._dirty_cursors: dict[ManagedCursor, None] = {}
        # per ledger name, its last close or delete whose disk work runs on a thread
        self._settling: dict[str, Future[Any]] = {}
        # ledgers a close_async is closing (out of _ledgers; an open of the name waits)
        self._closing: dict[str, ManagedLedger] = {}
        self._persist_handle: asyncio.TimerHandle | None = None
        self._persist_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        #: Shared storage: the ownership epoch to fence a ledger with when it opens (by
        #: ledger name; None: not fenced). Set by the broker of a cluster; read on the
        #: ``readers`` threads.
        self.fence_epoch: Callable[[str], int | None] | None = None

    # ------------------------------------------------------------------ ledgers
    def open(self, name: str) -> ManagedLedger:
        """The ledger ``name``, created if it does not exist (the same object while open).
        Its recovery scan and storage reads run on the calling thread (see `open_async`)."""
        if self._closed:
            raise LedgerClosedError("storage factory is closed")
        ml = self._ledgers.get(name)
        if ml is not None:
            return ml
        pending = self._opening.get(name)
        if pending is None:
            self._wait_settled(name)
            return self._finish(name, self._prepare(name))
        # an open_async of this ledger is under way: wait for its scan rather than scan twice
        try:
            opened = pending.result()
        except BaseException:
            self._forget_open(name, pending)
            raise
        return self._finish(name, opened)

    async def open_async(self, name: str) -> ManagedLedger:
        """`open`, with the disk and SQLite work (directory creation, the segments'
        recovery scan, the ledger's and its cursors' stored state) on the ``readers``
        threads: a ledger whose disk is slow holds up only those who wait for it. Only
        registering the ledger happens on the event loop. Concurrent opens of one name share
        one scan. LedgerClosedError if the factory, or the ledger (closed or deleted by
        someone else once open), is closed before this open completes."""
        if self._closed:
            raise LedgerClosedError("storage factory is closed")
        ml = self._ledgers.get(name)
        if ml is not None:
            return ml
        while name not in self._opening:
            settling = self._settling.get(name)
            if settling is None or settling.done():
                break
            # its last close or delete is still being written: open what it left
            await asyncio.shield(asyncio.wrap_future(settling))
            if self._closed:
                raise LedgerClosedError("storage factory is closed")
            ml = self._ledgers.get(name)
            if ml is not None:
                return ml
        pending = self._opening.get(name)
        if pending is None:
            pending = self._opening[name] = self.readers.submit(self._prepare, name)
        try:
            # shielded: a waiter that gives up must not cancel the scan other waiters share
            opened = await asyncio.shield(asyncio.wrap_future(pending))
        except Exception:
            self._forget_open(name, pending)
            raise
        if self._closed:
            raise LedgerClosedError("storage factory is closed")
        ml = self._ledgers.get(name)
        if ml is not None:
            return ml
        if self._opening.get(name) is not pending:
            raise LedgerClosedError(f"ledger {name} was closed while it was being opened")
        return self._finish(name, opened)

    def _prepare(self, name: str) -> _Opened:
        """An open's disk and SQLite work; touches no in-memory state shared with the event
        loop (the stores are thread-safe), so it may run in a worker thread."""
        epoch = self.fence_epoch(name) if self.fence_epoch is not None else None
        if self.config.shared and epoch is not None and epoch < 0:
            # not this broker's to open: fencing it would stop its owner's appends
            raise FencedError(f"ledger {name} belongs to a bundle this broker does not own")
        meta = self._store.get(LEDGER_PREFIX + name)
        if meta is None:
            meta = {"dir": dir_name(name), "terminated": False}
            path = os.path.join(self._root, meta["dir"])
            os.makedirs(path, exist_ok=True)
            if self.config.fsync != "never":
                self._root_sync.sync()
            self._store.put(LEDGER_PREFIX + name, meta)
        else:
            path = os.path.join(self._root, meta["dir"])
            os.makedirs(path, exist_ok=True)
        try:
            # shared storage: fence out any previous writer before reading (fence.py)
            fence = Fence.take(path, epoch) if self.config.shared and epoch is not None \
                else None
            if fence is not None and epoch is not None and \
                    isinstance(self._store, LedgerFilesStore):
                # the cursors (and the ledger's row) move into this epoch's folder: a
                # stale owner's go unread
                self._store.adopt(name, epoch)
                meta = self._store.get(LEDGER_PREFIX + name) or meta
            if fence is not None:
                # read without changing anything, ends recorded (takeover.py)
                segments = take_over(path, fence.epoch, fence.check)
                for seg in segments:
                    seg.guard = fence.check
            else:
                segments = scan_segments(path, self._synced_before)
        except OSError as exc:
            raise StorageError(f"cannot open ledger {name}: {exc}") from exc
        sourced = self._sourced_ids
        if sourced is not None and segments:
            # another broker may have written it with higher ids than ours: have a block
            # above them at hand (waiting here, off the loop, unless this is the loop)
            sourced.ensure(max(seg.ledger_id for seg in segments) + 1,
                           wait=running_loop() is None)
        prefix = self._cursor_key(name, "")
        cursors = {k[len(prefix) :]: v for k, v in self._store.list(prefix).items()}
        return _Opened(meta, path, segments, cursors, fence)

    def _forget_open(self, name: str, pending: Future[_Opened]) -> None:
        if self._opening.get(name) is pending:
            del self._opening[name]

    def _finish(self, name: str, opened: _Opened) -> ManagedLedger:
        """Register a prepared ledger (on the event loop, or the thread that owns the factory)."""
        if self._opening.get(name) is not None:
            del self._opening[name]
        if self.config.shared and opened.segments:
            top = max(seg.ledger_id for seg in opened.segments)
            if self._sourced_ids is not None:
                self._sourced_ids.raise_floor(top + 1)
            elif top >= self._next_id:  # written by another broker: our next ids go above
                self._next_id = self._id_limit = top + 1
        ml = ManagedLedger(self, name, opened.path, opened.meta, segments=opened.segments)
        if opened.fence is not None:  # (else the class default: fewer instance attributes)
            ml.fence = opened.fence
        ml._load_cursors(opened.cursors)
        self._ledgers[name] = ml
        return ml

    def exists(self, name: str) -> bool:
        self._wait_settled(name)
        return name in self._ledgers or self._store.get(LEDGER_PREFIX + name) is not None

    def list(self) -> list[str]:
        """Names of every ledger (open or not)."""
        return [k[len(LEDGER_PREFIX) :] for k in self._store.list(LEDGER_PREFIX)]

    def delete(self, name: str) -> None:
        """Delete a ledger and its cursors, open or not (or being opened: that open
        completes first, and its waiters get LedgerClosedError). Blocks until the files
        and rows are gone (see `delete_async`)."""
        if name in self._opening and not self._closed:
            with contextlib.suppress(Exception):  # a failed open leaves nothing to finish
                self.open(name)
        ml = self._ledgers.get(name)
        if ml is not None:
            ml.delete()
        else:
            self._wait_settled(name)
            self._dispose(name, None).result()
        self._wait_settled(name)

    async def delete_async(self, name: str) -> bool:
        """`delete`, with the disk and SQLite work (the stored directory's lookup, its
        removal, the rows of the ledger and its cursors) on storage threads: an open ledger
        is closed to its users at once, the rest is awaited. True if the ledger existed."""
        if name in self._opening and not self._closed:
            with contextlib.suppress(Exception):  # a failed open leaves nothing to finish
                await self.open_async(name)
        ml = self._ledgers.get(name)
        if ml is not None:
            ml.delete()
            existed = True
        else:
            settling = self._settling.get(name)
            if settling is not None and not settling.done():
                await asyncio.shield(asyncio.wrap_future(settling))
            existed = await asyncio.shield(asyncio.wrap_future(self._dispose(name, None)))
        settling = self._settling.get(name)
        if settling is not None and not settling.done():
            await asyncio.shield(asyncio.wrap_future(settling))
        return existed

    def _wait_settled(self, name: str) -> None:
        """Block until the last close or delete of ``name`` reached the disk (a close
        `close_async` began is finished here, since its rest may need this thread)."""
        closing = self._closing.get(name)
        if closing is not None:
            closing.close()
        settling = self._settling.get(name)
        if settling is not None:
            with contextlib.suppress(Exception):  # logged by whoever scheduled it
                settling.result()


    def _dispose(
        self, name: str, directory: str | None, after: builtins.list[Future[Any]] | None = None
    ) -> Future[bool]:
        """Remove a ledger's directory (``None``: the one storage.db records, if any) on a
        ``readers`` thread, once the file jobs ``after`` ended, then its rows on the cursor
        writer thread (after the cursor writes queued before them). The future is True if
        the ledger was stored."""
        def work() -> bool:
            path = directory
            if path is None:
                meta = self._store.get(LEDGER_PREFIX + name)
                if meta is None:
                    return False
                path = os.path.join(self._root, meta["dir"])
            # the sidecars first: a crash midway leaves segment files without them (a
            # ledger whose rows survive reopens them), never a sidecar standing for a
            # segment lost (`Segment.missing`)
            with contextlib.suppress(OSError):
                for entry in os.listdir(path):
                    if entry.endswith(".idx"):
                        os.unlink(os.path.join(path, entry))
            shutil.rmtree(path, ignore_errors=True)
            self._meta_writer.submit(self._forget_rows, name).result()
            return True

        future: Future[bool]
        if after:
            future = self._run_after(all_done(after), self.readers, work)
        else:
            future = self.readers.submit(work)

        def done(f: Future[bool]) -> None:
            if not f.cancelled() and f.exception() is not None:
                log.error("deleting ledger %s failed: %s", name, f.exception())

        future.add_done_callback(done)
        return self._settle(name, future)

    def open_ledgers(self) -> dict[str, ManagedLedger]:
        return dict(self._ledgers)

    def _closes_under_way(self) -> bool:
        """Whether a `close_async` is sealing a ledger (the flusher then syncs nothing on
        the event loop: see `Flusher`)."""
        return bool(self._closing)

    def _ledger_closed(self, ml: ManagedLedger) -> None:
        if self._ledgers.get(ml.name) is ml:
            del self._ledgers[ml.name]

    def _closing_started(
        self, ml: ManagedLedger, cursors: builtins.list[ManagedCursor]
    ) -> tuple[Future[None], Future[Any] | None]:
        """`ManagedLedger.close_async` began: the cursors' last states go to the cursor
        writer thread, the ledger leaves the registry, and opens of its name wait for the
        first future returned (set by `_closing_finished`) and for those writes (the
        second: None when there were none)."""
        written = self._ledger_closing(ml.name, cursors)
        self._ledger_closed(ml)
        self._closing[ml.name] = ml
        done: Future[None] = running_future()
        self._settle(ml.name, done)
        return done, written

    def _closing_finished(self, ml: ManagedLedger, done: Future[None] | None) -> None:
        if self._closing.get(ml.name) is ml:
            del self._closing[ml.name]
        if done is not None and not done.done():
            done.set_result(None)

    def _ledger_deleted(self, ml: ManagedLedger) -> None:
        """A deleted ledger left memory: its directory and rows go on storage threads."""
        self._ledger_closed(ml)
        self._dispose(ml.name, ml.directory, [f for f in ml._file_work if not f.done()])

    def _forget_rows(self, name: str) -> None:
        self._store.delete_prefix(self._cursor_key(name, ""))
        self._store.delete(LEDGER_PREFIX + name)

    def _save_ledger_meta(self, name: str, meta: dict[str, Any]) -> None:
        self._store.put_many({LEDGER_PREFIX + name: meta}, durable=True)

    def _save_ledger_meta_later(self, name: str, meta: dict[str, Any]) -> Future[None]:
        """`_save_ledger_meta` on the cursor writer thread (after the writes queued before
        it); an open of the ledger waits for it."""
        if self._closed:
            raise LedgerClosedError("storage factory is closed")
        future = self._run_after(None, self._meta_writer, self._save_ledger_meta, name, meta)
        self._settle(name, future)
        return future

    def use_ledger_id_source(self, source: IdSource, block: int = _ID_BLOCK) -> None:
        """Take ledger ids in blocks of ``block`` from ``source`` from now on, instead of
        storage.db (the broker of a cluster: the metadata store's counter; see
        `SourcedLedgerIds`). The first block is asked for at once; ids start above every
        id storage.db handed out (a directory used before the cluster had its counter)."""
        if self._sourced_ids is not None:
            self._sourced_ids.close()
        self._sourced_ids = SourcedLedgerIds(source, block, floor=self._next_id)

    async def ledger_ids_ready(self) -> None:
        """Wait until the first block of a `use_ledger_id_source` source is reserved (at
        once without one); its error if the source failed."""
        sourced = self._sourced_ids
        spare = sourced.spare() if sourced is not None else None
        if spare is not None:
            try:
                await asyncio.wrap_future(spare)
            except Exception as exc:
                raise StorageError(f"cannot reserve ledger ids: {exc}") from exc

    def _allocate_ledger_id(self) -> tuple[int, Future[Any] | None]:
        """A new segment id, and the durable storage.db write of its id block that its
        file must wait for (None: stored already). Ids come in blocks of `_ID_BLOCK`: the
        block's limit is stored (on the cursor writer thread, durably) before any file of
        it exists, so a restart never hands out an id below one on disk. With an id
        source (`use_ledger_id_source`) the id comes from its block (reserved already),
        and `StorageError` says none is at hand."""
        if self._sourced_ids is not None:
            return self._sourced_ids.allocate(), None
        block = self._id_block
        if block is not None and block.done():
            if block.cancelled() or block.exception() is not None:
                self._id_limit = self._next_id  # that block was never stored: store one now
            self._id_block = block = None
        if self._next_id >= self._id_limit and self.config.shared:
            # another broker may take blocks too: reserve one in storage.db, atomically
            # (one synchronous transaction per _ID_BLOCK segments), above every id seen
            self._next_id = self._store.reserve("ids", _ID_BLOCK, self._next_id)
            self._id_limit = self._next_id + _ID_BLOCK
        if self._next_id >= self._id_limit:
            limit = self._next_id + _ID_BLOCK
            block = self._id_block = self._run_after(
                None, self._meta_writer, self._store.put_many, {"ids": {"limit": limit}}, True
            )
            self._id_limit = limit
        lid = self._next_id
        self._next_id += 1
        return lid, block

    # ------------------------------------------------------------------ metadata calls
    def read_metadata(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` (metadata store reads) on the ``readers`` threads; call from the
        event loop. A stalled store then holds up only those who await the answer."""
        if self._closed:
            raise LedgerClosedError("storage factory is closed")
        return asyncio.get_running_loop().run_in_executor(self.readers, fn, *args)

    def write_metadata(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` (metadata store writes, or a read and the writes that depend on it)
        on the metadata writer thread; call from the event loop. Calls run one at a time in
        the order they were made, so a later write of a key is never overwritten by an
        earlier one, and `close` finishes them all before it closes the store."""
        if self._closed:
            raise LedgerClosedError("storage factory is closed")
        return asyncio.wrap_future(self._metadata_writer.submit(fn, *args))

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close every open ledger (flushing and persisting cursors), stop the flusher."""
        if self._closed:
            return
        self._closed = True
        if self._persist_handle is not None:
            with contextlib.suppress(RuntimeError):
                self._persist_handle.cancel()
            self._persist_handle = None
        ledgers = [*self._ledgers.values(), *self._closing.values()]
        clean = self.stopping_clean = not self.config.shared and self.config.fsync != "never"
        _write_indexes([seg for ml in ledgers for seg in ml._segments_to_index()])
        for ml in ledgers:
            try:
                if not (clean and ml.close_if_idle()):
                    ml.close()  # (finishes a close_async under way, on this thread)
            except Exception:
                clean = False
                log.exception("closing ledger %s failed", ml.name)
        self._ledgers.clear()  # (the idle ones' descriptors: close_all below)
        for settling in list(self._settling.values()):  # deletes need the writer thread
            with contextlib.suppress(Exception):
                settling.result()
        self._persist_cursors(list(self._dirty_cursors))
        self._meta_writer.shutdown(wait=True)
        self._metadata_writer.shutdown(wait=True)  # pending metadata writes land first
        self.readers.shutdown(wait=False, cancel_futures=True)
        self._flusher.stop()
        if self._sourced_ids is not None:
            self._sourced_ids.close()
        self._files.close_all()
        self._store.close()
        if self._owns_metadata:
            self.metadata.close()
        if clean and not any(seg.sync_error is not None for ml in ledgers for seg in ml._segments):
            leave_mark(os.path.dirname(self._root))

    def evict_expired_cache(self) -> None:
        """Drop read-cache entries past their age limit (call periodically)."""
        self._cache.evict_expired()

    def close_idle_files(self) -> int:
        """Close the segment files unused since the previous call (call periodically)."""
        return self._files.close_idle()

    def close_idle_files_in_slices(self, size: int) -> Iterator[int]:
        """`close_idle_files`, ``size`` files a step (each step yields how many it
        closed; the caller lets the event loop run between two)."""
        return self._files.close_idle_in_slices(size)

    def open_file_count(self) -> int:
        """Segment file descriptors currently open."""
        return self._files.open_count()

    def __enter__(self) -> ManagedLedgerFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
