"""Schema compatibility with the official client's JSON and Avro schema classes (issue 7,
defect 3): producers' new versions and consumers' schemas are checked with
``schemaCompatibilityStrategy`` (default FULL) and refused with ``IncompatibleSchema``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

from magnetar.protocol import pb

from .conftest import QUIET, ThreadedBroker
from .rawclient import RawClient

T = pb.BaseCommand


def new_topic() -> str:
    return f"persistent://public/default/sc-{uuid.uuid4().hex[:10]}"


def versions(broker: ThreadedBroker, topic: str) -> list[int]:
    assert broker.service is not None
    return broker.call(broker.service.schemas.versions, topic.removeprefix("persistent://"))


@pytest.fixture
def strategy(broker: ThreadedBroker) -> Iterator[Callable[[str], None]]:
    """``strategy(name)`` sets the broker's schemaCompatibilityStrategy for this test."""
    assert broker.service is not None
    config = broker.service.config
    before = config.schemaCompatibilityStrategy
    yield lambda name: broker.call(setattr, config, "schemaCompatibilityStrategy", name)
    broker.call(setattr, config, "schemaCompatibilityStrategy", before)


# ---------------------------------------------------------------- the issue's example


class IntAB(Record):
    a = Integer(required=True)
    b = Integer(required=True)


class StrAB(Record):
    a = String(required=True)
    b = Integer(required=True)


@pytest.mark.parametrize("kind", [JsonSchema, AvroSchema], ids=["json", "avro"])
def test_issue_example_consumer_with_incompatible_schema_refused(
    client: pulsar.Client, broker: ThreadedBroker, kind: type
) -> None:
    topic = new_topic()
    producer = client.create_producer(topic, schema=kind(IntAB))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "s", schema=kind(StrAB))
    # a compatible consumer is accepted and reads; neither consumer's schema is stored
    consumer = client.subscribe(topic, "ok", schema=kind(IntAB))
    producer.send(IntAB(a=1, b=2))
    got = consumer.receive(5000).value()
    assert (got.a, got.b) == (1, 2)
    assert versions(broker, topic) == [0]


def test_producer_with_incompatible_schema_refused(client: pulsar.Client,
                                                   broker: ThreadedBroker) -> None:
    topic = new_topic()
    client.create_producer(topic, schema=JsonSchema(IntAB)).close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=JsonSchema(StrAB))
    with pytest.raises(pulsar.IncompatibleSchema):  # same fields, other schema type
        client.create_producer(topic, schema=AvroSchema(IntAB))
    assert versions(broker, topic) == [0]


# ---------------------------------------------------------------- each strategy


class Base(Record):
    a = Integer(required=True)
    c = Integer()  # nullable, no default (what the Python client writes)


class AddWithDefault(Record):
    a = Integer(required=True)
    c = Integer()
    b = Integer(required_default=True)  # "default": null


class AddWithout(Record):
    a = Integer(required=True)
    c = Integer()
    b = Integer()


class RemoveC(Record):
    a = Integer(required=True)


class ChangeType(Record):
    a = String(required=True)
    c = Integer()


CANDIDATES = {"add with default": AddWithDefault, "add without default": AddWithout,
              "remove a field without default": RemoveC, "change a field's type": ChangeType}


@pytest.mark.parametrize(("name", "accepted"), [
    ("ALWAYS_COMPATIBLE", set(CANDIDATES)),
    ("ALWAYS_INCOMPATIBLE", set()),
    ("BACKWARD", {"add with default", "remove a field without default"}),
    ("FORWARD", {"add with default", "add without default"}),
    ("FULL", {"add with default"}),
    ("BACKWARD_TRANSITIVE", {"add with default", "remove a field without default"}),
    ("FORWARD_TRANSITIVE", {"add with default", "add without default"}),
    ("FULL_TRANSITIVE", {"add with default"}),
])
def test_each_strategy(client: pulsar.Client, broker: ThreadedBroker,
                       strategy: Callable[[str], None], name: str, accepted: set[str]) -> None:
    strategy(name)
    got = set()
    for label, cls in CANDIDATES.items():
        topic = new_topic()
        client.create_producer(topic, schema=JsonSchema(Base)).close()
        try:
            client.create_producer(topic, schema=JsonSchema(cls)).close()
        except pulsar.IncompatibleSchema:
            assert versions(broker, topic) == [0]
        else:
            got.add(label)
            assert versions(broker, topic) == [0, 1]
    assert got == accepted


class V1(Record):
    a = Integer(required=True)


class V2(Record):
    a = Integer(required=True)
    b = Integer(required_default=True)


class V3(Record):
    a = Integer(required=True)
    b = Integer()  # the default is gone: cannot read V1's data


@pytest.mark.parametrize(("name", "accepted"), [
    ("BACKWARD", True), ("BACKWARD_TRANSITIVE", False),
    ("FULL", True), ("FULL_TRANSITIVE", False),
])
def test_transitive_checks_every_version(client: pulsar.Client, broker: ThreadedBroker,
                                         strategy: Callable[[str], None], name: str,
                                         accepted: bool) -> None:
    strategy(name)
    topic = new_topic()
    for cls in (V1, V2):
        client.create_producer(topic, schema=AvroSchema(cls)).close()
    if accepted:
        client.create_producer(topic, schema=AvroSchema(V3)).close()
        assert versions(broker, topic) == [0, 1, 2]
    else:
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(V3))
        assert versions(broker, topic) == [0, 1]
    # an existing version is accepted again whatever the strategy
    client.create_producer(topic, schema=AvroSchema(V1)).close()


def test_consumer_checked_against_every_version_only_when_transitive(
    client: pulsar.Client, strategy: Callable[[str], None]
) -> None:
    # PIP-44: under FULL a consumer reads the latest; under FULL_TRANSITIVE all of them
    topic = new_topic()
    strategy("BACKWARD")
    client.create_producer(topic, schema=JsonSchema(V1)).close()
    client.create_producer(topic, schema=JsonSchema(V2)).close()
    strategy("FULL")
    client.subscribe(topic, "latest", schema=JsonSchema(V3)).close()
    strategy("FULL_TRANSITIVE")
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "all", schema=JsonSchema(V3))


# ---------------------------------------------------------------- primitive schemas, bytes


def test_primitive_schemas_by_type(client: pulsar.Client, broker: ThreadedBroker) -> None:
    text, structured = new_topic(), new_topic()
    producer = client.create_producer(text, schema=StringSchema())
    client.create_producer(text, schema=StringSchema()).close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(text, schema=JsonSchema(V1))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(text, "json", schema=JsonSchema(V1))
    producer.close()
    client.create_producer(structured, schema=JsonSchema(V1)).close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(structured, "str", schema=StringSchema())
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(structured, schema=StringSchema())
    assert versions(broker, text) == [0] and versions(broker, structured) == [0]


def test_bytes_clients_on_a_topic_with_a_schema(client: pulsar.Client,
                                                broker: ThreadedBroker) -> None:
    # Pulsar: a producer or consumer without a schema is accepted (isSchemaValidationEnforced
    # is false by default) and registers nothing
    topic = new_topic()
    producer = client.create_producer(topic, schema=JsonSchema(V1))
    raw_consumer = client.subscribe(topic, "raw")
    raw_producer = client.create_producer(topic)
    raw_producer.send(b'{"a": 5}')
    producer.send(V1(a=6))
    got = [raw_consumer.receive(5000).data() for _ in range(2)]
    assert got[0] == b'{"a": 5}' and b'"a": 6' in got[1].replace(b'":6', b'": 6')
    assert versions(broker, topic) == [0]


def test_schema_validation_enforced(make_broker: Callable[..., ThreadedBroker]) -> None:
    b = make_broker(isSchemaValidationEnforced=True)
    client = pulsar.Client(b.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        topic = new_topic()
        client.create_producer(topic).close()  # no schema yet: fine
        client.create_producer(topic, schema=JsonSchema(V1)).close()
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic)
    finally:
        client.close()


def test_consumer_schema_on_busy_topic_without_schema_refused(client: pulsar.Client,
                                                              broker: ThreadedBroker) -> None:
    # Pulsar's addSchemaIfIdleOrCheckCompatible: a topic with data (or producers, or
    # consumers) but no schema has nothing to check a consumer's schema against
    busy, idle = new_topic(), new_topic()
    client.create_producer(busy).send(b"x")
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(busy, "s", schema=JsonSchema(V1))
    client.subscribe(idle, "s", schema=JsonSchema(V1)).close()  # an idle topic takes it
    assert versions(broker, busy) == [] and versions(broker, idle) == [0]


def _subscribe_raw(raw: RawClient, topic: str, schema: pb.Schema, consumer_id: int) -> T:
    raw.send("SUBSCRIBE", topic=topic, subscription=f"raw-{consumer_id}",
             subType=pb.CommandSubscribe.Shared, consumer_id=consumer_id,
             request_id=raw.next_request_id(), schema=schema)
    return raw.read_reply()


def test_auto_consume_accepted_without_storing(client: pulsar.Client, broker: ThreadedBroker) -> None:
    topic, empty = new_topic(), new_topic()
    client.create_producer(topic, schema=JsonSchema(V1)).close()
    auto = pb.Schema(name="auto", schema_data=b"", type=pb.Schema.AutoConsume)
    raw = RawClient.for_url(broker.url)
    try:
        raw.connect()
        assert _subscribe_raw(raw, topic, auto, 1).type == T.SUCCESS
        assert _subscribe_raw(raw, empty, auto, 2).type == T.SUCCESS
        # an AUTO_CONSUME consumer does not make the topic busy: a typed one still registers
        client.subscribe(empty, "typed", schema=JsonSchema(V1)).close()
        refused = _subscribe_raw(raw, topic, pb.Schema(name="s", schema_data=b"",
                                                        type=pb.Schema.String), 3)
        assert refused.type == T.ERROR and refused.error.error == pb.IncompatibleSchema
    finally:
        raw.close()
    assert versions(broker, topic) == [0] and versions(broker, empty) == [0]


# ---------------------------------------------------------------- where the strategy comes from


def test_namespace_policy_overrides_broker_default(broker: ThreadedBroker) -> None:
    service = broker.service
    assert service is not None
    topic = new_topic()
    assert broker.call(service.topic_schemas.strategy, topic) == "FULL"
    try:
        broker.call(lambda: service.policies.set(
            "public/default", schema_compatibility_strategy="BACKWARD"))
        assert broker.call(service.topic_schemas.strategy, topic) == "BACKWARD"
        broker.call(lambda: service.policies.set(
            "public/default", schema_compatibility_strategy=None))
        assert broker.call(service.topic_schemas.strategy, topic) == "FULL"
    finally:
        broker.call(lambda: service.policies.set(
            "public/default", schema_compatibility_strategy=None))
