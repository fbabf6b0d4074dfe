"""The transaction buffer, driven over the raw protocol (transactions from the broker's
coordinator with NewTxn/AddPartitionToTxn/EndTxn, sends in them, and the participant
command EndTxnOnPartition a coordinator sends) and read by the official client: messages
of an open transaction are invisible, appear together at commit, never after an abort;
later non-transactional messages wait behind an open transaction; markers are never
delivered nor counted."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from magnetar.protocol import pb

from . import txnraw
from .conftest import QUIET, ThreadedBroker
from .rawclient import RawClient
from .rawconsumer import connected, flow, message, subscribe

T = pb.BaseCommand
_unknown_ids = itertools.count(1)

#: how long a test waits to see that a message does NOT come (it would come at once)
ABSENT_MS = 700


def unknown_txn() -> tuple[int, int]:
    """An id no coordinator gave out (for the participant commands alone)."""
    return (1 << 40, next(_unknown_ids))


@pytest.fixture
def raw(broker: ThreadedBroker) -> Iterator[RawClient]:
    r = connected(broker.url)
    yield r
    r.close()


def received(consumer: pulsar.Consumer, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=15_000)
        out.append(msg.data())
        consumer.acknowledge(msg)
    return out


def nothing_more(consumer: pulsar.Consumer) -> None:
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=ABSENT_MS)


def test_commit_makes_messages_visible_together_in_order(
        broker: ThreadedBroker, client: pulsar.Client, raw: RawClient, topic: str) -> None:
    txnraw.producer(raw, topic)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    txn = txnraw.begin(raw, topic)
    txnraw.send_ok(raw, 1, 0, b"before")
    for i in range(3):
        txnraw.send_ok(raw, 1, 1 + i, f"t{i}".encode(), txn)
    txnraw.send_ok(raw, 1, 4, b"after")  # not in the transaction: waits behind it
    assert received(consumer, 1) == [b"before"]
    nothing_more(consumer)
    txnraw.end_ok(raw, txn, commit=True)  # the coordinator tells the topic
    assert received(consumer, 4) == [b"t0", b"t1", b"t2", b"after"]
    nothing_more(consumer)  # the commit marker is never delivered
    # a retried commit (the coordinator lost the answer) succeeds again, writes nothing
    assert not txnraw.end_on_partition(raw, topic, txn, commit=True).HasField("error")
    bad = txnraw.end_on_partition(raw, topic, txn, commit=False)
    assert bad.error == pb.InvalidTxnStatus and bad.message

    def counters() -> tuple[int, int, int]:
        t = broker.service.topics[topic]
        return t.msg_in, t.subscriptions["s"].backlog(), len(t.txn_buffer.open)

    assert broker.call(counters) == (5, 0, 0)  # markers: not messages, not backlog


def test_abort_hides_messages_for_every_reader(
        broker: ThreadedBroker, client: pulsar.Client, raw: RawClient, topic: str) -> None:
    txnraw.producer(raw, topic)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    shared = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared,
                              initial_position=pulsar.InitialPosition.Earliest)
    keyed = client.subscribe(topic, "keyed", consumer_type=pulsar.ConsumerType.KeyShared,
                             initial_position=pulsar.InitialPosition.Earliest)
    aborted, committed = txnraw.begin(raw, topic), txnraw.begin(raw, topic)
    txnraw.send_ok(raw, 1, 0, [b"a0", b"a1"], aborted)  # a batch
    txnraw.send_ok(raw, 1, 1, b"c0", committed)
    txnraw.send_ok(raw, 1, 2, b"a2", aborted, txn_in_metadata=False)  # id on the Send only
    txnraw.send_ok(raw, 1, 3, b"plain")
    nothing_more(consumer)
    txnraw.end_ok(raw, aborted, commit=False)
    nothing_more(consumer)  # the committed one is still open: it holds "plain" back
    txnraw.end_ok(raw, committed, commit=True)
    assert received(consumer, 2) == [b"c0", b"plain"]
    assert received(shared, 2) == [b"c0", b"plain"]
    assert received(keyed, 2) == [b"c0", b"plain"]
    nothing_more(consumer)
    # a reader from the start, and a new subscription, skip the aborted entries too
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(timeout_millis=15_000).data() for _ in range(2)]
    assert got == [b"c0", b"plain"]
    assert not reader.has_message_available()
    # a send in the aborted transaction afterwards is refused
    txnraw.send(raw, 1, 4, b"late", aborted)
    late = txnraw.receipt(raw, 4)
    assert late.type == T.SEND_ERROR and late.send_error.error == pb.InvalidTxnStatus

    def backlogs() -> tuple[int, int, int]:
        subs = broker.service.topics[topic].subscriptions
        return subs["s"].backlog(), subs["shared"].backlog(), subs["keyed"].backlog()

    assert broker.call(backlogs) == (0, 0, 0)


def test_reader_last_message_id_stops_before_an_open_transaction(
        client: pulsar.Client, raw: RawClient, topic: str) -> None:
    txnraw.producer(raw, topic)
    txn = txnraw.begin(raw, topic)
    txnraw.send_ok(raw, 1, 0, b"m0")
    txnraw.send_ok(raw, 1, 1, b"t0", txn)
    txnraw.send_ok(raw, 1, 2, b"m1")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(timeout_millis=15_000).data() == b"m0"
    assert not reader.has_message_available()  # GetLastMessageId: before the open one
    txnraw.end_ok(raw, txn, commit=False)
    # the last entry is now the abort marker: the last readable message is m1
    assert reader.has_message_available()
    assert reader.read_next(timeout_millis=15_000).data() == b"m1"
    assert not reader.has_message_available()


def test_markers_are_never_sent_to_a_raw_consumer(broker: ThreadedBroker, raw: RawClient,
                                                  topic: str) -> None:
    txnraw.producer(raw, topic)
    assert subscribe(raw, topic, "raw", 7, earliest=True).type == T.SUCCESS
    flow(raw, 7, 100)
    txn = txnraw.begin(raw, topic)
    txnraw.send_ok(raw, 1, 0, b"t", txn)
    assert message(raw, 7, timeout=ABSENT_MS / 1000) is None
    txnraw.end_ok(raw, txn)
    first = message(raw, 7, timeout=15)
    assert first is not None and first.command.message.message_id.entryId == 0
    assert message(raw, 7, timeout=ABSENT_MS / 1000) is None  # not the marker (entry 1)


def test_send_in_a_transaction_needs_txn_enabled(client: pulsar.Client, raw: RawClient,
                                                 topic: str) -> None:
    txnraw.producer(raw, topic, txn_enabled=False)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    txnraw.send(raw, 1, 0, b"refused", txnraw.begin(raw, topic))
    answer = txnraw.receipt(raw, 0)
    assert answer.type == T.SEND_ERROR
    assert answer.send_error.error == pb.NotAllowedError and "txn_enabled" in answer.send_error.message
    txnraw.send_ok(raw, 1, 1, b"plain")  # the producer goes on
    assert received(consumer, 1) == [b"plain"]


def test_send_in_a_transaction_the_coordinator_does_not_know(
        client: pulsar.Client, raw: RawClient, topic: str) -> None:
    txnraw.producer(raw, topic)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    txnraw.send(raw, 1, 0, b"unknown", unknown_txn())
    answer = txnraw.receipt(raw, 0)
    assert answer.type == T.SEND_ERROR and answer.send_error.error == pb.TransactionNotFound
    not_added = txnraw.new_txn(raw)  # no AddPartitionToTxn for this topic
    txnraw.send(raw, 1, 1, b"not-added", not_added)
    assert txnraw.receipt(raw, 1).type == T.SEND_ERROR
    txnraw.send_ok(raw, 1, 2, b"plain")
    assert received(consumer, 1) == [b"plain"]  # nothing of the refused ones, nothing held
    nothing_more(consumer)
    txnraw.end_ok(raw, not_added, commit=False)


def test_ending_a_transaction_never_seen_succeeds(raw: RawClient, topic: str) -> None:
    txnraw.producer(raw, topic)
    for commit in (True, False):
        assert not txnraw.end_on_partition(raw, topic, unknown_txn(), commit).HasField("error")
    missing = "persistent://public/default/never-created-for-txn"
    assert not txnraw.end_on_partition(raw, missing, unknown_txn()).HasField("error")


def test_sends_stay_in_order_around_a_first_transactional_send(
        client: pulsar.Client, raw: RawClient, topic: str) -> None:
    """The first send of a transaction waits for the buffer and the checker: the sends
    written right behind it (without waiting for receipts) keep their order."""
    txnraw.producer(raw, topic)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    txn = txnraw.begin(raw, topic)
    txnraw.send(raw, 1, 0, b"t0", txn)
    txnraw.send(raw, 1, 1, b"p0")
    txnraw.send(raw, 1, 2, b"t1", txn)
    positions = []
    for seq in range(3):
        answer = txnraw.receipt(raw, seq)
        assert answer.type == T.SEND_RECEIPT, answer
        positions.append((answer.send_receipt.message_id.ledgerId, answer.send_receipt.message_id.entryId))
    assert positions == sorted(positions)
    txnraw.end_ok(raw, txn)
    assert received(consumer, 3) == [b"t0", b"p0", b"t1"]


class SlowChecker:
    """The broker's own coordinator check, answered only after a few turns of the loop (as
    a coordinator on another broker answers): counts the checks asked."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.asked: list[tuple[int, int]] = []

    async def check_open(self, most: int, least: int, topic: str,
                         subscription: str | None = None) -> None:
        self.asked.append((most, least))
        for _ in range(3):
            await asyncio.sleep(0)
        await self.real.check_open(most, least, topic, subscription)


@pytest.mark.parametrize("slow", [False, True], ids=["coordinator-here", "coordinator-waits"])
def test_later_transactions_on_a_topic_keep_the_order(
        broker: ThreadedBroker, client: pulsar.Client, raw: RawClient, topic: str,
        slow: bool) -> None:
    """A transaction's first send on a topic that already has its buffer is checked at
    once when the coordinator answers without waiting, and waits in order otherwise:
    either way the sends written right behind it keep their order, and one the
    coordinator refuses is answered and stores nothing. A transaction whose
    AddPartitionToTxn this broker's coordinator answered as it read it is not checked
    again at its first send."""
    txnraw.producer(raw, topic)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    first = txnraw.begin(raw, topic)
    txnraw.send_ok(raw, 1, 0, b"first", first)  # the topic's buffer is created
    txnraw.end_ok(raw, first)
    assert received(consumer, 1) == [b"first"]
    assert broker.service is not None
    real = broker.service.txn_checker
    checker = SlowChecker(real)
    if slow:
        broker.service.txn_checker = checker
    try:
        txn = txnraw.begin(raw, topic)
        not_added = txnraw.new_txn(raw)  # no AddPartitionToTxn for this topic
        txnraw.send(raw, 1, 1, b"t0", txn)
        txnraw.send(raw, 1, 2, b"p0")
        txnraw.send(raw, 1, 3, b"t1", txn)
        txnraw.send(raw, 1, 4, b"refused", not_added)
        txnraw.send(raw, 1, 5, b"p1")
        answers = [txnraw.receipt(raw, seq) for seq in range(1, 6)]
    finally:
        broker.service.txn_checker = real
    refused = answers.pop(3)
    assert refused.type == T.SEND_ERROR and refused.send_error.error == pb.InvalidTxnStatus
    assert all(a.type == T.SEND_RECEIPT for a in answers), answers
    positions = [(a.send_receipt.message_id.ledgerId, a.send_receipt.message_id.entryId)
                 for a in answers]
    assert positions == sorted(positions)
    assert txn not in checker.asked  # (its AddPartitionToTxn, answered here, told the topic)
    if slow:  # the transaction not added: asked in the send's step, then again in order
        assert checker.asked.count(not_added) >= 2
    txnraw.end_ok(raw, txn)
    assert received(consumer, 4) == [b"t0", b"p0", b"t1", b"p1"]
    nothing_more(consumer)
    txnraw.end_ok(raw, not_added, commit=False)


def test_official_client_reads_while_others_commit(client: pulsar.Client, raw: RawClient,
                                                   topic: str) -> None:
    """Many transactions, interleaved, committed in another order than they began."""
    txnraw.producer(raw, topic)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    txns = [txnraw.begin(raw, topic) for _ in range(4)]
    seq = itertools.count()
    for round_ in range(3):
        for i, txn in enumerate(txns):
            txnraw.send_ok(raw, 1, next(seq), f"{i}-{round_}".encode(), txn)
    for txn in reversed(txns):
        txnraw.end_ok(raw, txn, commit=txn != txns[1])
    expected = [f"{i}-{r}".encode() for r in range(3) for i in range(4) if i != 1]
    assert received(consumer, len(expected)) == expected
    nothing_more(consumer)



def test_open_transaction_at_the_start_of_a_new_ledger(make_broker: Callable[..., ThreadedBroker],
                                                      topic: str) -> None:
    """The read position sits at the end of a full ledger and the open transaction's first
    entry opens the next one: the dispatcher waits (does not spin on it), then delivers."""
    b = make_broker(managedLedgerMaxEntriesPerLedger=2)
    client = pulsar.Client(b.url, operation_timeout_seconds=10, logger=QUIET)
    raw = connected(b.url)
    try:
        txnraw.producer(raw, topic)
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        txnraw.send_ok(raw, 1, 0, b"m0")
        txnraw.send_ok(raw, 1, 1, b"m1")
        assert received(consumer, 2) == [b"m0", b"m1"]
        txn = txnraw.begin(raw, topic)
        first = txnraw.send_ok(raw, 1, 2, b"t0", txn).message_id
        txnraw.send_ok(raw, 1, 3, b"m2")
        nothing_more(consumer)

        def waiting() -> bool:
            sub = b.service.topics[topic].subscriptions["s"]
            return sub.dispatcher.read_position > sub.dispatcher.readable_last()

        assert first.entryId == 0  # the transaction opened a ledger
        assert b.call(waiting)  # parked past the bound, not re-reading in a loop
        txnraw.end_ok(raw, txn)
        assert received(consumer, 2) == [b"t0", b"m2"]
    finally:
        raw.close()
        client.close()


def test_message_ttl_never_expires_past_an_open_transaction(
        broker: ThreadedBroker, client: pulsar.Client, raw: RawClient, topic: str) -> None:
    """Expiring everything (TTL 0) stops before the open transaction's first message: its
    messages, and those after it, are delivered once it commits."""
    txnraw.producer(raw, topic)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    consumer.close()
    txn = txnraw.begin(raw, topic)
    txnraw.send_ok(raw, 1, 0, b"old")
    txnraw.send_ok(raw, 1, 1, b"t0", txn)
    txnraw.send_ok(raw, 1, 2, b"later")

    async def expire_all() -> None:
        t = broker.service.topics[topic]
        await broker.service.expire_messages(t, 0, now=time.time() + 60)

    broker.call(expire_all)
    txnraw.end_ok(raw, txn)
    consumer = client.subscribe(topic, "s")
    assert received(consumer, 2) == [b"t0", b"later"]  # "old" expired, nothing else
