"""The OpenAPI description is served, describes every installed route, and every endpoint
it describes answers (exercised here one by one against fresh resources)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.admin import build_app
from magnetar.broker.config import BrokerConfig
from magnetar.broker.service import BrokerService
from magnetar.testing import StandaloneBroker
from tests.admin.conftest import Api
from tests.broker import txnraw
from tests.broker.rawconsumer import connected

BODIES: dict[tuple[str, str], Any] = {
    ("PUT", "/partitions"): 2,
    ("POST", "/partitions"): 3,
    ("POST", "/retention"): {"retentionTimeInMinutes": 5, "retentionSizeInMB": 5},
    ("POST", "/messageTTL"): 10,
    ("POST", "/deduplication"): True,
    ("POST", "/backlogQuota"): {"limitSize": 1000, "policy": "producer_request_hold"},
    ("POST", "/autoTopicCreation"): {"allowAutoTopicCreation": True},
    ("PUT", "/schemaCompatibilityStrategy"): "FULL",
    ("POST", "/maxProducersPerTopic"): 3,
    ("POST", "/maxConsumersPerTopic"): 3,
    ("POST", "/{tenant}"): {"adminRoles": []},
    ("POST", "/schema"): {"type": "STRING", "schema": ""},
    ("POST", "/compatibility"): {"type": "STRING", "schema": ""},
    ("POST", "/resetcursor"): {"ledgerId": -1, "entryId": -1},
    ("POST", "/permissions/{role}"): ["produce", "consume"],
}


def test_every_installed_route_is_described(tmp_path: Path) -> None:
    service = BrokerService(BrokerConfig.load(None, magnetarDataDir=str(tmp_path)))
    try:
        app = build_app(service)
        from magnetar.admin.openapi import OPENAPI

        described = {(method.upper(), path) for path, ops in app[OPENAPI]["paths"].items()
                     for method in ops}
        installed = {(r.method, r.resource.canonical) for r in app.router.routes()
                     if r.resource is not None}
        assert installed == described
    finally:
        service.storage.close()


def _fresh(api: Api, client: pulsar.Client) -> dict[str, str]:
    """A new tenant, namespace, topic with 3 messages, a subscription and a schema."""
    tag = uuid.uuid4().hex[:8]
    values = {"tenant": f"oa-{tag}", "namespace": "ns", "topic": "t", "subscription": "s",
              "cluster": "standalone", "domain": "persistent", "count": "1",
              "timestamp": "0", "seconds": "0", "n": "1", "version": "0",
              "role": "some-role", "bundle": "0x00000000_0xffffffff",
              "mostSigBits": "0", "leastSigBits": "1", "timeout": "1000"}
    api.ok("PUT", f"/admin/v2/tenants/oa-{tag}")
    api.ok("PUT", f"/admin/v2/namespaces/oa-{tag}/ns")
    topic = f"persistent://oa-{tag}/ns/t"
    consumer = client.subscribe(topic, "s")
    consumer.close()
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(b"%d" % i)
    producer.close()
    last = api.ok("GET", f"/admin/v2/persistent/oa-{tag}/ns/t/lastMessageId")
    values.update(ledgerId=str(last["ledgerId"]), entryId=str(last["entryId"]))
    api.ok("POST", f"/admin/v2/schemas/oa-{tag}/ns/t/schema", {"type": "STRING", "schema": ""})
    api.ok("PUT", f"/admin/v2/persistent/oa-{tag}/ns/pt/partitions", 2)
    return values


def _on_partitioned(method: str, path: str) -> bool:
    """Endpoints about partitioned topics get one (``pt``, 2 partitions)."""
    return path.endswith("/partitioned-stats") or (
        path.endswith("/partitions") and method in ("POST", "DELETE"))


def _body(method: str, path: str) -> Any:
    for (m, suffix), body in BODIES.items():
        if m == method and path.endswith(suffix):
            return body
    return None


def test_every_described_endpoint_answers(api: Api, client: pulsar.Client,
                                          broker: StandaloneBroker) -> None:
    doc = api.ok("GET", "/admin/v2/openapi.json")
    assert doc["openapi"].startswith("3.")
    raw = connected(broker.service_url)  # a real transaction for the /admin/v3/transactions paths
    try:
        most, least = txnraw.begin(raw, ["persistent://public/default/oa-txn"])
    finally:
        raw.close()
    exercised = 0
    for path, operations in doc["paths"].items():
        for method in operations:
            values = _fresh(api, client)
            values.update(mostSigBits=str(most), leastSigBits=str(least), timeout="0")
            if _on_partitioned(method.upper(), path):
                values["topic"] = "pt"
            url = path.format(**values)
            status, answer = api.call(method.upper(), url, _body(method.upper(), path))
            context = (method, url, status, answer)
            assert status < 500, context
            assert status != 405, context
            if status == 404:  # a handler's 404 names what is missing; an unmatched route does not
                assert answer["reason"] != "Not Found", context
            if method == "get" and "/transactionMetadata/" not in path:
                # 204: a policy the namespace or topic sets none of (a transaction's
                # metadata: no transaction was made here, its 404 names it)
                assert status in (200, 204), context
            exercised += 1
    assert exercised >= 60


@pytest.mark.parametrize("method", ["PATCH", "DELETE"])
def test_wrong_methods_get_405_with_a_reason(api: Api, method: str) -> None:
    status, answer = api.call(method, "/admin/v2/clusters")
    assert status == 405 and answer["reason"]
