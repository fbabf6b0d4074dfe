"""Load shedding: the pure choice of bundles, and the leader moving a bundle off a broker
that its load report shows overloaded (threshold 0 %: any broker with 2+ bundles)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pulsar
import pytest

from magnetar.broker.cluster.bundles import NamespaceBundles
from magnetar.broker.cluster.records import BrokerData
from magnetar.broker.cluster.shedding import bundles_to_shed
from magnetar.client.errors import ServerError
from tests.cluster.brokers import Cluster, raw_lookup
from tests.zkserver import ZooKeeperServer

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def test_bundles_to_shed_picks_one_per_overloaded_broker() -> None:
    hot = BrokerData("pulsar://a:6650", cpu_usage=180.0, cpu_limit=200.0,
                     bundles=("p/d/0x00000000_0x40000000", "p/d/0x40000000_0x80000000"))
    cool = BrokerData("pulsar://b:6650", cpu_usage=20.0, cpu_limit=200.0,
                      bundles=("p/d/0x80000000_0xc0000000", "p/d/0xc0000000_0xffffffff"))
    lone = BrokerData("pulsar://c:6650", cpu_usage=199.0, cpu_limit=200.0,
                      bundles=("q/d/0x00000000_0xffffffff",))
    brokers = {"a:8080": hot, "b:8080": cool, "c:8080": lone}
    assert bundles_to_shed(brokers, 85.0, {}, 100.0, 60.0) == [
        ("a:8080", "p/d/0x00000000_0x40000000")]  # c has one bundle only: nothing to give
    moved = {"p/d/0x00000000_0x40000000": 90.0}  # shed 10 s ago: in its grace period
    assert bundles_to_shed(brokers, 85.0, moved, 100.0, 60.0) == [
        ("a:8080", "p/d/0x40000000_0x80000000")]
    assert bundles_to_shed({"a:8080": hot}, 85.0, {}, 100.0, 60.0) == []  # nowhere to go


@pytest.fixture
def shedding(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("shedding"), zookeeper, 2, {
        "loadBalancerBrokerOverloadedThresholdPercentage": "0",
        "loadBalancerSheddingGracePeriodMinutes": "1",
        "magnetarLoadBalancerSheddingIntervalSeconds": "1",
        "loadBalancerReportUpdateMinIntervalMillis": "300"}, shared=True)
    c.start()
    yield c
    c.stop()


def test_the_leader_sheds_bundles_off_an_overloaded_broker(shedding: Cluster) -> None:
    import asyncio

    a, b = shedding.brokers
    bundles = NamespaceBundles.evenly(4)
    topics: dict[object, str] = {}
    i = 0
    while len(topics) < 4:  # one topic in each of the 4 bundles
        t = f"persistent://public/default/shed-{i}"
        topics.setdefault(bundles.bundle_of(t), t)
        i += 1
    for t in topics.values():  # A takes every bundle
        assert asyncio.run(raw_lookup(a.port, t, authoritative=True)).brokerServiceUrl == a.url
    client = pulsar.Client(shedding.service_url, operation_timeout_seconds=30, logger=QUIET)
    try:
        producers = [client.create_producer(t) for t in topics.values()]
        deadline = time.monotonic() + 60
        while True:  # keep some load on; the leader moves bundles to B
            for p in producers:
                p.send(b"x")
            owners = set()
            for t in topics.values():
                try:
                    owners.add(asyncio.run(raw_lookup(b.port, t)).brokerServiceUrl)
                except ServerError:  # a bundle being moved right now: ServiceNotReady
                    continue
            if b.url in owners:
                break
            assert time.monotonic() < deadline, "no bundle was shed to the other broker"
    finally:
        client.close()
