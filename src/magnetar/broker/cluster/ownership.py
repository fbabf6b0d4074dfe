"""`OwnershipCache`: which bundles this broker owns, and who owns the others.

A bundle is owned through its ephemeral key ``/namespace/{tenant}/{ns}/{range}``: taking it
is a create-if-absent (`BadVersionError` means another broker was first), and the key
disappears with this broker's metadata session. Owned bundles are kept in memory, so the
hot-path question "is this topic mine?" costs no round trip; other brokers' keys are read
through a `MetadataCache`, kept until a notification says they changed.

Losing a bundle without releasing it (the key deleted under us, or the session lost) is
reported through ``on_lost`` so the broker stops serving its topics at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from magnetar.broker.cluster.bundles import BundleRange
from magnetar.broker.cluster.records import OwnerData, owner_path, parse_owner_path
from magnetar.metadata import (
    BadVersionError,
    MetadataCache,
    MetadataStore,
    NotFoundError,
    Notification,
    NotificationType,
    SessionEvent,
    json_decode,
    json_encode,
)

log = logging.getLogger(__name__)

#: Magnetar's own key: the cluster's ownership epoch, raised on every bundle takeover
EPOCH_PATH = "/magnetar/ownership-epoch"

Bundle = tuple[str, BundleRange]  # (tenant/namespace, range)


class OwnershipCache:
    """This broker's bundles (in memory) and the owners of the others (cached reads)."""

    def __init__(self, store: MetadataStore, me: OwnerData,
                 on_lost: Callable[[str, BundleRange], None] | None = None) -> None:
        self.store = store
        self.me = me
        self.on_lost = on_lost
        self.owned: dict[Bundle, OwnerData] = {}
        # raised on every lost session: an acquisition that spans one owns nothing
        self.generation = 0
        # each owned bundle's ownership epoch: raised cluster-wide on every takeover, it
        # fences the bundle's ledgers in shared storage (storage/fence.py)
        self.epochs: dict[Bundle, int] = {}
        self._owners: MetadataCache[Any] = MetadataCache(store)
        self._released: dict[str, list[asyncio.Future[None]]] = {}  # waiters by key
        store.register_listener(self._on_notification)
        store.register_session_listener(self._on_session)

    def is_owned(self, namespace: str, bundle: BundleRange) -> bool:
        return (namespace, bundle) in self.owned

    def is_serving(self, namespace: str, bundle: BundleRange) -> bool:
        """Owned and not being given up (`set_disabled`: an unload under way)."""
        mine = self.owned.get((namespace, bundle))
        return mine is not None and not mine.disabled

    async def owner_of(self, namespace: str, bundle: BundleRange) -> OwnerData | None:
        """The bundle's owner (this broker's own record when it is ours), None if free."""
        mine = self.owned.get((namespace, bundle))
        if mine is not None:
            return mine
        data = await self._owners.get(owner_path(namespace, bundle))
        return OwnerData.from_json(data) if isinstance(data, dict) else None

    async def try_acquire(self, namespace: str, bundle: BundleRange) -> OwnerData | None:
        """Take a free bundle. Returns its owner: ``self.me`` when we took it (or had it),
        another broker's record when it was first; None if the key vanished meanwhile."""
        key = (namespace, bundle)
        if key in self.owned:
            return self.owned[key]
        path = owner_path(namespace, bundle)
        generation = self.generation
        try:
            await self.store.put(path, json_encode(self.me.to_json()), -1, ephemeral=True)
        except BadVersionError:
            self._owners.invalidate(path)
            got = await self.store.get(path)
            if got is None:
                return None
            if got[1].created_by_self:  # ours already (a retry after a lost answer)
                epoch = await self._next_epoch()
                if self.generation != generation:
                    return None
                self.epochs[key] = epoch
                self.owned[key] = self.me
                return self.me
            return OwnerData.from_json(json_decode(got[0]) or {})
        epoch = await self._next_epoch()
        if self.generation != generation:
            # the session was lost meanwhile: the key went with it, or (a session the
            # server kept) is deleted here; nothing is owned, the caller looks again
            await self._drop_if_mine(path)
            return None
        self.epochs[key] = epoch
        self.owned[key] = self.me
        # a read sets the watch that tells us if the key is deleted under us
        await self.store.exists(path)
        log.debug("took ownership of bundle %s/%s", namespace, bundle)  # the caller logs why
        return self.me

    async def _drop_if_mine(self, path: str) -> None:
        with contextlib.suppress(Exception):  # best effort: it goes with the session anyway
            got = await self.store.get(path)
            if got is not None and got[1].created_by_self:
                await self.store.delete(path, got[1].version)

    async def _next_epoch(self) -> int:
        """Raise the cluster's ownership epoch (compare-and-set) and return it."""
        for _ in range(100):
            got = await self.store.get(EPOCH_PATH)
            value = json_decode(got[0]) if got is not None else None
            epoch = (value if isinstance(value, int) else 0) + 1
            try:
                await self.store.put(EPOCH_PATH, json_encode(epoch),
                                     -1 if got is None else got[1].version)
            except BadVersionError:
                continue
            return epoch
        raise BadVersionError(EPOCH_PATH, -2)

    async def set_disabled(self, namespace: str, bundle: BundleRange) -> None:
        """Mark an owned bundle as being unloaded (lookups stop sending clients here)."""
        key = (namespace, bundle)
        if key in self.owned:
            disabled = dataclasses.replace(self.me, disabled=True)
            self.owned[key] = disabled
            await self.store.put(owner_path(namespace, bundle),
                                 json_encode(disabled.to_json()))

    async def wait_free(self, namespace: str, bundle: BundleRange, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until the bundle's ownership key is gone;
        whether it is."""
        path = owner_path(namespace, bundle)
        waiter = asyncio.get_running_loop().create_future()
        self._released.setdefault(path, []).append(waiter)
        try:
            if not await self.store.exists(path):  # the read also sets the watch
                return True
            # asyncio.timeout, not wait_for: 3.11's wait_for can lose a cancellation that
            # arrives in the turn the wait ends (a lookup whose client went)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await asyncio.shield(waiter)
            return waiter.done()
        finally:
            waiters = self._released.get(path, [])
            if waiter in waiters:
                waiters.remove(waiter)

    async def release(self, namespace: str, bundle: BundleRange) -> None:
        """Give an owned bundle up (its key deleted: the bundle is free)."""
        if self.owned.pop((namespace, bundle), None) is None:
            return
        self.epochs.pop((namespace, bundle), None)
        with contextlib.suppress(NotFoundError):
            await self.store.delete(owner_path(namespace, bundle))
        log.info("released bundle %s/%s", namespace, bundle)

    async def release_all(self) -> None:
        for namespace, bundle in list(self.owned):
            await self.release(namespace, bundle)

    # -- losing bundles without releasing them -------------------------------------------
    def _lost(self, namespace: str, bundle: BundleRange) -> None:
        self.epochs.pop((namespace, bundle), None)
        if self.owned.pop((namespace, bundle), None) is None:
            return
        log.warning("lost ownership of bundle %s/%s", namespace, bundle)
        if self.on_lost is not None:
            self.on_lost(namespace, bundle)

    def _on_notification(self, note: Notification) -> None:
        parsed = parse_owner_path(note.path)
        if parsed is None:
            return
        self._owners.invalidate(note.path)
        if note.type == NotificationType.DELETED:
            for waiter in self._released.pop(note.path, []):
                if not waiter.done():
                    waiter.set_result(None)
            self._lost(*parsed)

    def _on_session(self, event: SessionEvent) -> None:
        if event == SessionEvent.SESSION_LOST:  # every ephemeral key of ours is gone
            self.generation += 1
            for namespace, bundle in list(self.owned):
                self._lost(namespace, bundle)

