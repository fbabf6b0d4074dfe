"""Acknowledgements in transactions, over the raw protocol (transactions from the broker's
coordinator: NewTxn, AddSubscriptionToTxn, EndTxn): held until the coordinator's
EndTxnOnSubscription, applied at commit, dropped at abort (the messages come again),
conflicting ones answered TransactionConflict; individual, cumulative and batch-index."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from magnetar.protocol import pb

from . import txnraw
from .conftest import ThreadedBroker
from .rawclient import RawClient
from .rawconsumer import connected, flow, message, subscribe

T = pb.BaseCommand
Sub = pb.CommandSubscribe
_unknown_ids = itertools.count(1)


def unknown_txn() -> tuple[int, int]:
    return (1 << 41, next(_unknown_ids))


@pytest.fixture
def raw(broker: ThreadedBroker) -> Iterator[RawClient]:
    r = connected(broker.url)
    yield r
    r.close()


def backlog(broker: ThreadedBroker, topic: str, sub: str) -> int:
    return int(broker.call(lambda: broker.service.topics[topic].subscriptions[sub].backlog()))


def receive(raw: RawClient, consumer_id: int, count: int) -> list[tuple[int, int]]:
    out = []
    for _ in range(count):
        frame = message(raw, consumer_id, timeout=15)
        assert frame is not None, "a message did not come"
        mid = frame.command.message.message_id
        out.append((mid.ledgerId, mid.entryId))
    return out


def setup(raw: RawClient, topic: str, n: int, sub_type: int = Sub.Shared) -> list[tuple[int, int]]:
    txnraw.producer(raw, topic)
    assert subscribe(raw, topic, "s", 5, sub_type, earliest=True).type == T.SUCCESS
    for i in range(n):
        txnraw.send_ok(raw, 1, i, f"m{i}".encode())
    flow(raw, 5, 1000)
    return receive(raw, 5, n)


def error_of(answer: pb.CommandAckResponse) -> int | None:
    return answer.error if answer.HasField("error") else None


def test_individual_acks_apply_at_commit_and_come_back_after_abort(
        broker: ThreadedBroker, raw: RawClient, topic: str) -> None:
    ids = setup(raw, topic, 4)
    t1, t2, t3 = (txnraw.begin(raw, topic, "s") for _ in range(3))
    answer = txnraw.ack(raw, 5, ids[:2], t1)
    assert error_of(answer) is None
    assert (answer.txnid_most_bits, answer.txnid_least_bits) == t1  # AckResponse names it
    assert backlog(broker, topic, "s") == 4  # held, not applied
    conflict = txnraw.ack(raw, 5, [ids[0]], t2)
    assert error_of(conflict) == pb.TransactionConflict and conflict.message
    txnraw.end_ok(raw, t1, commit=True)
    assert backlog(broker, topic, "s") == 2
    late = txnraw.ack(raw, 5, [ids[1]], t2)  # acknowledged (committed) already
    assert error_of(late) == pb.TransactionConflict
    assert error_of(txnraw.ack(raw, 5, [ids[2]], t3)) is None
    txnraw.end_ok(raw, t3, commit=False)
    assert receive(raw, 5, 1) == [ids[2]]  # delivered again after the abort
    assert backlog(broker, topic, "s") == 2
    # ending again, or a transaction never seen, succeeds
    assert not txnraw.end_on_subscription(raw, topic, "s", t1, commit=True).HasField("error")
    assert not txnraw.end_on_subscription(raw, topic, "s", unknown_txn()).HasField("error")
    assert not txnraw.end_on_subscription(raw, topic, "nosuch", unknown_txn()).HasField("error")
    # an ack in a transaction no coordinator knows is refused
    unknown = txnraw.ack(raw, 5, [ids[3]], unknown_txn())
    assert error_of(unknown) == pb.TransactionNotFound


def test_cumulative_ack_in_a_transaction(broker: ThreadedBroker, raw: RawClient, topic: str) -> None:
    ids = setup(raw, topic, 4, Sub.Exclusive)
    t1, t2, t3 = (txnraw.begin(raw, topic, "s") for _ in range(3))
    assert error_of(txnraw.ack(raw, 5, [ids[1]], t1, cumulative=True)) is None
    other = txnraw.ack(raw, 5, [ids[2]], t2, cumulative=True)
    assert error_of(other) == pb.TransactionConflict  # one cumulative holder at a time
    assert backlog(broker, topic, "s") == 4
    txnraw.end_ok(raw, t1)
    assert backlog(broker, topic, "s") == 2
    assert error_of(txnraw.ack(raw, 5, [ids[3]], t3, cumulative=True)) is None
    txnraw.end_ok(raw, t3, commit=False)
    assert receive(raw, 5, 2) == ids[2:]  # what the aborted cumulative ack covered
    assert backlog(broker, topic, "s") == 2


def test_batch_index_acks_in_transactions(broker: ThreadedBroker, raw: RawClient, topic: str) -> None:
    txnraw.producer(raw, topic)
    assert subscribe(raw, topic, "s", 5, Sub.Shared, earliest=True).type == T.SUCCESS
    txnraw.send_ok(raw, 1, 0, [b"b0", b"b1", b"b2", b"b3"])
    flow(raw, 5, 100)
    (entry,) = receive(raw, 5, 1)
    t1, t2 = txnraw.begin(raw, topic, "s"), txnraw.begin(raw, topic, "s")
    # a set bit is an index left unacknowledged
    assert error_of(txnraw.ack(raw, 5, [entry], t1, ack_set=[0b1100])) is None  # 0 and 1
    clash = txnraw.ack(raw, 5, [entry], t2, ack_set=[0b1101])  # index 1 again
    assert error_of(clash) == pb.TransactionConflict
    assert error_of(txnraw.ack(raw, 5, [entry], t2, ack_set=[0b0011])) is None  # 2 and 3
    txnraw.end_ok(raw, t1)
    assert backlog(broker, topic, "s") == 1  # half the batch acknowledged
    txnraw.end_ok(raw, t2)
    assert backlog(broker, topic, "s") == 0
