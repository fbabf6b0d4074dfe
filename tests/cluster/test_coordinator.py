"""Two brokers' coordinators on one real ZooKeeper (two sessions in one process): bundle
placement, lookups that redirect to the owner, the ownership check, and bundles freed when
a broker leaves."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest

from magnetar.broker.cluster.coordinator import ClusterCoordinator
from magnetar.broker.cluster.records import OwnerData
from magnetar.broker.errors import BrokerError
from magnetar.metadata import MetadataStore, create_metadata_store
from tests.zkserver import ZooKeeperServer

_chroots = itertools.count(1)


def owner(name: str) -> OwnerData:
    return OwnerData(f"pulsar://{name}:6650", "", f"http://{name}:8080")


async def pair(zk: ZooKeeperServer) -> tuple[list[MetadataStore], ClusterCoordinator,
                                              ClusterCoordinator]:
    url = zk.url(f"/coord{next(_chroots)}")
    stores = [await create_metadata_store(url, session_timeout_s=4.0) for _ in range(2)]
    a = ClusterCoordinator(stores[0], "a:8080", owner("a"))
    b = ClusterCoordinator(stores[1], "b:8080", owner("b"))
    await a.start()
    await b.start()
    return stores, a, b


def run(coro_fn: Callable[[], Awaitable[None]], timeout: float = 60.0) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(timeout):
            await coro_fn()

    asyncio.run(bounded())


def test_lookups_spread_bundles_and_redirect_to_the_owner(zookeeper: ZooKeeperServer) -> None:
    async def main() -> None:
        stores, a, b = await pair(zookeeper)
        assert sorted(await a.registry.live()) == ["a:8080", "b:8080"]
        topics = [f"persistent://public/default/spread-partition-{i}" for i in range(16)]
        served: dict[str, str] = {}
        for topic in topics:  # every first lookup at A, as a client given A's URL does
            first = await a.lookup(topic)
            if first.connect:
                served[topic] = "a"
            else:
                assert first.owner.service_url == "pulsar://b:6650"
                second = await b.lookup(topic, authoritative=True)  # the redirect, followed
                assert second.connect
                served[topic] = "b"
        # the 4 default bundles went 2 and 2
        assert len(a.ownership.owned) == 2 and len(b.ownership.owned) == 2
        assert set(served.values()) == {"a", "b"}
        for topic, where in served.items():
            mine, other = (a, b) if where == "a" else (b, a)
            assert mine.owns(topic) and not other.owns(topic)
            again = await other.lookup(topic)  # any broker: redirect to the owner
            assert not again.connect and again.owner.service_url == mine.me.service_url
            with pytest.raises(BrokerError):
                other.check_owned(topic)
            mine.check_owned(topic)
        # B leaves: its bundles are free, and A takes them on the next lookups
        await b.stop()
        await stores[1].close()
        for topic in topics:
            assert (await a.lookup(topic)).connect
        assert len(a.ownership.owned) == 4
        await a.stop()
        await stores[0].close()

    run(main)


def test_a_lost_session_frees_the_bundles(zookeeper: ZooKeeperServer) -> None:
    async def main() -> None:
        stores, a, b = await pair(zookeeper)
        topic = "persistent://public/default/lost-1"
        await b.lookup(topic, authoritative=True)
        assert b.owns(topic)
        await stores[1].close()  # the session ends without releasing anything
        for _ in range(200):  # bounded poll: A sees the ephemeral key gone
            if (await a.lookup(topic, authoritative=True)).connect:
                break
            await asyncio.sleep(0.05)
        assert a.owns(topic)
        await a.stop()
        await stores[0].close()

    run(main)
