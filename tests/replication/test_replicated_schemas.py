"""Schemas go with the data: a topic written with Avro schemas in A is read in B by a
schema-aware official-client consumer. B already had the second version of the schema
(as its version 0) before anything was replicated, so the two clusters number the versions
differently: each message must arrive with B's version of its schema for B's consumer to
decode it with the right writer schema."""

from __future__ import annotations

import uuid
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

from tests.broker.brokerproc import BrokerProcess
from tests.replication.test_geo_replication import NS, _admin, _client, clusters  # noqa: F401

pytestmark = pytest.mark.slow


def _v1() -> type[Record]:
    class Reading(Record):
        name = String()
        n = Integer()
    return Reading


def _v2() -> type[Record]:
    class Reading(Record):  # the same record with a field added (default null): FULL-compatible
        name = String()
        n = Integer()
        unit = String(required_default=True)
    return Reading


def _version(msg: pulsar.Message) -> int:
    """The message's schema version (8 bytes, big-endian, on the wire)."""
    raw = msg.schema_version()
    return int.from_bytes(raw.encode("latin-1") if isinstance(raw, str) else raw, "big")


def test_schemas_and_their_versions_are_replicated(
        clusters: tuple[BrokerProcess, BrokerProcess]) -> None:  # noqa: F811
    a, b = clusters
    topic = f"persistent://{NS}/schema-{uuid.uuid4().hex[:10]}"
    rest = topic.split("://")[1]
    v1, v2 = _v1(), _v2()
    ca, cb = _client(a), _client(b)
    try:
        # B knows the second version first: its version 0
        cb.create_producer(topic, schema=AvroSchema(v2)).close()
        consumer = cb.subscribe(topic, "s", schema=AvroSchema(v2),
                                initial_position=pulsar.InitialPosition.Earliest)
        first = ca.create_producer(topic, schema=AvroSchema(v1))  # A's version 0
        for i in range(5):
            first.send(v1(name=f"v1-{i}", n=i))
        second = ca.create_producer(topic, schema=AvroSchema(v2))  # A's version 1
        for i in range(5):
            second.send(v2(name=f"v2-{i}", n=i, unit="kg"))
        got: dict[str, Any] = {}
        versions: dict[str, int] = {}
        while len(got) < 10:
            msg = consumer.receive(timeout_millis=60000)
            consumer.acknowledge(msg)
            value = msg.value()
            got[value.name] = (value.n, value.unit)
            versions[value.name] = _version(msg)
        assert got == {**{f"v1-{i}": (i, None) for i in range(5)},
                       **{f"v2-{i}": (i, "kg") for i in range(5)}}
        # B's numbering: the first version was registered there by the replicator, as 1
        assert {versions[f"v1-{i}"] for i in range(5)} == {1}
        assert {versions[f"v2-{i}"] for i in range(5)} == {0}
        schema = _admin(b, "GET", f"/admin/v2/schemas/{rest}/schema/1")
        assert isinstance(schema, dict) and '"unit"' not in schema["data"]
    finally:
        ca.close()
        cb.close()
