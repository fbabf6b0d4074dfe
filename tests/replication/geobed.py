"""Two clusters in network namespaces (tests/netbed.py) for replication tests and benches:
`Standalone`, a ``magnetar standalone`` broker of a cluster on a host; `setup_geo`, each
cluster knowing the other, one namespace replicated to both; `produce` with the official
client, a `Receiver` on the other side, and `replication`, a topic's replication stats.
"""

from __future__ import annotations

import time
from typing import Any

import pulsar

from tests.cluster.brokers import ChildBroker, http_call
from tests.netbed import Host, NetBed

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


class Standalone(ChildBroker):
    """``magnetar standalone`` of cluster ``name`` on ``host`` (ports 6650 and 8080)."""

    def __init__(self, bed: NetBed, host: Host, name: str,
                 extra: dict[str, str] | None = None) -> None:
        conf = {"clusterName": name, "advertisedAddress": host.address,
                "bindAddress": host.address, "brokerDeduplicationEnabled": "true",
                **(extra or {})}
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


def know(local: Standalone, remote: Standalone, broker_url: str | None = None) -> None:
    local.admin("PUT", f"/admin/v2/clusters/{remote.name}", {
        "serviceUrl": remote.web_url, "brokerServiceUrl": broker_url or remote.url})


def produce(broker: Standalone, topic: str, payloads: list[bytes]) -> None:
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


def replication(broker: Standalone, topic: str, remote: str) -> dict[str, Any]:
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/stats"
    stats = broker.admin("GET", path)
    return dict(stats["replication"].get(remote, {}))


def wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def setup_geo(a: Standalone, b: Standalone, namespace: str) -> None:
    """Each cluster knows the other; ``namespace`` exists on both, replicated to both."""
    know(a, b)
    know(b, a)
    tenant = namespace.split("/")[0]
    for broker in (a, b):
        broker.admin("PUT", f"/admin/v2/tenants/{tenant}",
                     {"adminRoles": [], "allowedClusters": [a.name, b.name]})
        broker.admin("PUT", f"/admin/v2/namespaces/{namespace}")
        broker.admin("POST", f"/admin/v2/namespaces/{namespace}/replication", [a.name, b.name])
