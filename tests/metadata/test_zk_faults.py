"""ZooKeeper faults, with a real server that the tests stop, restart and expire sessions on:
unreachable at start (a clear error naming the address after retries with back-off; a
server that comes up during the retries is used), a restart while connected (nothing lost,
ephemeral keys kept, listeners told, notifications flow again), an expired session (the
``reconnect`` policy opens a new one without the old ephemeral keys; ``shutdown`` closes
the store), a frozen server (SIGSTOP) past the session timeout: the session is lost by
the store's own clock before the server can say so, requests are refused at once with the
reason meanwhile, and a new session follows the server's return."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from magnetar.metadata import (
    MetadataCache,
    MetadataStore,
    NotificationType,
    SessionEvent,
    StoreClosedError,
    StoreUnavailableError,
    create_metadata_store,
)
from magnetar.metadata.zk import ZKMetadataStore
from tests.zkserver import Gate, ZooKeeperServer, free_port, zk_missing_reason

from .test_contract import Recorder

pytestmark = pytest.mark.skipif(zk_missing_reason() is not None,
                                reason=zk_missing_reason() or "")


@pytest.fixture
def own_zk(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this test alone (the test stops and restarts it)."""
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    yield server
    server.stop()


class Sessions:
    def __init__(self, store: MetadataStore) -> None:
        self.events: list[SessionEvent] = []
        self.changed = asyncio.Event()
        store.register_session_listener(self.on)

    def on(self, event: SessionEvent) -> None:
        self.events.append(event)
        self.changed.set()

    async def wait_for(self, event: SessionEvent, timeout: float = 30.0) -> None:
        async def until() -> None:
            while event not in self.events:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(until(), timeout)


def test_unreachable_at_start_is_a_clear_error(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()

    async def main() -> None:
        with pytest.raises(StoreUnavailableError) as err:
            await create_metadata_store(f"zk:127.0.0.1:{port}", connect_timeout_s=2.5)
        assert f"127.0.0.1:{port}" in str(err.value)
        assert err.value.__cause__ is None and err.value.__suppress_context__

    with caplog.at_level(logging.WARNING, logger="magnetar.metadata"):
        asyncio.run(main())
    retries = [r for r in caplog.records if "unreachable (attempt" in r.getMessage()]
    assert len(retries) >= 1
    assert all(f"127.0.0.1:{port}" in r.getMessage() and not r.exc_info for r in retries)


def test_server_coming_up_during_the_retries_is_used(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = ZooKeeperServer(tmp_path / "zk")

    async def main() -> None:
        connecting = asyncio.ensure_future(
            create_metadata_store(server.url(), connect_timeout_s=60))
        while not any("unreachable (attempt" in r.getMessage() for r in caplog.records):
            assert not connecting.done()
            await asyncio.sleep(0.05)
        await asyncio.get_running_loop().run_in_executor(None, server.start)
        store = await connecting
        await store.put("/up", b"yes")
        assert (await store.get("/up"))[0] == b"yes"  # type: ignore[index]
        await store.close()

    try:
        with caplog.at_level(logging.WARNING, logger="magnetar.metadata"):
            asyncio.run(asyncio.wait_for(main(), 90))
    finally:
        server.stop()


@pytest.mark.timeout(320)
def test_restart_while_connected_loses_nothing(own_zk: ZooKeeperServer) -> None:
    async def main() -> None:
        # a session outlives a restart shorter than its timeout (30 s: a busy machine's JVM
        # start-up included). The stores reach the server through a gate shut while the
        # server restarts: an attempt that reached a server still starting would wait a
        # whole session timeout for its answer (kazoo's) and might find the session
        # expired on the restarted server (zkserver.Gate)
        options: dict[str, Any] = {"session_timeout_s": 30.0, "operation_timeout_s": 120.0}
        store = await create_metadata_store(gate.url("/c"), **options)
        other = await create_metadata_store(gate.url("/c"), **options)
        sessions = Sessions(store)
        await store.put("/admin/policies/acme", b'{"a": 1}')
        await store.put("/brokers/b1", b"b1", ephemeral=True)
        cache: MetadataCache[dict[str, int]] = MetadataCache(store)
        assert await cache.get("/admin/policies/acme") == {"a": 1}

        loop = asyncio.get_running_loop()
        gate.shut()
        await loop.run_in_executor(None, own_zk.stop)
        await sessions.wait_for(SessionEvent.CONNECTION_LOST)
        await loop.run_in_executor(None, own_zk.start)
        gate.reopen()
        await sessions.wait_for(SessionEvent.RECONNECTED, timeout=120)
        assert SessionEvent.SESSION_LOST not in sessions.events

        assert (await store.get("/admin/policies/acme"))[0] == b'{"a": 1}'  # type: ignore[index]
        got = await store.get("/brokers/b1")
        assert got is not None and got[1].ephemeral and got[1].created_by_self
        # caches were cleared (changes could have been missed), and watches work again
        rec = Recorder(store)
        assert await cache.get("/admin/policies/acme") == {"a": 1}
        await other.put("/admin/policies/acme", b'{"a": 2}')
        await rec.wait_for(NotificationType.MODIFIED, "/admin/policies/acme", timeout=120)
        assert await cache.get("/admin/policies/acme") == {"a": 2}
        await store.close()
        await other.close()

    gate = Gate(own_zk.port)
    try:
        asyncio.run(asyncio.wait_for(main(), 300))
    finally:
        gate.close()


def _expire(server: ZooKeeperServer, store: ZKMetadataStore) -> None:
    """Expire ``store``'s session the way ZooKeeper's own tests do: open the same session
    from a second client and close it there."""
    session = store.session
    assert session is not None
    thief = KazooClient(hosts=server.address, client_id=session, timeout=4.0)
    thief.start(timeout=15)
    thief.stop()
    thief.close()


def test_expired_session_with_reconnect_policy_opens_a_new_one(
        zookeeper: ZooKeeperServer) -> None:
    """``reconnect`` (the default): a new session, holding none of the old one's ephemeral
    keys (their owners create again the ones they want: the broker's registry entry; a
    bundle is taken again through compare-and-set, never re-created by the store)."""
    async def main() -> None:
        url = zookeeper.url("/expire-reconnect")
        store = await create_metadata_store(url, session_timeout_s=4.0)
        observer = await create_metadata_store(url, session_timeout_s=4.0)
        assert isinstance(store, ZKMetadataStore)
        assert store.session_expired_policy.value == "reconnect"  # Magnetar's default
        sessions = Sessions(store)
        await store.put("/brokers/b1", b"owner-1", ephemeral=True)
        await store.put("/kept", b"persistent")
        rec = Recorder(observer)
        assert await observer.get("/brokers/b1") is not None
        before = store.session

        await asyncio.get_running_loop().run_in_executor(None, _expire, zookeeper, store)
        await rec.wait_for(NotificationType.DELETED, "/brokers/b1")
        await sessions.wait_for(SessionEvent.SESSION_LOST)
        await sessions.wait_for(SessionEvent.SESSION_REESTABLISHED)
        assert store.session != before and not store.closed
        assert await observer.get("/brokers/b1") is None
        assert (await store.get("/kept"))[0] == b"persistent"  # type: ignore[index]
        assert store.unavailable_reason() is None
        await store.put("/brokers/b1", b"owner-1", ephemeral=True)
        assert (await store.get("/brokers/b1"))[1].created_by_self  # type: ignore[index]
        await store.close()
        await observer.close()

    asyncio.run(asyncio.wait_for(main(), 120))


def test_expired_session_with_shutdown_policy_closes_the_store(
        zookeeper: ZooKeeperServer) -> None:
    async def main() -> None:
        store = await create_metadata_store(zookeeper.url("/expire-shutdown"),
                                            session_timeout_s=4.0,
                                            session_expired_policy="shutdown")
        assert isinstance(store, ZKMetadataStore)
        sessions = Sessions(store)
        await store.put("/brokers/b1", b"x", ephemeral=True)
        await asyncio.get_running_loop().run_in_executor(None, _expire, zookeeper, store)
        await sessions.wait_for(SessionEvent.SESSION_LOST)
        while not store.closed:
            await asyncio.sleep(0.02)
        with pytest.raises(StoreClosedError):
            await store.get("/brokers/b1")
        assert SessionEvent.SESSION_REESTABLISHED not in sessions.events

    asyncio.run(asyncio.wait_for(main(), 120))


def test_a_request_cancelled_as_the_connection_returns_is_cancelled(
        zookeeper: ZooKeeperServer) -> None:
    """A request waiting for the connection, cancelled in the loop turn the wait ends in
    (the connection is back, or the store closes and wakes it): it ends cancelled. (Python
    3.11's ``asyncio.wait_for`` dropped such a cancellation: the broker's registry task,
    cancelled by a stopping broker whose session had expired, ran on and held the stop.)"""
    async def main() -> None:
        store = await create_metadata_store(zookeeper.url("/cancel-race"))
        assert isinstance(store, ZKMetadataStore)
        try:
            for turns in range(8):  # each point of the wake-up, one loop turn apart
                store._connected.clear()  # as while the connection is lost
                waiting = asyncio.ensure_future(store.get("/k"))
                for _ in range(3):
                    await asyncio.sleep(0)  # it is waiting for the connection
                assert not waiting.done()
                store._connected.set()
                for _ in range(turns):
                    await asyncio.sleep(0)
                if not waiting.cancel():
                    continue  # it was answered before the cancel
                with pytest.raises(asyncio.CancelledError):
                    await waiting
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 60))


@pytest.mark.timeout(240)
def test_a_frozen_server_past_the_session_timeout(
        own_zk: ZooKeeperServer, caplog: pytest.LogCaptureFixture) -> None:
    """ZooKeeper frozen (SIGSTOP) for longer than the session timeout: the store says it is
    unavailable (with the reason) within a few seconds, treats the session as lost by its
    own clock while the server is still frozen (the server cannot tell it yet), and once
    the server runs again opens a new session without the old ephemeral keys. One log
    line when ZooKeeper went silent, one when it is back, no traceback."""
    timeout_s = 4.0

    async def main() -> None:
        store = await create_metadata_store(own_zk.url("/frozen"), session_timeout_s=timeout_s)
        assert isinstance(store, ZKMetadataStore)
        sessions = Sessions(store)
        await store.put("/brokers/b1", b"x", ephemeral=True)
        assert store.unavailable_reason() is None
        assert store.lease_deadline > time.monotonic()
        own_zk.freeze()
        frozen = time.monotonic()
        try:
            while store.unavailable_reason() is None:
                assert time.monotonic() - frozen < timeout_s, "not unavailable yet"
                await asyncio.sleep(0.05)  # bounded poll of the store's state
            reason = store.unavailable_reason()
            assert reason is not None and reason.startswith(
                f"metadata store unavailable: ZooKeeper at {own_zk.address} not connected for")
            await sessions.wait_for(SessionEvent.SESSION_LOST, timeout=30)
            # told by its own clock, the server still frozen: within the timeout + a tick
            assert time.monotonic() - frozen < timeout_s + 2.5
            assert store.lease_deadline < time.monotonic()
            assert not store.closed
        finally:
            own_zk.thaw()
        await sessions.wait_for(SessionEvent.SESSION_REESTABLISHED, timeout=60)
        assert store.unavailable_reason() is None
        assert store.lease_deadline > time.monotonic()
        assert await store.get("/brokers/b1") is None  # the old session's keys are gone
        await store.put("/kept", b"v")
        assert (await store.get("/kept"))[0] == b"v"  # type: ignore[index]
        await store.close()

    with caplog.at_level(logging.INFO, logger="magnetar.metadata"):
        asyncio.run(asyncio.wait_for(main(), 200))
    lines = [r.getMessage() for r in caplog.records]
    assert sum("unavailable until it is back" in m for m in lines) == 1, lines
    assert sum("is back, " in m for m in lines) == 1, lines
    assert not any(r.exc_info for r in caplog.records)


def test_a_session_lost_by_the_clock_but_kept_by_the_server(
        zookeeper: ZooKeeperServer) -> None:
    """The store's heartbeats go unanswered past the session timeout (here: held back, as
    if lost) while kazoo's own pings keep the session alive at the server: the store
    cannot know that, so it treats the session as lost; when it hears ZooKeeper again it
    deletes the ephemeral keys it had created in that session (the state a real expiry
    leaves) before telling SESSION_REESTABLISHED."""
    async def main() -> None:
        url = zookeeper.url("/stalled")
        store = await create_metadata_store(url, session_timeout_s=4.0)
        observer = await create_metadata_store(url, session_timeout_s=4.0)
        assert isinstance(store, ZKMetadataStore)
        sessions = Sessions(store)
        await store.put("/brokers/b1", b"x", ephemeral=True)
        before = store.session
        store._beat_at = time.monotonic()  # a heartbeat "in flight": no more are sent
        await sessions.wait_for(SessionEvent.SESSION_LOST)
        store._beat_at = None  # heartbeats answered again
        await sessions.wait_for(SessionEvent.SESSION_REESTABLISHED)
        assert store.session == before  # the server kept it
        assert await observer.get("/brokers/b1") is None  # what it held is gone
        assert store.lease_deadline > time.monotonic()
        assert store.unavailable_reason() is None
        await store.close()
        await observer.close()

    asyncio.run(asyncio.wait_for(main(), 120))
