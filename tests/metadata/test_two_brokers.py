"""Two brokers on one real ZooKeeper (child processes, different ports and data
directories): what is created through broker A's admin API is visible and enforced through
broker B, a revocation on A takes effect on B; both within a second of A's answer (bounded
polls: the change travels as a ZooKeeper notification, nothing polls the store)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.cli.tokens import create_secret_key, create_token
from magnetar.metadata import create_metadata_store
from tests.cluster.brokers import BrokerProc, http_call, initialize
from tests.zkserver import ZooKeeperServer

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
#: how long a change made through A may take to show through B
WITHIN_S = 1.0


class Api:
    def __init__(self, base: str, token: str) -> None:
        self.base = base
        self.token = token

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, answer, _ = http_call(method, self.base + path, body,
                                      {"Authorization": f"Bearer {self.token}"})
        return status, answer

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = self.call(method, path, body)
        assert 200 <= status < 300, (method, path, status, answer)
        return answer


def within(predicate: Callable[[], bool], what: str, timeout: float = WITHIN_S) -> float:
    """Bounded poll: how long until ``predicate()`` held (fails past ``timeout``)."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.005)
    return time.monotonic() - start


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("cluster")
    secret = root / "secret.key"
    secret.write_bytes(create_secret_key())
    url = zookeeper.url(f"/two-brokers-{uuid.uuid4().hex[:6]}")
    initialize(url, "c1")
    settings = {"authenticationEnabled": "true",
                "authenticationProviders":
                    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
                "tokenSecretKey": f"file://{secret}", "authorizationEnabled": "true",
                "superUserRoles": "admin"}
    a = BrokerProc(Path(root / "a"), url, **settings).start()
    b = BrokerProc(Path(root / "b"), url, **settings).start()
    tokens = {role: create_token(role, secret_key=f"file://{secret}")
              for role in ("admin", "app")}
    try:
        yield {"a": a, "b": b, "tokens": tokens, "url": url}
    finally:
        a.stop()
        b.stop()


def test_admin_changes_through_a_are_seen_and_enforced_through_b(
        cluster: dict[str, Any]) -> None:
    a, b, tokens = cluster["a"], cluster["b"], cluster["tokens"]
    api_a, api_b = Api(a.web_url, tokens["admin"]), Api(b.web_url, tokens["admin"])
    tenant, ns = f"acme{uuid.uuid4().hex[:6]}", "orders"
    full_ns = f"{tenant}/{ns}"
    # both brokers see the cluster and public/default that initialize-cluster-metadata made
    assert "c1" in api_b.ok("GET", "/admin/v2/clusters")
    assert "public/default" in api_b.ok("GET", "/admin/v2/namespaces/public")

    east = f"east{uuid.uuid4().hex[:4]}"
    api_a.ok("PUT", f"/admin/v2/clusters/{east}", {"serviceUrl": "http://east:8080"})
    within(lambda: east in api_b.ok("GET", "/admin/v2/clusters"), "registered cluster on B")

    api_a.ok("PUT", f"/admin/v2/tenants/{tenant}",
             {"adminRoles": ["ops"], "allowedClusters": ["c1"]})
    within(lambda: tenant in api_b.ok("GET", "/admin/v2/tenants"), "tenant on B")
    assert api_b.ok("GET", f"/admin/v2/tenants/{tenant}")["adminRoles"] == ["ops"]

    api_a.ok("PUT", f"/admin/v2/namespaces/{full_ns}")
    within(lambda: full_ns in api_b.ok("GET", f"/admin/v2/namespaces/{tenant}"),
           "namespace on B")

    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    api_a.ok("POST", f"/admin/v2/namespaces/{full_ns}/retention", retention)
    within(lambda: api_b.call("GET", f"/admin/v2/namespaces/{full_ns}/retention")[1]
           == retention, "retention on B")

    api_a.ok("POST", f"/admin/v2/namespaces/{full_ns}/permissions/app", ["produce", "consume"])
    within(lambda: api_b.call("GET", f"/admin/v2/namespaces/{full_ns}/permissions")[1]
           == {"app": ["consume", "produce"]}, "permissions on B")

    partitioned = f"persistent://{full_ns}/parts"
    api_a.ok("PUT", f"/admin/v2/persistent/{full_ns}/parts/partitions", 3)
    within(lambda: api_b.call("GET", f"/admin/v2/persistent/{full_ns}/parts/partitions")[1]
           == {"partitions": 3}, "partition count on B")

    typed = f"persistent://{full_ns}/typed"
    schema = {"type": "JSON", "schema": json.dumps({
        "type": "record", "name": "Order", "fields": [{"name": "id", "type": "int"}]}),
        "properties": {}}
    api_a.ok("POST", f"/admin/v2/schemas/{full_ns}/typed/schema", schema)
    within(lambda: api_b.call("GET", f"/admin/v2/schemas/{full_ns}/typed/schema")[0] == 200,
           "schema on B")

    # enforced through B, with the official client and the app role's token
    client = pulsar.Client(b.service_url, authentication=pulsar.AuthenticationToken(
        tokens["app"]), operation_timeout_seconds=10, logger=QUIET)
    try:
        assert len(client.get_topic_partitions(partitioned)) == 3
        producer = client.create_producer(partitioned)
        producer.send(b"through B")
        producer.close()
        with pytest.raises(pulsar.exceptions.IncompatibleSchema):
            client.create_producer(typed, schema=pulsar.schema.StringSchema())
    finally:
        client.close()

    # a revocation on A takes effect on B: the app role can no longer produce there
    api_a.ok("DELETE", f"/admin/v2/namespaces/{full_ns}/permissions/app")
    within(lambda: api_b.call("GET", f"/admin/v2/namespaces/{full_ns}/permissions")[1] == {},
           "revocation on B")
    client = pulsar.Client(b.service_url, authentication=pulsar.AuthenticationToken(
        tokens["app"]), operation_timeout_seconds=5, logger=QUIET)
    try:
        with pytest.raises(pulsar.exceptions.PulsarException):
            client.create_producer(f"persistent://{full_ns}/after-revoke")
    finally:
        client.close()

    # stored where Pulsar stores it, in Pulsar's shapes
    async def read_zk() -> dict[str, Any]:
        store = await create_metadata_store(cluster["url"])
        try:
            out = {}
            for path in [f"/admin/policies/{tenant}", f"/admin/policies/{full_ns}",
                         f"/admin/partitioned-topics/{full_ns}/persistent/parts",
                         "/admin/clusters/c1"]:
                got = await store.get(path)
                out[path] = json.loads(got[0]) if got else None
            out["schemas"] = await store.get_children(f"/schemas/{full_ns}/typed")
            return out
        finally:
            await store.close()

    stored = asyncio.run(read_zk())
    assert stored[f"/admin/policies/{tenant}"] == {"adminRoles": ["ops"],
                                                    "allowedClusters": ["c1"]}
    policies = stored[f"/admin/policies/{full_ns}"]
    assert policies["retention_policies"] == retention
    assert policies["auth_policies"]["namespace_auth"] == {}
    assert policies["replication_clusters"] == ["c1"]
    assert stored[f"/admin/partitioned-topics/{full_ns}/persistent/parts"] == {"partitions": 3}
    assert stored["/admin/clusters/c1"]["brokerServiceUrl"] == "pulsar://127.0.0.1:6650"
    assert len(stored["schemas"]) == 1
