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
"""

from __future__ import annotations

import fcntl
import os
import uuid

from .errors import StorageError

FENCE_FILE = "fence"
LOCK_FILE = "fence.lock"


class FencedError(StorageError):
    """A newer owner holds the ledger: this broker may not write it."""


def _epoch_of(path: str) -> int | None:
    """The epoch a fence file names (None: no fence; -1: unreadable)."""
    try:
        with open(path, "rb") as f:
            return int(f.read(64).split()[0])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, IndexError):
        return -1


class Fence:
    """The fence this process wrote for one ledger directory."""

    def __init__(self, directory: str, ino: int, mtime_ns: int) -> None:
        self.path = os.path.join(directory, FENCE_FILE)
        self._id = (ino, mtime_ns)

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
        return Fence(directory, st.st_ino, st.st_mtime_ns)

    def holds(self) -> bool:
        """Whether no other writer fenced the ledger since (one ``stat``)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_ino, st.st_mtime_ns) == self._id
