"""When the broker writes a transaction command's answer: an AddPartitionToTxn read with
sends behind it (as Magnetar's client writes a transaction's first send) has its answer
written with their receipts, in one write of the connection; an add read alone is
answered at once. Observed at the connection's flushes (`CnxBase._flush`, the only place
its queued output is handed to the transport), over the raw protocol."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest

from magnetar.protocol import pb
from magnetar.protocol.commands import command
from magnetar.protocol.frames import encode_command

from . import txnraw
from .conftest import ThreadedBroker
from .rawclient import RawClient
from .rawconsumer import connected, reply_to

T = pb.BaseCommand


@pytest.fixture
def raw(broker: ThreadedBroker) -> Iterator[RawClient]:
    r = connected(broker.url)
    yield r
    r.close()


def _kinds(pieces: list[Any]) -> list[int]:
    """The command types of the frames in one flush's pieces."""
    data = b"".join(bytes(p) for p in pieces)
    kinds, at = [], 0
    while at + 8 <= len(data):
        total, size = struct.unpack_from(">II", data, at)
        cmd = T()
        cmd.ParseFromString(data[at + 8:at + 8 + size])
        kinds.append(cmd.type)
        at += 4 + total
    return kinds


def _record_flushes(broker: ThreadedBroker, topic: str) -> list[list[int]]:
    """Each flush of the connection that produces to ``topic``: its frames' types."""
    service = broker.service
    assert service is not None
    cnx = broker.call(lambda: next(c for c in service.connections
                                   if any(p.topic.name == topic for p in c.producers.values())))
    flushes: list[list[int]] = []
    original = cnx._flush

    def flush() -> None:
        if cnx._out:
            flushes.append(_kinds(cnx._out))
        original()

    broker.call(setattr, cnx, "_flush", flush)
    return flushes


def _add(raw: RawClient, txn: txnraw.Txn, topic: str) -> tuple[int, bytes]:
    rid = raw.next_request_id()
    return rid, encode_command(command(
        T.ADD_PARTITION_TO_TXN, request_id=rid, txnid_most_bits=txn[0],
        txnid_least_bits=txn[1], partitions=[topic]))


def test_an_add_with_sends_behind_it_is_answered_with_their_receipts(
        broker: ThreadedBroker, raw: RawClient, topic: str) -> None:
    txnraw.producer(raw, topic)
    flushes = _record_flushes(broker, topic)
    txn = txnraw.new_txn(raw)
    _, add = _add(raw, txn, topic)
    written: list[bytes] = []
    send_bytes = raw.send_bytes
    raw.send_bytes = written.append  # type: ignore[method-assign]  # the frames, in one write
    try:
        txnraw.send(raw, 1, 0, b"first", txn)
        txnraw.send(raw, 1, 1, b"second", txn)
    finally:
        raw.send_bytes = send_bytes  # type: ignore[method-assign]
    raw.send_bytes(add + b"".join(written))
    assert txnraw.receipt(raw, 0).type == T.SEND_RECEIPT
    assert txnraw.receipt(raw, 1).type == T.SEND_RECEIPT
    txnraw.end_ok(raw, txn)
    answered = [kinds for kinds in flushes if T.ADD_PARTITION_TO_TXN_RESPONSE in kinds]
    assert len(answered) == 1, flushes
    assert T.SEND_RECEIPT in answered[0], f"the add's answer left alone: {flushes}"
    assert answered[0].index(T.ADD_PARTITION_TO_TXN_RESPONSE) < answered[0].index(T.SEND_RECEIPT)


def test_an_add_read_alone_is_answered_at_once(broker: ThreadedBroker, raw: RawClient,
                                               topic: str) -> None:
    """As the Java and Go clients write it (the send waits for the add's answer)."""
    txnraw.producer(raw, topic)
    flushes = _record_flushes(broker, topic)
    txn = txnraw.new_txn(raw)
    rid, add = _add(raw, txn, topic)
    raw.send_bytes(add)
    answer = reply_to(raw, rid, timeout=15)
    assert answer.type == T.ADD_PARTITION_TO_TXN_RESPONSE
    assert not answer.addPartitionToTxnResponse.HasField("error")
    assert [T.ADD_PARTITION_TO_TXN_RESPONSE] in flushes
    txnraw.send_ok(raw, 1, 0, b"after", txn)
    txnraw.end_ok(raw, txn)
