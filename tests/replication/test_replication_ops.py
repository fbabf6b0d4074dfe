"""Operating geo-replication between two `magnetar standalone` processes (clusters A and B,
set up as in test_geo_replication.py), with the official client: the replicator held to
``replicatorDispatchRate``; the ``replication`` stats of both sides (a remote replicator's
producer seen as ``inboundConnection``) and the ``pulsar_replication_*`` metrics at topic
and namespace level; the replicator's cursor under backlog quotas and message TTL while the
remote cluster is down."""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.broker.brokerproc import SILENT, BrokerProcess, wait_until
from tests.cluster.brokers import magnetar
from tests.replication.test_geo_replication import NS, _admin, two_standalones

pytestmark = pytest.mark.slow

#: housekeeping (TTL, backlog quotas) and rate samples every second
_FAST = {"backlogQuotaCheckIntervalInSeconds": "1", "statsUpdateFrequencyInSecs": "1",
         "magnetarMetricsCacheSeconds": "0"}


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    """A shows topic-level metrics, B namespace-level ones."""
    with two_standalones(tmp_path, _FAST, {"exposeTopicLevelMetricsInPrometheus": "false"}) as pair:
        yield pair


def _topic() -> str:
    return f"persistent://{NS}/t-{uuid.uuid4().hex[:10]}"


def _client(broker: BrokerProcess) -> pulsar.Client:
    return pulsar.Client(broker.url, logger=SILENT, operation_timeout_seconds=30)


def _stats(broker: BrokerProcess, topic: str) -> dict[str, object]:
    stats = _admin(broker, "GET", f"/admin/v2/persistent/{topic.split('://')[1]}/stats")
    assert isinstance(stats, dict)
    return stats


def _repl(broker: BrokerProcess, topic: str, remote: str) -> dict[str, object]:
    entry = _stats(broker, topic)["replication"][remote]  # type: ignore[index]
    assert isinstance(entry, dict)
    return entry


def _metrics(broker: BrokerProcess) -> dict[str, float]:
    """``name{labels}`` -> value of every sample."""
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(\w+\{[^}]*\}) (\S+)$", text, re.MULTILINE)}


def _send_all(producer: pulsar.Producer, count: int, size: int = 0) -> None:
    """Publish ``count`` messages and wait until every one is acknowledged."""
    failed: list[pulsar.Result] = []
    for i in range(count):
        data = b"m%d" % i
        producer.send_async(data.ljust(size, b"."),
                            lambda r, _m: failed.append(r) if r != pulsar.Result.Ok else None)
    producer.flush()
    assert not failed


def test_replicator_held_to_its_dispatch_rate(clusters: tuple[BrokerProcess, BrokerProcess]) -> None:
    """600 messages published at once in A reach B no faster than A's namespace lets its
    replicator send them: 100 msg/s (the first 100 at once, the bucket's burst)."""
    a, b = clusters
    _admin(a, "POST", f"/admin/v2/namespaces/{NS}/replicatorDispatchRate",
           {"dispatchThrottlingRateInMsg": 100, "ratePeriodInSecond": 1})
    assert _admin(a, "GET", f"/admin/v2/namespaces/{NS}/replicatorDispatchRate") == {
        "dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": -1,
        "relativeToPublishRate": False, "ratePeriodInSecond": 1}
    topic = _topic()
    ca, cb = _client(a), _client(b)
    arrived: list[float] = []
    done = threading.Event()

    def listener(consumer: pulsar.Consumer, msg: pulsar.Message) -> None:
        arrived.append(time.monotonic())
        consumer.acknowledge(msg)
        if len(arrived) == 600:
            done.set()

    try:
        cb.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest,
                     message_listener=listener)
        producer = ca.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        started = time.monotonic()
        _send_all(producer, 600)
        assert done.wait(120), f"{len(arrived)} of 600 replicated"
        # 500 messages past the burst at 100/s: 5 s at least after the first send
        assert arrived[-1] - started >= 4.5, arrived[-1] - started
        assert _repl(a, topic, "B")["msgOutCounter"] == 600
    finally:
        ca.close()
        cb.close()


def test_replication_stats_and_metrics_on_both_sides(
        clusters: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = clusters
    topic = _topic()
    ca, cb = _client(a), _client(b)
    stop = threading.Event()
    try:
        consumer_b = cb.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        pa = ca.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        pb = cb.create_producer(topic, batching_enabled=False, block_if_queue_full=True)

        def steady() -> None:  # 50 msg/s each way, until the rates show
            while not stop.wait(0.02):
                pa.send_async(b"a", lambda _r, _m: None)
                pb.send_async(b"b", lambda _r, _m: None)

        thread = threading.Thread(target=steady, daemon=True)
        thread.start()
        wait_until(lambda: float(_repl(a, topic, "B")["msgRateOut"]) > 0  # type: ignore[arg-type]
                   and float(_repl(a, topic, "B")["msgRateIn"]) > 0, 60,  # type: ignore[arg-type]
                   "replication rates in A")
        stop.set()
        thread.join(10)
        out_a, in_b = _repl(a, topic, "B"), _repl(b, topic, "A")
        # B sees A's replicator producer coming from the address A's replicator uses
        assert out_a["connected"] is True and in_b["connected"] is True
        assert in_b["inboundConnection"] and in_b["inboundConnectedSince"]
        assert out_a["outboundConnection"] == f"[L:{in_b['inboundConnection']} - R:127.0.0.1:{b.port}]"
        assert out_a["outboundConnectedSince"]
        in_a = _repl(a, topic, "B")
        assert f"[L:{in_a['inboundConnection']} -" in str(_repl(b, topic, "A")["outboundConnection"])
        # a replicator's producer is not one of the topic's publishers (as Pulsar)
        publishers = _stats(b, topic)["publishers"]
        assert [p["producerName"] for p in publishers] == [pb.producer_name()]  # type: ignore[union-attr]
        consumer_b.receive(timeout_millis=30000)

        # A: per topic; B: per namespace (exposeTopicLevelMetricsInPrometheus=false)
        labels_a = f'cluster="A",namespace="{NS}",topic="{topic}",remote_cluster="B"'
        wait_until(lambda: _metrics(a).get(f"pulsar_replication_backlog{{{labels_a}}}") == 0, 30,
                   "A's replication backlog to drain")
        metrics_a = _metrics(a)
        assert metrics_a[f"pulsar_replication_connected_count{{{labels_a}}}"] == 1
        for series in ("rate_in", "rate_out", "throughput_in", "throughput_out",
                       "rate_expired", "delay_in_seconds"):
            assert f"pulsar_replication_{series}{{{labels_a}}}" in metrics_a, series
        labels_b = f'cluster="B",namespace="{NS}",remote_cluster="A"'
        metrics_b = _metrics(b)
        assert metrics_b[f"pulsar_replication_connected_count{{{labels_b}}}"] == 1
        assert not any(k.startswith("pulsar_replication_") and "topic=" in k for k in metrics_b)
    finally:
        stop.set()
        ca.close()
        cb.close()


def test_remote_down_backlog_quota_and_ttl_count_the_replicator(
        clusters: tuple[BrokerProcess, BrokerProcess]) -> None:
    """With B stopped and no subscription in A, the replicator's cursor alone holds A's
    backlog: the size quota refuses producers (producer_exception), eviction moves the
    cursor back under the quota, message TTL expires the rest; B then gets none of it."""
    a, b = clusters
    topic = _topic()
    base = f"/admin/v2/namespaces/{NS}"
    ca = _client(a)
    try:
        ca.create_producer(topic).send(b"first")  # the topic and its replicator in A
        wait_until(lambda: _repl(a, topic, "B")["replicationBacklog"] == 0, 30, "first replicated")
        b.stop()
        wait_until(lambda: not _repl(a, topic, "B")["connected"], 30, "A's replicator to see B down")
        producer = ca.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        _send_all(producer, 100, size=1000)
        assert _repl(a, topic, "B")["replicationBacklog"] == 100
        assert _stats(a, topic)["backlogSize"] >= 100_000  # type: ignore[operator]
        _admin(a, "POST", f"{base}/backlogQuota?backlogQuotaType=destination_storage",
               {"limitSize": 20_000, "policy": "producer_exception"})

        def refused() -> bool:
            try:
                ca.create_producer(topic).close()
            except pulsar.ProducerBlockedQuotaExceededException:
                return True
            return False

        wait_until(refused, 30, "a new producer refused over the backlog quota")
        # eviction: the replicator's cursor skips to under 90% of the quota
        _admin(a, "POST", f"{base}/backlogQuota?backlogQuotaType=destination_storage",
               {"limitSize": 20_000, "policy": "consumer_backlog_eviction"})
        wait_until(lambda: 0 < _repl(a, topic, "B")["replicationBacklog"] <= 18,  # type: ignore[operator]
                   30, "the replicator's cursor moved under the quota")
        ca.create_producer(topic).close()  # no longer refused
        # message TTL: the rest expires for the replicator as for a subscription
        _admin(a, "POST", f"{base}/messageTTL", 1)
        wait_until(lambda: _repl(a, topic, "B")["replicationBacklog"] == 0, 30,
                   "the replicator's backlog expired")
        _admin(a, "DELETE", f"{base}/messageTTL")
        _admin(a, "DELETE", f"{base}/backlogQuota?backlogQuotaType=destination_storage")
        b.start()
        cb = _client(b)
        try:
            consumer = cb.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            ca.create_producer(topic).send(b"end")
            got = []
            while not got or got[-1] != b"end":
                msg = consumer.receive(timeout_millis=60000)
                consumer.acknowledge(msg)
                got.append(msg.data())
            assert got == [b"first", b"end"]  # what was dropped for B never came
        finally:
            cb.close()
    finally:
        ca.close()


def _get(broker: BrokerProcess, path: str) -> tuple[dict[str, str], bytes]:
    """(headers, body) of an admin GET."""
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}{path}", timeout=30) as r:
        return dict(r.headers.items()), r.read()


def test_admin_shows_replication_as_pulsar_does(
        clusters: tuple[BrokerProcess, BrokerProcess]) -> None:
    """A replicated message's origin in examinemessage / peek (X-Pulsar-replicated-from, and
    in the CLI), the partitions' replication summed in partitioned-stats, 403 for an
    unknown cluster in a namespace's replication clusters."""
    a, b = clusters
    topic = _topic()
    rest = topic.split("://")[1]
    _admin(a, "PUT", f"/admin/v2/persistent/{rest}/partitions", 2)
    ca, cb = _client(a), _client(b)
    try:
        producer = ca.create_producer(
            topic, batching_enabled=False, block_if_queue_full=True,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
        _send_all(producer, 10)

        def summed() -> dict[str, object]:
            stats = _admin(a, "GET", f"/admin/v2/persistent/{rest}/partitioned-stats")
            assert isinstance(stats, dict)
            return dict(stats["replication"].get("B", {}))

        wait_until(lambda: summed().get("msgOutCounter") == 10
                   and summed().get("replicationBacklog") == 0, 60, "A's partitions replicated")
        assert summed()["connected"] is True
        per = [_repl(a, f"{topic}-partition-{i}", "B")["msgOutCounter"] for i in range(2)]
        assert sum(per) == 10 and all(per)  # type: ignore[arg-type]

        part = f"{rest}-partition-0"
        headers, _ = _get(b, f"/admin/v2/persistent/{part}/examinemessage"
                             "?initialPosition=earliest&messagePosition=1")
        assert headers.get("X-Pulsar-replicated-from") == "A"
        headers, _ = _get(a, f"/admin/v2/persistent/{part}/examinemessage"
                             "?initialPosition=earliest&messagePosition=1")
        assert "X-Pulsar-replicated-from" not in headers  # published here
        consumer = cb.subscribe(f"{topic}-partition-0", "peek",
                                initial_position=pulsar.InitialPosition.Earliest)
        consumer.close()
        headers, _ = _get(b, f"/admin/v2/persistent/{part}/subscription/peek/position/1")
        assert headers.get("X-Pulsar-replicated-from") == "A"
        shown = magnetar("admin", "--admin-url", f"http://127.0.0.1:{b.http_port}", "topics",
                         "examine-message", f"persistent://{part}", "-i", "earliest", "-m", "1")
        assert shown.returncode == 0, shown.stderr
        assert re.search(r"^X-Pulsar-replicated-from\s+A$", shown.stdout, re.MULTILINE), shown.stdout

        status = urllib.request.Request(
            f"http://127.0.0.1:{a.http_port}/admin/v2/namespaces/{NS}/replication",
            data=b'["A", "nowhere"]', method="POST", headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(status, timeout=30)
        assert refused.value.code == 403  # as Pulsar: "Invalid cluster id"
    finally:
        ca.close()
        cb.close()
