"""Losing the ZooKeeper session without losing the cluster (docs/cluster.md, "When the
metadata session ends"), with two brokers on a shared data directory under the official
client's load (deduplication on):

- ZooKeeper frozen (SIGSTOP) past the session timeout, then resumed: no broker stops
  (``zookeeperSessionExpiredPolicy=reconnect``, the default); each opens a new session,
  registers again and takes bundles again through compare-and-set; every broker serves
  within seconds of the resume, and every acknowledged message is consumed, once;
- a bundle owner paused (SIGSTOP) past the session timeout, then resumed: by its own clock
  it knows its session may be gone, acknowledges nothing more for its old bundles and
  closes their producers and consumers, which move on at once (its receipts after the
  pause would carry its old segment's ledger id: none does);
- ZooKeeper frozen, then stopped, for a broker's admin API: a change is answered 503 with
  the reason within a few seconds, reads are answered from the broker's copies, and the
  broker logs one line when ZooKeeper is lost and one when it is back, no traceback.

The times from a resume to serving are printed (``-s``) for the record.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.cluster.brokers import (
    Cluster,
    ClusterBroker,
    http_call,
    owner_port,
    topic_owned_by,
)
from tests.zkserver import ZooKeeperServer, zk_missing_reason

pytestmark = pytest.mark.skipif(zk_missing_reason() is not None,
                                reason=zk_missing_reason() or "")

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
R = pulsar.Result
SESSION_S = 4.0


@pytest.fixture
def own_zk(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this test alone (it is frozen and stopped)."""
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    yield server
    server.stop()


class Load:
    """Numbered messages sent with ``send_async`` (no send timeout: the client resends
    until a broker acknowledges), each acknowledgement recorded with its time and message
    id from the callback."""

    def __init__(self, producer: pulsar.Producer) -> None:
        self.producer = producer
        self.acked: dict[int, tuple[float, pulsar.MessageId]] = {}
        self.errors: list[pulsar.Result] = []
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _done(self, res: pulsar.Result, mid: pulsar.MessageId, n: int) -> None:
        with self._lock:
            if res == R.Ok:
                self.acked[n] = (time.monotonic(), mid)
            else:
                self.errors.append(res)

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            self.producer.send_async(str(n).encode(), lambda r, m, n=n: self._done(r, m, n))
            n += 1
            time.sleep(0.005)  # a steady rate, not synchronisation

    def acks_after(self, t: float) -> list[tuple[float, pulsar.MessageId]]:
        with self._lock:
            return sorted(v for v in self.acked.values() if v[0] > t)

    def first_ack_after(self, t: float, timeout: float) -> float:
        """Seconds from ``t`` to the first acknowledgement after it."""
        deadline = time.monotonic() + timeout
        while not (after := self.acks_after(t)):
            assert time.monotonic() < deadline, f"no send acknowledged {timeout} s after"
            time.sleep(0.02)  # bounded poll of the client's callbacks
        return after[0][0] - t

    def wait_acked(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < n:
            assert time.monotonic() < deadline, f"{len(self.acked)} of {n} acknowledged"
            time.sleep(0.02)  # bounded poll of the client's callbacks

    def finish(self) -> set[int]:
        self.stop.set()
        self.thread.join(30)
        self.producer.flush()
        with self._lock:
            return set(self.acked)


def consume_all(client: pulsar.Client, topic: str, wanted: set[int]) -> list[int]:
    """Every message of ``topic`` from the start (until ``wanted`` are in and 3 s pass
    without more), as numbers, duplicates kept."""
    consumer = client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
    got: list[int] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            msg = consumer.receive(3_000)
        except pulsar.Timeout:
            if wanted <= set(got):
                break
            continue
        got.append(int(msg.data()))
        consumer.acknowledge(msg)
    consumer.close()
    return got


def producer_of(client: pulsar.Client, topic: str) -> pulsar.Producer:
    return client.create_producer(topic, batching_enabled=False, send_timeout_millis=0,
                                  block_if_queue_full=True, max_pending_messages=500)


def registered(broker: ClusterBroker) -> list[str]:
    status, listed, _ = http_call("GET", f"{broker.web_url}/admin/v2/brokers/standalone")
    return list(listed) if status == 200 and listed else []


def report_time_ms(broker: ClusterBroker) -> int:
    """When the broker last wrote its load report (ms since the epoch; 0: none yet)."""
    status, report, _ = http_call("GET", f"{broker.web_url}/admin/v2/broker-stats/load-report")
    return int(report.get("lastUpdate", 0)) if status == 200 and report else 0


def topic_served_by(cluster: Cluster, broker: ClusterBroker, loaded: list[str],
                    probe_namespace: str) -> str:
    """A topic the broker serves: one of the ``loaded`` topics its bundle holds, or else
    one of a free bundle it takes when asked. The loads' topics went wherever their
    clients looked them up after the session loss, and bundles go to the least loaded
    broker by message rate: a broker that took both loads takes no free bundle until its
    rate is reported, so only the broker without a load is asked (in a namespace of
    free bundles)."""
    for topic in loaded:
        if owner_port(cluster, topic) == broker.port:
            return topic
    for i in range(200):
        topic = f"persistent://{probe_namespace}/probe-{i}-partition-0"
        if owner_port(cluster, topic) == broker.port:
            return topic
    raise AssertionError(f"the broker on port {broker.port} serves no bundle")


def dedup_cluster(tmp_path: Path, zk: ZooKeeperServer) -> Cluster:
    """Two started brokers sharing storage, deduplication on, a SESSION_S session."""
    cluster = Cluster(tmp_path / "c", zk, 2,
                      {"brokerDeduplicationEnabled": "true",
                       "metadataStoreSessionTimeoutMillis": str(int(SESSION_S * 1000))},
                      shared=True)
    cluster.start()
    return cluster


def log_of(broker: ClusterBroker) -> str:
    return broker.log_path.read_text(errors="replace")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_zookeeper_frozen_past_the_session_timeout(own_zk: ZooKeeperServer,
                                                    tmp_path: Path) -> None:
    cluster = dedup_cluster(tmp_path, own_zk)
    try:
        a, b = cluster.brokers
        topics = [topic_owned_by(cluster, a.port, "zk-frozen-a"),
                  topic_owned_by(cluster, b.port, "zk-frozen-b")]
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60, logger=QUIET)
        try:
            loads = [Load(producer_of(client, t)) for t in topics]
            for load in loads:
                load.wait_acked(100)
            own_zk.freeze()
            try:
                # both brokers lose their sessions by their own clocks (the server cannot
                # tell them): the session timeout, a heartbeat and a check at most
                deadline = time.monotonic() + SESSION_S + 30
                while not all("metadata session lost" in log_of(x) for x in (a, b)):
                    assert time.monotonic() < deadline, "a broker did not notice"
                    time.sleep(0.1)  # bounded poll of the brokers' logs
                time.sleep(2.0)  # ZooKeeper stays frozen past every session's timeout
            finally:
                own_zk.thaw()
            resumed = time.monotonic()
            took = [load.first_ack_after(resumed, 60) for load in loads]
            # every broker is up, registered again, and takes a free bundle when asked
            deadline = time.monotonic() + 60
            while sorted(registered(a)) != sorted([a.broker_id, b.broker_id]):
                assert time.monotonic() < deadline, registered(a)
                time.sleep(0.1)  # bounded poll of the registry
            back = time.monotonic() - resumed
            # each serves a bundle again, asked once both have reported the loads' new
            # places (a report is the rates since the one before)
            flowing_ms = int(time.time() * 1000)
            deadline = time.monotonic() + 60
            while min(report_time_ms(x) for x in (a, b)) <= flowing_ms:
                assert time.monotonic() < deadline, "a broker wrote no load report"
                time.sleep(0.1)  # bounded poll of the load reports
            status, _, _ = http_call("PUT", f"{a.web_url}/admin/v2/namespaces/public/after-resume")
            assert status in (200, 204), status
            for broker in (a, b):
                assert broker.proc is not None and broker.proc.poll() is None
                served = topic_served_by(cluster, broker, topics, "public/after-resume")
                if served not in topics:  # (the loads' own sends go on below)
                    assert client.create_producer(served).send(b"x") is not None
            for load in loads:
                load.wait_acked(len(load.acked) + 50)
            acked = [load.finish() for load in loads]
            print(f"\nZooKeeper resumed: first acknowledgement {took[0]:.2f} s and"
                  f" {took[1]:.2f} s later (topics first owned by each broker); both"
                  f" brokers registered again {back:.2f} s after")
            for topic, wanted in zip(topics, acked, strict=True):
                got = consume_all(client, topic, wanted)
                assert wanted <= set(got), sorted(wanted - set(got))[:20]
                assert len(got) == len(set(got)), "a message stored twice (dedup on)"
            for broker in (a, b):
                text = log_of(broker)
                assert "Traceback" not in text, text[-3000:]
                assert "stopping the broker" not in text
            assert max(took) < 20, took  # "within seconds" (the client's backoff included)
        finally:
            client.close()
    finally:
        cluster.stop()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_paused_owner_stops_serving_and_its_clients_move(own_zk: ZooKeeperServer,
                                                           tmp_path: Path) -> None:
    cluster = dedup_cluster(tmp_path, own_zk)
    try:
        a, b = cluster.brokers
        topic = topic_owned_by(cluster, a.port, "paused-owner")
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60, logger=QUIET)
        try:
            consumer = client.subscribe(topic, "live")
            load = Load(producer_of(client, topic))
            load.wait_acked(100)
            assert a.proc is not None
            paused = time.monotonic()
            os.kill(a.proc.pid, signal.SIGSTOP)
            try:
                deadline = time.monotonic() + 60
                while a.broker_id in registered(b):  # its session expires at the server
                    assert time.monotonic() < deadline, "the paused broker's session stayed"
                    time.sleep(0.1)  # bounded poll of the other broker's view
                time.sleep(1.0)  # paused a little longer than that
            finally:
                os.kill(a.proc.pid, signal.SIGCONT)
            resumed = time.monotonic()
            before = [mid for t, mid in load.acks_after(0) if t < paused]
            old_ledgers = {mid.ledger_id() for mid in before}
            took = load.first_ack_after(resumed, 60)
            load.wait_acked(len(load.acked) + 100)
            acked = load.finish()
            after = load.acks_after(resumed)
            # nothing acknowledged after the pause under the old ownership: a receipt the
            # resumed owner sent for its old bundle would carry its old segment's ledger id
            # (-1: a resend the new owner's deduplication knew, stored before the pause)
            stale = [mid for _t, mid in after
                     if 0 <= mid.ledger_id() <= max(old_ledgers)]
            assert not stale, stale[:5]
            print(f"\nowner paused {resumed - paused:.1f} s (session {SESSION_S:g} s): first"
                  f" acknowledgement {took:.2f} s after it resumed")
            # the live consumer moved too: it gets what was sent after the resume
            live: set[int] = set()
            deadline = time.monotonic() + 60
            newest = max(acked)
            while newest not in live:
                assert time.monotonic() < deadline, "the consumer did not move"
                try:
                    msg = consumer.receive(5_000)
                except pulsar.Timeout:
                    continue
                live.add(int(msg.data()))
                consumer.acknowledge(msg)
            got = consume_all(client, topic, acked)
            assert acked <= set(got), sorted(acked - set(got))[:20]
            assert len(got) == len(set(got)), "a message stored twice (dedup on)"
            text = log_of(a)
            assert "metadata session lost" in text
            assert "Traceback" not in text, text[-3000:]
            assert a.proc is not None and a.proc.poll() is None
            assert took < 15, took
        finally:
            client.close()
    finally:
        cluster.stop()


@pytest.mark.timeout(300)
def test_admin_with_the_metadata_store_down(own_zk: ZooKeeperServer, tmp_path: Path) -> None:
    """A session long enough to outlive the freeze: the broker only loses its connection."""
    broker = Cluster(tmp_path / "c", own_zk, 1,
                     {"metadataStoreSessionTimeoutMillis": "20000"}).start().brokers[0]
    try:
        web = broker.web_url
        assert http_call("PUT", f"{web}/admin/v2/tenants/t1",
                         {"allowedClusters": ["standalone"]})[0] == 204
        assert http_call("PUT", f"{web}/admin/v2/namespaces/t1/before")[0] == 204
        own_zk.freeze()
        try:
            # a change made as ZooKeeper goes silent waits only until the broker notices
            start = time.monotonic()
            status, reason, _ = http_call("PUT", f"{web}/admin/v2/namespaces/t1/during")
            took = time.monotonic() - start
            assert status == 503, (status, reason)
            assert "metadata store unavailable: ZooKeeper at" in reason, reason
            assert "not connected for" in reason, reason
            assert took < 8, took
            # then at once
            start = time.monotonic()
            status, reason, _ = http_call("PUT", f"{web}/admin/v2/namespaces/t1/again")
            assert status == 503 and time.monotonic() - start < 2, (status, reason)
            # reads come from the broker's copies
            status, listed, _ = http_call("GET", f"{web}/admin/v2/namespaces/t1")
            assert status == 200 and "t1/before" in listed, (status, listed)
            assert http_call("GET", f"{web}/admin/v2/tenants")[0] == 200
        finally:
            own_zk.thaw()
        deadline = time.monotonic() + 60
        while http_call("PUT", f"{web}/admin/v2/namespaces/t1/after")[0] != 204:
            assert time.monotonic() < deadline, "admin changes refused after the thaw"
            time.sleep(0.2)  # bounded poll until the broker hears ZooKeeper again
        text = log_of(broker)
        assert text.count("unavailable until it is back") == 1, text[-3000:]
        assert text.count("is back, ") == 1, text[-3000:]
        # stopped: refused at once with the reason too
        own_zk.stop()
        start = time.monotonic()
        while (answer := http_call("PUT", f"{web}/admin/v2/namespaces/t1/stopped"))[0] != 503:
            assert time.monotonic() - start < 10, answer
            time.sleep(0.2)  # bounded poll until the broker notices
        assert "metadata store unavailable: ZooKeeper at" in answer[1], answer
        assert http_call("GET", f"{web}/admin/v2/namespaces/t1")[0] == 200
        assert "Traceback" not in log_of(broker), log_of(broker)[-3000:]
    finally:
        broker.stop()
