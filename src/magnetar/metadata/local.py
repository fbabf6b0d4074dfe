"""`LocalMetadataStore`: the `MetadataStore` contract in one SQLite file (the embedded
default for ``magnetar standalone``; ``metadataStoreUrl=sqlite:/path/metadata.db``, or
``memory:`` for a store that lives only in the process).

Each key is one row of table ``nodes`` (path, value, version, timestamps, the owning
session for an ephemeral key, 0 for a persistent one). All SQL runs on one thread per
store, in order, so a slow disk never holds up the event loop: a call queues its job and
awaits a future the thread settles (jobs queued meanwhile are run and settled together,
one wake-up of the loop). A versioned update of an existing key is one statement
(``UPDATE ... WHERE version = ? RETURNING``), and so is the creation of a key whose parent
exists (``INSERT ... WHERE EXISTS ... ON CONFLICT DO NOTHING``). A store is one session:
its ephemeral rows are deleted when it closes, and rows left by an earlier process (which
crashed) are deleted when the file is opened. Stores of one process that share a file see
each other's changes: every write is notified to every such store (on its own loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from .api import MetadataStore, Notification, NotificationType, SessionExpiredPolicy, Stat
from .errors import (
    BadVersionError,
    MetadataStoreError,
    NotEmptyError,
    NotFoundError,
    StoreClosedError,
)
from .paths import ancestors, check_path, child_name, parent

R = TypeVar("R")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS nodes (path TEXT PRIMARY KEY, parent TEXT NOT NULL,"
    " value BLOB NOT NULL, version INTEGER NOT NULL, ctime INTEGER NOT NULL,"
    " mtime INTEGER NOT NULL, session INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS nodes_parent ON nodes (parent)",
)

# the stores of this process per database file (notifications cross between them)
_OPEN: dict[str, set[LocalMetadataStore]] = {}
_OPEN_LOCK = threading.Lock()

def _now_ms() -> int:
    return int(time.time() * 1000)


class LocalMetadataStore(MetadataStore):
    """SQLite-backed metadata store; ``path=":memory:"`` keeps it in memory."""

    def __init__(self, path: str, *,
                 session_expired_policy: SessionExpiredPolicy = SessionExpiredPolicy.RECONNECT,
                 synchronous: str = "NORMAL") -> None:
        super().__init__(session_expired_policy)
        self.path = path if path == ":memory:" else os.path.abspath(path)
        self.url = "memory:" if path == ":memory:" else f"sqlite:{self.path}"
        self.session_id = random.getrandbits(62) + 1
        self._synchronous = synchronous
        self._db: sqlite3.Connection | None = None
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopped = False

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        await super().start()
        await self._run(self._open)
        if self.path != ":memory:":
            with _OPEN_LOCK:
                _OPEN.setdefault(self.path, set()).add(self)

    def _open(self) -> list[Notification]:
        try:
            if self.path != ":memory:":
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL").fetchall()
            db.execute(f"PRAGMA synchronous={self._synchronous}")
            for statement in _SCHEMA:
                db.execute(statement)
            with _OPEN_LOCK:
                live = [s.session_id for s in _OPEN.get(self.path, ())]
            # ephemeral rows of sessions no store of this process holds: a process that ended
            marks = ",".join("?" * len(live))
            db.execute("DELETE FROM nodes WHERE session != 0"
                       + (f" AND session NOT IN ({marks})" if live else ""), live)
        except sqlite3.Error as exc:
            raise MetadataStoreError(f"cannot open metadata store {self.url}: {exc}") from exc
        self._db = db
        return []

    async def close(self) -> None:
        if self.closed:
            return
        with _OPEN_LOCK:
            peers = _OPEN.get(self.path)
            if peers is not None:
                peers.discard(self)
                if not peers:
                    del _OPEN[self.path]
        if self._db is not None:
            with contextlib.suppress(MetadataStoreError, sqlite3.Error):
                self._publish(await self._run(self._drop_session))
        await super().close()
        self._stop_thread()

    def _stop_thread(self) -> None:
        self._stopped = True
        thread = self._thread
        if thread is not None:
            self._jobs.put(None)
            thread.join()
            self._thread = None

    def _drop_session(self) -> list[Notification]:
        db = self._need_db()
        rows = db.execute("SELECT path FROM nodes WHERE session = ?",
                          (self.session_id,)).fetchall()
        db.execute("DELETE FROM nodes WHERE session = ?", (self.session_id,))
        db.close()
        self._db = None
        return [n for (path,) in rows for n in _deleted(path)]

    def _need_db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreClosedError(f"metadata store {self.url} is closed")
        return self._db

    async def _run(self, job: Callable[[], R]) -> R:
        if self._stopped:
            raise StoreClosedError(f"metadata store {self.url} is closed")
        if self._thread is None:
            self._start_thread()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._jobs.put((job, future, loop))
        return await future

    def _start_thread(self) -> None:
        thread = threading.Thread(target=_work, args=(self._jobs,), daemon=True,
                                  name=f"magnetar-mdstore-{id(self):x}")
        thread.start()
        self._thread = thread
        # a store dropped or left open at exit: its queued jobs still run, then the thread
        # ends (as an executor's would)
        weakref.finalize(self, _end_thread, self._jobs, thread)

    async def _write(self, job: Callable[[], tuple[R, list[Notification]]], path: str) -> R:
        self._check_open()
        result, notes = await self._run(job)
        self._invalidate_own_write(path)
        self._publish(notes)
        return result

    def _publish(self, notes: list[Notification]) -> None:
        if not notes:
            return
        if not self._listeners and not self._caches:
            alone = _OPEN.get(self.path)
            if alone is None or (len(alone) == 1 and self in alone):
                return  # nobody to tell
        with _OPEN_LOCK:
            peers = list(_OPEN.get(self.path, ()))
        if self not in peers:
            peers.append(self)
        for store in peers:
            loop = store._loop
            if store is self:
                for note in notes:
                    self._deliver(note)
            elif loop is not None and not loop.is_closed() and not store.closed:
                loop.call_soon_threadsafe(store._deliver_all, notes)

    def _deliver_all(self, notes: list[Notification]) -> None:
        for note in notes:
            self._deliver(note)

    # -- the contract ---------------------------------------------------------------------
    def _stat(self, path: str, version: int, ctime: int, mtime: int, session: int) -> Stat:
        return Stat(path, version, ctime, mtime, session != 0, session == self.session_id)

    async def get(self, path: str) -> tuple[bytes, Stat] | None:
        check_path(path)
        self._check_open()

        def job() -> tuple[bytes, Stat] | None:
            row = _one(self._need_db().execute(
                "SELECT value, version, ctime, mtime, session FROM nodes WHERE path = ?",
                (path,)))
            if row is None:
                return None
            return bytes(row[0]), self._stat(path, row[1], row[2], row[3], row[4])

        return await self._run(job)

    async def exists(self, path: str) -> bool:
        check_path(path)
        if path == "/":
            return True
        self._check_open()
        return await self._run(lambda: _one(self._need_db().execute(
            "SELECT 1 FROM nodes WHERE path = ?", (path,))) is not None)

    async def get_children(self, path: str) -> list[str]:
        check_path(path)
        self._check_open()
        rows = await self._run(lambda: self._need_db().execute(
            "SELECT path FROM nodes WHERE parent = ? ORDER BY path", (path,)).fetchall())
        return sorted(child_name(path, p) for (p,) in rows)

    async def put(self, path: str, value: bytes, expected_version: int | None = None,
                  *, ephemeral: bool = False) -> Stat:
        check_path(path)
        if path == "/":
            raise MetadataStoreError("cannot write the root path")
        value = bytes(value)

        def job() -> tuple[Stat, list[Notification]]:
            db = self._need_db()
            now = _now_ms()
            if expected_version is not None and expected_version >= 0:
                # the common versioned update: one statement (its own transaction)
                updated = db.execute(
                    "UPDATE nodes SET value = ?, version = version + 1, mtime = ?"
                    " WHERE path = ? AND version = ? RETURNING version, ctime, session",
                    (value, now, path, expected_version)).fetchall()
                if updated:
                    # (fetchall: the statement is done, its read of the WAL ends with it)
                    version, ctime, session = updated[0]
                    return (self._stat(path, version, ctime, now, session),
                            [Notification(NotificationType.MODIFIED, path)])
                # absent or at another version: the transaction below tells which
            elif expected_version == -1:
                # the common create: one statement (its own transaction) when the parent
                # exists (then so do all ancestors: a node is never deleted before its
                # children) and the key does not
                up = parent(path)
                session = self.session_id if ephemeral else 0
                created = db.execute(
                    "INSERT INTO nodes SELECT ?, ?, ?, 0, ?, ?, ?"
                    " WHERE EXISTS (SELECT 1 FROM nodes WHERE path = ?)"
                    " ON CONFLICT (path) DO NOTHING RETURNING version",
                    (path, up, value, now, now, session, up)).fetchall()
                if created:
                    return self._stat(path, 0, now, now, session), _created(path)
                # present, or a parent to create: the transaction below tells which
            notes: list[Notification] = []
            db.execute("BEGIN IMMEDIATE")
            try:
                row = _one(db.execute(
                    "SELECT version, ctime, session FROM nodes WHERE path = ?", (path,)))
                if row is None:
                    if expected_version is not None and expected_version != -1:
                        raise BadVersionError(path, expected_version)
                    ups = ancestors(path)
                    # usually they all exist already: one query instead of an insert each
                    present = _one(db.execute(
                        f"SELECT count(*) FROM nodes WHERE path IN ({','.join('?' * len(ups))})",
                        ups))[0] if ups else 0
                    for up in () if present == len(ups) else ups:
                        cur = db.execute(
                            "INSERT OR IGNORE INTO nodes VALUES (?, ?, x'', 0, ?, ?, 0)",
                            (up, parent(up), now, now))
                        if cur.rowcount:
                            notes.extend(_created(up))
                    session = self.session_id if ephemeral else 0
                    db.execute("INSERT INTO nodes VALUES (?, ?, ?, 0, ?, ?, ?)",
                               (path, parent(path), value, now, now, session))
                    notes.extend(_created(path))
                    stat = self._stat(path, 0, now, now, session)
                else:
                    version, ctime, session = row
                    if expected_version is not None and expected_version != version:
                        raise BadVersionError(path, expected_version)
                    db.execute("UPDATE nodes SET value = ?, version = ?, mtime = ?"
                               " WHERE path = ?", (value, version + 1, now, path))
                    notes.append(Notification(NotificationType.MODIFIED, path))
                    stat = self._stat(path, version + 1, ctime, now, session)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return stat, notes

        try:
            return await self._write(job, path)
        except sqlite3.Error as exc:
            raise MetadataStoreError(f"metadata write of {path} failed: {exc}") from exc

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        check_path(path)

        def job() -> tuple[None, list[Notification]]:
            db = self._need_db()
            db.execute("BEGIN IMMEDIATE")
            try:
                row = _one(db.execute("SELECT version FROM nodes WHERE path = ?", (path,)))
                if row is None:
                    raise NotFoundError(path)
                if expected_version is not None and expected_version != row[0]:
                    raise BadVersionError(path, expected_version)
                if _one(db.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", (path,))):
                    raise NotEmptyError(path)
                db.execute("DELETE FROM nodes WHERE path = ?", (path,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return None, _deleted(path)

        try:
            await self._write(job, path)
        except sqlite3.Error as exc:
            raise MetadataStoreError(f"metadata delete of {path} failed: {exc}") from exc


def _one(cursor: sqlite3.Cursor) -> Any:
    """The first row of a query of at most one (None without), its statement run to its
    end: a statement left at a row keeps its read of the WAL open (and the WAL from being
    started over after a checkpoint)."""
    rows = cursor.fetchall()
    return rows[0] if rows else None


def _end_thread(jobs: queue.SimpleQueue[_Job | None], thread: threading.Thread) -> None:
    jobs.put(None)
    if thread is not threading.current_thread():
        thread.join()


#: a queued job, the future its result settles and that future's loop
_Job = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


def _work(jobs: queue.SimpleQueue[_Job | None]) -> None:
    """The store's thread: run the jobs in order; the results of the jobs that were
    waiting together are handed to their loop in one call."""
    while True:
        item = jobs.get()
        done: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        loop = None
        while item is not None:
            job, future, loop = item
            try:
                done.append((future, job(), None))
            except BaseException as exc:  # handed to the caller
                done.append((future, None, exc))
            if jobs.empty():
                break
            item = jobs.get()
            if item is not None and item[2] is not loop:  # another loop's: settle first
                _hand_over(loop, done)
                done = []
        if done and loop is not None:
            _hand_over(loop, done)
        if item is None:
            return
        # nothing of the store kept while waiting (its jobs refer to it): a dropped store
        # can be collected, which ends this thread
        item = job = future = loop = done = None  # type: ignore[assignment]


def _hand_over(loop: asyncio.AbstractEventLoop,
               done: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits them
        loop.call_soon_threadsafe(_settle, done)


def _settle(done: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, exc in done:
        if future.done():  # the caller was cancelled
            continue
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)


def _created(path: str) -> list[Notification]:
    return _with_parent(NotificationType.CREATED, path)


def _deleted(path: str) -> list[Notification]:
    return _with_parent(NotificationType.DELETED, path)


def _with_parent(kind: NotificationType, path: str) -> list[Notification]:
    """``kind`` of ``path``, and its parent's children changed (unless it is the root)."""
    notes = [Notification(kind, path)]
    up = parent(path)
    if up is not None:
        notes.append(Notification(NotificationType.CHILDREN_CHANGED, up))
    return notes
