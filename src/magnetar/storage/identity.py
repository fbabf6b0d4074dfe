"""The identity of a shared data directory: a small JSON file, ``storage-identity.json``,
written once into the volume the brokers of a cluster share (and recorded in the cluster's
metadata store, `broker/cluster/storage_identity.py`), as BookKeeper's cookies and Kafka's
``meta.properties`` are. A broker whose directory lacks it, or holds another, is not on the
cluster's volume (a host restarted without its mount sees the empty directory under the
mount point) and must not serve from it.

Creating is exclusive: the file is written whole under a temporary name, fsynced, and
linked to its name (``link`` fails if it exists, on every POSIX file system the brokers
may share), so two brokers starting at once end up with the one identity that won.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
import uuid
from dataclasses import dataclass

__all__ = ["IDENTITY_FILE", "IdentityUnreadable", "StorageIdentity", "create_identity",
           "read_identity"]

IDENTITY_FILE = "storage-identity.json"


class IdentityUnreadable(Exception):
    """The identity file exists but holds no identity (truncated, not JSON)."""


@dataclass(frozen=True)
class StorageIdentity:
    """A shared volume's identity: a random id, the cluster it was made for, when."""

    id: str
    cluster: str
    created: float = 0.0

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "cluster": self.cluster, "created": self.created})

    @classmethod
    def from_json(cls, text: str | bytes) -> StorageIdentity:
        try:
            value = json.loads(text)
            return cls(str(value["id"]), str(value.get("cluster", "")),
                       float(value.get("created", 0.0)))
        except (ValueError, TypeError, KeyError) as exc:
            raise IdentityUnreadable(f"not a storage identity: {exc}") from None

    @classmethod
    def new(cls, cluster: str) -> StorageIdentity:
        return cls(str(uuid.uuid4()), cluster, round(time.time(), 3))


def identity_path(data_dir: str) -> str:
    return os.path.join(data_dir, IDENTITY_FILE)


def read_identity(data_dir: str) -> StorageIdentity | None:
    """The identity in ``data_dir``; None when it has none (no file, or no directory).
    OSError for another failure to read it (an I/O error, a mount not connected);
    `IdentityUnreadable` for a file that holds none."""
    try:
        with open(identity_path(data_dir), "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    return StorageIdentity.from_json(text)


def create_identity(data_dir: str, cluster: str) -> StorageIdentity:
    """Write a new identity into ``data_dir`` unless one is there already; the identity
    the directory holds afterwards (ours, or the one another broker wrote first)."""
    os.makedirs(data_dir, exist_ok=True)
    mine = StorageIdentity.new(cluster)
    tmp = os.path.join(data_dir, f".{IDENTITY_FILE}.{os.getpid()}.{mine.id[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, mine.to_json().encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, identity_path(data_dir))
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    dir_fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    found = read_identity(data_dir)
    if found is None:  # removed meanwhile: nothing sane to answer
        raise FileNotFoundError(errno.ENOENT, "storage identity vanished", identity_path(data_dir))
    return found
