"""`TxnLog`: a broker alone keeps its coordinators' transaction records in one append-only
file, ``transactions.log`` in its data directory (`TxnRecords`' interface: counters,
create, update, get, load, delete; a cluster keeps them in its metadata store).

Every change is one record appended with ``os.write`` before it is answered: the OS keeps
it across a kill -9 (what the SQLite store it replaces gave, in WAL with
``synchronous=NORMAL``, and what the message storage's appends give); every `SYNC_EVERY`
records the file is fdatasynced on a thread (as that store's checkpoints were). A record is framed
as ``length (u32) | CRC32 (u32) | payload``; its payload is one of

- ``P tc seq version {json}``: a transaction's record (the whole of it) at ``version``,
- ``D tc seq``: a transaction's record deleted,
- ``C tc next``: coordinator ``tc``'s id counter (the next id nobody has taken).

The live state is in memory: the last record of each transaction (and its framed bytes),
so a change is checked against its version there (`BadVersionError`, as the store's
compare-and-set) and written once. At start the file is replayed; a torn tail (a short or
corrupt last record, from a crash mid-write or a full disk) is cut off with a warning. When
the file outgrows its live records (`COMPACT_MIN_BYTES`, and twice the live bytes of the
last compaction), it is compacted: the live records are written to a new file and synced
off the event loop, the records appended meanwhile copied after them, and the new file
renamed over the old one (a crash at any point leaves one complete file).

A broker upgrading from ``transactions.db`` has that file's records copied into a new log
once (the log written and synced before it is renamed into place), and the database
renamed to ``transactions.db.migrated``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import struct
import zlib

from magnetar.broker.transactions.records import (
    ROOT,
    TxnRecord,
    TxnRecords,
    encode_record,
    txn_path,
)
from magnetar.metadata import BadVersionError, LocalMetadataStore

log = logging.getLogger(__name__)

#: a log smaller than this is never compacted
COMPACT_MIN_BYTES = 4 << 20
#: records between two fdatasyncs of the log on a thread (what the SQLite store's
#: checkpoints gave: a power loss loses at most about this many; a kill -9 none)
SYNC_EVERY = 500
_HEADER = struct.Struct("<II")
#: a record longer than this is corruption, not a record (a record holds one transaction)
_MAX_RECORD = 64 << 20

Key = tuple[int, int]


def _frame(payload: bytes) -> bytes:
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def replay(data: bytes) -> tuple[dict[Key, tuple[int, bytes]], dict[int, int], int]:
    """The live state of a log's bytes: (transaction -> (version, JSON)), (coordinator ->
    next id), and how many bytes are whole records (the rest is a torn tail)."""
    recs: dict[Key, tuple[int, bytes]] = {}
    counters: dict[int, int] = {}
    at, end = 0, len(data)
    while at + _HEADER.size <= end:
        length, crc = _HEADER.unpack_from(data, at)
        start = at + _HEADER.size
        if length > _MAX_RECORD or start + length > end:
            break
        payload = data[start:start + length]
        if zlib.crc32(payload) != crc:
            break
        try:
            kind = payload[:2]
            if kind == b"P ":
                tc, seq, version, body = payload[2:].split(b" ", 3)
                recs[(int(tc), int(seq))] = (int(version), body)
            elif kind == b"D ":
                tc, seq = payload[2:].split(b" ")
                recs.pop((int(tc), int(seq)), None)
            elif kind == b"C ":
                tc, nxt = payload[2:].split(b" ")
                counters[int(tc)] = int(nxt)
            else:
                break
        except ValueError:
            break
        at = start + length
    return recs, counters, at


def _write_synced(path: str, data: bytes) -> None:
    """``data`` as the whole of ``path``, synced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Counter:
    """Coordinator ``tc``'s id counter in the log (`IdBlocks`' ``reserve``)."""

    def __init__(self, log_: TxnLog, tc: int) -> None:
        self._log = log_
        self._tc = tc

    async def reserve(self, count: int, floor: int = 0) -> int:
        return self._log.reserve(self._tc, count, floor)


class TxnLog:
    """The transaction records of every coordinator of a broker alone, in one file (an
    `InlineTxnStore`: every write is done before the call returns)."""

    inline = True

    def __init__(self, path: str, *, compact_min_bytes: int = COMPACT_MIN_BYTES) -> None:
        self.path = path
        self.compact_min_bytes = compact_min_bytes
        self._fd = -1
        self._size = 0
        self._compact_at = compact_min_bytes
        self._recs: dict[Key, TxnRecord] = {}
        self._lines: dict[Key, bytes] = {}  # each live record's framed bytes
        self._counters: dict[int, int] = {}
        self._compacting: asyncio.Task[None] | None = None
        self.compactions = 0
        self._unsynced = 0
        self._syncing: asyncio.Future[None] | None = None
        self.syncs = 0

    # ------------------------------------------------------------------ lifecycle
    async def open(self, migrate_from: str | None = None) -> None:
        """Replay the log (created, from ``migrate_from``'s records when that database
        exists and the log does not)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path + ".tmp")  # a compaction or migration a crash cut short
        if not os.path.exists(self.path) and migrate_from and os.path.exists(migrate_from):
            await self._migrate(migrate_from)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            data = b""
            size = os.fstat(fd).st_size
            if size:
                data = os.pread(fd, size, 0)
            recs, counters, good = replay(data)
            if good < len(data):
                log.warning("transaction log %s: a torn tail of %d bytes after %d cut off",
                            self.path, len(data) - good, good)
                os.ftruncate(fd, good)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._size = fd, good
        for key, (version, body) in recs.items():
            self._recs[key] = TxnRecord.from_json(key[0], key[1], json.loads(body), version)
            self._lines[key] = _frame(b"P %d %d %d " % (key[0], key[1], version) + body)
        self._counters = counters
        self._compact_at = max(self.compact_min_bytes, 2 * self._live_bytes())
        if migrate_from and os.path.exists(migrate_from):
            log.warning("transaction log %s in use: %s (an older store) is ignored",
                        self.path, migrate_from)

    async def close(self) -> None:
        for running in (self._compacting, self._syncing):
            if running is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(running)
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            with contextlib.suppress(OSError):
                os.fsync(fd)
            os.close(fd)

    # ------------------------------------------------------------------ TxnRecords' interface
    def counter(self, tc: int) -> _Counter:
        return _Counter(self, tc)

    def reserve(self, tc: int, count: int, floor: int = 0) -> int:
        if count < 1:
            raise ValueError(f"a block holds at least one id, not {count}")
        start = max(self._counters.get(tc, 0), floor)
        self._append(_frame(b"C %d %d" % (tc, start + count)))
        self._counters[tc] = start + count
        return start

    async def create(self, rec: TxnRecord) -> None:
        self.create_now(rec)

    async def update(self, rec: TxnRecord) -> None:
        self.update_now(rec)

    def create_now(self, rec: TxnRecord) -> None:
        """Store ``rec``, a new record (`BadVersionError` if there is one)."""
        key = (rec.tc, rec.seq)
        if key in self._recs:
            raise BadVersionError(txn_path(rec.tc, rec.seq), -1)
        self._put(key, rec, 0)

    def update_now(self, rec: TxnRecord) -> None:
        """Store ``rec`` if the stored one is still at ``rec.version`` (`BadVersionError`)."""
        key = (rec.tc, rec.seq)
        current = self._recs.get(key)
        if current is None or current.version != rec.version:
            raise BadVersionError(txn_path(rec.tc, rec.seq), rec.version)
        self._put(key, rec, rec.version + 1)

    async def get(self, tc: int, seq: int) -> TxnRecord | None:
        rec = self._recs.get((tc, seq))
        return None if rec is None else rec.changed()

    async def load(self, tc: int) -> list[TxnRecord]:
        return [r.changed() for (t, _), r in self._recs.items() if t == tc]

    async def delete(self, rec: TxnRecord) -> None:
        key = (rec.tc, rec.seq)
        current = self._recs.get(key)
        if current is None or current.version != rec.version:
            return  # (gone, or changed since: as the store's delete, nothing done)
        self._append(_frame(b"D %d %d" % key))
        del self._recs[key]
        del self._lines[key]

    # ------------------------------------------------------------------ writing
    def _put(self, key: Key, rec: TxnRecord, version: int) -> None:
        line = _frame(b"P %d %d %d " % (key[0], key[1], version) + encode_record(rec))
        self._append(line)
        rec.version = version
        # kept as given, not copied: the coordinators never change a record they stored
        # (a change is a new one, `TxnRecord.changed`); readers get copies (`get`, `load`)
        self._recs[key] = rec
        self._lines[key] = line

    def _append(self, line: bytes) -> None:
        if self._fd < 0:
            raise OSError(f"transaction log {self.path} is closed")
        written = os.write(self._fd, line)
        if written != len(line):  # (a full disk): the partial record is taken back
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            raise OSError(f"transaction log {self.path}: short write ({written} of {len(line)})")
        self._size += written
        self._unsynced += 1
        if self._unsynced >= SYNC_EVERY and self._syncing is None:
            self._unsynced = 0
            self._syncing = asyncio.get_running_loop().run_in_executor(None, self._sync, self._fd)
            self._syncing.add_done_callback(self._synced)
        if self._size >= self._compact_at and self._compacting is None:
            self._compacting = asyncio.get_running_loop().create_task(self._compact())
            self._compacting.add_done_callback(self._compacted)

    @staticmethod
    def _sync(fd: int) -> None:
        try:
            os.fdatasync(fd)
        except OSError as exc:
            # a compaction replaced (and closed) the file meanwhile: the new one was
            # synced when written
            if exc.errno != errno.EBADF:
                raise

    def _synced(self, done: asyncio.Future[None]) -> None:
        self._syncing = None
        if not done.cancelled() and done.exception() is not None:
            log.warning("transaction log %s: sync failed: %s", self.path, done.exception())
        else:
            self.syncs += 1

    def _live_bytes(self) -> int:
        return sum(map(len, self._lines.values())) + 16 * len(self._counters)

    def _snapshot(self) -> bytes:
        counters = [_frame(b"C %d %d" % item) for item in self._counters.items()]
        return b"".join([*counters, *self._lines.values()])

    async def _compact(self) -> None:
        """Rewrite the log as its live records (see the module docstring)."""
        snapshot = self._snapshot()
        since = self._size
        tmp = self.path + ".tmp"
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, _write_synced, tmp, snapshot)
        if self._fd < 0:
            os.unlink(tmp)
            return
        # on the loop from here, without a wait: the records appended meanwhile follow
        tail = os.pread(self._fd, self._size - since, since) if self._size > since else b""
        fd = os.open(tmp, os.O_RDWR | os.O_APPEND)
        try:
            if tail and os.write(fd, tail) != len(tail):
                raise OSError(f"transaction log {tmp}: short write")
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            raise
        old, self._fd = self._fd, fd
        os.close(old)
        self._size = len(snapshot) + len(tail)
        self._compact_at = max(self.compact_min_bytes, 2 * self._size)
        self.compactions += 1
        await loop.run_in_executor(None, _sync_dir, self.path)

    def _compacted(self, task: asyncio.Task[None]) -> None:
        self._compacting = None
        if not task.cancelled() and task.exception() is not None:
            log.warning("transaction log %s: compaction failed: %s", self.path, task.exception())
            self._compact_at = self._size + self.compact_min_bytes  # tried again later

    # ------------------------------------------------------------------ migration
    async def _migrate(self, db_path: str) -> None:
        """Copy the records of ``transactions.db`` (the SQLite store of earlier versions)
        into a new log, then rename the database aside."""
        store = LocalMetadataStore(db_path)
        await store.start()
        try:
            records = TxnRecords(store)
            lines: list[bytes] = []
            moved = 0
            for name in await store.get_children(ROOT):
                try:
                    tc = int(name)
                except ValueError:
                    continue
                got = await store.get(f"{ROOT}/{tc}/sequence")
                if got is not None:
                    lines.append(_frame(b"C %d %d" % (tc, int(json.loads(got[0])))))
                for rec in await records.load(tc):
                    lines.append(_frame(b"P %d %d %d " % (tc, rec.seq, rec.version) + encode_record(rec)))
                    moved += 1
        finally:
            await store.close()
        tmp = self.path + ".tmp"
        await asyncio.get_running_loop().run_in_executor(None, _write_synced, tmp, b"".join(lines))
        os.replace(tmp, self.path)
        _sync_dir(self.path)
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(db_path + suffix, db_path + ".migrated" + suffix)
        log.info("transaction records: %d moved from %s to %s", moved, db_path, self.path)


__all__ = ["COMPACT_MIN_BYTES", "TxnLog", "replay"]
