"""Client calls beyond the official API that the Spark source builds on: listing a
namespace's topics, a topic's schema, reading many messages at once, and closing without
flushing."""

from __future__ import annotations

import pulsar
import pytest
from pulsar.schema import Integer, JsonSchema, Record

from magnetar.client import AlreadyClosed, MessageId, RegexSubscriptionMode, Timeout
from magnetar.sync import Client
from tests.client.conftest import BrokerProcess


class Point(Record):
    x = Integer()
    y = Integer()


def test_topics_and_schema(broker: BrokerProcess, topic: str, official: pulsar.Client) -> None:
    official.create_producer(topic, schema=JsonSchema(Point)).close()
    plain = topic + "-plain"
    official.create_producer(plain).close()
    with Client(broker.url) as client:
        found = client.get_topics_of_namespace("public/default")
        assert topic in found and plain in found
        non_persistent = client.get_topics_of_namespace(
            "public/default", RegexSubscriptionMode.NonPersistentOnly)
        assert topic not in non_persistent
        assert all(t.startswith("non-persistent://") for t in non_persistent)
        schema = client.get_schema(topic)
        assert schema is not None and schema.type == "Json"
        assert b'"x"' in schema.definition
        assert client.get_schema(plain) is None


def test_read_batch_takes_many_at_once(broker: BrokerProcess, topic: str, official: pulsar.Client) -> None:
    producer = official.create_producer(topic, batching_enabled=True, batching_max_messages=50)
    for i in range(120):
        producer.send_async(b"%d" % i, None)
    producer.flush()
    with Client(broker.url) as client:
        reader = client.create_reader(topic, MessageId.earliest)
        got: list[bytes] = []
        while len(got) < 120:
            got += [m.data() for m in reader.read_batch(100, 5000)]
        assert got == [b"%d" % i for i in range(120)]
        with pytest.raises(Timeout):
            reader.read_batch(10, 200)


def test_close_without_flush_sends_nothing_pending(
    broker: BrokerProcess, topic: str, official: pulsar.Client
) -> None:
    consumer = official.subscribe(topic, "s")
    with Client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=True,
                                          batching_max_publish_delay_ms=60_000)
        futures = [producer.send_async(b"never-%d" % i) for i in range(5)]
        producer.close(flush=False)
        for f in futures:
            with pytest.raises(AlreadyClosed):
                f.result(5)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=300)
