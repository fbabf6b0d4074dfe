"""One segment file (= one ledger id): framed records on disk plus the in-memory offset index.

Layout: a 16-byte file header (magic, ledger id) then records (see `record`). The index is
an ``array('Q')`` of ``count + 1`` offsets: record ``i`` spans ``offsets[i]..offsets[i+1]``.

A sealed, fully synced segment gets a sidecar ``.idx`` file (magic, count, end offset, the
offsets, CRC32C), so reopening does not rescan it. A segment without a valid sidecar (the
one being written when the process stopped) is scanned on open and a torn or corrupt tail
is truncated. If the sidecar is valid but the file is longer (records whose append failed),
the file is truncated to the sidecar's end, so a failed append never reappears.

Space is reserved ahead of small writes once a segment holds 64 KiB (``posix_fallocate``,
growing with the segment: as much as is written, at most 4 MiB at a time), so most fdatasyncs
only flush data and do not also commit a file-size change to the journal; that saves a
third of an fdatasync's cost on ext4. A segment is cut back to its last record when it is
sealed or closed; after a crash the reserved tail reads as zeros, which the recovery scan
stops at (an all-zero record header is never valid) and cuts off quietly.

Shared storage (`takeover.py`): a segment made by a fenced writer is named with its
epoch (``<id>.e<epoch>.seg``) and ``guard`` (the fence's check) is asked before the file
is made and before any best-effort file work (space given back, sidecar written); a
segment opened by a new owner (``shared``) is never truncated, renamed or removed, and
is read only up to ``limit``, where the owner that took it over recorded its end. A
writer never cuts a segment below what it wrote (`cut_reserve` stops at ``written``).

Threads: the event loop thread writes, reads and opens/closes the descriptor; the flusher
thread (and the file limiter's retiring syncs) only call `sync`. ``lock`` serialises `sync`
against `close_fd`. A ``readers`` thread creates a new segment's file (`create_file`) and,
once the segment is sealed and every entry confirmed, gives back its reserved space and
writes its sidecar (`cut_reserve`, `write_index`): the loop writes nothing to it by then.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
import threading
import time
from array import array
from collections.abc import Callable
from concurrent.futures import Future

import crc32c

from . import clean_stop, metrics, record
from .clean_stop import INDEX_MIN_BYTES
from .cold_span import ColdSpan
from .errors import CorruptEntryError, SegmentFileMissingError, StorageError

log = logging.getLogger(__name__)

SEG_MAGIC = b"MGTRSEG1"
IDX_MAGIC = b"MGTRIDX1"
FILE_HEADER = struct.Struct("<8sQ")
IDX_HEADER = struct.Struct("<8sQQ")
_IOV_MAX = 1024
#: Segments smaller than this reserve nothing: most of 10,000 quiet topics never get
#: there, so they cost no disk space beyond their records and no work to cut on close.
_RESERVE_FROM = 64 * 1024
_RESERVE_MIN = 64 * 1024
_RESERVE_MAX = 4 * 1024 * 1024
#: Only small writes reserve: they are the ones each followed by an fdatasync, where the
#: size change costs as much as the data; a big write amortises it (and reserving ahead of
#: a stream of 4 MiB writes measured ~20% slower).
_RESERVE_WRITES_BELOW = 256 * 1024
#: Cleared for the process when the file system cannot reserve space.
_reserve_supported = hasattr(os, "posix_fallocate")


def segment_name(ledger_id: int, epoch: int | None = None) -> str:
    """File name of a segment (made by a writer fenced with ``epoch``, if not None)."""
    if epoch is None:
        return f"{ledger_id:012d}.seg"
    return f"{ledger_id:012d}.e{epoch}.seg"


def parse_index_name(name: str) -> tuple[int, int | None] | None:
    """(ledger id, epoch or None) of a segment's sidecar index file name (``<id>.idx``,
    ``<id>.e<epoch>.idx``); None if it names none."""
    if not name.endswith(".idx"):
        return None
    return parse_segment_name(name[:-4] + ".seg")


def parse_segment_name(name: str) -> tuple[int, int | None] | None:
    """(ledger id, epoch or None) of a segment file name; None if it names none."""
    if not name.endswith(".seg"):
        return None
    stem, dot, tail = name[:-4].partition(".e")
    if not stem.isdigit():
        return None
    if not dot:
        return int(stem), None
    return (int(stem), int(tail)) if tail.isdigit() else None



class Segment:
    """A segment file and its index. Not thread-safe except `sync` vs `close_fd`."""

    __slots__ = (
        "_offsets",
        "allocated",
        "confirmed",
        "count",
        "create_error",
        "created",
        "creating",
        "dir_sync",
        "directory",
        "end",
        "entry_with_file",
        "epoch",
        "fd",
        "guard",
        "idx_path",
        "index_written",
        "ledger_id",
        "limit",
        "lock",
        "path",
        "ready",
        "sealed",
        "sealing",
        "shared",
        "sync_error",
        "synced",
        "written",
    )

    def __init__(self, directory: str, ledger_id: int, epoch: int | None = None) -> None:
        self.directory = directory
        self.ledger_id = ledger_id
        self.epoch = epoch
        self.path = os.path.join(directory, segment_name(ledger_id, epoch))
        #: Raises (`StorageError`) when this broker may no longer write the file (its
        #: fence moved, or cannot be read); None: no fence. See `takeover.py`.
        self.guard: Callable[[], None] | None = None
        #: Another broker may hold this file (opened by a takeover): never truncated,
        #: renamed or removed here, and read only up to ``limit`` (None: its end).
        self.shared = False
        self.limit: int | None = None
        self.idx_path = self.path[:-4] + ".idx"
        self.fd: int | None = None
        self.lock = threading.Lock()
        self._offsets: array[int] | None = None
        self.count = 0  # entries in the index
        self.confirmed = 0  # entries readable (durable per policy)
        self.end = FILE_HEADER.size  # offset just past the last indexed record
        self.written = 0  # bytes handed to the OS
        self.allocated = 0  # file size reserved ahead of the writes (0: none)
        self.synced = 0  # bytes known durable
        self.sealed = False
        self.index_written = False
        self.sync_error: OSError | None = None
        self.dir_sync: list[str] = []
        self.entry_with_file = False  # its first sync makes its name durable: dir_fsync
        self.created = time.monotonic()
        # A new segment's file is made on a storage thread (`planned`, `create_file`):
        # until `file_created` runs on the loop, ``ready`` is False and ``creating`` is
        # that job; ``create_error`` is why it failed, if it did.
        self.ready = True
        self.creating: Future[int] | None = None
        self.create_error: BaseException | None = None
        # the job giving back the reserved space and writing the sidecar once sealed
        self.sealing: Future[None] | None = None

    # ------------------------------------------------------------------ creation / open
    @classmethod
    def create(cls, directory: str, ledger_id: int, dir_sync: list[str]) -> Segment:
        """Create a new, empty segment file (the header is written at once), blocking."""
        seg = cls.planned(directory, ledger_id)
        seg.file_created(seg.create_file())
        seg.dir_sync.extend(dir_sync)
        return seg

    @classmethod
    def planned(cls, directory: str, ledger_id: int, epoch: int | None = None) -> Segment:
        """A new segment whose file does not exist yet: entries can be indexed (not
        written) until `create_file` (any thread) and then `file_created` (the owner's)."""
        seg = cls(directory, ledger_id, epoch)
        seg._offsets = array("Q", [FILE_HEADER.size])
        seg.ready = False
        return seg

    def create_file(self) -> int:
        """Make the file with its header and return its descriptor. Touches nothing of
        the segment's state: safe on a storage thread while the loop appends. With a
        ``guard``, asked first: a fenced writer makes no file (and one whose check came
        just before the fence moved makes a file named by its old epoch: nobody reads it)."""
        if self.guard is not None:
            self.guard()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.pwrite(fd, FILE_HEADER.pack(SEG_MAGIC, self.ledger_id), 0)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise
        return fd

    def file_created(self, fd: int) -> None:
        """`create_file` made the file (descriptor ``fd``): writes may go to it now. The
        directory entry is made durable by the first `sync`."""
        self.fd = fd
        self.written = max(self.written, FILE_HEADER.size)
        self.dir_sync = [self.directory]
        self.ready = True

    @classmethod
    def open_existing(
        cls, directory: str, ledger_id: int, epoch: int | None = None, *,
        shared: bool = False, limit: int | None = None, synced_before: int | None = None,
    ) -> Segment | None:
        """Open a segment left by an earlier run (sealed). Returns None (and removes the
        file, unless ``shared``) when it holds no valid entry. ``shared``: opened by a new
        owner, another broker may still hold it: nothing is cut or removed, and bytes past
        ``limit`` (the end its previous owner's takeover recorded) are never read.
        ``synced_before``: files changed until then (ns) are synced (`clean_stop`). A
        file that is not there but whose sidecar is: `missing`."""
        seg = cls(directory, ledger_id, epoch)
        seg.sealed = True
        seg.shared = shared
        seg.limit = limit
        try:
            st = os.stat(seg.path)
        except FileNotFoundError:  # (a sidecar without its file: a segment lost)
            return cls.missing(directory, ledger_id, epoch, shared=shared)
        size = st.st_size
        if limit is not None:
            size = min(size, limit)
        if not seg._load_index_header(size):
            synced = synced_before is not None and st.st_mtime_ns <= synced_before
            seg._recover(size, sync=not synced)
            if seg.count and not (synced and seg.end <= INDEX_MIN_BYTES):
                seg.write_index()
        seg.confirmed = seg.count
        seg.written = seg.synced = seg.end
        if shared:
            seg.limit = seg.end  # what this owner reads of it, for good
        if seg.count == 0:
            if not shared:
                seg.remove_files()
            return None
        return seg

    @classmethod
    def missing(cls, directory: str, ledger_id: int, epoch: int | None = None, *,
                shared: bool = False) -> Segment | None:
        """A sealed segment whose file is not there (`open_existing` found none) but whose
        sidecar index is (the file removed by hand, or lost by its file system): its
        entries as the sidecar records them, with an error log, so that its ledger keeps
        them and every read of them fails with `SegmentFileMissingError` (readers try
        again, or skip it with ``autoSkipNonRecoverableData``) instead of the ledger going
        on without them as if they had never been. None when there is no usable sidecar.
        (A trim removes the sidecar before the file: a crash between the two leaves a
        file without a sidecar, never this.)"""
        seg = cls(directory, ledger_id, epoch)
        if not seg._load_offsets():
            return None
        offs = seg._offsets
        assert offs is not None
        seg.sealed = seg.index_written = True
        seg.shared = shared
        seg.count = seg.confirmed = len(offs) - 1
        seg.end = seg.written = seg.synced = offs[-1]
        if shared:
            seg.limit = seg.end
        if not seg.count:
            return None
        log.error("%s is missing: its sidecar index says it held %d entries (%d:0 to %d:%d); "
                  "its ledger keeps them and every read of them fails until the file is "
                  "back (put it back, or set autoSkipNonRecoverableData=true to have readers "
                  "skip them)", seg.path, seg.count, ledger_id, ledger_id, seg.count - 1)
        return seg

    def missing_error(self) -> SegmentFileMissingError:
        """What a read of this segment raises when its file is not there."""
        exc = SegmentFileMissingError(
            errno.ENOENT, f"the file of segment {self.ledger_id} is missing (is the data "
            "directory's mount there?)", self.path)
        exc.segment = (self.ledger_id, self.confirmed - 1)
        return exc

    def _load_index_header(self, seg_size: int) -> bool:
        try:
            with open(self.idx_path, "rb") as f:
                head = f.read(IDX_HEADER.size)
                idx_size = os.fstat(f.fileno()).st_size
        except OSError:
            return False
        if len(head) != IDX_HEADER.size:
            return False
        magic, count, end = IDX_HEADER.unpack(head)
        if magic != IDX_MAGIC or idx_size != IDX_HEADER.size + 8 * (count + 1) + 4:
            return False
        if end > seg_size:
            return False  # the data is shorter than the index claims: rescan
        if self.limit is not None and end != self.limit:
            return False  # not the end the takeover recorded (a stale writer's sidecar)
        if end < seg_size and self.shared:
            # past the sidecar: a failed append's bytes, or another broker's; ignored
            if not self._load_offsets((count, end)):
                return False
        elif end < seg_size:
            # bytes past the index are appends that failed; drop them for good
            if not self._load_offsets():
                return False
            log.info("%s: dropping %d bytes past the indexed end", self.path, seg_size - end)
            os.truncate(self.path, end)
        self.count = count
        self.end = end
        self.index_written = True
        return True

    def _load_offsets(self, expect: tuple[int, int] | None = None) -> bool:
        """Load the sidecar's offsets; False if it is unusable or, with ``expect``, does
        not hold that (count, end) (a sidecar replaced since its header was read)."""
        try:
            with open(self.idx_path, "rb") as f:
                raw = f.read()
        except OSError:
            return False
        if len(raw) < IDX_HEADER.size + 12:
            return False
        body, (crc,) = raw[:-4], struct.unpack("<I", raw[-4:])
        if crc32c.crc32c(body) != crc:
            return False
        magic, count, end = IDX_HEADER.unpack_from(body)
        offs = array("Q")
        offs.frombytes(body[IDX_HEADER.size :])
        if magic != IDX_MAGIC or len(offs) != count + 1 or offs[-1] != end:
            return False
        if expect is not None and (count, end) != expect:
            return False
        self._offsets = offs
        return True

    def _recover(self, size: int, sync: bool = True) -> None:
        """Scan the whole file; truncate a torn or corrupt tail; fdatasync what remains
        (if ``sync``: not after a clean stop)."""
        offsets = [FILE_HEADER.size]
        good = 0
        if size >= FILE_HEADER.size:
            with open(self.path, "rb") as f:
                magic, lid = FILE_HEADER.unpack(f.read(FILE_HEADER.size))
                if magic != SEG_MAGIC or lid != self.ledger_id:
                    log.error("%s: bad segment header; ignoring the file", self.path)
                    if not self.shared:
                        os.replace(self.path, self.path + ".corrupt")
                    return
                good = (record.scan_file(f, size, FILE_HEADER.size, offsets)
                        if size > FILE_HEADER.size else FILE_HEADER.size)
        if good < size and self.shared:
            # not ours to cut: another broker may hold it; what is past ``good`` is
            # never read (the takeover records ``good`` as the segment's end)
            log.debug("%s: reading %d bytes of %d", self.path, good, size)
        elif good < size:
            if _all_zero(self.path, good, size):
                log.debug("%s: cutting %d bytes of reserved space", self.path, size - good)
            else:
                log.warning("%s: truncating %d bytes of torn/corrupt tail", self.path, size - good)
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            try:
                os.ftruncate(fd, good)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        elif sync:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fdatasync(fd)  # what we are about to expose must be durable
            finally:
                os.close(fd)
        self._offsets = array("Q", offsets)
        self.count = len(offsets) - 1
        self.end = offsets[-1]

    # ------------------------------------------------------------------ index
    @property
    def offsets(self) -> array[int]:
        """The offset index, loaded from the sidecar (or rebuilt) on first use."""
        offs = self._offsets
        if offs is None:
            if not self._load_offsets((self.count, self.end) if self.shared else None):
                log.warning("%s: index sidecar unusable; rescanning", self.path)
                size = os.stat(self.path).st_size
                if self.limit is not None:
                    size = min(size, self.limit)
                self._recover(size)
                self.write_index()
                self.confirmed = min(self.confirmed, self.count)
            offs = self._offsets
            assert offs is not None
        return offs

    def add_record(self, length: int) -> int:
        """Index one more record of payload ``length``; returns its entry id."""
        eid = self.count
        self.end += record.HEADER_SIZE + length
        self.offsets.append(self.end)
        self.count = eid + 1
        return eid

    def truncate_index(self, count: int) -> None:
        """Forget entries ``count..`` (their append failed)."""
        offs = self.offsets
        del offs[count + 1 :]
        self.count = count
        self.end = offs[-1]
        self.confirmed = min(self.confirmed, count)

    def entry_span(self, entry_id: int) -> tuple[int, int]:
        """(payload start, payload end) offsets of an entry."""
        offs = self.offsets
        return offs[entry_id] + record.HEADER_SIZE, offs[entry_id + 1]

    def size_bytes(self) -> int:
        return self.end

    def write_index(self) -> None:
        """Write the sidecar index (no fsync: it is only a cache of the scan). Not once
        the ``guard`` refuses (a fenced writer's sidecar would be ignored anyway)."""
        if not self._allowed():
            return
        offs = self.offsets
        body = IDX_HEADER.pack(IDX_MAGIC, self.count, self.end) + offs[: self.count + 1].tobytes()
        tmp = self.idx_path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(body + struct.pack("<I", crc32c.crc32c(body)))
            os.replace(tmp, self.idx_path)
            self.index_written = True
        except OSError as exc:
            log.warning("%s: cannot write index: %s", self.idx_path, exc)

    # ------------------------------------------------------------------ I/O
    def open_fd(self) -> int:
        """The file's descriptor (opened if need be; `SegmentFileMissingError` when the
        file is not there)."""
        fd = self.fd
        if fd is None:
            try:
                fd = self.fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                raise self.missing_error() from None
        return fd

    def close_fd(self) -> None:
        with self.lock:
            fd, self.fd = self.fd, None
            if fd is not None:
                os.close(fd)

    @property
    def dirty(self) -> bool:
        return self.written > self.synced

    def write(self, bufs: list[bytes] | list[bytes | memoryview], offset: int) -> None:
        """pwritev ``bufs`` at ``offset`` (all of it, or OSError)."""
        fd = self.open_fd()
        total = sum(map(len, bufs))
        end = offset + total
        if end > self.allocated and end > _RESERVE_FROM and total < _RESERVE_WRITES_BELOW and _reserve_supported:
            self._reserve(fd, end)
        if len(bufs) > _IOV_MAX or total == 0:
            chunks = [bufs[i : i + _IOV_MAX] for i in range(0, len(bufs), _IOV_MAX)]
        else:
            chunks = [bufs]
        for chunk in chunks:
            want = sum(map(len, chunk))
            done = os.pwritev(fd, chunk, offset)
            if done < want:  # short write: finish it the slow way
                rest = b"".join(chunk)
                while done < want:
                    n = os.pwrite(fd, rest[done:], offset + done)
                    if n <= 0:
                        raise OSError(28, "short write")
                    done += n
            offset += want
            # as each chunk lands: a later chunk's failure must not let `cut_reserve`
            # cut bytes already written (a new owner may have read them)
            self.written = max(self.written, offset)

    def _reserve(self, fd: int, end: int) -> None:
        global _reserve_supported
        grow = min(max(end, _RESERVE_MIN), _RESERVE_MAX)
        start = max(self.allocated, self.written)
        try:
            os.posix_fallocate(fd, start, end + grow - start)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                _reserve_supported = False
                log.info("file system does not reserve space (%s); writing without", exc)
            else:  # e.g. ENOSPC: the write itself decides
                log.debug("%s: cannot reserve space: %s", self.path, exc)
            return
        self.allocated = end + grow

    def _allowed(self) -> bool:
        """Whether the ``guard`` (if any) lets this broker write the file now."""
        if self.guard is None:
            return True
        try:
            self.guard()
        except StorageError as exc:
            log.debug("%s: not written: %s", self.path, exc)
            return False
        return True

    def cut_reserve(self) -> None:
        """Give back the space reserved past the last record (on seal and close); never
        below what was written (a rolled-back append's bytes stay: in shared storage a
        new owner may have read them), and not once the ``guard`` refuses."""
        keep = max(self.end, self.written)
        if self.allocated > keep and not self.shared and self._allowed():
            try:
                os.truncate(self.path, keep)
            except OSError as exc:
                log.warning("%s: cannot give back reserved space: %s", self.path, exc)
                return
            self.allocated = 0

    def sync(self) -> float:
        """fdatasync (called from the flusher thread, or inline for ``always``/close);
        returns how long the fdatasync took (seconds; 0.0 when there was nothing to sync).
        Once a sync failed, every later call fails too: the kernel may have dropped the
        dirty pages, and a later successful fsync would not bring them back."""
        with self.lock:
            if self.sync_error is not None:
                raise self.sync_error
            target = self.written
            if target <= self.synced:
                return 0.0
            try:
                while self.dir_sync and not self.entry_with_file:
                    fsync_dir(self.dir_sync[0])
                    self.dir_sync.pop(0)
                if self.fd is None:
                    raise OSError(9, "segment closed with unsynced data")
                started = time.perf_counter()
                os.fdatasync(self.fd)
                elapsed = time.perf_counter() - started
                metrics.fsync_seconds.observe(elapsed)
            except OSError as exc:
                self.sync_error = exc
                raise
            self.dir_sync.clear()  # (with ``entry_with_file``, that fdatasync did it)
            if target > self.synced:
                self.synced = target
            return elapsed

    def pread(self, start: int, end: int) -> bytes:
        fd = self.open_fd()
        data = os.pread(fd, end - start, start)
        while len(data) < end - start:
            more = os.pread(fd, end - start - len(data), start + len(data))
            if not more:
                raise CorruptEntryError(f"{self.path}: short read at {start}")
            data += more
        return data

    def span(self, first: int, last: int) -> ColdSpan:
        """What a worker thread needs to read entries ``first..last`` (event loop thread)."""
        return ColdSpan(self.path, self.ledger_id, first, list(self.offsets[first : last + 2]))

    def read_records(self, first: int, last: int) -> list[bytes]:
        """Payloads of entries ``first..last`` (inclusive) in one pread, each checked
        against its header (`record.verify`)."""
        offs = self.offsets
        base = offs[first]
        buf = self.pread(base, offs[last + 1])
        mv = memoryview(buf)
        out = []
        unpack = record.HEADER.unpack_from
        hs = record.HEADER_SIZE
        verify = record.verify
        for eid in range(first, last + 1):
            start = offs[eid] - base
            end = offs[eid + 1] - base
            word, crc = unpack(mv, start)
            if not verify(word, crc, mv[start + hs : end]):
                raise CorruptEntryError(
                    f"{self.path}: entry {eid} fails its checksum", (self.ledger_id, eid)
                )
            out.append(buf[start + hs : end])
        return out

    def truncate_file(self) -> None:
        """Best effort: cut the file back to the indexed end (after failed appends)."""
        try:
            os.truncate(self.path, self.end)
            self.written = min(self.written, self.end)
            self.allocated = 0
        except OSError as exc:
            log.warning("%s: cannot truncate after a failed append: %s", self.path, exc)

    def remove_files(self) -> None:
        """Remove the sidecar, then the file (see `missing`)."""
        self.close_fd()
        for p in (self.idx_path, self.path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)

    def mtime(self) -> float:
        try:
            return os.stat(self.path).st_mtime
        except OSError:
            return time.time()

    def __repr__(self) -> str:
        return f"Segment({self.ledger_id}, count={self.count}, confirmed={self.confirmed})"


def _all_zero(path: str, start: int, end: int) -> bool:
    """True when bytes ``start..end`` of the file are all zero (reserved, never written)."""
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            chunk = f.read(min(left, 1 << 20))
            if not chunk or chunk.count(0) != len(chunk):
                return False
            left -= len(chunk)
    return True


def fsync_dir(path: str) -> None:
    """Make a directory's entries (files created, renamed or removed in it) durable."""
    clean_stop.fsync_dir(path)
