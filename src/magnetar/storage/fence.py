"""`Fence`: one writer per ledger when brokers share a data directory.

A broker that opens a ledger in shared storage first *fences* it with its ownership epoch
(a number the cluster raises on every takeover): holding ``fence.lock``, it reads the
current ``fence`` file and refuses to open (`FencedError`) if that names a higher epoch;
otherwise it writes a new one (a temporary file, fsynced, renamed over the old one, the
directory fsynced) and remembers which file it wrote (inode and modification time). Only
then does it scan the segments. So a stale owner can never fence out the new one, even
by reopening the ledger. The previous writer, if it is still running (a broker paused
past its metadata session and resumed), finds the fence replaced:

- before writing a batch (a cheap early stop: nothing written at all), and
- after the batch's fdatasync and before confirming it (the check that makes it safe).

Why the second check suffices: a batch confirmed by the old writer had its sync finish
before that check, which saw the old fence, so before the new writer's rename, so before
the new writer's scan: the scan sees the batch and keeps it. A batch whose check sees the
new fence is failed, never confirmed. Bytes a stale writer might still append past the
scanned end are never read: the new writer starts its own segments and keeps the old
ones at their scanned length. (docs/cluster.md, "Failover and fencing".)

What a stale writer may still do after the check (a write under way when the fence
moved) is kept out of every reader's sight by `takeover.py`: segment files carry the
epoch of the writer that made them, and the new owner records where each older segment
ends. A fence that cannot be read (``ENOTCONN``, ``EIO``, ``ESTALE``: the storage, not
another broker) is a `FenceUnknownError`, never "fenced".
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import uuid

from .errors import StorageError

FENCE_FILE = "fence"
LOCK_FILE = "fence.lock"

log = logging.getLogger(__name__)

#: ``stat`` errors that say the fence file is gone (the ledger directory was removed, or
#: a new fence replaced the one this handle named): the fence moved. Any other error is
#: the storage failing, and says nothing about who owns the ledger.
_GONE = (errno.ENOENT, errno.ENOTDIR)


class FencedError(StorageError):
    """A newer owner holds the ledger: this broker may not write it."""


class FenceUnknownError(StorageError):
    """The fence could not be read (a storage error: ``ENOTCONN``, ``EIO``, ``ESTALE``,
    ...): whether this broker still holds the ledger is unknown, so it writes nothing,
    but nobody took the ledger over as far as it can tell."""


def _epoch_of(path: str) -> int | None:
    """The epoch a fence file names (None: no fence; -1: a file that names none). A fence
    that cannot be read is a `FenceUnknownError`: taking the ledger then could fence out
    a newer owner whose fence this broker could not see."""
    try:
        with open(path, "rb") as f:
            raw = f.read(64)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FenceUnknownError(f"cannot read the fence {path}: storage error: "
                                f"{os.strerror(exc.errno or 0) or exc}") from exc
    try:
        return int(raw.split()[0])
    except (ValueError, IndexError):
        return -1


class Fence:
    """The fence this process wrote for one ledger directory."""

    def __init__(self, directory: str, ino: int, mtime_ns: int, epoch: int = 0) -> None:
        self.path = os.path.join(directory, FENCE_FILE)
        self._id = (ino, mtime_ns)
        #: The ownership epoch this fence was written with (names the files it makes).
        self.epoch = epoch

    @staticmethod
    def take(directory: str, epoch: int) -> Fence:
        """Fence the ledger in ``directory`` with ``epoch`` (blocking: file work);
        `FencedError` if a higher epoch fenced it already."""
        lock = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # read, compare and replace as one step
            current = _epoch_of(os.path.join(directory, FENCE_FILE))
            if current is not None and current > epoch:
                raise FencedError(f"ledger in {directory} is fenced by a newer owner "
                                  f"(epoch {current} > {epoch})")
            fence = Fence._write(directory, epoch)
        finally:
            os.close(lock)  # releases the lock
        return fence

    @staticmethod
    def _write(directory: str, epoch: int) -> Fence:
        tmp = os.path.join(directory, f".{FENCE_FILE}.{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, f"{epoch} {os.getpid()} {uuid.uuid4().hex}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(directory, FENCE_FILE))
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        st = os.stat(os.path.join(directory, FENCE_FILE))
        return Fence(directory, st.st_ino, st.st_mtime_ns, epoch)

    def holds(self) -> bool:
        """Whether no other writer fenced the ledger since (one ``stat``). Raises
        `FenceUnknownError` when the fence cannot be read for another reason than its
        being gone: a storage error is not a takeover."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            if exc.errno in _GONE:
                return False
            raise FenceUnknownError(f"cannot read the fence {self.path}: storage error: "
                                    f"{os.strerror(exc.errno or 0) or exc}") from exc
        return (st.st_ino, st.st_mtime_ns) == self._id

    def check(self) -> None:
        """`holds`, raising: `FencedError` if the fence moved, `FenceUnknownError` if it
        cannot be read. The ``guard`` of the segments this writer makes."""
        if not self.holds():
            raise FencedError(f"fenced: another broker took the ledger in "
                              f"{os.path.dirname(self.path)} over (epoch {self.epoch} is stale)")

    def allows(self) -> bool:
        """`holds`, for best-effort file work (sealing, sidecars, trimming): False when
        the fence moved *or* cannot be read (then nothing is written; logged once)."""
        try:
            return self.holds()
        except FenceUnknownError as exc:
            log.warning("%s", exc)
            return False
