"""`ZKMetadataStore`: the `MetadataStore` contract on Apache ZooKeeper, through kazoo.

kazoo runs its own threads (connection, callbacks); everything it reports is handed to the
store's event loop with ``call_soon_threadsafe``: request results (its async API's
``rawlink`` callbacks resolve asyncio futures), watch events and connection states. Nothing
of the store's own state is touched off the loop.

Paths are prefixed with the URL's chroot by this class (the chroot node is created on
start when missing). Watches are ZooKeeper's one-shot ones, set by every ``get``,
``exists`` and ``get_children`` through a single watcher (a ``get`` of a missing key sets
an ``exists`` watch so that its creation is notified); kazoo forgets them when a connection
drops, which is why RECONNECTED clears the caches.

Connection states map to `SessionEvent`: kazoo's SUSPENDED is CONNECTION_LOST, LOST (the
session expired) is SESSION_LOST, CONNECTED after that is RECONNECTED (same session) or
SESSION_REESTABLISHED (a new one: with the ``reconnect`` policy the ephemeral keys this
store created are created again first; one another session took meanwhile is dropped,
with a warning). Requests made while disconnected wait for the connection, up to
``operation_timeout_s``; reads that lose their connection are retried.

Start-up: a server that cannot be reached is retried with back-off (0.5 s doubling to 5 s,
a warning naming the address each time) until ``connect_timeout_s``, then
`StoreUnavailableError` names the address.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry

from .api import (
    MetadataStore,
    Notification,
    NotificationType,
    SessionEvent,
    SessionExpiredPolicy,
    Stat,
)
from .errors import (
    BadVersionError,
    MetadataStoreError,
    NotEmptyError,
    NotFoundError,
    StoreUnavailableError,
)
from .paths import check_path
from .url import StoreUrl

log = logging.getLogger(__name__)
#: kazoo's own log: it warns on every failed connection attempt, this module says it once
kazoo_log = logging.getLogger("magnetar.metadata.kazoo")
kazoo_log.setLevel(logging.ERROR)

_LOST = (kz.ConnectionLoss, kz.SessionExpiredError)
_EVENT_TYPES = {
    EventType.CREATED: NotificationType.CREATED,
    EventType.DELETED: NotificationType.DELETED,
    EventType.CHANGED: NotificationType.MODIFIED,
    EventType.CHILD: NotificationType.CHILDREN_CHANGED,
}


class ZKMetadataStore(MetadataStore):
    """ZooKeeper-backed metadata store (see the module docstring)."""

    def __init__(self, url: StoreUrl, *,
                 session_timeout_s: float = 30.0,
                 session_expired_policy: SessionExpiredPolicy = SessionExpiredPolicy.SHUTDOWN,
                 operation_timeout_s: float = 30.0,
                 connect_timeout_s: float = 30.0) -> None:
        super().__init__(session_expired_policy)
        self.url = str(url)
        self.hosts = ",".join(f"{h}:{p}" for h, p in url.hosts)
        self.root = url.chroot
        self.session_timeout_s = session_timeout_s
        self.operation_timeout_s = operation_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._client: KazooClient | None = None
        self._connected = asyncio.Event()
        self._session_id: int | None = None
        self._expired = False
        self._ephemerals: dict[str, bytes] = {}

    # -- lifecycle ------------------------------------------------------------------------
    def _make_client(self) -> KazooClient:
        return KazooClient(
            hosts=self.hosts,
            timeout=self.session_timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0),
            command_retry=None,
            logger=kazoo_log,
        )

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + self.connect_timeout_s
        delay, attempt = 0.5, 0
        window = min(2.0, max(0.5, self.connect_timeout_s / 4))  # one attempt's wait
        while True:
            attempt += 1
            client = self._make_client()
            remaining = deadline - time.monotonic()
            try:
                await loop.run_in_executor(None, client.start, min(window, max(remaining, 0.1)))
                break
            except (client.handler.timeout_exception, kz.KazooException, OSError) as exc:
                _discard(client)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StoreUnavailableError(
                        f"cannot reach ZooKeeper at {self.hosts} ({self.url}): no connection"
                        f" after {attempt} attempt{'s' if attempt > 1 else ''} over"
                        f" {self.connect_timeout_s:g} s"
                        f" ({type(exc).__name__})") from None
                log.warning("ZooKeeper at %s unreachable (attempt %d); retrying in %.1f s",
                            self.hosts, attempt, min(delay, remaining))
                await asyncio.sleep(min(delay, remaining))
                delay = min(delay * 2, 5.0)
        self._client = client
        self._session_id = client.client_id[0] if client.client_id else None
        self._connected.set()
        client.add_listener(self._on_state)
        if self.root:
            try:
                await self._call(lambda c: c.ensure_path_async(self.root), retry=True)
            except MetadataStoreError:
                await self.close()
                raise
        log.info("metadata store connected to ZooKeeper at %s (session 0x%x)",
                 self.url, self._session_id or 0)

    async def close(self) -> None:
        if self.closed:
            return
        await super().close()
        client, self._client = self._client, None
        self._connected.set()  # wake waiters: they see `closed`
        if client is not None:
            await asyncio.get_running_loop().run_in_executor(None, _discard, client)

    @property
    def session(self) -> tuple[int, bytes] | None:
        """This store's ZooKeeper session (id, password), None before it connected."""
        client = self._client
        return None if client is None or not client.client_id else tuple(client.client_id)

    # -- kazoo -> asyncio -----------------------------------------------------------------
    def _zk(self, path: str) -> str:
        return self.root + path if path != "/" else (self.root or "/")

    def _unzk(self, zk_path: str) -> str | None:
        if not self.root:
            return zk_path
        if zk_path == self.root:
            return "/"
        if zk_path.startswith(self.root + "/"):
            return zk_path[len(self.root):]
        return None

    async def _call(self, start: Callable[[KazooClient], Any], *, retry: bool) -> Any:
        """Run one kazoo async request; reads (``retry``) survive a dropped connection."""
        deadline = time.monotonic() + self.operation_timeout_s
        while True:
            self._check_open()
            remaining = deadline - time.monotonic()
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result when
            # the awaited thing completes in the loop turn the caller is cancelled in, and
            # the cancellation is lost (a store closing wakes every waiter in the turn a
            # stopping broker cancels them: a cancelled task went on running)
            if not self._connected.is_set():
                try:
                    async with asyncio.timeout(max(remaining, 0.001)):
                        await self._connected.wait()
                except TimeoutError:
                    raise StoreUnavailableError(
                        f"ZooKeeper at {self.hosts} not connected for"
                        f" {self.operation_timeout_s:g} s") from None
                self._check_open()
            client = self._client
            assert client is not None
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                    return await self._bridge(start(client))
            except TimeoutError:
                raise StoreUnavailableError(
                    f"ZooKeeper at {self.hosts}: no answer in"
                    f" {self.operation_timeout_s:g} s") from None
            except kz.ConnectionClosedError:
                self._check_open()
                raise StoreUnavailableError(f"ZooKeeper at {self.hosts}: connection closed")\
                    from None
            except _LOST as exc:
                if not retry or time.monotonic() >= deadline:
                    raise StoreUnavailableError(
                        f"ZooKeeper at {self.hosts}: {type(exc).__name__}") from None
                await asyncio.sleep(0.05)

    def _bridge(self, result: Any) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()

        def done(res: Any) -> None:  # a kazoo thread
            try:
                value = res.get_nowait()
            except BaseException as exc:
                loop.call_soon_threadsafe(_settle, fut, None, exc)
            else:
                loop.call_soon_threadsafe(_settle, fut, value, None)

        result.rawlink(done)
        return fut

    def _watch(self, event: WatchedEvent) -> None:  # a kazoo thread
        kind = _EVENT_TYPES.get(event.type)
        loop = self._loop
        if kind is None or event.path is None or loop is None or loop.is_closed():
            return
        path = self._unzk(event.path)
        if path is not None:
            loop.call_soon_threadsafe(self._on_watch, Notification(kind, path))

    def _on_watch(self, note: Notification) -> None:
        if self.closed:
            return
        if note.type is NotificationType.DELETED:
            self._ephemerals.pop(note.path, None)
        self._deliver(note)

    def _on_state(self, state: str) -> None:  # a kazoo thread
        loop = self._loop
        client = self._client
        if loop is None or loop.is_closed() or client is None:
            return
        session = client.client_id[0] if client.client_id else None
        loop.call_soon_threadsafe(self._state_changed, state, session)

    def _state_changed(self, state: str, session: int | None) -> None:
        if self.closed:
            return
        if state == KazooState.SUSPENDED:
            self._connected.clear()
            log.warning("lost the connection to ZooKeeper at %s; reconnecting", self.hosts)
            self._tell(SessionEvent.CONNECTION_LOST)
        elif state == KazooState.LOST:
            self._connected.clear()
            self._expired = True
            log.error("ZooKeeper session 0x%x at %s expired (zookeeperSessionExpiredPolicy=%s)",
                      self._session_id or 0, self.hosts, self.session_expired_policy.value)
            self._tell(SessionEvent.SESSION_LOST)
            if self.session_expired_policy is SessionExpiredPolicy.SHUTDOWN:
                asyncio.get_running_loop().create_task(self.close())
        elif state == KazooState.CONNECTED:
            if self._expired or (session is not None and session != self._session_id):
                self._expired = False
                self._session_id = session
                asyncio.get_running_loop().create_task(self._reestablish())
            else:
                self._connected.set()
                log.info("reconnected to ZooKeeper at %s (same session)", self.hosts)
                self._tell(SessionEvent.RECONNECTED)

    def _tell(self, event: SessionEvent) -> None:
        self._deliver_session(event)

    async def _reestablish(self) -> None:
        """A new session: create this store's ephemeral keys again, then tell."""
        self._connected.set()
        log.warning("new ZooKeeper session 0x%x at %s; re-creating %d ephemeral keys",
                    self._session_id or 0, self.hosts, len(self._ephemerals))
        for path, value in list(self._ephemerals.items()):
            zk = self._zk(path)
            try:
                await self._call(partial(_create_ephemeral, zk=zk, value=value), retry=False)
            except kz.NodeExistsError:
                log.warning("ephemeral key %s was taken by another session meanwhile", path)
                self._ephemerals.pop(path, None)
            except MetadataStoreError as exc:
                log.warning("could not re-create ephemeral key %s: %s", path, exc)
        if not self.closed:
            self._tell(SessionEvent.SESSION_REESTABLISHED)

    # -- the contract ---------------------------------------------------------------------
    def _stat(self, path: str, stat: ZnodeStat) -> Stat:
        owner = stat.ephemeralOwner
        return Stat(path, stat.version, stat.ctime, stat.mtime, owner != 0,
                    owner != 0 and owner == self._session_id)

    async def get(self, path: str) -> tuple[bytes, Stat] | None:
        check_path(path)
        zk = self._zk(path)
        while True:
            try:
                data, stat = await self._call(lambda c: c.get_async(zk, self._watch), retry=True)
                return bytes(data or b""), self._stat(path, stat)
            except kz.NoNodeError:
                # arm a watch for its creation; if it appeared meanwhile, read it again
                if await self._call(lambda c: c.exists_async(zk, self._watch),
                                    retry=True) is None:
                    return None

    async def exists(self, path: str) -> bool:
        check_path(path)
        zk = self._zk(path)
        return await self._call(lambda c: c.exists_async(zk, self._watch), retry=True) \
            is not None

    async def get_children(self, path: str) -> list[str]:
        check_path(path)
        zk = self._zk(path)
        try:
            names = await self._call(lambda c: c.get_children_async(zk, self._watch),
                                     retry=True)
        except kz.NoNodeError:
            await self._call(lambda c: c.exists_async(zk, self._watch), retry=True)
            return []
        return sorted(names)

    async def put(self, path: str, value: bytes, expected_version: int | None = None,
                  *, ephemeral: bool = False) -> Stat:
        check_path(path)
        if path == "/":
            raise MetadataStoreError("cannot write the root path")
        value = bytes(value)
        zk = self._zk(path)

        async def create() -> Stat:
            _, stat = await self._call(lambda c: c.create_async(
                zk, value, ephemeral=ephemeral, makepath=True, include_data=True), retry=False)
            if ephemeral:
                self._ephemerals[path] = value
            return self._stat(path, stat)

        async def update(version: int) -> Stat:
            stat = await self._call(lambda c: c.set_async(zk, value, version), retry=False)
            if path in self._ephemerals:
                self._ephemerals[path] = value
            return self._stat(path, stat)

        try:
            if expected_version == -1:
                try:
                    return await create()
                except kz.NodeExistsError:
                    raise BadVersionError(path, -1) from None
            if expected_version is not None:
                try:
                    return await update(expected_version)
                except (kz.BadVersionError, kz.NoNodeError):
                    raise BadVersionError(path, expected_version) from None
            while True:  # unconditional: set, or create if missing (racing a delete/create)
                try:
                    return await update(-1)
                except kz.NoNodeError:
                    pass
                try:
                    return await create()
                except kz.NodeExistsError:
                    pass
        finally:
            self._invalidate_own_write(path)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        check_path(path)
        zk = self._zk(path)
        version = -1 if expected_version is None else expected_version
        try:
            await self._call(lambda c: c.delete_async(zk, version), retry=False)
        except kz.NoNodeError:
            raise NotFoundError(path) from None
        except kz.BadVersionError:
            raise BadVersionError(path, version) from None
        except kz.NotEmptyError:
            raise NotEmptyError(path) from None
        finally:
            self._invalidate_own_write(path)
        self._ephemerals.pop(path, None)


def _create_ephemeral(client: KazooClient, *, zk: str, value: bytes) -> Any:
    return client.create_async(zk, value, ephemeral=True, makepath=True)


def _settle(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


def _discard(client: KazooClient) -> None:
    """Stop and close a kazoo client, whatever state it is in."""
    try:
        client.stop()
    except Exception:
        log.debug("kazoo stop failed", exc_info=True)
    try:
        client.close()
    except Exception:
        log.debug("kazoo close failed", exc_info=True)

