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
SESSION_REESTABLISHED (a new one). Requests made while disconnected wait for the
connection, up to ``operation_timeout_s``; reads that lose their connection are retried.

The session by this process's own clock (Pulsar's session watcher): a heartbeat (an
``exists`` of the root, sent from a thread of its own so that a stalled event loop does
not pass for a silent server) goes out every ``heartbeat_s`` while connected, and every answered
request moves ``last_heard`` to the moment it was *sent* (the server heard us after that,
so it cannot expire the session before ``last_heard + session_timeout_s``). That moment
plus the session timeout is `lease_deadline`. Heard from for longer than
``silent_after_s``: the store is unavailable (`unavailable_reason`, one warning);
longer than the session timeout: the session is treated as lost (SESSION_LOST, as if
expired) even if the server has not said so yet (a paused process, a partition). With
``shutdown`` the store then closes; with ``reconnect`` it carries on: once ZooKeeper answers
again, in a new session or, if the old one survived, after deleting the ephemeral keys it
had created (so that both cases leave the same state: none), it tells
SESSION_REESTABLISHED. Ephemeral keys are never re-created by the store: their owners do
it (the broker registers again; bundles are taken again through compare-and-set).
One log line when the connection is lost or ZooKeeper falls silent, one when it is back.

Start-up: a server that cannot be reached is retried with back-off (0.5 s doubling to 5 s,
a warning naming the address each time) until ``connect_timeout_s``, then
`StoreUnavailableError` names the address.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
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
                 session_expired_policy: SessionExpiredPolicy = SessionExpiredPolicy.RECONNECT,
                 operation_timeout_s: float = 30.0,
                 connect_timeout_s: float = 30.0) -> None:
        super().__init__(session_expired_policy)
        self.url = str(url)
        self.hosts = ",".join(f"{h}:{p}" for h, p in url.hosts)
        self.root = url.chroot
        self.session_timeout_s = session_timeout_s
        self.operation_timeout_s = operation_timeout_s
        self.connect_timeout_s = connect_timeout_s
        # the heartbeat's period, and the silence after which the store is unavailable
        self.heartbeat_s = max(0.1, min(1.0, session_timeout_s / 8))
        self.silent_after_s = max(2 * self.heartbeat_s, min(3.0, session_timeout_s / 2))
        self._client: KazooClient | None = None
        self._connected = asyncio.Event()
        self._session_id: int | None = None
        self._expired = False  # the session is lost (expired, or by our clock)
        self._lost_at = 0.0  # monotonic: when it was
        self._ephemerals: dict[str, bytes] = {}
        self._last_heard = time.monotonic()
        self._down_since: float | None = None  # connection lost or ZooKeeper silent since
        # the heartbeat runs on a thread of its own (kazoo's callbacks answer it), so that
        # a stalled event loop cannot look like a silent ZooKeeper; the lease fields are
        # written under this lock from that thread and from the loop
        self._lease_lock = threading.Lock()
        self._beat_at: float | None = None  # the heartbeat in flight, sent then
        self._beating = threading.Event()  # set: the heartbeat thread ends
        self._watcher: asyncio.Task[None] | None = None
        self._reviving: asyncio.Task[None] | None = None

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
        self._heard(time.monotonic())
        self._connected.set()
        client.add_listener(self._on_state)
        self._watcher = loop.create_task(self._watch_session())
        threading.Thread(target=self._beat, name="magnetar-zk-heartbeat", daemon=True).start()
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
        self._beating.set()
        with self._lease_lock:
            self.lease_deadline = -math.inf
        for task in (self._watcher, self._reviving):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
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

    async def _call(self, start: Callable[[KazooClient], Any], *, retry: bool,
                    gated: bool = True) -> Any:
        """Run one kazoo async request; reads (``retry``) survive a dropped connection.
        ``gated=False``: do not wait for the store to be usable (the store's own
        requests while it re-establishes its session)."""
        deadline = time.monotonic() + self.operation_timeout_s
        while True:
            self._check_open()
            remaining = deadline - time.monotonic()
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result when
            # the awaited thing completes in the loop turn the caller is cancelled in, and
            # the cancellation is lost (a store closing wakes every waiter in the turn a
            # stopping broker cancels them: a cancelled task went on running)
            if gated and not self._connected.is_set():
                try:
                    async with asyncio.timeout(max(remaining, 0.001)):
                        await self._connected.wait()
                except TimeoutError:
                    raise StoreUnavailableError(
                        "metadata store unavailable: ZooKeeper at"
                        f" {self.hosts} not connected for {self._silence():.0f} s") from None
                self._check_open()
            client = self._client
            assert client is not None
            sent = time.monotonic()
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                    result = await self._bridge(start(client))
                self._heard(sent)
                return result
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
            except kz.KazooException:  # an answer (no node, bad version, ...): heard
                self._heard(sent)
                raise

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
            self._mark_down("lost the connection")
            self._tell(SessionEvent.CONNECTION_LOST)
        elif state == KazooState.LOST:
            self._ephemerals.clear()  # gone with the session
            self._lose_session("expired")
        elif state == KazooState.CONNECTED:
            if self._expired or (session is not None and session != self._session_id):
                self._lose_session("expired")  # (a new session without LOST before it)
                self._heard(time.monotonic())
                self._revive()
            else:
                self._heard(time.monotonic())
                self._connected.set()
                self._tell(SessionEvent.RECONNECTED)

    def _tell(self, event: SessionEvent) -> None:
        self._deliver_session(event)

    # -- the session by this process's clock ----------------------------------------------
    def _silence(self) -> float:
        return time.monotonic() - self._last_heard

    def _note_heard(self, sent: float) -> None:
        """ZooKeeper answered a request sent at ``sent`` (monotonic); any thread."""
        with self._lease_lock:
            if sent > self._last_heard:
                self._last_heard = sent
            if not self._expired:
                self.lease_deadline = self._last_heard + self.session_timeout_s

    def _heard(self, sent: float) -> None:
        """`_note_heard`, on the loop: and ZooKeeper is back if it was not."""
        self._note_heard(sent)
        client = self._client
        if not self._expired and client is not None and client.connected:
            self._mark_up("same session")

    def _beat(self) -> None:  # the heartbeat thread
        while not self._beating.wait(self.heartbeat_s):
            client = self._client
            if client is None or not client.connected or self._beat_at is not None:
                continue
            sent = self._beat_at = time.monotonic()
            session = client.client_id[0] if client.client_id else None
            try:
                ping = client.exists_async(self._zk("/"))
            except Exception:  # (kazoo refuses while it reconnects)
                self._beat_at = None
                continue
            ping.rawlink(partial(self._beat_done, sent, session))

    def _beat_done(self, sent: float, session: int | None, result: Any) -> None:  # kazoo's
        """A heartbeat answered. It extends the lease only if it went out in the session the
        loop knows: after a pause, kazoo may expire the old session and open a new one
        before the loop hears of either; an answer in that new session says nothing of the
        old one's bundles, and renewing the lease then would let a receipt for them out."""
        self._beat_at = None
        if result.successful() and session is not None and session == self._session_id:
            self._note_heard(sent)

    def _mark_down(self, why: str) -> None:
        if self._down_since is None:
            self._down_since = self._last_heard
            log.warning("ZooKeeper at %s: %s (last answer %.1f s ago); the metadata store is "
                        "unavailable until it is back", self.hosts, why, self._silence())

    def _mark_up(self, how: str) -> None:
        if self._down_since is not None:
            log.warning("ZooKeeper at %s is back, %.1f s after its last answer (%s)",
                        self.hosts, time.monotonic() - self._down_since, how)
            self._down_since = None

    def unavailable_reason(self) -> str | None:
        if self.closed:
            return f"metadata store unavailable: {self.url} is closed"
        if self._down_since is None and not self._expired:
            return None
        return (f"metadata store unavailable: ZooKeeper at {self.hosts} not connected for"
                f" {self._silence():.0f} s")

    def _lose_session(self, why: str) -> None:
        """The session is over (``why``: expired, or not heard from for its timeout)."""
        if self._expired:
            return  # said once
        with self._lease_lock:
            self._expired = True
            self.lease_deadline = -math.inf
        self._lost_at = time.monotonic()
        self._connected.clear()
        self._mark_down(why)
        log.error("ZooKeeper session 0x%x at %s %s (zookeeperSessionExpiredPolicy=%s)",
                  self._session_id or 0, self.hosts, why, self.session_expired_policy.value)
        self._tell(SessionEvent.SESSION_LOST)
        if self.session_expired_policy is SessionExpiredPolicy.SHUTDOWN and not self.closed:
            asyncio.get_running_loop().create_task(self.close())

    async def _watch_session(self) -> None:
        """The session's state by this process's clock, looked at every heartbeat."""
        while not self.closed:
            await asyncio.sleep(self.heartbeat_s)
            self._tick(time.monotonic())

    def _tick(self, now: float) -> None:
        client = self._client
        if client is None or self.closed:
            return
        silent = now - self._last_heard
        if silent > self.silent_after_s:
            self._mark_down(f"no answer for {silent:.1f} s")
        elif not self._expired and client.connected:
            self._mark_up("same session")
        if silent > self.session_timeout_s:
            self._lose_session(f"not heard from for {silent:.1f} s, past the session timeout"
                               f" ({self.session_timeout_s:g} s): treated as expired")
        elif self._expired and client.connected and self._last_heard > self._lost_at:
            self._revive()  # ZooKeeper answers again and kazoo kept the session

    def _revive(self) -> None:
        if self.session_expired_policy is SessionExpiredPolicy.SHUTDOWN or self.closed:
            return
        if self._reviving is None or self._reviving.done():
            self._reviving = asyncio.get_running_loop().create_task(self._reestablish())

    async def _reestablish(self) -> None:
        """After a lost session: end what is left of it, then tell SESSION_REESTABLISHED.
        kazoo opened a new session, or (lost by our clock only) kept the old one, whose
        ephemeral keys are deleted here so that either way none is left."""
        client = self._client
        if client is None:
            return
        session = client.client_id[0] if client.client_id else None
        same = session is not None and session == self._session_id
        if same:
            for path in list(self._ephemerals):
                try:
                    await self._call(partial(_delete, zk=self._zk(path)), retry=False,
                                     gated=False)
                except kz.NoNodeError:
                    pass
                except MetadataStoreError as exc:  # down again: the next answer retries
                    log.warning("ending the old session's key %s: %s", path, exc)
                    return
                self._ephemerals.pop(path, None)
                self._invalidate_own_write(path)
        self._ephemerals.clear()
        self._session_id = session
        self._mark_up(f"session 0x{session or 0:x}, "
                      + ("kept by the server, its ephemeral keys deleted" if same else "new"))
        with self._lease_lock:
            self._expired = False
        self._heard(time.monotonic())
        self._connected.set()
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


def _delete(client: KazooClient, *, zk: str) -> Any:
    return client.delete_async(zk)


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

