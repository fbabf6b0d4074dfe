"""Regressions of issue 7 with the official client: nothing acknowledged that was not consumed.

- A cumulative ack of a message inside a batch, with batch-index acks off, is sent as "the
  entry before this one"; for the first entry of a ledger that is entry id -1, which must mean
  "before that ledger's first entry" and not 2**64-1 (which acknowledged the whole topic).
- Every seek resets what the consumer holds, whatever came before it (a seek by time after a
  seek by id gave a stale message).
"""

from __future__ import annotations

from collections.abc import Callable

import pulsar
import pytest

from magnetar.protocol import pb
from magnetar.storage import Position

from . import rawconsumer as rc
from .conftest import QUIET, ThreadedBroker
from .test_acks import nothing_more


def produce_batches(client: pulsar.Client, topic: str, batches: int, size: int) -> None:
    """``batches`` entries of ``size`` messages each, ``b-i`` for batch b, index i."""
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=size,
        batching_max_publish_delay_ms=60_000,
    )
    for b in range(batches):
        for i in range(size):
            producer.send_async(f"{b}-{i}".encode(), None)
        producer.flush()
    producer.close()


def drain(consumer: pulsar.Consumer, n: int) -> list[bytes]:
    out = [consumer.receive(timeout_millis=5000).data() for _ in range(n)]
    assert nothing_more(consumer)
    return out


@pytest.mark.parametrize(
    ("entries_per_ledger", "received", "expected_back"),
    [
        (50_000, 4, 30),  # inside the first entry of the only ledger: nothing is acknowledged
        (3, 4, 30),
        (1, 15, 20),  # inside the first entry of ledger 1: ledger 0 (10 messages) is acknowledged
        (1, 25, 10),
    ],
)
def test_cumulative_ack_inside_a_batch_keeps_what_was_not_consumed(
    make_broker: Callable[..., ThreadedBroker], entries_per_ledger: int, received: int,
    expected_back: int,
) -> None:
    broker = make_broker(managedLedgerMaxEntriesPerLedger=entries_per_ledger)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        topic = "persistent://public/default/cumulative-in-batch"
        consumer = client.subscribe(topic, "s")
        produce_batches(client, topic, 3, 10)
        msgs = [consumer.receive(timeout_millis=5000) for _ in range(received)]
        consumer.acknowledge_cumulative(msgs[-1])
        consumer.close()  # flushes the grouped acks
        again = client.subscribe(topic, "s")
        back = drain(again, expected_back)
        first_whole_batch = 3 - expected_back // 10
        assert back == [f"{b}-{i}".encode() for b in range(first_whole_batch, 3) for i in range(10)]
    finally:
        client.close()


def test_seek_by_time_after_seek_by_id(client: pulsar.Client, topic: str) -> None:
    # receive waits up to 30 s: after each seek the client reconnects, and 5 s is thin on
    # a loaded CI machine (this test failed once under heavy load, cause not known; not
    # reproduced in 25 runs beside two CPU burners)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(str(i).encode(), event_timestamp=1000 + i) for i in range(80)]
    msgs = [consumer.receive(timeout_millis=30_000) for _ in range(80)]
    for m in msgs:
        consumer.acknowledge(m)
    times = [m.publish_timestamp() for m in msgs]
    consumer.seek(ids[50])
    assert consumer.receive(timeout_millis=30_000).data() == b"51"
    # the publish time of #20 (several messages may share a millisecond: take the first)
    target = times[20]
    first = times.index(target)
    consumer.seek(target)
    assert consumer.receive(timeout_millis=30_000).data() == str(first).encode()
    consumer.seek(ids[10])
    assert consumer.receive(timeout_millis=30_000).data() == b"11"


def test_batch_ack_sets_are_bounded_to_entries_that_exist(broker: ThreadedBroker, topic: str) -> None:
    """Ack sets for positions that name no entry keep nothing, and a set longer than its
    batch is cut to the batch's words (a client cannot grow the cursor at will)."""
    raw = rc.connected(broker.url)
    try:
        raw.create_producer(topic)
        receipt = rc.publish_batch(raw, 1, 0, [b"m%d" % i for i in range(10)])
        assert receipt.type == pb.BaseCommand.SEND_RECEIPT
        lid = receipt.send_receipt.message_id.ledgerId
        eid = receipt.send_receipt.message_id.entryId
        assert rc.subscribe(raw, topic, "bounded", 7, rc.Sub.Shared, earliest=True).type == pb.BaseCommand.SUCCESS
        rc.flow(raw, 7, 100)
        assert rc.message(raw, 7) is not None
        huge = [-1] * 10_000  # every bit "still unacknowledged" ...
        huge[0] = -2  # ... but index 0
        ids = [
            pb.MessageIdData(ledgerId=lid, entryId=eid, ack_set=huge),
            pb.MessageIdData(ledgerId=lid, entryId=eid + 5, ack_set=[-2]),  # no such entry
            pb.MessageIdData(ledgerId=lid + 3, entryId=0, ack_set=[-2]),  # no such ledger
        ]
        request_id = raw.next_request_id()
        raw.send("ACK", consumer_id=7, ack_type=pb.CommandAck.Individual, message_id=ids,
                 request_id=request_id)
        rc.reply_to(raw, request_id)
        service = broker.service
        assert service is not None
        sets = broker.call(lambda: dict(service.topics[topic].subscriptions["bounded"].cursor.batch_ack_sets))
        assert sets == {Position(lid, eid): [-2]}
    finally:
        raw.close()
