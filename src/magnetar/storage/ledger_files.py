"""`LedgerFilesStore`: a ledger's stored state as files in its own directory, for brokers
that share storage across hosts (``StorageConfig.state_files``).

Theory of operation
-------------------
Standalone, a factory keeps its rows in one SQLite file, ``storage.db``: each ledger's row
(``ledger/<name>``: its directory, terminated flag, properties) and each cursor's
(``cursor/<ledger>\\x1f<cursor>``). Brokers of a cluster sharing the data directory would
all write that one file at once, each for the ledgers it owns; SQLite's WAL mode needs
shared memory, which a network file system does not share between hosts, and its locks
are only as good as the file system's. Here every row lives in the directory of the ledger
it belongs to instead, one file per row, so each file has one writer at a time, the
ledger's owner (fenced: `fence.py`), and the state travels with the ledger:

- ``<root>/<ledger dir>/ledger.json``: ``{"name": ..., "value": <ledger row>}``;
- ``<root>/<ledger dir>/cursors/<cursor file>.json``: ``{"name": ..., "value": <state>}``
  (``<cursor file>`` is the name quoted, cut short, and a digest: any name fits);
- any other key (none in a cluster: ledger ids come from the metadata store) in
  ``<data dir>/state/<quoted key>.json``.

A write goes to a temporary file that is fsynced and then renamed over the old one (one
atomic step on a local or NFS file system), the directory fsynced too when ``durable``:
a reader sees the old state or the new one, never half of one. A ledger's row is written
after its directory exists and is removed after its cursor files, so a ledger without
``ledger.json`` has no cursors worth keeping. `list` scans the directories (used when
listing ledgers and opening one, not on the hot path).

`migrate` copies the rows of a ``storage.db`` written before (standalone, or a cluster
on one host) into these files once, for the ledgers that have no ``ledger.json`` yet,
then leaves a marker (``storage.db.migrated``) so that it is never read again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from .errors import StorageError
from .metadata import SqliteMetadataStore

log = logging.getLogger(__name__)

LEDGER_PREFIX = "ledger/"
CURSOR_PREFIX = "cursor/"
CURSOR_SEP = "\x1f"
LEDGER_FILE = "ledger.json"
CURSORS_DIR = "cursors"
MIGRATED = "storage.db.migrated"


def dir_name(name: str) -> str:
    """The directory (under ``ledgers/``) of ledger ``name``: its name quoted and cut
    short, and a digest of it."""
    digest = hashlib.sha1(name.encode()).hexdigest()[:12]
    return f"{quote(name, safe='')[:100]}-{digest}"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: str) -> tuple[str, Any] | None:
    """(name, value) of a row file; None if it is missing (or half-made: never renamed)."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot read stored state {path}: {exc}") from exc
    return doc["name"], doc["value"]


def _write(path: str, name: str, value: Any, durable: bool) -> None:
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}")
    data = json.dumps({"name": name, "value": value}, separators=(",", ":")).encode()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if durable:
            _fsync_dir(directory)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StorageError(f"cannot store state {path}: {exc}") from exc


class LedgerFilesStore:
    """storage.db's rows as files in each ledger's directory (see the module docstring).
    Thread-safe as far as the file system is: one row, one file."""

    error_type = StorageError

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.root = os.path.join(data_dir, "ledgers")
        self.other = os.path.join(data_dir, "state")

    # -- where a key lives ----------------------------------------------------------------
    def _path(self, key: str) -> tuple[str, str]:
        """(file, name stored in it) of ``key``."""
        if key.startswith(LEDGER_PREFIX):
            name = key[len(LEDGER_PREFIX):]
            return os.path.join(self.root, dir_name(name), LEDGER_FILE), name
        if key.startswith(CURSOR_PREFIX) and CURSOR_SEP in key:
            ledger, _, cursor = key[len(CURSOR_PREFIX):].partition(CURSOR_SEP)
            return os.path.join(self.root, dir_name(ledger), CURSORS_DIR,
                                dir_name(cursor) + ".json"), cursor
        return os.path.join(self.other, quote(key, safe="")[:200] + ".json"), key

    # -- KeyValueStore --------------------------------------------------------------------
    def get(self, key: str) -> Any | None:
        got = _read(self._path(key)[0])
        return None if got is None else got[1]

    def put(self, key: str, value: Any) -> None:
        self.put_many({key: value})

    def put_many(self, items: Mapping[str, Any], durable: bool = False) -> None:
        for key, value in items.items():
            path, name = self._path(key)
            directory = os.path.dirname(path)
            if not os.path.isdir(directory):
                if key.startswith(CURSOR_PREFIX) and not os.path.isdir(
                        os.path.dirname(directory)):
                    # the ledger is gone (deleted meanwhile): its cursors with it
                    raise StorageError(f"cannot store cursor {name}: its ledger is deleted")
                os.makedirs(directory, exist_ok=True)
            _write(path, name, value, durable)

    def reserve(self, key: str, count: int, floor: int = 0) -> int:
        raise StorageError("ledger ids are not reserved in the data directory when the "
                           "state is kept in ledger files: they come from the metadata store")

    def delete(self, key: str) -> bool:
        try:
            os.unlink(self._path(key)[0])
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot delete stored state of {key}: {exc}") from exc
        return True

    def delete_prefix(self, prefix: str) -> int:
        rows = self.list(prefix)
        for key in rows:
            self.delete(key)
        return len(rows)

    def list(self, prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        if prefix.startswith(CURSOR_PREFIX) and CURSOR_SEP in prefix:
            ledger, _, start = prefix[len(CURSOR_PREFIX):].partition(CURSOR_SEP)
            self._list_cursors(ledger, os.path.join(self.root, dir_name(ledger)), start, out)
        else:
            ledgers = _may_hold(prefix, LEDGER_PREFIX)
            cursors = _may_hold(prefix, CURSOR_PREFIX)
            for entry in _scandir(self.root) if ledgers or cursors else []:
                got = _read(os.path.join(entry, LEDGER_FILE))
                if got is None:
                    continue
                name, value = got
                out[LEDGER_PREFIX + name] = value
                if cursors:
                    self._list_cursors(name, entry, "", out)
        for entry in _scandir(self.other, dirs=False):
            got = _read(entry) if entry.endswith(".json") else None
            if got is not None:
                out[got[0]] = got[1]
        return {k: v for k, v in sorted(out.items()) if k.startswith(prefix)}

    def _list_cursors(self, ledger: str, directory: str, start: str,
                      out: dict[str, Any]) -> None:
        for entry in _scandir(os.path.join(directory, CURSORS_DIR), dirs=False):
            got = _read(entry) if entry.endswith(".json") else None
            if got is not None and got[0].startswith(start):
                out[f"{CURSOR_PREFIX}{ledger}{CURSOR_SEP}{got[0]}"] = got[1]

    def close(self) -> None:
        """Nothing is held open."""

    # -- from storage.db ------------------------------------------------------------------
    def migrate(self, legacy_path: str) -> int:
        """Copy the ledger and cursor rows of the ``storage.db`` at ``legacy_path`` into
        files, for ledgers without ``ledger.json`` (cursor files first, the ledger's row
        last), once: a marker file then says it was done. Returns the ledgers copied."""
        marker = os.path.join(self.data_dir, MIGRATED)
        if not os.path.exists(legacy_path) or os.path.exists(marker):
            return 0
        legacy = SqliteMetadataStore(legacy_path)
        try:
            rows = legacy.list("")
        finally:
            legacy.close()
        copied = 0
        for key, meta in rows.items():
            if not key.startswith(LEDGER_PREFIX):
                continue
            name = key[len(LEDGER_PREFIX):]
            path = os.path.join(self.root, dir_name(name), LEDGER_FILE)
            if os.path.exists(path) or meta.get("dir") != dir_name(name):
                continue
            prefix = f"{CURSOR_PREFIX}{name}{CURSOR_SEP}"
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.put_many({k: v for k, v in rows.items() if k.startswith(prefix)}, durable=True)
            self.put_many({key: meta}, durable=True)
            copied += 1
        if "ids" in rows:
            self.put_many({"ids": rows["ids"]}, durable=True)
        _write(marker, MIGRATED, {"ledgers": copied}, durable=True)
        log.info("moved the state of %d ledgers from %s into their directories",
                 copied, legacy_path)
        return copied



def _may_hold(prefix: str, kind: str) -> bool:
    """Whether keys starting with ``kind`` may start with ``prefix`` too."""
    return kind.startswith(prefix) or prefix.startswith(kind)


def _scandir(path: str, dirs: bool = True) -> list[str]:
    try:
        with os.scandir(path) as it:
            return [e.path for e in it if e.is_dir() == dirs and not e.name.startswith(".")]
    except FileNotFoundError:
        return []
