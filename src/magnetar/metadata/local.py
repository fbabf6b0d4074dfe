"""`LocalMetadataStore`: the `MetadataStore` contract in one SQLite file (the embedded
default for ``magnetar standalone``; ``metadataStoreUrl=sqlite:/path/metadata.db``, or
``memory:`` for a store that lives only in the process).

Each key is one row of table ``nodes`` (path, value, version, timestamps, the owning
session for an ephemeral key, 0 for a persistent one). All SQL runs on one thread per
store, in order, so a slow disk never holds up the event loop. A store is one session:
its ephemeral rows are deleted when it closes, and rows left by an earlier process (which
crashed) are deleted when the file is opened. Stores of one process that share a file see
each other's changes: every write is notified to every such store (on its own loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

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
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="magnetar-mdstore")

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
            db.execute("PRAGMA journal_mode=WAL")
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
        self._thread.shutdown(wait=True)

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
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._thread, job)
        except RuntimeError as exc:  # executor shut down
            raise StoreClosedError(f"metadata store {self.url} is closed") from exc

    async def _write(self, job: Callable[[], tuple[R, list[Notification]]], path: str) -> R:
        self._check_open()
        result, notes = await self._run(job)
        self._invalidate_own_write(path)
        self._publish(notes)
        return result

    def _publish(self, notes: list[Notification]) -> None:
        if not notes:
            return
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
            row = self._need_db().execute(
                "SELECT value, version, ctime, mtime, session FROM nodes WHERE path = ?",
                (path,)).fetchone()
            if row is None:
                return None
            return bytes(row[0]), self._stat(path, row[1], row[2], row[3], row[4])

        return await self._run(job)

    async def exists(self, path: str) -> bool:
        check_path(path)
        if path == "/":
            return True
        self._check_open()
        return await self._run(lambda: self._need_db().execute(
            "SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone() is not None)

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
            notes: list[Notification] = []
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT version, ctime, session FROM nodes WHERE path = ?",
                    (path,)).fetchone()
                if row is None:
                    if expected_version is not None and expected_version != -1:
                        raise BadVersionError(path, expected_version)
                    for up in ancestors(path):
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
                row = db.execute("SELECT version FROM nodes WHERE path = ?",
                                 (path,)).fetchone()
                if row is None:
                    raise NotFoundError(path)
                if expected_version is not None and expected_version != row[0]:
                    raise BadVersionError(path, expected_version)
                if db.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1",
                              (path,)).fetchone():
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
