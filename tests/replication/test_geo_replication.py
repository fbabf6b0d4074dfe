"""Geo-replication between two `magnetar standalone` processes as clusters A and B, driven
with the official client: each cluster has the other's record and the same tenant and
namespace with ``replication_clusters`` [A, B]; deduplication is on (the remote side drops
what a restarted replicator sends again)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.client import MessageId as MagnetarMessageId
from magnetar.sync import Client as MagnetarClient
from tests.broker.brokerproc import SILENT, BrokerProcess, read_all, wait_until

pytestmark = pytest.mark.slow

NS = "geo/ns"


def _admin(broker: BrokerProcess, method: str, path: str, body: object | None = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{broker.http_port}{path}", data=data, method=method,
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text else None


def _http_up(broker: BrokerProcess) -> bool:
    try:
        socket.create_connection(("127.0.0.1", broker.http_port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _setup(local: BrokerProcess, remote: BrokerProcess, remote_name: str) -> None:
    wait_until(lambda: _http_up(local), 60, "the admin API")
    _admin(local, "PUT", f"/admin/v2/clusters/{remote_name}", {
        "serviceUrl": f"http://127.0.0.1:{remote.http_port}", "brokerServiceUrl": remote.url})
    _admin(local, "PUT", "/admin/v2/tenants/geo", {"adminRoles": [], "allowedClusters": ["A", "B"]})
    _admin(local, "PUT", f"/admin/v2/namespaces/{NS}")
    _admin(local, "POST", f"/admin/v2/namespaces/{NS}/replication", ["A", "B"])


@contextlib.contextmanager
def two_standalones(tmp_path: Path, settings: dict[str, str] | None = None,
                    b_settings: dict[str, str] | None = None
                    ) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    """Standalones A and B (deduplication on, plus ``settings``; B also ``b_settings``),
    each knowing the other's record, both with the namespace replicated to A and B."""
    brokers = {}
    for name, extra in (("A", {}), ("B", b_settings or {})):
        root = tmp_path / name
        root.mkdir()
        brokers[name] = BrokerProcess(root, {"clusterName": name, "brokerDeduplicationEnabled": "true",
                                             **(settings or {}), **extra})
    a, b = brokers["A"], brokers["B"]
    try:
        a.start()
        b.start()
        _setup(a, b, "B")
        _setup(b, a, "A")
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    with two_standalones(tmp_path) as pair:
        yield pair


def _topic() -> str:
    return f"persistent://{NS}/t-{uuid.uuid4().hex[:10]}"


def _client(broker: BrokerProcess) -> pulsar.Client:
    return pulsar.Client(broker.url, logger=SILENT, operation_timeout_seconds=30)


def _send(producer: pulsar.Producer, tag: str, count: int, start: int = 0) -> set[bytes]:
    """Publish ``tag-i`` messages (key and properties set); the set of those acknowledged."""
    acked: set[bytes] = set()
    lock = threading.Lock()

    def done(data: bytes) -> object:
        def callback(res: pulsar.Result, _mid: pulsar.MessageId) -> None:
            if res == pulsar.Result.Ok:
                with lock:
                    acked.add(data)
        return callback

    for i in range(start, start + count):
        data = f"{tag}-{i}".encode()
        producer.send_async(data, done(data), partition_key=f"k-{tag}-{i}",
                            properties={"origin": tag, "i": str(i)})
    producer.flush()
    return acked


def _receive_until(consumer: pulsar.Consumer, sentinels: set[bytes]) -> list[pulsar.Message]:
    """Receive (and acknowledge) until every sentinel arrived; everything received."""
    got: list[pulsar.Message] = []
    seen: set[bytes] = set()
    while not sentinels <= seen:
        msg = consumer.receive(timeout_millis=60000)
        consumer.acknowledge(msg)
        got.append(msg)
        seen.add(msg.data())
    return got


def _check(msg: pulsar.Message) -> None:
    tag, i = msg.data().decode().split("-")
    assert msg.partition_key() == f"k-{tag}-{i}"
    assert msg.properties() == {"origin": tag, "i": i}


def test_active_active_each_message_once_on_both_sides(
        clusters: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = clusters
    topic = _topic()
    ca, cb = _client(a), _client(b)
    try:
        sub = dict(subscription_name="s", initial_position=pulsar.InitialPosition.Earliest)
        consumer_a, consumer_b = ca.subscribe(topic, **sub), cb.subscribe(topic, **sub)
        # A batches, B does not: batches are replicated as batches
        pa = ca.create_producer(topic, batching_enabled=True, batching_max_messages=50,
                                block_if_queue_full=True)
        pb = cb.create_producer(topic, block_if_queue_full=True)
        n = 300
        results: dict[str, set[bytes]] = {}
        threads = [threading.Thread(target=lambda p=p, t=t: results.__setitem__(t, _send(p, t, n)))
                   for p, t in ((pa, "A"), (pb, "B"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert len(results["A"]) == len(results["B"]) == n
        # a last message each way: what either side would echo back arrives before it
        pa.send(b"A-end", partition_key="k-A-end", properties={"origin": "A", "i": "end"})
        pb.send(b"B-end", partition_key="k-B-end", properties={"origin": "B", "i": "end"})
        expected = sorted(results["A"] | results["B"] | {b"A-end", b"B-end"})
        for consumer in (consumer_a, consumer_b):
            got = _receive_until(consumer, {b"A-end", b"B-end"})
            assert sorted(m.data() for m in got) == expected  # every message once, no echo
            for m in got:
                _check(m)
        stats = _admin(a, "GET", f"/admin/v2/persistent/{topic.split('://')[1]}/stats")
        assert isinstance(stats, dict)
        assert set(stats["subscriptions"]) == {"s"}  # the replicator's cursor is not listed
        assert set(stats["replication"]) == {"B"}
        repl = stats["replication"]["B"]
        assert repl["connected"] is True and repl["replicationBacklog"] == 0
        assert repl["msgOutCounter"] == n + 1
    finally:
        ca.close()
        cb.close()
    # Magnetar's own client shows where a replicated message was first published
    mc = MagnetarClient(b.url)
    try:
        reader = mc.create_reader(topic, MagnetarMessageId.earliest)
        origins = {}
        for _ in range(len(expected)):
            msg = reader.read_next(timeout_millis=30000)
            origins[msg.data().split(b"-")[0]] = msg.replicated_from()
        assert origins == {b"A": "A", b"B": None}
    finally:
        mc.close()


@pytest.mark.parametrize("how", ["stop", "kill9"])
def test_remote_down_and_back_loses_and_repeats_nothing(
        clusters: tuple[BrokerProcess, BrokerProcess], how: str) -> None:
    a, b = clusters
    topic = _topic()
    ca = _client(a)
    try:
        producer = ca.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
        first = _send(producer, "A", 200)
        b.stop() if how == "stop" else b.kill9()  # A keeps the backlog in its replicator's cursor
        second = _send(producer, "A", 200, start=200)
        path = f"/admin/v2/persistent/{topic.split('://')[1]}/stats"
        wait_until(lambda: not _admin(a, "GET", path)["replication"]["B"]["connected"],  # type: ignore[index]
                   30, "the replicator to notice B is down")
        assert _admin(a, "GET", path)["replication"]["B"]["replicationBacklog"] > 0  # type: ignore[index]
        producer.send(b"A-end", properties={"origin": "A", "i": "end"}, partition_key="k-A-end")
        b.start()
        cb = _client(b)
        try:
            consumer = cb.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            got = _receive_until(consumer, {b"A-end"})
            assert sorted(m.data() for m in got) == sorted(first | second | {b"A-end"})
        finally:
            cb.close()
    finally:
        ca.close()


def test_replicating_broker_killed_loses_and_repeats_nothing(
        clusters: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = clusters
    topic = _topic()
    cb = _client(b)
    consumer = cb.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    try:
        ca = _client(a)
        producer = ca.create_producer(topic, batching_enabled=True, batching_max_messages=20,
                                      block_if_queue_full=True)
        acked = _send(producer, "A", 3000)
        assert len(acked) == 3000
        ca.close()  # nobody uses the topic in A any more: its restart alone resumes replication
        got: list[pulsar.Message] = []
        while len(got) < 100:  # replication under way
            msg = consumer.receive(timeout_millis=60000)
            consumer.acknowledge(msg)
            got.append(msg)
        a.kill9()
        a.start()  # loads the replicated topic, whose replicator resumes from its cursor
        while len({m.data() for m in got}) < 3000:
            msg = consumer.receive(timeout_millis=60000)
            consumer.acknowledge(msg)
            got.append(msg)
        ca = _client(a)
        try:
            ca.create_producer(topic).send(
                b"A-end", properties={"origin": "A", "i": "end"}, partition_key="k-A-end")
            got += _receive_until(consumer, {b"A-end"})  # whatever was sent twice came before
            stored = [data for _mid, data in read_all(ca, topic)]
        finally:
            ca.close()
        assert sorted(stored) == sorted(acked | {b"A-end"})
        assert sorted(m.data() for m in got) == sorted(stored)
    finally:
        cb.close()


def test_cluster_taken_out_stops_replication_and_drops_the_cursor(
        clusters: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = clusters
    topic = _topic()
    path = f"/admin/v2/persistent/{topic.split('://')[1]}/stats"
    ca, cb = _client(a), _client(b)
    try:
        consumer = cb.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = ca.create_producer(topic, block_if_queue_full=True)
        before = _send(producer, "A", 50)
        producer.send(b"A-end1", partition_key="k-A-end1", properties={"origin": "A", "i": "end1"})
        got = _receive_until(consumer, {b"A-end1"})
        assert sorted(m.data() for m in got) == sorted(before | {b"A-end1"})
        _admin(a, "POST", f"/admin/v2/namespaces/{NS}/replication", ["A"])
        wait_until(lambda: _admin(a, "GET", path)["replication"] == {}, 30,  # type: ignore[index]
                   "the replicator to B to stop")
        gap = _send(producer, "A", 50, start=50)  # not replicated: B is not listed
        assert len(gap) == 50
        _admin(a, "POST", f"/admin/v2/namespaces/{NS}/replication", ["A", "B"])
        wait_until(lambda: "B" in _admin(a, "GET", path)["replication"], 30,  # type: ignore[index, operator]
                   "the replicator to B to start again")
        producer.send(b"A-end2", partition_key="k-A-end2", properties={"origin": "A", "i": "end2"})
        # a new cursor starts at the end: what was published while B was out stays in A
        got = _receive_until(consumer, {b"A-end2"})
        assert [m.data() for m in got] == [b"A-end2"]
    finally:
        ca.close()
        cb.close()


def test_partitioned_topic_replicated_partition_by_partition(
        clusters: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = clusters
    topic = _topic()
    rest = topic.split("://")[1]
    _admin(a, "PUT", f"/admin/v2/persistent/{rest}/partitions", 3)
    ca = _client(a)
    try:
        producer = ca.create_producer(topic, batching_enabled=True, block_if_queue_full=True,
                                      message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
        sent = _send(producer, "A", 300)
        assert len(sent) == 300
        # B's partitioned topic is created by the replicators, with A's count
        wait_until(lambda: _admin(b, "GET", f"/admin/v2/persistent/{rest}/partitions")
                   == {"partitions": 3}, 60, "the partitioned topic in B")
        cb = _client(b)
        try:
            consumer = cb.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            got: list[pulsar.Message] = []
            while len(got) < 300:
                msg = consumer.receive(timeout_millis=60000)
                consumer.acknowledge(msg)
                got.append(msg)
            assert sorted(m.data() for m in got) == sorted(sent)
            for m in got:
                _check(m)
            # each message in B sits in the partition it was published to in A
            in_a = {data: i for i in range(3) for _mid, data in read_all(ca, f"{topic}-partition-{i}")}
            in_b = {m.data(): int(m.topic_name().rsplit("-", 1)[1]) for m in got}
            assert in_b == {data: in_a[data] for data in sent}
        finally:
            cb.close()
    finally:
        ca.close()


def test_a_remote_broker_down_does_not_stop_replication_into_the_others(
        clusters: tuple[BrokerProcess, BrokerProcess]) -> None:
    """B's record lists two brokers, the first one with nothing listening: the replicator
    connects to the one that answers (as a client given a multi-host service URL does)."""
    a, b = clusters
    with socket.socket() as closed:  # a port that was free: nothing listens there
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]
    _admin(a, "POST", "/admin/v2/clusters/B", {
        "serviceUrl": f"http://127.0.0.1:{b.http_port}",
        "brokerServiceUrl": f"pulsar://127.0.0.1:{dead},127.0.0.1:{b.port}"})
    topic = _topic()
    ca, cb = _client(a), _client(b)
    try:
        consumer = cb.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = ca.create_producer(topic, block_if_queue_full=True)
        acked = _send(producer, "A", 20)
        producer.send(b"A-end", partition_key="k-A-end", properties={"origin": "A", "i": "end"})
        got = _receive_until(consumer, {b"A-end"})
        assert {m.data() for m in got} == acked | {b"A-end"}
    finally:
        ca.close()
        cb.close()


def test_a_missing_segment_is_skipped_by_the_replicator_with_auto_skip(tmp_path: Path) -> None:
    """With ``autoSkipNonRecoverableData``, a replicator whose backlog starts in a segment
    whose file is missing skips what is left of it (as Pulsar's cursors skip a ledger that
    no longer exists) and replicates what follows; without it, it would read that segment
    again after each back-off for as long as the file is away."""
    settings = {"autoSkipNonRecoverableData": "true", "managedLedgerCacheSizeMB": "0",
                "managedLedgerMaxEntriesPerLedger": "5"}
    with two_standalones(tmp_path, settings) as (a, b):
        topic = _topic()
        name = topic.split("://")[1]
        ca = _client(a)
        try:
            producer = ca.create_producer(topic, batching_enabled=False)

            def connected() -> bool:
                stats = _admin(a, "GET", f"/admin/v2/persistent/{name}/stats")
                return bool(stats["replication"].get("B", {}).get("connected"))  # type: ignore[index]

            wait_until(connected, 30, "the replicator to connect")
            b.stop()
            wait_until(lambda: not connected(), 30, "the replicator to notice B is down")
            sent = [b"m%d" % i for i in range(15)]
            for data in sent:
                producer.send(data)
            internal = _admin(a, "GET", f"/admin/v2/persistent/{name}/internalStats")
            first = next(s for s in internal["ledgers"] if s["entries"] > 0)  # type: ignore[index]
            assert 0 < first["entries"] < len(sent)
            [segment] = a.data_dir.glob(f"ledgers/*/{first['ledgerId']:012d}.seg")
            segment.rename(segment.with_name(segment.name + ".away"))
            b.start()
            cb = _client(b)
            try:
                consumer = cb.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
                got = [m.data() for m in _receive_until(consumer, {sent[-1]})]
                assert got == sent[first["entries"]:]
            finally:
                cb.close()
            assert f"skipping {first['entries']} entries" in a.log()
        finally:
            ca.close()
