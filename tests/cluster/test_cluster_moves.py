"""Moving bundles between two brokers that share one data directory
(``magnetarSharedStorage``): an unload under load hands the clients to the other broker
with ``assignedBrokerServiceUrl`` and loses no acknowledged message, and a kill -9 of the
owner under load loses none either: the other broker takes the bundle once the dead one's
ZooKeeper session expires, recovers the ledger and the consumer carries on."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator

import pulsar
import pytest

from magnetar.broker.cluster.bundles import NamespaceBundles
from magnetar.protocol import pb
from tests.cluster.brokers import Cluster, ClusterBroker, owner_port, raw_lookup, topic_owned_by
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


class AsyncLoad(Load):
    """`Load` with up to 200 sends in flight (``send_async``): a bundle moving away
    leaves some stored but unanswered, which the client resends to the new owner."""

    def _run(self) -> None:
        i = 0
        lock = threading.Lock()

        def done(res: pulsar.Result, _mid: object, n: int) -> None:
            with lock:
                if res == pulsar.Result.Ok:
                    self.acked.append(n)
                else:
                    self.failed += 1

        while not self.stop.is_set():
            self.producer.send_async(str(i).encode(), lambda r, m, n=i: done(r, m, n))
            i += 1
        self.producer.flush()


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
    topic = "persistent://public/default/moving"
    client = pulsar.Client(shared.service_url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        load = Load(client.create_producer(topic, batching_enabled=False))
        owners = move_back_and_forth(shared, topic, load)
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


def move_back_and_forth(cluster: Cluster, topic: str, load: Load, moves: int = 3) -> list[int]:
    """Unload ``topic``'s bundle at its owner ``moves`` times, once ``load`` has 30 sends
    acknowledged and then after each move; the owners' ports, first to last. The topic's
    namespace has the default 4 bundles."""
    a, b = cluster.brokers
    namespace = topic.split("://", 1)[1].rsplit("/", 1)[0]
    bundle = NamespaceBundles.evenly(4).bundle_of(topic)
    load.wait_for(30)
    owners = [owner_port(cluster, topic)]
    for _ in range(moves):
        owner = a if owners[-1] == a.port else b
        status, _, _ = call(
            "PUT", f"{owner.web_url}/admin/v2/namespaces/{namespace}/{bundle}/unload")
        assert status == 204
        load.wait_for(len(load.acked) + 30)
        owners.append(owner_port(cluster, topic))
    return owners


def live_brokers(broker: ClusterBroker) -> list[str]:
    status, listed, _ = call("GET", f"{broker.web_url}/admin/v2/brokers/standalone")
    return list(listed) if status == 200 and listed else []


def test_a_paused_owner_that_resumes_acknowledges_nothing_lost(shared: Cluster) -> None:
    """SIGSTOP the owner past its session timeout, let the other broker take the topic
    over, SIGCONT it: sends it held while paused are fenced out (never acknowledged
    unless a broker that serves them acknowledged them), every acknowledged message is
    read back from the new owner, and the resumed broker, its session lost, stays up and
    registers again (zookeeperSessionExpiredPolicy=reconnect, the default)."""
    a, b = shared.brokers
    topic = topic_owned_by(shared, a.port, "paused")
    assert a.proc is not None
    c1 = pulsar.Client(a.url, operation_timeout_seconds=15, logger=QUIET)
    c2 = pulsar.Client(b.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        p1 = c1.create_producer(topic, batching_enabled=False, send_timeout_millis=15_000)
        acked = {f"a{i}" for i in range(10) if p1.send(f"a{i}".encode()) is not None}
        results: dict[str, pulsar.Result] = {}
        os.kill(a.proc.pid, signal.SIGSTOP)
        try:
            for i in range(10):  # they wait in the paused broker's socket
                key = f"late{i}"
                p1.send_async(key.encode(), lambda res, _mid, key=key: results.__setitem__(key, res))
            deadline = time.monotonic() + 60
            while a.broker_id in live_brokers(b):  # A's session expires
                assert time.monotonic() < deadline, "the paused broker's session never expired"
                time.sleep(0.1)  # bounded poll of the other broker's view
            p2 = c2.create_producer(topic, batching_enabled=False)  # B takes the topic over
            for i in range(10):
                p2.send(f"b{i}".encode())
                acked.add(f"b{i}")
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 90
        while len(results) < 10:  # each late send ends: refused, timed out or acknowledged
            assert time.monotonic() < deadline, results
            time.sleep(0.05)  # bounded poll of the client's callbacks
        acked |= {k for k, r in results.items() if r == pulsar.Result.Ok}
        # its session lost (zookeeperSessionExpiredPolicy=reconnect, the default): it
        # stays up and registers again in a new session
        deadline = time.monotonic() + 60
        while a.broker_id not in live_brokers(b):
            assert time.monotonic() < deadline, "the resumed broker did not register again"
            assert a.proc.poll() is None, "the resumed broker stopped"
            time.sleep(0.1)  # bounded poll of the other broker's view
        log = (a.root / "broker.log").read_text(errors="replace")
        assert "metadata session lost (zookeeperSessionExpiredPolicy=reconnect)" in log
        assert "Traceback" not in log, log[-3000:]
        consumer = c2.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
        got: set[str] = set()
        deadline = time.monotonic() + 60
        while not acked <= got and time.monotonic() < deadline:
            try:
                got.add(consumer.receive(5_000).data().decode())
            except pulsar.Timeout:
                continue
        assert acked <= got, (sorted(acked - got), results)
    finally:
        c1.close()
        c2.close()


def test_magnetar_client_follows_a_moving_bundle(shared: Cluster) -> None:
    """Magnetar's client, producing and consuming while the bundle moves twice: each close
    names the new owner (assignedBrokerServiceUrl), the client goes there, nothing acked is
    lost."""
    from magnetar.client import Client

    a, b = shared.brokers
    topic = "persistent://public/default/magnetar-moving"
    bundle = NamespaceBundles.evenly(4).bundle_of(topic)

    async def scenario() -> tuple[list[int], set[int], list[int]]:
        async with Client(shared.service_url, operation_timeout_seconds=30) as client:
            consumer = await client.subscribe(topic, "s")
            producer = await client.create_producer(topic)
            acked: list[int] = []
            owners = [await asyncio.to_thread(owner_port, shared, topic)]
            n = 0
            for _ in range(2):
                for _ in range(30):
                    await producer.send(str(n).encode())
                    acked.append(n)
                    n += 1
                owner = a if owners[-1] == a.port else b
                status, _, _ = await asyncio.to_thread(
                    call, "PUT",
                    f"{owner.web_url}/admin/v2/namespaces/public/default/{bundle}/unload")
                assert status == 204
                for _ in range(30):  # sent through the reconnection to the new owner
                    await producer.send(str(n).encode())
                    acked.append(n)
                    n += 1
                owners.append(await asyncio.to_thread(owner_port, shared, topic))
            got: set[int] = set()
            while not set(acked) <= got:
                msg = await asyncio.wait_for(consumer.receive(), 30)
                got.add(int(msg.data()))
                await consumer.acknowledge(msg)
            return acked, got, owners

    acked, got, owners = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert set(acked) <= got
    assert all(x != y for x, y in itertools.pairwise(owners)), owners


def test_with_dedup_a_moving_bundle_stores_nothing_twice(
        zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Deduplication on: sends under way while the bundle moves are resent to the new
    owner, which knows their sequence ids (the ledger and dedup state are shared): the
    topic holds every acknowledged message exactly once."""
    c = Cluster(tmp_path_factory.mktemp("dedup"), zookeeper, 2,
                {"brokerDeduplicationEnabled": "true"}, shared=True)
    c.start()
    try:
        topic = "persistent://public/default/dedup-moving"
        client = pulsar.Client(c.service_url, operation_timeout_seconds=30, logger=QUIET)
        try:
            load = AsyncLoad(client.create_producer(
                topic, producer_name="dedup-p", batching_enabled=False,
                block_if_queue_full=True, max_pending_messages=200))
            move_back_and_forth(c, topic, load)
            acked = load.finish()
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            stored: list[int] = []
            while reader.has_message_available():
                stored.append(int(reader.read_next(10_000).data()))
            assert set(acked) <= set(stored)
            assert len(stored) == len(set(stored)), "a message was stored twice"
        finally:
            client.close()
    finally:
        c.stop()
