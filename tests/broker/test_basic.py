"""Produce and consume through the broker with the official client: the basic round trip."""

from __future__ import annotations

import pulsar


def test_produce_consume_round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic, batching_enabled=False)
    sent_ids = [producer.send(f"m-{i}".encode(), properties={"i": str(i)}) for i in range(20)]
    got = []
    for _ in range(20):
        msg = consumer.receive(timeout_millis=5000)
        got.append((msg.data(), msg.properties()["i"], msg.message_id()))
        consumer.acknowledge(msg)
    assert [g[0] for g in got] == [f"m-{i}".encode() for i in range(20)]
    assert [g[1] for g in got] == [str(i) for i in range(20)]
    assert [str(g[2]) for g in got] == [str(m) for m in sent_ids]


def test_batched_produce_consume(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=50, batching_max_publish_delay_ms=5
    )
    for i in range(500):
        producer.send_async(f"b-{i}".encode(), None)
    producer.flush()
    got = set()
    while len(got) < 500:
        msg = consumer.receive(timeout_millis=5000)
        got.add(msg.data())
        consumer.acknowledge(msg)
    assert got == {f"b-{i}".encode() for i in range(500)}


def test_earliest_subscription_sees_old_messages(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"old-{i}".encode())
    late = client.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
    latest = client.subscribe(topic, "latest", initial_position=pulsar.InitialPosition.Latest)
    producer.send(b"new")
    assert [late.receive(5000).data() for _ in range(6)] == [
        b"old-0", b"old-1", b"old-2", b"old-3", b"old-4", b"new"
    ]
    assert latest.receive(5000).data() == b"new"
