"""Lookups settle in at most two hops (issue 29, item 1), on real ZooKeeper.

Free bundles are placed by one decision every broker follows (a placement record written
with compare-and-set), a lookup that followed a redirect (``authoritative``) is answered
where it arrives, and a partitioned topic created at one broker is known at the other at
once. Checked with two coordinators in one process (many concurrent lookups at both, the
redirects followed) and with two broker processes: fresh namespaces, partitioned topics of
8, 16 and 32 partitions created at either broker, looked up at once through both brokers
over the binary protocol and HTTP while the official client and Magnetar's subscribe."""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging

import pytest

from magnetar.broker.cluster.coordinator import ClusterCoordinator
from magnetar.metadata import MetadataStore, create_metadata_store
from tests.cluster.brokers import (
    Cluster,
    fresh_partitioned_topics,
    http_lookup_hops,
    lookup_hops,
    magnetar_subscribe,
    official_subscribe,
)
from tests.cluster.test_coordinator import owner, run
from tests.zkserver import ZooKeeperServer

_chroots = itertools.count(1)


async def _stop(coordinators: list[ClusterCoordinator], stores: list[MetadataStore]) -> None:
    """Stop the coordinators, then close their stores."""
    for c in coordinators:
        await c.stop()
    for store in stores:
        await store.close()


def test_concurrent_lookups_at_two_coordinators_settle_in_two_hops(
        zookeeper: ZooKeeperServer) -> None:
    async def main() -> None:
        url = zookeeper.url(f"/hops{next(_chroots)}")
        stores = [await create_metadata_store(url, session_timeout_s=4.0) for _ in range(2)]
        a = ClusterCoordinator(stores[0], "a:8080", owner("a"), default_bundles=16)
        b = ClusterCoordinator(stores[1], "b:8080", owner("b"), default_bundles=16)
        by_url = {"pulsar://a:6650": a, "pulsar://b:6650": b}
        try:
            await a.start()
            await b.start()

            async def follow(first: ClusterCoordinator, topic: str) -> tuple[int, str]:
                at, authoritative = first, False
                for hop in range(1, 9):
                    result = await at.lookup(topic, authoritative)
                    if result.connect:
                        return hop, at.broker_id
                    at, authoritative = by_url[result.owner.service_url], True
                raise AssertionError(f"{topic}: more than 8 hops")

            topics = [f"persistent://public/default/hops-partition-{i}" for i in range(32)]
            # every partition looked up at both brokers at once, twice over
            done = await asyncio.gather(*(follow(c, t) for t in topics for c in (a, b, b, a)))
            hops = collections.Counter(h for h, _ in done)
            assert max(hops) <= 2, hops
            served = {}
            for (_, where), topic in zip(done, [t for t in topics for _ in range(4)],
                                         strict=True):
                assert served.setdefault(topic, where) == where  # one owner per topic
            assert set(served.values()) == {"a:8080", "b:8080"}  # spread over both
            # each bundle is owned by exactly one of them
            assert not set(a.ownership.owned) & set(b.ownership.owned)
        finally:
            await _stop([a, b], stores)

    run(main)


def test_fresh_partitioned_topics_settle_in_two_hops_everywhere(cluster: Cluster) -> None:
    a, b = cluster.brokers
    # created at either broker, then at once used through the other one too
    topics = fresh_partitioned_topics(cluster, f"public/fresh-hops-{next(_chroots)}",
                                      (8, 16, 32), first=1)

    async def main() -> tuple[collections.Counter[str], dict[str, int]]:
        hops: collections.Counter[str] = collections.Counter()
        served: dict[str, int] = {}

        async def binary(port: int, part: str) -> None:
            hop, where = await lookup_hops(port, part)
            hops[f"binary {hop}"] += 1
            assert served.setdefault(part, where) == where

        async def http(web: str, part: str) -> None:
            hops[f"http {await asyncio.to_thread(http_lookup_hops, web, part)}"] += 1

        work = []
        for k, (topic, n) in enumerate(topics):
            for i in range(n):
                part = f"{topic}-partition-{i}"
                first, second = (a, b) if i % 2 else (b, a)
                work += [binary(first.port, part), binary(second.port, part),
                         http(first.web_url, part)]
            work += [asyncio.to_thread(official_subscribe, (a, b)[k % 2].url, topic, "official"),
                     asyncio.wait_for(magnetar_subscribe((b, a)[k % 2].url, topic, "ours"), 90)]
        await asyncio.gather(*work)  # any failure fails the test
        return hops, served

    hops, served = asyncio.run(asyncio.wait_for(main(), 240))
    assert max(int(k.split()[1]) for k in hops) <= 2, hops
    assert sum(hops.values()) == 3 * (8 + 16 + 32)
    assert set(served.values()) == {a.port, b.port}, "the partitions went to one broker"


def test_unload_sends_each_bundle_to_the_least_loaded_other_broker(
        zookeeper: ZooKeeperServer) -> None:
    async def main() -> None:
        url = zookeeper.url(f"/hops{next(_chroots)}")
        stores = [await create_metadata_store(url, session_timeout_s=4.0) for _ in range(3)]
        # (no load report between the unloads: each counts what was sent before it)
        coordinators = [ClusterCoordinator(store, f"{n}:8080", owner(n), default_bundles=4,
                                           report_interval_s=120.0)
                         for store, n in zip(stores, "abc", strict=True)]
        a = coordinators[0]
        try:
            for c in coordinators:
                await c.start()
            topics = [f"persistent://public/default/unload-{i}" for i in range(64)]
            for topic in topics:  # every bundle taken by A (redirected lookups go there)
                assert (await a.lookup(topic, authoritative=True)).connect
            owned = sorted(a.ownership.owned)
            assert len(owned) == 4
            for namespace, bundle in owned:
                assert await a.unload(namespace, bundle)
            targets = [await a.handoff_target(ns, b) for ns, b in owned]
            # never back to A, and spread over B and C (counting what was just sent)
            assert sorted(targets) == ["b:8080", "b:8080", "c:8080", "c:8080"], targets
        finally:
            await _stop(coordinators, stores)

    run(main)


def test_a_takeover_is_logged_with_the_previous_owner(
        zookeeper: ZooKeeperServer, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        url = zookeeper.url(f"/hops{next(_chroots)}")
        stores = [await create_metadata_store(url, session_timeout_s=4.0) for _ in range(2)]
        a = ClusterCoordinator(stores[0], "a:8080", owner("a"), default_bundles=1)
        b = ClusterCoordinator(stores[1], "b:8080", owner("b"), default_bundles=1)
        try:
            await a.start()
            await b.start()
            topic = "persistent://public/default/taken-over"
            assert (await a.lookup(topic, authoritative=True)).connect
            seen = await b.lookup(topic)  # B sees A own it
            assert not seen.connect and seen.owner.service_url == "pulsar://a:6650"
            await a.stop()  # A goes without handing the bundle to anyone
            for _ in range(100):  # until B hears the key went (bounded: 100 x 0.1 s)
                if await b.ownership.owner_of(*(await b.bundle_of(topic))) is None:
                    break
                await asyncio.sleep(0.1)
            with caplog.at_level(logging.INFO, "magnetar.broker.cluster.coordinator"):
                assert (await b.lookup(topic)).connect
        finally:
            await _stop([a, b], stores)

    run(main)
    took = [r for r in caplog.records if r.getMessage().startswith("took bundle")]
    assert len(took) == 1 and took[0].levelno == logging.WARNING
    assert "previous owner pulsar://a:6650" in took[0].getMessage()
