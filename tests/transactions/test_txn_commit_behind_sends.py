"""A commit written right behind its transaction's last sends (Magnetar's client does so
on its coordinator's connection to a Magnetar broker, without waiting for the receipts).

On the wire (frames built from the generated protobuf classes): for such a client the
broker answers the EndTxn only after every Send read before it on the connection, and
refuses the commit, leaving the transaction open, when one of the transaction's Sends was
refused; a client that is not Magnetar's is served as Pulsar serves it. With the client:
the EndTxn leaves while sends are still unanswered, and a refused send makes the commit
abort (``TransactionHasOperationFailed``) with nothing of the transaction visible."""

from __future__ import annotations

import asyncio
import uuid

import pulsar
import pytest

import magnetar
from magnetar.client.errors import NotAllowed, Timeout, TransactionHasOperationFailed
from magnetar.protocol import pulsar_pb2 as pb
from tests.client.conftest import BrokerProcess, run
from tests.transactions.test_txn_wire import (
    Wire,
    _add_frame,
    _send_frame,
    end,
    new_txn,
    txn_producer,
)

T = pb.BaseCommand


def _end_frame(request_id: int, txn: tuple[int, int], action: int) -> bytes:
    body = T(type=T.END_TXN, endTxn=pb.CommandEndTxn(
        request_id=request_id, txnid_most_bits=txn[0], txnid_least_bits=txn[1],
        txn_action=action)).SerializeToString()
    return len(body + b"1234").to_bytes(4, "big") + len(body).to_bytes(4, "big") + body


def _added(wire: Wire, txn: tuple[int, int], topic: str) -> None:
    answer = wire.call(T.ADD_PARTITION_TO_TXN, "addPartitionToTxn", txnid_most_bits=txn[0],
                       txnid_least_bits=txn[1], partitions=[topic])
    assert not answer.addPartitionToTxnResponse.HasField("error"), answer


def test_a_commit_behind_its_sends_is_answered_after_every_one(
        txn_broker: BrokerProcess) -> None:
    """Twenty Sends and the EndTxn in one write, from Magnetar's client: the twenty
    receipts come first (the commit is decided once they are stored), then the commit's
    answer, and a reader then finds all twenty."""
    wire = Wire(txn_broker.port, client_version="magnetar-python-wire-test")
    client = pulsar.Client(f"pulsar://127.0.0.1:{txn_broker.port}")
    try:
        topic = f"persistent://public/default/behind-{uuid.uuid4().hex[:8]}"
        txn_producer(wire, topic)
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        txn = new_txn(wire)
        _added(wire, txn, topic)
        wire.rid += 1
        wire.sock.sendall(b"".join(_send_frame(1, seq, txn, b"m%d" % seq) for seq in range(20))
                          + _end_frame(wire.rid, txn, pb.COMMIT))
        answers = [wire.read() for _ in range(21)]
        assert [a.type for a in answers] == [T.SEND_RECEIPT] * 20 + [T.END_TXN_RESPONSE]
        assert [a.send_receipt.sequence_id for a in answers[:20]] == list(range(20))
        assert not answers[20].endTxnResponse.HasField("error"), answers[20]
        got = [reader.read_next(timeout_millis=10_000).data() for _ in range(20)]
        assert got == [b"m%d" % seq for seq in range(20)]
    finally:
        client.close()
        wire.close()


def _refused_send_then_commit(port: int, client_version: str, topic: str,
                              behind: bool) -> tuple[tuple[int, int], Wire, list[T]]:
    """A stored send and a send refused for its checksum, then the commit: in the same
    write (``behind``), or once both sends are answered."""
    wire = Wire(port, client_version=client_version)
    txn_producer(wire, topic)
    txn = new_txn(wire)
    _added(wire, txn, topic)
    sends = (_send_frame(1, 0, txn, b"stored")
             + _send_frame(1, 1, txn, b"refused", bad_checksum=True))
    if not behind:
        wire.sock.sendall(sends)
        answers = [wire.read() for _ in range(2)]
        assert sorted(a.type for a in answers) == sorted([T.SEND_RECEIPT, T.SEND_ERROR])
        wire.rid += 1
        wire.sock.sendall(_end_frame(wire.rid, txn, pb.COMMIT))
        return txn, wire, [*answers, wire.read()]
    wire.rid += 1
    wire.sock.sendall(sends + _end_frame(wire.rid, txn, pb.COMMIT))
    answers = [wire.read() for _ in range(3)]
    assert sorted(a.type for a in answers) == sorted(
        [T.SEND_RECEIPT, T.SEND_ERROR, T.END_TXN_RESPONSE]), answers
    return txn, wire, answers


def test_a_commit_behind_a_refused_send_is_refused_and_the_transaction_stays_open(
        txn_broker: BrokerProcess) -> None:
    """From Magnetar's client, a commit read after one of its transaction's Sends was
    refused is refused (``NotAllowedError``) and commits nothing; the transaction stays
    open and can be aborted. From another client, which commits once its sends are
    answered (as the Java and Go clients do), the commit after the same refusal is done,
    as Pulsar does it."""
    client = pulsar.Client(f"pulsar://127.0.0.1:{txn_broker.port}")
    try:
        topic = f"persistent://public/default/behind-refused-{uuid.uuid4().hex[:8]}"
        txn, wire, answers = _refused_send_then_commit(
            txn_broker.port, "magnetar-python-wire-test", topic, behind=True)
        try:
            assert answers[-1].type == T.END_TXN_RESPONSE  # after the stored send's receipt
            reply = answers[-1].endTxnResponse
            assert reply.error == pb.NotAllowedError and "still open" in reply.message, reply
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            with pytest.raises(pulsar.Timeout):  # nothing committed
                reader.read_next(timeout_millis=300)
            assert not end(wire, txn, pb.ABORT).HasField("error")  # it was open
            with pytest.raises(pulsar.Timeout):
                reader.read_next(timeout_millis=300)
        finally:
            wire.close()

        other = f"persistent://public/default/behind-refused-other-{uuid.uuid4().hex[:8]}"
        txn, wire, answers = _refused_send_then_commit(txn_broker.port, "wire-test", other,
                                                       behind=False)
        try:
            assert answers[-1].type == T.END_TXN_RESPONSE
            ended = answers[-1].endTxnResponse
            assert not ended.HasField("error"), ended
            reader = client.create_reader(other, pulsar.MessageId.earliest)
            assert reader.read_next(timeout_millis=10_000).data() == b"stored"
        finally:
            wire.close()
    finally:
        client.close()


def test_the_client_writes_its_commit_behind_unanswered_sends(
        txn_broker: BrokerProcess) -> None:
    """Magnetar's client writes the EndTxn while sends of the transaction are still
    unanswered; the commit returns with every send answered and all of them readable."""
    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            topic = f"persistent://public/default/behind-client-{uuid.uuid4().hex[:8]}"
            producer = await client.create_producer(topic, batching_enabled=False)
            consumer = await client.subscribe(topic, "s")
            txn = await client.new_transaction(timeout_ms=60_000)
            futures = [await producer.send_async(b"m%d" % i, txn=txn) for i in range(50)]
            cnx = client._transactions().connected(txn.id[0])
            assert cnx is not None and cnx.txn_ends_in_order
            unanswered_then: list[int] = []
            request_now = cnx.request_now

            def noting(kind: int, **fields: object) -> object:
                if kind == T.END_TXN:
                    unanswered_then.append(sum(not f.done() for f in futures))
                return request_now(kind, **fields)

            cnx.request_now = noting  # type: ignore[method-assign]
            await txn.commit()
            assert txn.state == "COMMITTED"
            assert unanswered_then and unanswered_then[0] > 0  # written behind the sends
            assert all(f.done() and f.exception() is None for f in futures)
            got = [(await consumer.receive(10_000)).data() for _ in range(50)]
            assert got == [b"m%d" % i for i in range(50)]

    run(go)


def test_a_refused_send_behind_which_the_commit_went_aborts_it(
        txn_broker: BrokerProcess) -> None:
    """A send of the transaction refused by the broker (a non-persistent topic takes no
    transactions) while the commit is already written behind it: the broker refuses the
    commit, the client aborts (``TransactionHasOperationFailed``), and the transaction's
    stored message is never delivered."""
    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            name = uuid.uuid4().hex[:8]
            topic = f"persistent://public/default/behind-abort-{name}"
            stored = await client.create_producer(topic, batching_enabled=False)
            refused = await client.create_producer(
                f"non-persistent://public/default/behind-abort-{name}", batching_enabled=False)
            consumer = await client.subscribe(topic, "s")
            txn = await client.new_transaction(timeout_ms=60_000)
            kept = await stored.send_async(b"kept", txn=txn)
            failing = await refused.send_async(b"refused", txn=txn)
            refusals: list[str] = []
            end_txn = client._transactions().connected(txn.id[0])
            assert end_txn is not None
            answer = end_txn.answer

            async def noting(kind: int, rid: int, fut: asyncio.Future[object],
                             timeout: float = 30.0) -> object:
                try:
                    return await answer(kind, rid, fut, timeout)
                finally:
                    if kind == T.END_TXN and fut.done() and not fut.cancelled():
                        body = fut.result()
                        if getattr(body, "error", 0) == pb.NotAllowedError:
                            refusals.append(body.message)

            end_txn.answer = noting  # type: ignore[method-assign]
            with pytest.raises(TransactionHasOperationFailed):
                await txn.commit()
            assert txn.state == "ABORTED"
            assert refusals and "still open" in refusals[0]  # the commit went first
            assert kept.done() and kept.exception() is None
            with pytest.raises(NotAllowed):
                await failing
            with pytest.raises(Timeout):
                await consumer.receive(500)
            await stored.send(b"after")  # the producer goes on
            assert (await consumer.receive(10_000)).data() == b"after"

    run(go)


def _frames(data: bytes) -> list[T]:
    """The commands of the whole frames in ``data``."""
    out = []
    while len(data) >= 8:
        total = int.from_bytes(data[:4], "big")
        size = int.from_bytes(data[4:8], "big")
        cmd = T()
        cmd.ParseFromString(data[8:8 + size])
        out.append(cmd)
        data = data[4 + total:]
    return out


def test_the_add_and_the_commit_are_answered_in_the_receipts_write(
        txn_broker: BrokerProcess) -> None:
    """A transaction's add, its send and its commit in one write from Magnetar's client:
    the three answers leave the broker in one write, which the first read here finds
    whole (the add's answer is not written on its own before the send is stored, nor the
    commit's after the receipt)."""
    wire = Wire(txn_broker.port, client_version="magnetar-python-wire-test")
    try:
        topic = f"persistent://public/default/one-write-{uuid.uuid4().hex[:8]}"
        txn_producer(wire, topic)
        first = new_txn(wire)  # the topic's transaction buffer made: nothing waits below
        _added(wire, first, topic)
        wire.sock.sendall(_send_frame(1, 0, first, b"first"))
        assert wire.read().type == T.SEND_RECEIPT
        assert not end(wire, first, pb.COMMIT).HasField("error")
        txn = new_txn(wire)
        add_rid, end_rid = wire.rid + 1, wire.rid + 2
        wire.rid += 2
        wire.sock.sendall(_add_frame(add_rid, txn, topic) + _send_frame(1, 1, txn, b"second")
                          + _end_frame(end_rid, txn, pb.COMMIT))
        data = wire.buf + wire.sock.recv(65536)
        wire.buf = b""
        kinds = [c.type for c in _frames(data)]
        assert kinds == [T.ADD_PARTITION_TO_TXN_RESPONSE, T.SEND_RECEIPT, T.END_TXN_RESPONSE]
    finally:
        wire.close()
