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

- ``<root>/<ledger dir>/ledger.json``: ``{"name": ..., "value": <ledger row>}``, written
  when the ledger is made; once a fenced owner adopted it, the row it writes (terminated
  flag, properties) is ``cursors.<epoch>/ledger`` (see below), and ``ledger.json`` only
  says that the ledger exists and what it is called;
- ``<root>/<ledger dir>/cursors.<epoch>/<cursor file>.json``: ``{"name": ...,
  "value": <state>}`` (``<cursor file>`` is the name quoted, cut short, and a digest: any
  name fits); ``cursors/`` for a ledger that is not fenced;
- any other key (none in a cluster: ledger ids come from the metadata store) in
  ``<data dir>/state/`` (`KeyFilesStore`).

A write goes to a temporary file that is fsynced and then renamed over the old one (one
atomic step on a local or NFS file system), the directory fsynced too when ``durable``:
a reader sees the old state or the new one, never half of one. A ledger's row is written
after its directory exists and is removed after its cursor files, so a ledger without
``ledger.json`` has no cursors worth keeping. `list` scans the directories (used when
listing ledgers and opening one, not on the hot path).

Cursor folders carry the fencing epoch (`adopt`). A broker that takes a ledger over
fences it with a higher epoch, copies the newest complete cursor folder into its own
``cursors.<epoch>``, marks that copy complete and from then on reads and writes only
there; readers pick the newest complete folder. So a previous owner that checked the
fence, was paused, and writes its cursor states afterwards writes into its own, older
folder, which nobody reads any more: a late write cannot undo the new owner's cursors,
where a check followed by a write always leaves a gap. The ledger's own row (terminated
flag, properties) is kept in the same folder (``ledger``, copied by `adopt`), so a stale
owner's late terminate or property lands where nobody reads either; its caller checks
the fence after the write, so a write the new owner's copy did not see is never
reported as done (`LedgerLifecycle`).

`migrate` copies the rows of a ``storage.db`` written before (standalone, or a cluster
on one host) into these files once, for the ledgers that have no ``ledger.json`` yet,
then leaves a marker (``storage.db.migrated``) so that it is never read again.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .errors import StorageError
from .key_files import (
    KeyFilesStore,
    file_name,
    legacy_rows,
    read_row,
    row_files,
    sub_dirs,
    write_row,
)
from .segment import fsync_dir

log = logging.getLogger(__name__)

LEDGER_PREFIX = "ledger/"
CURSOR_PREFIX = "cursor/"
CURSOR_SEP = "\x1f"
LEDGER_FILE = "ledger.json"
CURSORS_DIR = "cursors"
COMPLETE = "complete"  # in a cursors.<epoch> folder: its copy is whole
LEDGER_ROW = "ledger"  # in a cursors.<epoch> folder: the ledger's row, as that owner keeps it
MIGRATED = "storage.db.migrated"
#: Row files written at once by one `put_many` (a batch of cursor states): each write
#: waits for an fsync, and on an SSD or a file server several overlap.
_WRITERS = 4


def dir_name(name: str) -> str:
    """The directory (under ``ledgers/``) of ledger ``name``."""
    return file_name(name)


class LedgerFilesStore:
    """storage.db's rows as files in each ledger's directory (see the module docstring).
    Thread-safe as far as the file system is: one row, one file."""

    error_type = StorageError

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.root = os.path.join(data_dir, "ledgers")
        self.other = KeyFilesStore(os.path.join(data_dir, "state"))
        self._writers = ThreadPoolExecutor(max_workers=_WRITERS,
                                           thread_name_prefix="magnetar-state")
        self._closed = False
        # the epoch each ledger was fenced with by this factory (`adopt`): its cursor
        # files go to that epoch's folder
        self._epochs: dict[str, int] = {}

    # -- where a key lives ----------------------------------------------------------------
    def _path(self, key: str, write: bool = False) -> tuple[str, str] | None:
        """(file, name stored in it) of ``key`` (to be written, or read); None for a key
        of `other`."""
        if key.startswith(LEDGER_PREFIX):
            name = key[len(LEDGER_PREFIX):]
            return self._ledger_row(name, write), name
        if key.startswith(CURSOR_PREFIX) and CURSOR_SEP in key:
            ledger, _, cursor = key[len(CURSOR_PREFIX):].partition(CURSOR_SEP)
            return os.path.join(self._cursors_of(ledger), dir_name(cursor) + ".json"), cursor
        return None

    def _ledger_row(self, ledger: str, write: bool = False) -> str:
        """The file of ``ledger``'s row this factory writes (and reads, while it is
        there): in its epoch's folder when it fenced the ledger, else in the newest
        complete folder that has one, else ``ledger.json``."""
        directory = os.path.join(self.root, dir_name(ledger))
        epoch = self._epochs.get(ledger)
        if epoch is not None:
            mine = os.path.join(directory, f"{CURSORS_DIR}.{epoch}", LEDGER_ROW)
            if write or os.path.exists(mine):
                return mine
        kept = os.path.join(_newest_cursors(directory)[1], LEDGER_ROW)
        return kept if os.path.exists(kept) else os.path.join(directory, LEDGER_FILE)

    def _cursors_of(self, ledger: str) -> str:
        """The cursor folder of ``ledger`` this factory reads and writes: its epoch's
        when it fenced the ledger, else the newest complete one (or the plain one)."""
        directory = os.path.join(self.root, dir_name(ledger))
        epoch = self._epochs.get(ledger)
        if epoch is not None:
            return os.path.join(directory, f"{CURSORS_DIR}.{epoch}")
        return _newest_cursors(directory)[1]

    def adopt(self, ledger: str, epoch: int) -> None:
        """This factory fenced ``ledger`` with ``epoch`` (before reading its cursors):
        copy the newest complete cursor folder into ``cursors.<epoch>`` (then marked
        complete, the older folders removed) and keep its cursors there from now on. A
        previous owner that still writes (paused, then resumed) writes into its own
        epoch's folder, which nobody reads any more: its late cursor states are ignored."""
        directory = os.path.join(self.root, dir_name(ledger))
        mine = os.path.join(directory, f"{CURSORS_DIR}.{epoch}")
        newest_epoch, newest = _newest_cursors(directory)
        if newest != mine:
            if newest_epoch is not None and newest_epoch > epoch:
                raise StorageError(f"ledger {ledger}: cursors of a newer owner "
                                   f"(epoch {newest_epoch} > {epoch})")
            rows = [got for got in map(read_row, row_files(newest)) if got is not None]
            row = read_row(os.path.join(newest, LEDGER_ROW)) or \
                read_row(os.path.join(directory, LEDGER_FILE))
            os.makedirs(mine, exist_ok=True)
            jobs = [self._submit(os.path.join(mine, dir_name(name) + ".json"), name, value)
                    for name, value in rows]
            if row is not None:
                jobs.append(self._submit(os.path.join(mine, LEDGER_ROW), *row))
            for job in jobs:
                job.result()
            write_row(os.path.join(mine, COMPLETE), COMPLETE, {"from": newest}, durable=True)
            fsync_dir(directory)
            for old in sub_dirs(directory):
                old_epoch = _epoch_of(old)
                if old != mine and (old_epoch is None or old_epoch < epoch) and \
                        os.path.basename(old).startswith(CURSORS_DIR):
                    shutil.rmtree(old, ignore_errors=True)
        self._epochs[ledger] = epoch

    def _submit(self, path: str, name: str, value: Any, durable: bool = False
                ) -> Future[None]:
        if self._closed:
            done: Future[None] = Future()
            try:
                write_row(path, name, value, durable)
                done.set_result(None)
            except StorageError as exc:
                done.set_exception(exc)
            return done
        return self._writers.submit(write_row, path, name, value, durable)

    # -- KeyValueStore --------------------------------------------------------------------
    def get(self, key: str) -> Any | None:
        where = self._path(key)
        if where is None:
            return self.other.get(key)
        got = read_row(where[0])
        return None if got is None else got[1]

    def put(self, key: str, value: Any) -> None:
        self.put_many({key: value})

    def put_many(self, items: Mapping[str, Any], durable: bool = False) -> None:
        """Write each row's file; several at once on the store's writer threads (each
        costs an fsync: in parallel they overlap). Returns once all are written; raises
        the first failure then. A cursor of a ledger deleted meanwhile is left out."""
        jobs: list[tuple[str, str, Any]] = []
        for key, value in items.items():
            where = self._path(key, write=True)
            if where is None:
                self.other.put_many({key: value}, durable)
                continue
            path, name = where
            directory = os.path.dirname(path)
            if not os.path.isdir(directory):
                if key.startswith(CURSOR_PREFIX) and not os.path.isdir(
                        os.path.dirname(directory)):
                    log.debug("cursor %s not stored: its ledger is deleted", name)
                    continue
                if os.path.basename(directory).startswith(CURSORS_DIR + ".") and \
                        _epoch_of(directory) is not None:
                    # an epoch's folder is made by `adopt` only: gone, a newer owner
                    # removed it (this broker was fenced out); nothing is made again
                    if key.startswith(CURSOR_PREFIX):
                        log.debug("cursor %s not stored: %s is gone", name, directory)
                        continue
                    raise StorageError(f"cannot store the row of ledger {name}: "
                                       f"{directory} is gone (another broker took it over)")
                os.makedirs(directory, exist_ok=True)
            jobs.append((path, name, value))
        if len(jobs) == 1:
            write_row(*jobs[0], durable)
            return
        futures = [self._submit(path, name, value, durable) for path, name, value in jobs]
        errors = [exc for exc in (f.exception() for f in futures) if exc is not None]
        if errors:
            raise errors[0]

    def reserve(self, key: str, count: int, floor: int = 0) -> int:
        raise StorageError("ledger ids are not reserved in the data directory when the "
                           "state is kept in ledger files: they come from the metadata store")

    def delete(self, key: str) -> bool:
        where = self._path(key)
        if where is None:
            return self.other.delete(key)
        paths = [where[0]]
        if key.startswith(LEDGER_PREFIX):  # the row where an owner kept it, and ledger.json
            paths.append(os.path.join(self.root, dir_name(where[1]), LEDGER_FILE))
        found = False
        for path in dict.fromkeys(paths):
            try:
                os.unlink(path)
                found = True
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(f"cannot delete stored state of {key}: {exc}") from exc
        return found

    def delete_prefix(self, prefix: str) -> int:
        rows = self.list(prefix)
        for key in rows:
            self.delete(key)
        return len(rows)

    def list(self, prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        if prefix.startswith(CURSOR_PREFIX) and CURSOR_SEP in prefix:
            ledger, _, start = prefix[len(CURSOR_PREFIX):].partition(CURSOR_SEP)
            self._list_cursors(ledger, self._cursors_of(ledger), start, out)
        else:
            ledgers = _may_hold(prefix, LEDGER_PREFIX)
            cursors = _may_hold(prefix, CURSOR_PREFIX)
            for entry in sub_dirs(self.root) if ledgers or cursors else []:
                got = read_row(os.path.join(entry, LEDGER_FILE))
                if got is None:
                    continue
                name, value = got
                kept = read_row(os.path.join(_newest_cursors(entry)[1], LEDGER_ROW))
                out[LEDGER_PREFIX + name] = value if kept is None else kept[1]
                if cursors:
                    self._list_cursors(name, self._cursors_of(name), "", out)
        out.update(self.other.list(prefix))
        return {k: v for k, v in sorted(out.items()) if k.startswith(prefix)}

    def _list_cursors(self, ledger: str, folder: str, start: str,
                      out: dict[str, Any]) -> None:
        for entry in row_files(folder):
            got = read_row(entry)
            if got is not None and got[0].startswith(start):
                out[f"{CURSOR_PREFIX}{ledger}{CURSOR_SEP}{got[0]}"] = got[1]

    def close(self) -> None:
        """Stop the writer threads (writes after this run on the caller's thread)."""
        self._closed = True
        self._writers.shutdown(wait=True)

    # -- from storage.db ------------------------------------------------------------------
    def migrate(self, legacy_path: str) -> int:
        """Copy the ledger and cursor rows of the ``storage.db`` at ``legacy_path`` into
        files, for ledgers without ``ledger.json`` (cursor files first, the ledger's row
        last), once: a marker file then says it was done. Returns the ledgers copied."""
        marker = os.path.join(self.data_dir, MIGRATED)
        if not os.path.exists(legacy_path) or os.path.exists(marker):
            return 0
        rows = legacy_rows(legacy_path)
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
        write_row(marker, MIGRATED, {"ledgers": copied}, durable=True)
        log.info("moved the state of %d ledgers from %s into their directories",
                 copied, legacy_path)
        return copied



def _epoch_of(folder: str) -> int | None:
    """The epoch of a ``cursors.<epoch>`` folder (None: the plain one, or another)."""
    _, dot, tail = os.path.basename(folder).partition(".")
    return int(tail) if dot and tail.isdigit() else None


def _newest_cursors(directory: str) -> tuple[int | None, str]:
    """(epoch, folder) of a ledger directory's newest complete ``cursors.<epoch>``
    folder; (None, the plain ``cursors`` folder) when there is none."""
    best: tuple[int, str] | None = None
    for folder in sub_dirs(directory):
        epoch = _epoch_of(folder)
        if epoch is None or not os.path.basename(folder).startswith(CURSORS_DIR + "."):
            continue
        if (best is None or epoch > best[0]) and os.path.exists(os.path.join(folder, COMPLETE)):
            best = (epoch, folder)
    return best if best is not None else (None, os.path.join(directory, CURSORS_DIR))


def _may_hold(prefix: str, kind: str) -> bool:
    """Whether keys starting with ``kind`` may start with ``prefix`` too."""
    return kind.startswith(prefix) or prefix.startswith(kind)
