"""Acknowledgements with the official client: individual, cumulative, batch index, negative,
ack timeout, explicit redelivery, AckResponse, and unsubscribe."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.protocol import pb

from . import rawconsumer as rc
from .conftest import ThreadedBroker

T = pb.BaseCommand
Sub = pb.CommandSubscribe


def produce(client: pulsar.Client, topic: str, n: int, prefix: str = "m") -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"{prefix}-{i}".encode()) for i in range(n)]
    producer.close()
    return ids


def produce_one_batch(client: pulsar.Client, topic: str, n: int) -> None:
    """``n`` messages in a single batch entry."""
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=n, batching_max_publish_delay_ms=60_000
    )
    for i in range(n):
        producer.send_async(f"b-{i}".encode(), None)
    producer.flush()
    producer.close()


def receive_n(consumer: pulsar.Consumer, n: int) -> list[pulsar.Message]:
    return [consumer.receive(timeout_millis=5000) for _ in range(n)]


def nothing_more(consumer: pulsar.Consumer, timeout_ms: int = 300) -> bool:
    try:
        msg = consumer.receive(timeout_millis=timeout_ms)
    except pulsar.Timeout:
        return True
    raise AssertionError(f"unexpected message {msg.data()!r}")


def data(msgs: list[pulsar.Message]) -> list[bytes]:
    return [m.data() for m in msgs]


# ------------------------------------------------------------------------------ individual / cumulative


@pytest.mark.parametrize("kind", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.Exclusive])
def test_individual_acks_are_not_redelivered(client: pulsar.Client, topic: str, kind: pulsar.ConsumerType) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=kind)
    produce(client, topic, 10)
    msgs = receive_n(consumer, 10)
    for m in msgs[::2]:  # acknowledge every other message
        consumer.acknowledge(m)
    consumer.close()
    again = client.subscribe(topic, "s", consumer_type=kind)
    back = receive_n(again, 5)
    assert sorted(data(back)) == sorted(data(msgs[1::2]))
    for m in back:
        again.acknowledge(m)
    assert nothing_more(again)
    again.close()
    third = client.subscribe(topic, "s", consumer_type=kind)
    assert nothing_more(third)


def test_cumulative_ack_on_exclusive(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    produce(client, topic, 10)
    msgs = receive_n(consumer, 10)
    consumer.acknowledge_cumulative(msgs[6])
    consumer.close()
    again = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    assert data(receive_n(again, 3)) == [b"m-7", b"m-8", b"m-9"]
    assert nothing_more(again)


def test_cumulative_ack_inside_a_batch(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive,
                                batch_index_ack_enabled=True)
    produce_one_batch(client, topic, 10)
    msgs = receive_n(consumer, 10)
    consumer.acknowledge_cumulative(msgs[3])
    consumer.close()
    again = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive,
                             batch_index_ack_enabled=True)
    assert data(receive_n(again, 6)) == [f"b-{i}".encode() for i in range(4, 10)]
    assert nothing_more(again)


# ------------------------------------------------------------------------------ batch index acks


@pytest.mark.parametrize("kind", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.Exclusive])
def test_batch_index_ack_redelivers_only_the_unacked(
    client: pulsar.Client, topic: str, kind: pulsar.ConsumerType
) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=kind, batch_index_ack_enabled=True)
    produce_one_batch(client, topic, 10)
    msgs = receive_n(consumer, 10)
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in msgs}) == 1
    for m in msgs[::2]:
        consumer.acknowledge(m)
    consumer.close()
    again = client.subscribe(topic, "s", consumer_type=kind, batch_index_ack_enabled=True)
    back = receive_n(again, 5)
    assert data(back) == [f"b-{i}".encode() for i in range(1, 10, 2)]
    assert [m.message_id().batch_index() for m in back] == [1, 3, 5, 7, 9]
    # The explicit redelivery path sends the entry with the same ack set.
    again.redeliver_unacknowledged_messages()
    assert data(receive_n(again, 5)) == [f"b-{i}".encode() for i in range(1, 10, 2)]
    assert nothing_more(again)


def test_partial_batch_ack_without_batch_index_ack_redelivers_the_batch(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    produce_one_batch(client, topic, 4)
    msgs = receive_n(consumer, 4)
    consumer.acknowledge(msgs[0])
    consumer.close()
    again = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    assert data(receive_n(again, 4)) == [f"b-{i}".encode() for i in range(4)]


# ------------------------------------------------------------------------------ redelivery


def test_negative_ack_redelivers_with_growing_count(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100)
    produce(client, topic, 3)
    first = receive_n(consumer, 3)
    assert [m.redelivery_count() for m in first] == [0, 0, 0]
    consumer.acknowledge(first[0])
    consumer.acknowledge(first[2])
    consumer.negative_acknowledge(first[1])
    second = consumer.receive(timeout_millis=5000)
    assert (second.data(), second.redelivery_count()) == (b"m-1", 1)
    consumer.negative_acknowledge(second)
    third = consumer.receive(timeout_millis=5000)
    assert (third.data(), third.redelivery_count()) == (b"m-1", 2)
    consumer.acknowledge(third)
    assert nothing_more(consumer)


def test_negative_ack_on_exclusive(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive,
                                negative_ack_redelivery_delay_ms=100)
    produce(client, topic, 3)
    msgs = receive_n(consumer, 3)
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[2])
    consumer.negative_acknowledge(msgs[1])
    back = consumer.receive(timeout_millis=5000)
    assert back.data() == b"m-1"
    consumer.acknowledge(back)
    assert nothing_more(consumer)


@pytest.mark.parametrize("kind", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.Failover])
def test_redeliver_unacknowledged_messages(client: pulsar.Client, topic: str, kind: pulsar.ConsumerType) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=kind)
    produce(client, topic, 5)
    first = receive_n(consumer, 5)
    consumer.acknowledge(first[0])
    consumer.redeliver_unacknowledged_messages()
    back = receive_n(consumer, 4)
    assert sorted(data(back)) == [b"m-1", b"m-2", b"m-3", b"m-4"]
    assert all(m.redelivery_count() == 1 for m in back)
    for m in back:
        consumer.acknowledge(m)
    assert nothing_more(consumer)


def test_ack_timeout_redelivers(client: pulsar.Client, topic: str) -> None:
    # The official client refuses timeouts under 10 s; its tracker ticks once a second.
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                unacked_messages_timeout_ms=10_000)
    produce(client, topic, 2)
    first = receive_n(consumer, 2)
    consumer.acknowledge(first[0])
    back = consumer.receive(timeout_millis=15_000)
    assert (back.data(), back.redelivery_count()) == (b"m-1", 1)
    consumer.acknowledge(back)


# ------------------------------------------------------------------------------ AckResponse (raw)


def test_ack_response_when_a_request_id_is_given(broker: ThreadedBroker, topic: str) -> None:
    raw = rc.connected(broker.url)
    try:
        assert rc.subscribe(raw, topic, "s", 1, Sub.Shared).type == T.SUCCESS
        assert raw.create_producer(topic, 1).type == T.PRODUCER_SUCCESS
        raw.send_message(1, 0, b"x")
        receipt = rc.expect(raw, lambda f: f.command.type == T.SEND_RECEIPT).command.send_receipt
        rc.flow(raw, 1, 10)
        frame = rc.message(raw, 1)
        assert frame is not None
        mid = frame.command.message.message_id
        assert (mid.ledgerId, mid.entryId) == (receipt.message_id.ledgerId, receipt.message_id.entryId)
        raw.send("ACK", consumer_id=1, ack_type=pb.CommandAck.Individual,
                 message_id=[pb.MessageIdData(ledgerId=mid.ledgerId, entryId=mid.entryId)], request_id=77)
        resp = rc.reply_to(raw, 77)
        assert resp.type == T.ACK_RESPONSE
        assert resp.ackResponse.consumer_id == 1 and not resp.ackResponse.HasField("error")
        # An ack for a consumer id the connection does not know gets an error back.
        raw.send("ACK", consumer_id=99, ack_type=pb.CommandAck.Individual,
                 message_id=[pb.MessageIdData(ledgerId=mid.ledgerId, entryId=mid.entryId)], request_id=78)
        bad = rc.reply_to(raw, 78)
        assert bad.type == T.ACK_RESPONSE and bad.ackResponse.error == pb.ConsumerNotFound
        # The acknowledged message is gone for good: a new consumer gets nothing.
        assert rc.close_consumer(raw, 1).type == T.SUCCESS
        assert rc.subscribe(raw, topic, "s", 2, Sub.Shared).type == T.SUCCESS
        rc.flow(raw, 2, 10)
        assert rc.message(raw, 2, 0.3) is None
    finally:
        raw.close()


def test_cumulative_ack_refused_on_shared(broker: ThreadedBroker, topic: str) -> None:
    raw = rc.connected(broker.url)
    try:
        assert rc.subscribe(raw, topic, "s", 1, Sub.Shared).type == T.SUCCESS
        assert raw.create_producer(topic, 1).type == T.PRODUCER_SUCCESS
        raw.send_message(1, 0, b"x")
        rc.expect(raw, lambda f: f.command.type == T.SEND_RECEIPT)
        rc.flow(raw, 1, 10)
        frame = rc.message(raw, 1)
        assert frame is not None
        mid = frame.command.message.message_id
        raw.send("ACK", consumer_id=1, ack_type=pb.CommandAck.Cumulative,
                 message_id=[pb.MessageIdData(ledgerId=mid.ledgerId, entryId=mid.entryId)], request_id=5)
        resp = rc.reply_to(raw, 5)
        assert resp.type == T.ACK_RESPONSE and resp.ackResponse.error == pb.NotAllowedError
        # Nothing was acknowledged: the message comes back to the next consumer.
        assert rc.close_consumer(raw, 1).type == T.SUCCESS
        assert rc.subscribe(raw, topic, "s", 2, Sub.Shared).type == T.SUCCESS
        rc.flow(raw, 2, 10)
        assert rc.message(raw, 2) is not None
    finally:
        raw.close()


# ------------------------------------------------------------------------------ unsubscribe


def test_unsubscribe_then_resubscribe_starts_at_latest(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    produce(client, topic, 5, prefix="old")
    receive_n(consumer, 2)  # three stay unacknowledged
    consumer.unsubscribe()
    produce(client, topic, 2, prefix="gap")
    again = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    produce(client, topic, 1, prefix="new")
    assert again.receive(timeout_millis=5000).data() == b"new-0"
    assert nothing_more(again)


def test_unsubscribe_refused_while_others_are_connected(client: pulsar.Client, topic: str) -> None:
    a = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    b = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    with pytest.raises(pulsar.PulsarException):
        a.unsubscribe()
    b.close()
    a.unsubscribe()
