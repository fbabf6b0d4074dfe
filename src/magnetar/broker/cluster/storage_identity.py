"""The cluster's shared volume and the broker's data directory: the same one, or refuse.

The volume's identity (`magnetar.storage.identity`) is written into it once, by
``initialize-cluster-metadata --shared-data-dir`` or by the first shared-mode broker to
start, and recorded in the cluster's metadata store at `IDENTITY_PATH`. Each shared-mode
broker then checks at start (`verify_identity`) that its data directory holds that identity
and refuses to start otherwise, with a message naming the directory, the file system it is
on, the identity expected and the mount to check (a host restarted without its mount sees
the empty directory under the mount point: serving it would hide every topic on the volume
and write new ones beside it). While it runs, `IdentityWatch` reads the file again every few
seconds: the file gone or another one there (the mount gone or replaced) is reported once
through ``on_lost``, whose caller stops serving and gives up its bundles. An I/O error while
reading it (a network file system not answering) is not a loss: the storage's own errors
pause writes meanwhile; it is logged when it starts and when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Callable

from magnetar.metadata import BadVersionError, MetadataStore
from magnetar.storage import mounts
from magnetar.storage.episodes import Episode
from magnetar.storage.identity import (
    IDENTITY_FILE,
    IdentityUnreadable,
    StorageIdentity,
    create_identity,
    read_identity,
)

log = logging.getLogger(__name__)

__all__ = ["IDENTITY_PATH", "IdentityWatch", "StorageIdentityError", "claim_identity",
           "recorded_identity", "verify_identity"]

IDENTITY_PATH = "/magnetar/storage-identity"

#: errors that mean the file is not there (as opposed to a file system not answering)
_ABSENT = (errno.ENOENT, errno.ENOTDIR)


class StorageIdentityError(Exception):
    """The data directory is not the cluster's shared volume (the message says why)."""


async def recorded_identity(store: MetadataStore) -> StorageIdentity | None:
    """The identity recorded in the cluster's metadata store, None before the first."""
    got = await store.get(IDENTITY_PATH)
    return StorageIdentity.from_json(got[0]) if got is not None else None


async def claim_identity(store: MetadataStore, data_dir: str, cluster: str
                         ) -> tuple[StorageIdentity, bool]:
    """The cluster's identity, recorded from ``data_dir`` (written there if it has none)
    when the store holds none yet; whether this call recorded it."""
    recorded = await recorded_identity(store)
    if recorded is not None:
        return recorded, False
    found = await asyncio.to_thread(read_identity, data_dir)
    if found is None:
        found = await asyncio.to_thread(create_identity, data_dir, cluster)
    try:
        await store.put(IDENTITY_PATH, found.to_json().encode(), -1)
    except BadVersionError:  # another broker recorded one first
        recorded = await recorded_identity(store)
        assert recorded is not None
        return recorded, False
    return found, True


def describe_dir(data_dir: str) -> str:
    """The file system ``data_dir`` is on, in words."""
    mount, _ = mounts.check_data_dir(data_dir)
    return mounts.describe(mount) if mount is not None else "an unknown file system"


def refusal(data_dir: str, problem: str, expected: StorageIdentity, where: str) -> str:
    """The refusal: the directory, its file system, the identity expected, the mount."""
    return (f"refusing to serve from the shared data directory {data_dir}: {problem}\n"
            f"  it is on: {describe_dir(data_dir)}\n"
            f"  expected: storage identity {expected.id} (cluster {expected.cluster or '?'}, "
            f"in {data_dir}/{IDENTITY_FILE}, recorded at {where})\n"
            f"  check:    {mounts.mount_to_check(data_dir)}\n"
            "Serving another directory than the cluster's volume would hide its topics and "
            "write new ones beside them (docs/deploy.md, \"Storage identity\").")


def problem_with(data_dir: str, expected: StorageIdentity) -> str | None:
    """What is wrong with ``data_dir``'s identity (None: it is ``expected``). Blocking."""
    try:
        found = read_identity(data_dir)
    except IdentityUnreadable as exc:
        return f"its {IDENTITY_FILE} is damaged ({exc})"
    except OSError as exc:
        return f"its {IDENTITY_FILE} cannot be read ({exc.strerror or exc})"
    if found is None:
        return f"it holds no storage identity ({IDENTITY_FILE})"
    if found.id != expected.id:
        return f"it holds another storage identity, {found.id} (cluster {found.cluster or '?'})"
    return None


async def verify_identity(store: MetadataStore, data_dir: str, cluster: str,
                          store_url: str) -> StorageIdentity:
    """The cluster's identity, ``data_dir`` holding it (the first broker writes and records
    it); `StorageIdentityError` with the refusal otherwise."""
    try:
        expected, first = await claim_identity(store, data_dir, cluster)
    except (OSError, IdentityUnreadable) as exc:
        raise StorageIdentityError(
            f"cannot write or read the storage identity in the shared data directory "
            f"{data_dir} ({describe_dir(data_dir)}): {exc}") from None
    if first:
        log.info("shared data directory %s: storage identity %s written and recorded at "
                 "%s%s (the first broker of cluster %s)", data_dir, expected.id, store_url,
                 IDENTITY_PATH, cluster)
    problem = await asyncio.to_thread(problem_with, data_dir, expected)
    if problem is not None:
        raise StorageIdentityError(
            refusal(data_dir, problem, expected, f"{store_url}{IDENTITY_PATH}"))
    return expected


class IdentityWatch:
    """Reads ``data_dir``'s identity every ``interval_s`` seconds (on a thread, one read at
    a time: a hung file system holds up nothing); calls ``on_lost(reason)`` once when two
    reads in a row find the file gone or holding another identity."""

    def __init__(self, data_dir: str, expected: StorageIdentity, interval_s: float,
                 on_lost: Callable[[str], None]) -> None:
        self.data_dir = data_dir
        self.expected = expected
        self.interval_s = interval_s
        self.on_lost = on_lost
        self.lost: str | None = None
        self._task: asyncio.Task[None] | None = None
        self.unreadable = Episode(log, f"shared data directory {data_dir}: reading its "
                                       "storage identity")
        self._missed = 0  # consecutive reads that found the identity gone or another
        self._reading: asyncio.Future[str | None] | None = None

    def start(self) -> None:
        if self.interval_s > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def check(self) -> str | None:
        """One read (blocking): the loss, None when all is well or the read failed with
        an I/O error (logged when it starts and when it ends)."""
        try:
            found = read_identity(self.data_dir)
        except IdentityUnreadable as exc:
            return f"its {IDENTITY_FILE} is damaged ({exc})"
        except OSError as exc:
            if exc.errno in _ABSENT:
                found = None
            else:
                self.unreadable.failed(exc.strerror or exc)
                return None
        self.unreadable.succeeded()
        if found is None:
            return f"its {IDENTITY_FILE} is gone (the volume unmounted?)"
        if found.id != self.expected.id:
            return (f"it holds another storage identity, {found.id} (the volume replaced?)")
        return None

    async def _run(self) -> None:
        while self.lost is None:
            await asyncio.sleep(self.interval_s)
            if self._reading is None or self._reading.done():
                self._reading = asyncio.ensure_future(asyncio.to_thread(self.check))
            try:
                lost = await asyncio.wait_for(asyncio.shield(self._reading), self.interval_s * 5)
            except TimeoutError:
                continue  # still hung: asked again once it returns
            if lost is None:
                self._missed = 0
                continue
            self._missed += 1  # twice in a row: a network file system's passing glitch
            if self._missed >= 2:  # is no loss
                self.lost = lost
                self.on_lost(lost)
