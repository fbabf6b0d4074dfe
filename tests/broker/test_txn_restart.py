"""Transactions across a kill -9 of a standalone broker: an open transaction stays open
(its messages, and those after them, withheld until it ends), an aborted one stays
invisible, a committed one visible, and acks held in a transaction are still held."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.protocol import pb

from . import txnraw
from .brokerproc import SILENT, BrokerProcess
from .rawconsumer import connected, flow, message, subscribe

T = pb.BaseCommand
Sub = pb.CommandSubscribe


@pytest.fixture
def broker_proc(tmp_path: Path) -> Iterator[BrokerProcess]:
    # a snapshot after every ended transaction: the restart reads one and replays after it
    proc = BrokerProcess(tmp_path, {"transactionBufferSnapshotMaxTransactionCount": "1"})
    proc.start()
    yield proc
    proc.stop()


def test_kill9_keeps_open_transactions_open_and_aborted_ones_invisible(
        broker_proc: BrokerProcess) -> None:
    topic = "persistent://public/default/txn-restart"
    raw = connected(broker_proc.url)
    try:
        committed, aborted, still_open = (txnraw.begin(raw, topic) for _ in range(3))
        acking = txnraw.begin(raw, topic, "acks")
        txnraw.producer(raw, topic)
        assert subscribe(raw, topic, "acks", 5, Sub.Shared, earliest=True).type == T.SUCCESS
        m0 = txnraw.send_ok(raw, 1, 0, b"m0").message_id
        txnraw.send_ok(raw, 1, 1, b"c0", committed)
        txnraw.send_ok(raw, 1, 2, b"a0", aborted)
        txnraw.end_ok(raw, committed)
        txnraw.end_ok(raw, aborted, commit=False)
        txnraw.send_ok(raw, 1, 3, b"o0", still_open)
        txnraw.send_ok(raw, 1, 4, b"m1")
        txnraw.send(raw, 1, 5, b"a1", aborted)  # refused: that transaction ended
        assert txnraw.receipt(raw, 5).type == T.SEND_ERROR
        flow(raw, 5, 100)
        first = message(raw, 5, timeout=15)
        assert first is not None and first.command.message.message_id.entryId == m0.entryId
        answer = txnraw.ack(raw, 5, [(m0.ledgerId, m0.entryId)], acking)
        assert not answer.HasField("error")
    finally:
        raw.close()

    broker_proc.kill9()
    broker_proc.start()

    client = pulsar.Client(broker_proc.url, operation_timeout_seconds=15, logger=SILENT)
    raw = connected(broker_proc.url)
    try:
        consumer = client.subscribe(topic, "after", initial_position=pulsar.InitialPosition.Earliest)
        got = [consumer.receive(timeout_millis=15_000).data() for _ in range(2)]
        assert got == [b"m0", b"c0"]
        with pytest.raises(pulsar.Timeout):  # o0 still open: it and m1 wait
            consumer.receive(timeout_millis=700)
        # the held ack survived: m0 is not delivered again to the "acks" subscription
        assert subscribe(raw, topic, "acks", 6, Sub.Shared).type == T.SUCCESS
        flow(raw, 6, 100)
        txnraw.end_ok(raw, still_open)  # the coordinator kept it open across the crash
        assert [consumer.receive(timeout_millis=15_000).data() for _ in range(2)] == [b"o0", b"m1"]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=700)  # a0 stays aborted; markers never come
        entries = []
        for _ in range(3):  # c0, o0, m1: not m0 (held), not a0
            frame = message(raw, 6, timeout=15)
            assert frame is not None
            entries.append(frame.command.message.message_id.entryId)
        assert m0.entryId not in entries
        txnraw.end_ok(raw, acking, commit=False)
        again = message(raw, 6, timeout=15)  # the abort gives m0 back
        assert again is not None and again.command.message.message_id.entryId == m0.entryId
    finally:
        raw.close()
        client.close()
