"""The key/JSON stores the broker has used since its first version (synchronous, flat keys).

The broker keeps topics, partitioned-topic metadata, subscriptions, schemas, dedup state,
namespace policies and terminated flags here (it chooses the keys). `MetadataStore` is the
interface a ZooKeeper or etcd backend would implement; `SqliteMetadataStore` (stdlib
sqlite3, WAL mode) is the default and `MemoryMetadataStore` serves tests.

`list(prefix)` is a plain string-prefix match over keys, in key order.

These are not the coordination store (`magnetar.metadata.api.MetadataStore`: versions,
ephemeral keys, notifications): they keep per-broker state in ``metadata.db`` and
``storage.db``. ``magnetar.storage.metadata`` re-exports them under their old names
(``MetadataStore``, ``SqliteMetadataStore``, ``MemoryMetadataStore``), raising `StorageError`.
Failures raise ``error_type`` (a class attribute), `MetadataStoreError` here.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import MetadataStoreError

_MAX_CHAR = "\U0010ffff"


class KeyValueStore(ABC):
    """Key/value store of JSON-serialisable values."""

    error_type: type[Exception] = MetadataStoreError

    @abstractmethod
    def get(self, key: str) -> Any | None:
        """The value stored at ``key``, or None."""

    @abstractmethod
    def put(self, key: str, value: Any) -> None:
        """Store ``value`` (JSON-serialisable) at ``key``, replacing any old value."""

    @abstractmethod
    def delete(self, key: str) -> bool:
        """Remove ``key``; True if it existed."""

    @abstractmethod
    def list(self, prefix: str = "") -> dict[str, Any]:
        """Every key starting with ``prefix`` with its value, in key order."""

    def keys(self, prefix: str = "", after: str | None = None,
             limit: int | None = None) -> builtins.list[str]:
        """The keys starting with ``prefix``, in key order, without their values (listing
        100,000 topics read and parsed every value): only those past ``after``, at most
        ``limit`` of them, when given."""
        found = [k for k in self.list(prefix) if after is None or k > after]
        return found if limit is None else found[:limit]

    async def read_through(self, key: str) -> Any | None:
        """`get`, but a store that mirrors another one (a cluster's) reads a key it does
        not have from there (written elsewhere, its notification still on the way)."""
        return self.get(key)

    def unavailable_reason(self) -> str | None:
        """Why changes cannot be stored now (a cluster's metadata store unreachable), or
        None: callers that answer someone (the admin API) say so at once, not after a
        timeout."""
        return None

    def put_many(self, items: Mapping[str, Any]) -> None:
        """Store several keys (atomically where the backend can)."""
        for k, v in items.items():
            self.put(k, v)

    def delete_prefix(self, prefix: str) -> int:
        """Remove every key starting with ``prefix``; returns how many."""
        keys = list(self.list(prefix))
        for k in keys:
            self.delete(k)
        return len(keys)

    def watch(self, prefix: str, callback: Callable[[str, Any], None]) -> None:  # noqa: B027
        """Call ``callback(key, value)`` (None: deleted) on the event loop when a key under
        ``prefix`` is changed by someone else. A store only this process writes (these)
        never calls it; the broker's cluster store does."""

    def hold(self, key: str) -> None:  # noqa: B027 - optional hook
        """A change of ``key`` made in memory is on its way to this store (handed to a
        writer thread): until `release`, a value someone else stored for it is not applied
        (it predates the change, which overwrites it). A store no one else writes ignores
        this."""

    def release(self, key: str) -> None:  # noqa: B027 - optional hook
        """The change `hold` announced is stored (or failed)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


class SqliteKeyValueStore(KeyValueStore):
    """`KeyValueStore` in one SQLite file (WAL, ``synchronous=NORMAL``: a commit survives a
    process crash; after a power loss the last commits may be lost, never corrupted)."""

    def __init__(self, path: str | Path, synchronous: str = "NORMAL") -> None:
        self.path = str(path)
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
                " WITHOUT ROWID"
            )
        except sqlite3.Error as exc:
            raise self.error_type(f"cannot open metadata store {self.path}: {exc}") from exc
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value: Any) -> None:
        self.put_many({key: value})

    def put_many(self, items: Mapping[str, Any], durable: bool = False) -> None:
        rows = [(k, json.dumps(v, separators=(",", ":"))) for k, v in items.items()]
        with self._transaction(durable=durable):
            self._db.executemany("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", rows)

    def reserve(self, key: str, count: int, floor: int = 0) -> int:
        """Take ``count`` values of the counter at ``key`` (stored as ``{"limit": n}``),
        starting no lower than ``floor``, atomically and durably even across processes
        sharing the file (one IMMEDIATE transaction); returns the first value taken."""
        with self._transaction("BEGIN IMMEDIATE", durable=True):
            row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            stored = json.loads(row[0]).get("limit", 0) if row is not None else 0
            start = max(int(floor), int(stored))
            self._db.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)",
                             (key, json.dumps({"limit": start + count})))
        return start

    @contextlib.contextmanager
    def _transaction(self, begin: str = "BEGIN", durable: bool = False) -> Iterator[None]:
        """One write transaction, under the lock (``durable``: ``synchronous=FULL`` for
        it); an SQLite error rolls it back and is raised as this store's error type."""
        with self._lock:
            try:
                if durable:
                    self._db.execute("PRAGMA synchronous=FULL")
                self._db.execute(begin)
                yield
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise self.error_type(f"metadata write failed: {exc}") from exc
            finally:
                if durable:
                    self._db.execute("PRAGMA synchronous=NORMAL")

    def delete(self, key: str) -> bool:
        with self._lock:
            try:
                cur = self._db.execute("DELETE FROM kv WHERE key = ?", (key,))
            except sqlite3.Error as exc:
                raise self.error_type(f"metadata delete failed: {exc}") from exc
        return cur.rowcount > 0

    def delete_prefix(self, prefix: str) -> int:
        with self._lock:
            try:
                cur = self._db.execute(
                    "DELETE FROM kv WHERE key >= ? AND key < ?", (prefix, prefix + _MAX_CHAR)
                )
            except sqlite3.Error as exc:
                raise self.error_type(f"metadata delete failed: {exc}") from exc
        return cur.rowcount

    def list(self, prefix: str = "") -> dict[str, Any]:
        with self._lock:
            rows = self._db.execute(
                "SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key",
                (prefix, prefix + _MAX_CHAR),
            ).fetchall()
        return {k: json.loads(v) for k, v in rows}

    def keys(self, prefix: str = "", after: str | None = None,
             limit: int | None = None) -> builtins.list[str]:
        start = prefix if after is None or after < prefix else after
        sql = f"SELECT key FROM kv WHERE key {'>=' if start == prefix else '>'} ? AND key < ? ORDER BY key"
        args: tuple[Any, ...] = (start, prefix + _MAX_CHAR)
        if limit is not None:
            sql += " LIMIT ?"
            args += (limit,)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [k for (k,) in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class MemoryKeyValueStore(KeyValueStore):
    """`KeyValueStore` in a dict (tests; nothing survives the process)."""

    def __init__(self) -> None:
        self._data: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            raw = self._data.get(key)
        return None if raw is None else json.loads(raw)

    def put(self, key: str, value: Any) -> None:
        raw = json.dumps(value)
        with self._lock:
            self._data[key] = raw

    def delete(self, key: str) -> bool:
        with self._lock:
            return self._data.pop(key, None) is not None

    def list(self, prefix: str = "") -> dict[str, Any]:
        with self._lock:
            items = sorted((k, v) for k, v in self._data.items() if k.startswith(prefix))
        return {k: json.loads(v) for k, v in items}
