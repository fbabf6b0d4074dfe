"""Geo-replication between two ZooKeeper-backed clusters, each with its own ZooKeeper
(``metadataStoreUrl``), one broker each, in docs/geo-replication.md's two set-ups:

- shared: both on one configuration store (``configurationMetadataStoreUrl``: a chroot of
  the first ZooKeeper). Each cluster's record lands there when its first broker starts; the
  tenant, the namespace and its ``replication_clusters`` are created once, through A, and B
  acts on them.
- separate: each cluster its own configuration store; each registers the other's record,
  and the tenant and namespace are created on both.

Messages go both ways, each once on each side."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.broker.brokerproc import SILENT, wait_until
from tests.cluster.brokers import ClusterBroker, http_call
from tests.zkserver import ZooKeeperServer

pytestmark = pytest.mark.slow

NS = "geo/ns"


@pytest.fixture(params=["shared", "separate"])
def two_clusters(request: pytest.FixtureRequest, zookeeper: ZooKeeperServer,
                 tmp_path: Path) -> Iterator[tuple[ClusterBroker, ClusterBroker]]:
    zk_b = ZooKeeperServer(tmp_path / "zk-b")
    zk_b.start()
    run = uuid.uuid4().hex[:8]
    shared = zookeeper.url(f"/geo-config-{run}")
    a_conf, b_conf = {}, {}
    if request.param == "shared":
        a_conf = b_conf = {"configurationMetadataStoreUrl": shared}
    a = ClusterBroker(tmp_path / "A", zookeeper.url(f"/geo-a-{run}"), {
        "clusterName": "A", "brokerDeduplicationEnabled": "true", **a_conf})
    b = ClusterBroker(tmp_path / "B", zk_b.url("/geo-b"), {
        "clusterName": "B", "brokerDeduplicationEnabled": "true", **b_conf})
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()
        zk_b.stop()


def _ok(method: str, url: str, body: object = None) -> object:
    status, answer, _ = http_call(method, url, body)
    assert status in (200, 204), f"{method} {url}: {status} {answer}"
    return answer


def _send(producer: pulsar.Producer, tag: str, n: int) -> set[bytes]:
    sent = {f"{tag}-{i}".encode() for i in range(n)}
    for data in sorted(sent):
        producer.send(data)
    return sent


def _receive(consumer: pulsar.Consumer, until: set[bytes]) -> list[bytes]:
    got: list[bytes] = []
    while not until <= set(got):
        msg = consumer.receive(timeout_millis=60000)
        consumer.acknowledge(msg)
        got.append(msg.data())
    return got


def _create_namespace(broker: ClusterBroker) -> None:
    _ok("PUT", f"{broker.web_url}/admin/v2/tenants/geo", {"adminRoles": [], "allowedClusters": ["A", "B"]})
    _ok("PUT", f"{broker.web_url}/admin/v2/namespaces/{NS}")
    _ok("POST", f"{broker.web_url}/admin/v2/namespaces/{NS}/replication", ["A", "B"])


def test_two_zookeeper_clusters(two_clusters: tuple[ClusterBroker, ClusterBroker],
                                request: pytest.FixtureRequest) -> None:
    a, b = two_clusters
    if request.node.callspec.params["two_clusters"] == "shared":
        # both clusters' records are in the shared store, each seen from the other side
        wait_until(lambda: {"A", "B"} <= set(_ok("GET", f"{a.web_url}/admin/v2/clusters")),  # type: ignore[arg-type]
                   30, "cluster B's record seen by A")
        assert _ok("GET", f"{b.web_url}/admin/v2/clusters/A")["brokerServiceUrl"] == a.url  # type: ignore[index]
        _create_namespace(a)  # once, through A
    else:
        for here, there, name in ((a, b, "B"), (b, a, "A")):
            _ok("PUT", f"{here.web_url}/admin/v2/clusters/{name}",
                {"serviceUrl": there.web_url, "brokerServiceUrl": there.url})
            _create_namespace(here)
    wait_until(lambda: http_call("GET", f"{b.web_url}/admin/v2/namespaces/{NS}/replication")[1]
               == ["A", "B"], 30, "B to see the namespace's replication clusters")
    topic = f"persistent://{NS}/t-{uuid.uuid4().hex[:10]}"
    ca = pulsar.Client(a.url, logger=SILENT, operation_timeout_seconds=30)
    cb = pulsar.Client(b.url, logger=SILENT, operation_timeout_seconds=30)
    try:
        sub = dict(subscription_name="s", initial_position=pulsar.InitialPosition.Earliest)
        consumer_a, consumer_b = ca.subscribe(topic, **sub), cb.subscribe(topic, **sub)
        from_a = _send(ca.create_producer(topic), "A", 50)
        from_b = _send(cb.create_producer(topic), "B", 50)
        ends = {b"A-end", b"B-end"}
        ca.create_producer(topic).send(b"A-end")
        cb.create_producer(topic).send(b"B-end")
        expected = sorted(from_a | from_b | ends)
        for consumer in (consumer_a, consumer_b):
            assert sorted(_receive(consumer, ends)) == expected  # each once, nothing echoed
    finally:
        ca.close()
        cb.close()
