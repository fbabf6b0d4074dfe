"""Geo-replication from a cluster whose topic moves: cluster A is two brokers on one
ZooKeeper sharing one data directory (``magnetarSharedStorage``), cluster B one standalone
with deduplication on (what exactly-once across clusters needs). While the official client
produces in A under load, the topic's bundle is unloaded at its owner twice (it goes back
and forth between A's brokers), then its owner is killed with kill -9 and the other broker
takes it over: each new owner's replicator resumes from the durable cursor
``pulsar.repl.B`` the previous one left in the shared storage, and B holds every message
acknowledged in A exactly once (what an owner sent and did not see acknowledged is sent
again, and B drops it by its origin's producer name and sequence id). And a topic with a
backlog and no client in A, whose bundle moves: the broker that takes the bundle loads it,
so its replicator resumes without a client."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.broker.cluster.bundles import NamespaceBundles
from magnetar.client import MessageId as MagnetarMessageId
from magnetar.protocol import pb
from magnetar.sync import Client as MagnetarClient
from tests.broker.brokerproc import SILENT, wait_until
from tests.cluster.brokers import (
    ChildBroker,
    Cluster,
    http_call,
    owner_port,
    raw_lookup,
)
from tests.cluster.test_cluster_moves import AsyncLoad, move_back_and_forth
from tests.zkserver import ZooKeeperServer, free_port

pytestmark = pytest.mark.slow

NS = "geo/moves"
R = pb.CommandLookupTopicResponse


def _ok(method: str, url: str, body: object = None) -> object:
    status, answer, _ = http_call(method, url, body)
    assert status in (200, 204), f"{method} {url}: {status} {answer}"
    return answer


def _replicate(web_url: str, other: str, other_web: str, other_url: str) -> None:
    """On the cluster at ``web_url``: the other cluster's record, the tenant and the
    namespace replicated to both."""
    _ok("PUT", f"{web_url}/admin/v2/clusters/{other}",
        {"serviceUrl": other_web, "brokerServiceUrl": other_url})
    _ok("PUT", f"{web_url}/admin/v2/tenants/geo", {"adminRoles": [], "allowedClusters": ["A", "B"]})
    _ok("PUT", f"{web_url}/admin/v2/namespaces/{NS}")
    _ok("POST", f"{web_url}/admin/v2/namespaces/{NS}/replication", ["A", "B"])


@pytest.fixture
def geo(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory,
        tmp_path: Path) -> Iterator[tuple[Cluster, ChildBroker]]:
    """Cluster A (two brokers, shared storage) and cluster B (a standalone), each with the
    other's record and the namespace ``geo/moves`` replicated to both."""
    a = Cluster(tmp_path_factory.mktemp("geo-a"), zookeeper, 2, {"clusterName": "A"}, shared=True)
    b = ChildBroker(tmp_path / "B", {  # on fixed ports: the same after a restart
        "clusterName": "B", "bindAddress": "127.0.0.1", "brokerDeduplicationEnabled": "true"},
        port=free_port(), http_port=free_port())
    try:
        b.start()
        a.start()
        first = a.brokers[0]
        _replicate(first.web_url, "B", b.web_url, b.url)
        _replicate(b.web_url, "A", first.web_url, a.service_url)
        for broker in a.brokers:  # both of A's brokers see the policy before any load
            wait_until(lambda broker=broker: http_call(  # type: ignore[misc]
                "GET", f"{broker.web_url}/admin/v2/namespaces/{NS}/replication")[1] == ["A", "B"],
                30, f"{broker.broker_id} to see the replication clusters")
        yield a, b
    finally:
        a.stop()
        b.stop()


def _replication(broker: ChildBroker, topic: str) -> object:
    """The ``replication`` section of ``topic``'s stats at ``broker``."""
    status, stats, _ = http_call(
        "GET", f"{broker.web_url}/admin/v2/persistent/{topic.split('://')[1]}/stats")
    return stats.get("replication") if status == 200 and isinstance(stats, dict) else stats


def _replicator_settled(repl: object) -> bool:
    to_b = repl.get("B") if isinstance(repl, dict) else None
    return isinstance(to_b, dict) and to_b["connected"] is True and to_b["replicationBacklog"] == 0


def test_moves_and_kill_9_in_a_replicate_each_acked_message_once(
        geo: tuple[Cluster, ChildBroker]) -> None:
    a, b = geo
    topic = f"persistent://{NS}/moving-{uuid.uuid4().hex[:8]}"
    ca = pulsar.Client(a.service_url, operation_timeout_seconds=30, logger=SILENT)
    cb = pulsar.Client(b.url, operation_timeout_seconds=30, logger=SILENT)
    try:
        consumer = cb.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        load = AsyncLoad(ca.create_producer(
            topic, producer_name="mover", batching_enabled=False, block_if_queue_full=True,
            max_pending_messages=200, send_timeout_millis=60_000))
        # (1) two unloads under load: the bundle goes to the other broker each time
        owners = move_back_and_forth(a, topic, load, moves=2)
        assert all(x != y for x, y in itertools.pairwise(owners)), owners
        # (2) kill -9 of the owner: the other broker takes the bundle once the dead one's
        # ZooKeeper session expires, and the producer carries on there
        owner, survivor = a.brokers if a.brokers[0].port == owners[-1] else a.brokers[::-1]
        owner.kill()
        load.wait_for(len(load.acked) + 50, timeout=90)
        acked = load.finish()
        ca.create_producer(topic, batching_enabled=False).send(b"end")

        got: Counter[bytes] = Counter()
        deadline = time.monotonic() + 90
        while b"end" not in got:  # A's order is B's: whatever comes twice comes before it
            assert time.monotonic() < deadline, f"{len(got)} of {len(acked)} received in B"
            try:
                msg = consumer.receive(5_000)
            except pulsar.Timeout:
                continue
            got[msg.data()] += 1
            consumer.acknowledge(msg)
        missing = sorted(set(acked) - {int(d) for d in got if d != b"end"})
        assert not missing, f"{len(missing)} acked in A, missing in B: {missing[:20]}"
        doubled = sorted(d for d, n in got.items() if n > 1)
        assert not doubled, f"{len(doubled)} received twice in B: {doubled[:20]}"
        # what B stored: each message once, replicated from A
        mc = MagnetarClient(b.url)
        try:
            reader = mc.create_reader(topic, MagnetarMessageId.earliest)
            stored, origins = [], set()
            while not stored or stored[-1] != b"end":
                msg = reader.read_next(timeout_millis=30_000)
                stored.append(msg.data())
                origins.add(msg.replicated_from())
        finally:
            mc.close()
        assert len(stored) == len(set(stored)) and set(stored) == set(got)
        assert origins == {"A"}
        # the survivor owns the topic; its replicator is connected, its backlog gone
        resp = asyncio.run(raw_lookup(survivor.port, topic))
        assert resp.response == R.Connect and resp.brokerServiceUrl == survivor.url
        deadline = time.monotonic() + 60
        while not _replicator_settled(repl := _replication(survivor, topic)):
            assert time.monotonic() < deadline, f"replication stats on the survivor: {repl}"
            time.sleep(0.1)  # bounded poll of the survivor's stats
    finally:
        ca.close()
        cb.close()


def _same_bundle(topic: str, prefix: str) -> str:
    """Another topic of ``topic``'s bundle (the namespace's default 4 bundles)."""
    bundles = NamespaceBundles.evenly(4)
    for i in range(1000):
        other = f"persistent://{NS}/{prefix}-{i}"
        if bundles.bundle_of(other) == bundles.bundle_of(topic):
            return other
    raise AssertionError(f"no topic of {topic}'s bundle")


def test_an_idle_topic_of_a_moved_bundle_resumes_replicating(
        geo: tuple[Cluster, ChildBroker]) -> None:
    """A topic with a replication backlog and no client in A (B was down), whose bundle is
    unloaded and taken by the other broker for another topic's lookup: the new owner loads
    the bundle's replicated topics when it takes it (as Pulsar does), so the backlog reaches
    B once B is back, with no client of the topic in A."""
    a, b = geo
    _ok("POST", f"{b.web_url}/admin/v2/namespaces/{NS}/replication", ["B"])  # one way: A to B
    idle = f"persistent://{NS}/idle-{uuid.uuid4().hex[:8]}"
    busy = _same_bundle(idle, f"busy-{uuid.uuid4().hex[:8]}")
    ca = pulsar.Client(a.service_url, operation_timeout_seconds=30, logger=SILENT)
    try:
        ca.create_producer(busy).send(b"busy")  # the topic of the bundle's next lookup
        b.stop()
        producer = ca.create_producer(idle, batching_enabled=False, block_if_queue_full=True)
        acked = _sent(producer, 100)
        producer.close()  # no client of the idle topic in A from now on
        first = owner_port(a, idle)
        owner = a.brokers[0] if a.brokers[0].port == first else a.brokers[1]
        bundle = NamespaceBundles.evenly(4).bundle_of(idle)
        _ok("PUT", f"{owner.web_url}/admin/v2/namespaces/{NS}/{bundle}/unload")
        assert owner_port(a, busy) != first  # the other broker took the bundle
        b.start()
        cb = pulsar.Client(b.url, operation_timeout_seconds=30, logger=SILENT)
        try:
            consumer = cb.subscribe(idle, "s", initial_position=pulsar.InitialPosition.Earliest)
            got: Counter[int] = Counter()
            deadline = time.monotonic() + 60
            while not set(acked) <= set(got):
                assert time.monotonic() < deadline, f"{len(got)} of {len(acked)} received in B"
                try:
                    msg = consumer.receive(5_000)
                except pulsar.Timeout:
                    continue
                got[int(msg.data())] += 1
                consumer.acknowledge(msg)
            assert max(got.values()) == 1
        finally:
            cb.close()
    finally:
        ca.close()


def _sent(producer: pulsar.Producer, n: int) -> list[int]:
    """Send ``0`` to ``n - 1`` (send_async, flushed); the numbers acknowledged."""
    acked: list[int] = []

    def done(i: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        return lambda res, _mid: acked.append(i) if res == pulsar.Result.Ok else None

    for i in range(n):
        producer.send_async(str(i).encode(), done(i))
    producer.flush()
    return acked
