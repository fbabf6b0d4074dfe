"""Replication over a link that dies silently, in network namespaces (tests/netbed.py):
clusters A and B are ``magnetar standalone`` brokers on hosts ``a`` and ``b`` with a short
keep-alive (``keepAliveIntervalSeconds=2``), replicating one namespace both ways. Every
packet between the hosts is dropped (iptables, both ways) for longer than the keep-alive:
A's replicator notices (its stats say ``connected: false``) and replication resumes once
the network heals, with nothing acknowledged lost. And a cluster record listing a broker
that never answers (its SYNs dropped) before a live one: replication goes to the live one.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from magnetar.broker.replication.remote_producer import _connect_any
from magnetar.broker.replication.remote_settings import RemoteSettings
from magnetar.testing import COMMAND
from tests.cluster.brokers import ChildBroker, http_call
from tests.netbed import Host, NetBed, netbed_missing_reason

pytestmark = pytest.mark.slow

NS = "geo/live"
KEEPALIVE_S = 2
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


class Standalone(ChildBroker):
    """``magnetar standalone`` of cluster ``name`` on ``host`` (ports 6650 and 8080)."""

    def __init__(self, bed: NetBed, host: Host, name: str) -> None:
        conf = {"clusterName": name, "advertisedAddress": host.address,
                "bindAddress": host.address, "brokerDeduplicationEnabled": "true",
                "keepAliveIntervalSeconds": str(KEEPALIVE_S)}
        super().__init__(bed.root / name, conf, "standalone", None, 6650, 8080)
        self.bed, self.host, self.name = bed, host, name
        self.command = host.command(self.command)

    def start(self, timeout: float = 60.0) -> Standalone:
        super().start(timeout)
        assert self.proc is not None
        self.bed.track(self.proc, self.host)
        return self

    @property
    def url(self) -> str:
        return f"pulsar://{self.host.address}:6650"

    @property
    def web_url(self) -> str:
        return f"http://{self.host.address}:8080"

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        """An admin call made from this broker's host; its answer (fails unless 2xx)."""
        status, answer, _ = self.host.call(http_call, method, self.web_url + path, body)
        assert 200 <= status < 300, f"{method} {path}: {status} {answer}"
        return answer


def _know(local: Standalone, remote: Standalone, broker_url: str | None = None) -> None:
    local.admin("PUT", f"/admin/v2/clusters/{remote.name}", {
        "serviceUrl": remote.web_url, "brokerServiceUrl": broker_url or remote.url})


@pytest.fixture(scope="module")
def geo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NetBed, Standalone, Standalone]]:
    """Hosts ``a``, ``b`` (brokers of clusters A and B) and ``c`` (silent to all: it drops
    every incoming packet); NS replicated to A and B."""
    reason = netbed_missing_reason()
    if reason:
        pytest.skip(reason)
    with NetBed(tmp_path_factory.mktemp("geo-liveness")) as bed:
        a_host, b_host, c_host = bed.add_host("a"), bed.add_host("b"), bed.add_host("c")
        c_host.sh("iptables", "-A", "INPUT", "-j", "DROP")
        a, b = Standalone(bed, a_host, "A").start(), Standalone(bed, b_host, "B").start()
        _know(a, b)
        _know(b, a)
        for broker in (a, b):
            broker.admin("PUT", "/admin/v2/tenants/geo", {"adminRoles": [], "allowedClusters": ["A", "B"]})
            broker.admin("PUT", f"/admin/v2/namespaces/{NS}")
            broker.admin("POST", f"/admin/v2/namespaces/{NS}/replication", ["A", "B"])
        yield bed, a, b


def _produce(broker: Standalone, topic: str, payloads: list[bytes]) -> None:
    """``payloads`` sent to ``topic`` on ``broker`` with the official client, each acked."""
    def run() -> None:
        client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            for payload in payloads:
                producer.send(payload)
        finally:
            client.close()

    broker.host.call(run)


class Receiver:
    """An official-client consumer of ``topic`` on ``broker``, subscribed now (Earliest),
    receiving in a thread of the broker's host."""

    def __init__(self, broker: Standalone, topic: str) -> None:
        self.got: list[bytes] = []
        self._client = broker.host.call(
            lambda: pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET))
        self._consumer = broker.host.call(lambda: self._client.subscribe(
            topic, "check", initial_position=pulsar.InitialPosition.Earliest))

    def wait_for(self, want: set[bytes], timeout: float) -> set[bytes]:
        """What of ``want`` arrived within ``timeout`` s (returns early once all did)."""
        deadline = time.monotonic() + timeout
        while not want <= set(self.got) and time.monotonic() < deadline:
            try:
                msg = self._consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            self.got.append(msg.data())
            self._consumer.acknowledge(msg)
        return want & set(self.got)

    def close(self) -> None:
        self._client.close()


def _replication(broker: Standalone, topic: str, remote: str) -> dict[str, Any]:
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/stats"
    stats = broker.admin("GET", path)
    return dict(stats["replication"].get(remote, {}))


def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_silently_dead_link_is_noticed_and_replication_resumes_after_it(
        geo: tuple[NetBed, Standalone, Standalone]) -> None:
    _, a, b = geo
    topic = f"persistent://{NS}/cut-{uuid.uuid4().hex[:8]}"
    receiver = Receiver(b, topic)
    try:
        before = [b"before-%d" % i for i in range(5)]
        _produce(a, topic, before)
        assert receiver.wait_for(set(before), 60) == set(before)
        assert _replication(a, topic, "B")["connected"] is True

        a.host.cut_from(b.host)  # every packet between a and b dropped, both ways
        try:
            # nothing arrives from B for a keep-alive interval after A's Ping: the link is
            # seen as dead, although no packet says so
            _wait(lambda: _replication(a, topic, "B")["connected"] is False, 60,
                  "A's replicator to report the dead link")
            during = [b"during-%d" % i for i in range(5)]
            _produce(a, topic, during)  # stored in A meanwhile
            assert receiver.wait_for(set(during), 2 * KEEPALIVE_S) == set()
        finally:
            a.host.heal()
        assert receiver.wait_for(set(during), 90) == set(during)
        _wait(lambda: _replication(a, topic, "B")["connected"] is True, 30, "reconnection")
        assert _replication(a, topic, "B")["replicationBacklog"] == 0
        assert sorted(set(receiver.got)) == sorted(set(before + during))
    finally:
        receiver.close()


def test_a_record_listing_a_silent_broker_before_a_live_one(
        geo: tuple[NetBed, Standalone, Standalone]) -> None:
    bed, a, b = geo
    c = bed.hosts["c"]
    listed = f"pulsar://{c.address}:6650,{b.host.address}:6650"

    # the silent host (its SYNs dropped) is tried first: the attempt times out, the next
    # host is tried
    async def connect() -> tuple[str, int]:
        conn, where = await _connect_any([(c.address, 6650), (b.host.address, 6650)], 2.0,
                                         RemoteSettings(listed), start=0)
        conn.close()
        return where

    assert a.host.call(lambda: asyncio.run(connect())) == (b.host.address, 6650)

    # A's record of B lists the silent host first (set with the CLI): replication flows
    done = subprocess.run(a.host.command(
        [*COMMAND, "admin", "--admin-url", a.web_url, "clusters", "update", "B",
         "--url", b.web_url, "--broker-url", listed]), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert a.admin("GET", "/admin/v2/clusters/B")["brokerServiceUrl"] == listed
    topic = f"persistent://{NS}/listed-{uuid.uuid4().hex[:8]}"
    receiver = Receiver(b, topic)
    try:
        sent = [b"m-%d" % i for i in range(5)]
        _produce(a, topic, sent)
        assert receiver.wait_for(set(sent), 90) == set(sent)
    finally:
        receiver.close()
        a.admin("POST", "/admin/v2/clusters/B", {"serviceUrl": b.web_url, "brokerServiceUrl": b.url})
