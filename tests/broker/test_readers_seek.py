"""Readers (non-durable subscriptions), seek, GetLastMessageId and has_message_available."""

from __future__ import annotations

import time

import pulsar
import pytest


def _produce(client: pulsar.Client, topic: str, n: int, batched: bool = False) -> list[pulsar.MessageId]:
    producer = client.create_producer(
        topic, batching_enabled=batched, batching_max_messages=10, batching_max_publish_delay_ms=50
    )
    ids: list[pulsar.MessageId] = []
    if batched:
        for i in range(n):
            producer.send_async(f"m-{i}".encode(), lambda res, mid: ids.append(mid))
        producer.flush()
        ids.sort(key=lambda m: (m.ledger_id(), m.entry_id(), m.batch_index()))
    else:
        ids = [producer.send(f"m-{i}".encode()) for i in range(n)]
    producer.close()
    return ids


def _read_all(reader: pulsar.Reader) -> list[bytes]:
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(5000).data())
    return out


def test_reader_from_earliest_and_latest(client: pulsar.Client, topic: str) -> None:
    _produce(client, topic, 5)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert _read_all(reader) == [f"m-{i}".encode() for i in range(5)]
    latest = client.create_reader(topic, pulsar.MessageId.latest)
    assert not latest.has_message_available()
    _produce(client, topic, 1)
    assert latest.read_next(5000).data() == b"m-0"


def test_reader_start_id_exclusive_and_inclusive(client: pulsar.Client, topic: str) -> None:
    ids = _produce(client, topic, 6)
    exclusive = client.create_reader(topic, ids[2])
    assert _read_all(exclusive) == [b"m-3", b"m-4", b"m-5"]
    inclusive = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert _read_all(inclusive) == [b"m-2", b"m-3", b"m-4", b"m-5"]


def test_reader_inside_a_batch(client: pulsar.Client, topic: str) -> None:
    ids = _produce(client, topic, 30, batched=True)
    start = ids[14]
    reader = client.create_reader(topic, start)
    got = _read_all(reader)
    assert got == [f"m-{i}".encode() for i in range(15, 30)]


def test_has_message_available_on_empty_topic(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic).close()
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()


def test_seek_to_message_id_and_earliest(client: pulsar.Client, topic: str) -> None:
    ids = _produce(client, topic, 10)
    consumer = client.subscribe(
        topic, "seeker", initial_position=pulsar.InitialPosition.Earliest,
        consumer_type=pulsar.ConsumerType.Exclusive,
    )
    for _ in range(10):
        consumer.acknowledge(consumer.receive(5000))
    consumer.seek(ids[4])
    # The official client resumes after the given id (it drops the seek entry itself).
    assert consumer.receive(5000).data() == b"m-5"
    consumer.seek(pulsar.MessageId.earliest)
    assert consumer.receive(5000).data() == b"m-0"


def test_seek_to_publish_time(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(f"before-{i}".encode())
    deadline = time.time() + 2
    while int(time.time() * 1000) <= int((deadline - 2) * 1000) + 5:  # advance the wall clock a little
        pass
    cut = int(time.time() * 1000)
    for i in range(3):
        producer.send(f"after-{i}".encode())
    consumer = client.subscribe(topic, "timeseek", initial_position=pulsar.InitialPosition.Earliest)
    consumer.seek(cut)
    assert consumer.receive(5000).data() == b"after-0"


def test_get_last_message_id(client: pulsar.Client, topic: str) -> None:
    ids = _produce(client, topic, 4)
    consumer = client.subscribe(topic, "last", initial_position=pulsar.InitialPosition.Earliest)
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(), ids[-1].entry_id())


@pytest.mark.parametrize("n", [1, 3])
def test_reader_sees_every_message_once(client: pulsar.Client, topic: str, n: int) -> None:
    _produce(client, topic, n)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert len(_read_all(reader)) == n


def test_seek_keeps_a_readers_subscription_for_its_reconnect_only_for_a_while(
        broker, topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a seek closes a Reader's consumer, its subscription (and the cursor the seek
    moved) waits for the consumer to come back, as Pulsar keeps the reset cursor; one
    that never comes back does not leave it behind."""
    from magnetar.broker.subscriptions import subscription
    from magnetar.protocol import pb
    from tests.broker.brokerproc import wait_until
    from tests.broker.rawclient import RawClient

    monkeypatch.setattr(subscription, "READER_SEEK_HOLD_SECONDS", 0.5)
    with RawClient.for_url(broker.url) as raw:
        raw.connect()
        raw.send("SUBSCRIBE", topic=topic, subscription="reader-sub", subType=pb.CommandSubscribe.Exclusive,
                 consumer_id=1, request_id=raw.next_request_id(), durable=False)
        assert raw.expect(pb.BaseCommand.SUCCESS).type == pb.BaseCommand.SUCCESS
        loaded = broker.service.topics[topic]
        raw.send("SEEK", consumer_id=1, request_id=raw.next_request_id(), message_publish_time=0)
        answers = [raw.read_reply().type, raw.read_reply().type]  # the consumer is closed first
        assert answers == [pb.BaseCommand.CLOSE_CONSUMER, pb.BaseCommand.SUCCESS]
        assert "reader-sub" in loaded.subscriptions  # kept for the reconnect
        wait_until(lambda: "reader-sub" not in loaded.subscriptions, 10,
                   "the unclaimed Reader subscription to go")
