"""Moving bundles between two brokers that share one data directory
(``magnetarSharedStorage``): an unload under load hands the clients to the other broker
with ``assignedBrokerServiceUrl`` and loses no acknowledged message, and a kill -9 of the
owner under load loses none either: the other broker takes the bundle once the dead one's
ZooKeeper session expires, recovers the ledger and the consumer carries on."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator

import pulsar
import pytest

from magnetar.broker.cluster.bundles import NamespaceBundles
from magnetar.protocol import pb
from tests.cluster.brokers import Cluster, owner_port, raw_lookup
from tests.cluster.test_cluster_admin import call
from tests.zkserver import ZooKeeperServer

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
R = pb.CommandLookupTopicResponse


@pytest.fixture
def shared(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("shared"), zookeeper, 2, shared=True)
    c.start()
    yield c
    c.stop()


class Load:
    """A producer thread sending numbered messages one by one; ``acked`` holds each number
    whose send the broker confirmed."""

    def __init__(self, producer: pulsar.Producer) -> None:
        self.producer = producer
        self.acked: list[int] = []
        self.failed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.producer.send(str(i).encode())
                self.acked.append(i)
            except Exception:  # a send that failed is not acked: it may or may not arrive
                self.failed += 1
            i += 1

    def wait_for(self, n: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < n:
            assert time.monotonic() < deadline, f"only {len(self.acked)} of {n} sends acked"
            time.sleep(0.01)  # bounded poll of another thread's progress

    def finish(self) -> list[int]:
        self.stop.set()
        self.thread.join(60)
        return list(self.acked)


def receive_all(consumer: pulsar.Consumer, wanted: set[int]) -> set[int]:
    got: set[int] = set()
    deadline = time.monotonic() + 60
    while not wanted <= got and time.monotonic() < deadline:
        try:
            msg = consumer.receive(5_000)
        except pulsar.Timeout:
            continue
        got.add(int(msg.data()))
        consumer.acknowledge(msg)
    return got


def test_unload_under_load_moves_the_bundle_and_loses_nothing(shared: Cluster) -> None:
    a, b = shared.brokers
    topic = "persistent://public/default/moving"
    bundle = NamespaceBundles.evenly(4).bundle_of(topic)
    client = pulsar.Client(shared.service_url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        load = Load(client.create_producer(topic, batching_enabled=False))
        load.wait_for(30)
        owners = [owner_port(shared, topic)]
        for _ in range(3):  # back and forth
            owner = a if owners[-1] == a.port else b
            status, _, _ = call(
                "PUT", f"{owner.web_url}/admin/v2/namespaces/public/default/{bundle}/unload")
            assert status == 204
            load.wait_for(len(load.acked) + 30)
            owners.append(owner_port(shared, topic))
        acked = load.finish()
        # each unload handed the bundle to the other broker (assignedBrokerServiceUrl)
        assert all(x != y for x, y in itertools.pairwise(owners)), owners
        got = receive_all(consumer, set(acked))
        assert set(acked) <= got, sorted(set(acked) - got)[:20]
    finally:
        client.close()


def test_kill_9_of_the_owner_loses_no_acked_message(shared: Cluster) -> None:
    a, b = shared.brokers
    topic = "persistent://public/default/failover"
    client = pulsar.Client(shared.service_url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        load = Load(client.create_producer(topic, batching_enabled=False,
                                           send_timeout_millis=60_000))
        load.wait_for(50)
        owner, survivor = (a, b) if owner_port(shared, topic) == a.port else (b, a)
        owner.kill()
        before = len(load.acked)
        load.wait_for(before + 50, timeout=90)  # sends resume at the survivor
        acked = load.finish()
        got = receive_all(consumer, set(acked))
        assert set(acked) <= got, sorted(set(acked) - got)[:20]
        resp = asyncio.run(raw_lookup(survivor.port, topic))  # the survivor serves it now
        assert resp.response == R.Connect and resp.brokerServiceUrl == survivor.url
    finally:
        client.close()
