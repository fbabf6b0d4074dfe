"""Two brokers' coordinators on one real ZooKeeper (two sessions in one process): bundle
placement, lookups that redirect to the owner, the ownership check, and bundles freed when
a broker leaves."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest

from magnetar.broker.cluster.coordinator import ClusterCoordinator, LookupResult
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


def test_an_unloaded_bundle_goes_where_its_owner_sent_it(zookeeper: ZooKeeperServer) -> None:
    """A unloads a bundle towards B while A is the less loaded of the two: lookups made
    while it moves, or after A freed it but before B took it, at either broker, send the
    client to B (the handoff A recorded), rather than placing the free bundle anew, which
    would put it back on A."""
    from magnetar.broker.cluster.bundles import NamespaceBundles

    async def main() -> None:
        stores, a, b = await pair(zookeeper)
        bundles = NamespaceBundles.evenly(4)
        topics = [f"persistent://public/default/handoff-{i}" for i in range(64)]
        by_bundle = {bundles.bundle_of(t): t for t in topics}
        assert len(by_bundle) == 4
        moving, *others = by_bundle.values()
        assert (await a.lookup(moving, authoritative=True)).connect
        for topic in others[:2]:  # B owns two bundles, A one: A is the least loaded
            assert (await b.lookup(topic, authoritative=True)).connect
        await b.registry.refresh()
        namespace, bundle = await a.bundle_of(moving)

        seen: list[str | None] = []

        async def unloading(ns: str, rng: object, going: OwnerData | None) -> None:
            assert going is not None and going.service_url == "pulsar://b:6650"
            seen.append(await b.handoff_target(namespace, bundle))

        a.unload_topics = unloading
        assert await a.unload(namespace, bundle)
        assert seen == ["b:8080"]  # recorded before the clients were told
        assert not a.owns(moving) and not b.owns(moving)
        # freed, not taken yet: A sends the client to B, and B takes it when asked
        at_a = await a.lookup(moving)
        assert not at_a.connect and at_a.owner.service_url == "pulsar://b:6650"
        at_b = await b.lookup(moving)  # not authoritative: B follows the handoff too
        assert at_b.connect and b.owns(moving)
        assert await b.handoff_target(namespace, bundle) is None  # served, dropped

        # back from B to A: a lookup at A while B unloads waits for the key to go, then
        # A takes the bundle (before: "being unloaded", and the client backed off)
        waiting: list[asyncio.Task[object]] = []

        async def unloading_b(ns: str, rng: object, going: OwnerData | None) -> None:
            for _ in range(200):  # bounded poll: A has been told the key is disabled
                seen_owner = await a.ownership.owner_of(namespace, bundle)
                if seen_owner is not None and seen_owner.disabled:
                    break
                await asyncio.sleep(0.02)
            waiting.append(asyncio.get_running_loop().create_task(a.lookup(moving)))
            await asyncio.sleep(0.2)  # the lookup is under way while the key is disabled
            assert not waiting[0].done()

        b.unload_topics = unloading_b
        assert await b.unload(namespace, bundle, destination="a:8080")
        result = await asyncio.wait_for(waiting[0], 15)
        assert isinstance(result, LookupResult) and result.connect and a.owns(moving)
        await a.stop()
        await b.stop()
        for store in stores:
            await store.close()

    run(main)


def test_a_load_that_outlives_its_ownership_is_not_served(zookeeper: ZooKeeperServer) -> None:
    """What `load_topic` asks before registering a topic it loaded: while the bundle is
    being unloaded nothing new is served (a load may not start, ``check_owned``), and once
    the bundle left and came back, a ledger fenced under the earlier ownership's epoch is
    not served (CI once lost sight of acked messages that way: a load finished after its
    bundle moved, and the topic was served stale when the bundle returned)."""
    from magnetar.broker.cluster.bundles import NamespaceBundles

    async def main() -> None:
        stores, a, b = await pair(zookeeper)
        topic = "persistent://public/default/stale-load"
        assert (await a.lookup(topic, authoritative=True)).connect
        first_epoch = a.epoch_of(topic)
        assert first_epoch is not None and first_epoch >= 0
        assert a.serves(topic) and a.serves(topic, first_epoch)
        namespace, bundle = await a.bundle_of(topic)
        assert bundle == NamespaceBundles.evenly(4).bundle_of(topic)
        during: list[bool] = []

        async def unloading(ns: str, rng: object, going: OwnerData | None) -> None:
            during.append(a.owns(topic))  # still owned: the topics are being closed ...
            during.append(a.serves(topic))  # ... but nothing new is served
            with pytest.raises(BrokerError):
                a.check_owned(topic)

        a.unload_topics = unloading
        assert await a.unload(namespace, bundle, destination="b:8080")
        assert during == [True, False]
        assert not a.serves(topic, first_epoch)
        assert (await b.lookup(topic, authoritative=True)).connect
        b.unload_topics = None
        assert await b.unload(namespace, bundle, destination="a:8080")
        assert (await a.lookup(topic, authoritative=True)).connect
        assert a.serves(topic)  # the bundle is back, under a new epoch ...
        assert a.epoch_of(topic) != first_epoch
        assert not a.serves(topic, first_epoch)  # ... so a load fenced before is stale
        await a.stop()
        await b.stop()
        for store in stores:
            await store.close()

    run(main)
