"""Schemas over HTTP, HTTP lookup with the official client and ours (http:// service URL),
and the Prometheus scrape."""

from __future__ import annotations

import asyncio
import json
import uuid

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

import magnetar.client
from magnetar.client.errors import ConnectError, TopicNotFound
from magnetar.testing import StandaloneBroker
from tests.admin.conftest import QUIET, Api, wait_until

AVRO = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})


def test_schema_upload_get_versions_delete(api: Api, name: str) -> None:
    S = f"/admin/v2/schemas/public/default/{name}"
    assert api.get(f"{S}/schema")[0] == 404
    status, answer = api.post(f"{S}/schema", {"type": "AVRO", "schema": AVRO, "properties": {"k": "v"}})
    assert status == 200 and answer == {"version": {"version": 0}}
    doc = api.ok("GET", f"{S}/schema")
    assert doc["type"] == "AVRO" and json.loads(doc["data"]) == json.loads(AVRO)
    assert doc["properties"] == {"k": "v"} and doc["version"] == 0
    # the same schema again is the same version; another one is the next
    assert api.ok("POST", f"{S}/schema", {"type": "AVRO", "schema": AVRO, "properties": {"k": "v"}}) == {
        "version": {"version": 0}}
    evolved = json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": ""}]})
    api.ok("POST", f"{S}/schema", {"type": "AVRO", "schema": evolved})  # compatible under FULL
    assert [d["version"] for d in api.ok("GET", f"{S}/schemas")["getSchemaResponses"]] == [0, 1]
    assert api.ok("GET", f"{S}/schema/0")["type"] == "AVRO"
    assert api.get(f"{S}/schema/7")[0] == 404
    check = api.ok("POST", f"{S}/compatibility", {"type": "AVRO", "schema": AVRO})
    assert check["isCompatible"] is True and "schemaCompatibilityStrategy" in check
    assert api.post(f"{S}/schema", {"type": "NO_SUCH_TYPE", "schema": ""})[0] == 400
    assert api.delete(f"{S}/schema") == (200, {"version": 1})
    assert api.get(f"{S}/schema")[0] == 404
    assert api.get("/admin/v2/schemas/public/nowhere/t/schema")[0] == 404


def test_schema_of_an_official_client_producer(api: Api, client: pulsar.Client, name: str) -> None:
    client.create_producer(f"persistent://public/default/{name}", schema=pulsar.schema.StringSchema()).close()
    assert api.ok("GET", f"/admin/v2/schemas/public/default/{name}/schema")["type"] == "STRING"


def test_http_lookup_with_the_official_client(broker: StandaloneBroker, api: Api) -> None:
    name = f"http-{uuid.uuid4().hex[:8]}"
    api.ok("PUT", f"/admin/v2/persistent/public/default/{name}-p/partitions", 3)
    client = pulsar.Client(broker.web_service_url, operation_timeout_seconds=10, logger=QUIET)
    try:
        for topic, n in ((f"persistent://public/default/{name}", 5),
                         (f"persistent://public/default/{name}-p", 12)):
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(n):
                producer.send(b"%d" % i, partition_key=str(i))
            got = set()
            for _ in range(n):
                msg = consumer.receive(timeout_millis=10000)
                got.add(int(msg.data()))
                consumer.acknowledge(msg)
            assert got == set(range(n))
            producer.close()
            consumer.close()
        assert client.get_topic_partitions(f"persistent://public/default/{name}-p") == [
            f"persistent://public/default/{name}-p-partition-{i}" for i in range(3)]
    finally:
        client.close()


def test_http_lookup_with_our_client(broker: StandaloneBroker, api: Api) -> None:
    name = f"ours-{uuid.uuid4().hex[:8]}"
    api.ok("PUT", f"/admin/v2/persistent/public/default/{name}-p/partitions", 3)
    base = f"persistent://public/default/{name}"

    async def use() -> None:
        async with magnetar.client.Client(broker.web_service_url, operation_timeout_seconds=5) as client:
            assert await client.get_topic_partitions(base + "-p") == [
                f"{base}-p-partition-{i}" for i in range(3)]
            for topic, n in ((base, 5), (base + "-p", 12)):
                consumer = await client.subscribe(topic, "s")
                producer = await client.create_producer(topic, schema=magnetar.client.StringSchema())
                for i in range(n):
                    await producer.send(str(i), partition_key=str(i))
                got = set()
                for _ in range(n):
                    msg = await consumer.receive(timeout_millis=10000)
                    got.add(int(msg.data()))
                    await consumer.acknowledge(msg)
                assert got == set(range(n))
            assert all(address.startswith("pulsar://") for address in client._pool._conns)
            schema = await client.get_schema(base)
            assert schema is not None and schema.type == "String"
            listed = await client.get_topics_of_namespace("public/default")
            assert base in listed and f"{base}-p-partition-2" in listed
            with pytest.raises(TopicNotFound, match="HTTP 404"):
                await client.create_producer(f"persistent://no-such-tenant/ns/{name}")
        with pytest.raises(ConnectError, match=r"http://127\.0\.0\.1:1/"):  # after 2 s of retries
            async with magnetar.client.Client("http://127.0.0.1:1", operation_timeout_seconds=2) as client:
                await client.get_topic_partitions(base)

    asyncio.run(use())


def _scrape(api: Api) -> dict[str, list]:
    status, text = api.get("/metrics")
    assert status == 200
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_metrics_scrape(api: Api, client: pulsar.Client, name: str) -> None:
    topic = f"persistent://public/default/{name}"
    consumer = client.subscribe(topic, "ms")
    producer = client.create_producer(topic)
    for _ in range(5):
        producer.send(b"q" * 50)
    families = _scrape(api)
    for metric in ("pulsar_rate_in", "pulsar_rate_out", "pulsar_msg_backlog", "pulsar_storage_size",
                   "pulsar_subscription_back_log", "pulsar_producers_count",
                   "pulsar_consumers_count", "pulsar_active_connections", "pulsar_in_messages"):
        assert metric in families, metric
    # exposeConsumerLevelMetricsInPrometheus is off by default, as in Pulsar
    assert not [f for f in families if f.startswith("pulsar_consumer_")]

    def value(metric: str, **labels: str) -> float:
        for sample in _scrape(api)[metric]:
            if all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
        raise AssertionError(f"no {metric} sample with {labels}")

    mine = {"topic": topic, "namespace": "public/default"}
    assert value("pulsar_producers_count", **mine) == 1
    assert value("pulsar_consumers_count", **mine) == 1
    assert value("pulsar_storage_size", **mine) > 250
    assert value("pulsar_subscription_back_log", subscription="ms", **mine) == 5

    def rate_in() -> bool:
        producer.send(b"q")
        return value("pulsar_rate_in", **mine) > 0

    wait_until(rate_in, 20, "a non-zero pulsar_rate_in")
    # Magnetar's own: every SendReceipt above came after an fdatasync (fsync group)
    fsyncs = {s.labels.get("le"): s.value for s in _scrape(api)["magnetar_fsync_latency_seconds"]
              if s.name.endswith("_bucket")}
    assert fsyncs["+Inf"] > 0
    assert "magnetar_group_commit_size" in _scrape(api)
    producer.close()
    consumer.close()


def test_schema_compatibility_follows_the_namespace_strategy(api: Api) -> None:
    pytest.importorskip("magnetar.broker.schema.compat")  # the broker's strategy-aware check
    ns = f"public/compat-{uuid.uuid4().hex[:8]}"
    api.ok("PUT", f"/admin/v2/namespaces/{ns}")
    S = f"/admin/v2/schemas/{ns}/t"
    api.ok("POST", f"{S}/schema", {"type": "AVRO", "schema": AVRO})
    changed = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]})
    body = {"type": "AVRO", "schema": changed}
    check = api.ok("POST", f"{S}/compatibility", body)
    assert check == {"isCompatible": False, "schemaCompatibilityStrategy": "FULL"}
    assert api.post(f"{S}/schema", body)[0] == 409
    api.ok("PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    assert api.ok("POST", f"{S}/compatibility", body)["isCompatible"] is True
    assert api.ok("POST", f"{S}/schema", body) == {"version": {"version": 1}}


def test_load_report_of_a_broker_alone_measures_its_traffic(api: Api, client: pulsar.Client,
                                                           name: str) -> None:
    """``GET /admin/v2/broker-stats/load-report``: Pulsar's LocalBrokerData, each namespace
    one bundle, rates since the previous request."""
    api.ok("GET", "/admin/v2/broker-stats/load-report")  # the baseline
    producer = client.create_producer(f"persistent://public/default/{name}")
    for _ in range(20):
        producer.send(b"x" * 100)
    report = api.ok("GET", "/admin/v2/broker-stats/load-report")
    producer.close()
    bundle = report["lastStats"]["public/default/0x00000000_0xffffffff"]
    assert bundle["msgRateIn"] > 0 and bundle["msgThroughputIn"] > 0
    assert report["msgRateIn"] >= bundle["msgRateIn"] and report["numProducers"] >= 1
    assert "public/default/0x00000000_0xffffffff" in report["bundles"]
    assert report["cpu"]["limit"] >= 100 and report["memory"]["usage"] > 0
    assert report["pulsarServiceUrl"].startswith("pulsar://")
