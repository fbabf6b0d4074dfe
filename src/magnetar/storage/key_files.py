"""`KeyFilesStore`: a flat key/JSON store kept as one file per key, for brokers that share
a data directory across hosts, where one SQLite file written by several hosts is not
dependable (its WAL mode needs memory shared between the writers; its locks are only as
good as the network file system's).

Theory of operation
-------------------
A key ``kind/rest`` is the file ``<directory>/<kind>/<file name>.json`` holding
``{"name": key, "value": value}``; the file name is ``rest`` quoted, cut short, and a
digest of it (`file_name`), so any key fits and none collide (a ``kind`` that is not
plain letters and digits is named the same way). A key without ``/`` goes to the folder
``_``. Each write goes to a temporary file, fsynced, then renamed over the
old one (one atomic step, locally and on NFS), and with ``durable`` the folder is
fsynced too: a reader sees the old value or the new one, never half of one. So a key
written by one broker at a time (what the brokers of a cluster keep here is per topic,
written by the topic's owner) needs no lock. `list` reads the files of the folders its
prefix can reach: fine for start-up and sweeps, not meant for a hot path.

`migrate_from` copies the rows of a SQLite store written before into files once (a
marker file records that it was done, so a key deleted since is not copied back).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from .errors import StorageError
from .metadata import MetadataStore, SqliteMetadataStore
from .segment import fsync_dir

log = logging.getLogger(__name__)


def file_name(name: str) -> str:
    """A file or folder name for any string: quoted, cut short, and a digest of it."""
    digest = hashlib.sha1(name.encode()).hexdigest()[:12]
    return f"{quote(name, safe='')[:100]}-{digest}"


def legacy_rows(sqlite_path: str) -> dict[str, Any]:
    """Every row of a SQLite metadata file written before its keys became files."""
    legacy = SqliteMetadataStore(sqlite_path)
    try:
        return legacy.list("")
    finally:
        legacy.close()


def read_row(path: str) -> tuple[str, Any] | None:
    """(name, value) of a row file; None if there is none."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot read stored state {path}: {exc}") from exc
    return doc["name"], doc["value"]


def write_row(path: str, name: str, value: Any, durable: bool) -> None:
    """Replace the row file at ``path`` atomically (temporary file, fsync, rename; the
    folder fsynced too when ``durable``)."""
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
            fsync_dir(directory)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StorageError(f"cannot store state {path}: {exc}") from exc


def row_files(directory: str) -> list[str]:
    """The row files of a folder (temporary files left out)."""
    try:
        with os.scandir(directory) as it:
            return [e.path for e in it
                    if e.name.endswith(".json") and not e.name.startswith(".") and e.is_file()]
    except FileNotFoundError:
        return []


def sub_dirs(directory: str) -> list[str]:
    try:
        with os.scandir(directory) as it:
            return [e.path for e in it if e.is_dir() and not e.name.startswith(".")]
    except FileNotFoundError:
        return []


class KeyFilesStore(MetadataStore):
    """Flat keys as files under ``directory`` (see the module docstring)."""

    error_type = StorageError

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _kind_dir(self, kind: str) -> str:
        if not kind:
            return os.path.join(self.directory, "_")
        return os.path.join(self.directory, kind if kind.isalnum() else file_name(kind))

    def path(self, key: str) -> str:
        kind, slash, rest = key.partition("/")
        if not slash:
            kind, rest = "", key
        return os.path.join(self._kind_dir(kind), file_name(rest) + ".json")

    def get(self, key: str) -> Any | None:
        got = read_row(self.path(key))
        return None if got is None else got[1]

    def put(self, key: str, value: Any) -> None:
        self.put_many({key: value})

    def put_many(self, items: Mapping[str, Any], durable: bool = False) -> None:
        for key, value in items.items():
            path = self.path(key)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_row(path, key, value, durable)

    def delete(self, key: str) -> bool:
        try:
            os.unlink(self.path(key))
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot delete stored state of {key}: {exc}") from exc
        return True

    def list(self, prefix: str = "") -> dict[str, Any]:
        kind, slash, _ = prefix.partition("/")
        folders = [self._kind_dir(kind)] if slash else sub_dirs(self.directory)
        out: dict[str, Any] = {}
        for folder in folders:
            for path in row_files(folder):
                got = read_row(path)
                if got is not None and got[0].startswith(prefix):
                    out[got[0]] = got[1]
        return dict(sorted(out.items()))

    def migrate_from(self, sqlite_path: str, marker: str,
                     keep: Callable[[str], bool] = lambda key: True) -> int:
        """Copy the rows of the SQLite store at ``sqlite_path`` that ``keep`` accepts and
        that have no file yet, once (``marker``: the file that then says so). Returns how
        many were copied."""
        if not os.path.exists(sqlite_path) or os.path.exists(marker):
            return 0
        rows = legacy_rows(sqlite_path)
        copied = {k: v for k, v in rows.items() if keep(k) and not os.path.exists(self.path(k))}
        self.put_many(copied, durable=True)
        write_row(marker, os.path.basename(sqlite_path), {"keys": len(copied)}, durable=True)
        log.info("moved %d keys from %s into %s", len(copied), sqlite_path, self.directory)
        return len(copied)
