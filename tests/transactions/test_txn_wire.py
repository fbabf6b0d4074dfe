"""The coordinator's commands on the wire, with frames built from the generated protobuf
classes over a plain socket (no Magnetar client or codec code): TcClientConnect, NewTxn,
AddPartitionToTxn, AddSubscriptionToTxn, EndTxn, and their error answers."""

from __future__ import annotations

import socket
import struct
import time
import uuid
from typing import Any

import crc32c
import pulsar
import pytest

from magnetar.protocol import pulsar_pb2 as pb
from tests.client.conftest import BrokerProcess

T = pb.BaseCommand


class Wire:
    """A socket speaking Pulsar frames: [total size][command size][BaseCommand]."""

    def __init__(self, port: int, client_version: str = "wire-test") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""
        self.rid = 0
        connect = T(type=T.CONNECT, connect=pb.CommandConnect(
            client_version=client_version, protocol_version=21))
        self.write(connect)
        assert self.read().type == T.CONNECTED

    def write(self, cmd: pb.BaseCommand) -> None:
        body = cmd.SerializeToString()
        self.sock.sendall(struct.pack(">II", len(body) + 4, len(body)) + body)

    def read(self) -> pb.BaseCommand:
        while True:
            if len(self.buf) >= 4:
                (total,) = struct.unpack(">I", self.buf[:4])
                if len(self.buf) >= 4 + total:
                    frame, self.buf = self.buf[4:4 + total], self.buf[4 + total:]
                    (size,) = struct.unpack(">I", frame[:4])
                    cmd = T()
                    cmd.ParseFromString(frame[4:4 + size])
                    if cmd.type == T.PING:
                        self.write(T(type=T.PONG, pong=pb.CommandPong()))
                        continue
                    return cmd
            data = self.sock.recv(65536)
            assert data, "the broker closed the connection"
            self.buf += data

    def call(self, kind: int, field: str, **fields: Any) -> pb.BaseCommand:
        self.rid += 1
        cmd = T(type=kind)
        getattr(cmd, field).CopyFrom(getattr(pb, type(getattr(cmd, field)).__name__)(
            request_id=self.rid, **fields))
        self.write(cmd)
        answer = self.read()
        body = answer.ListFields()[1][1]
        assert body.request_id == self.rid
        return answer

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def wire(txn_broker: BrokerProcess) -> Any:
    w = Wire(txn_broker.port)
    yield w
    w.close()


def new_txn(wire: Wire, tc: int = 0, ttl: int = 60_000) -> tuple[int, int]:
    answer = wire.call(T.NEW_TXN, "newTxn", tc_id=tc, txn_ttl_seconds=ttl)
    assert answer.type == T.NEW_TXN_RESPONSE
    body = answer.newTxnResponse
    assert not body.HasField("error"), body.message
    assert body.txnid_most_bits == tc
    return body.txnid_most_bits, body.txnid_least_bits


def end(wire: Wire, txn: tuple[int, int], action: int) -> pb.CommandEndTxnResponse:
    answer = wire.call(T.END_TXN, "endTxn", txnid_most_bits=txn[0], txnid_least_bits=txn[1],
                       txn_action=action)
    assert answer.type == T.END_TXN_RESPONSE
    return answer.endTxnResponse


def test_connect_new_add_end(wire: Wire) -> None:
    answer = wire.call(T.TC_CLIENT_CONNECT_REQUEST, "tcClientConnectRequest", tc_id=3)
    assert answer.type == T.TC_CLIENT_CONNECT_RESPONSE
    assert not answer.tcClientConnectResponse.HasField("error")
    txn = new_txn(wire, tc=3)
    second = new_txn(wire, tc=3)
    assert second[1] != txn[1]
    topic = f"persistent://public/default/wire-{uuid.uuid4().hex[:8]}"
    answer = wire.call(T.ADD_PARTITION_TO_TXN, "addPartitionToTxn", txnid_most_bits=txn[0],
                       txnid_least_bits=txn[1], partitions=[topic])
    assert answer.type == T.ADD_PARTITION_TO_TXN_RESPONSE
    assert not answer.addPartitionToTxnResponse.HasField("error")
    assert answer.addPartitionToTxnResponse.txnid_least_bits == txn[1]
    answer = wire.call(T.ADD_SUBSCRIPTION_TO_TXN, "addSubscriptionToTxn",
                       txnid_most_bits=txn[0], txnid_least_bits=txn[1],
                       subscription=[pb.Subscription(topic=topic, subscription="s")])
    assert answer.type == T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE
    assert not answer.addSubscriptionToTxnResponse.HasField("error")
    # no participant ever saw the transaction: the topic answers success at once
    reply = end(wire, second, pb.COMMIT)
    assert not reply.HasField("error"), reply.message
    # a commit sent again after its answer was lost answers success again (Pulsar #19629)
    reply = end(wire, second, pb.COMMIT)
    assert not reply.HasField("error"), reply.message
    # the opposite end is refused
    reply = end(wire, second, pb.ABORT)
    assert reply.error == pb.InvalidTxnStatus
    assert "COMMITTED" in reply.message


def test_add_partition_after_the_end_is_refused(wire: Wire) -> None:
    txn = new_txn(wire)
    assert not end(wire, txn, pb.ABORT).HasField("error")
    answer = wire.call(T.ADD_PARTITION_TO_TXN, "addPartitionToTxn", txnid_most_bits=txn[0],
                       txnid_least_bits=txn[1], partitions=["persistent://public/default/x"])
    body = answer.addPartitionToTxnResponse
    assert answer.type == T.ADD_PARTITION_TO_TXN_RESPONSE
    assert body.error == pb.InvalidTxnStatus
    assert "ABORTED" in body.message
    reply = end(wire, txn, pb.COMMIT)
    assert reply.error == pb.InvalidTxnStatus


def test_unknown_transaction_and_coordinator(wire: Wire) -> None:
    reply = end(wire, (0, 123456789), pb.COMMIT)
    assert reply.error == pb.TransactionNotFound
    assert "not found" in reply.message
    answer = wire.call(T.TC_CLIENT_CONNECT_REQUEST, "tcClientConnectRequest", tc_id=999)
    body = answer.tcClientConnectResponse
    assert body.error == pb.TransactionCoordinatorNotFound
    assert "999" in body.message
    answer = wire.call(T.NEW_TXN, "newTxn", tc_id=16, txn_ttl_seconds=1000)
    assert answer.newTxnResponse.error == pb.TransactionCoordinatorNotFound
    answer = wire.call(T.ADD_SUBSCRIPTION_TO_TXN, "addSubscriptionToTxn", txnid_most_bits=77,
                       txnid_least_bits=0,
                       subscription=[pb.Subscription(topic="persistent://public/default/x",
                                                     subscription="s")])
    assert answer.addSubscriptionToTxnResponse.error == pb.TransactionCoordinatorNotFound


def test_bad_input_gets_an_answer_and_the_connection_lives(wire: Wire) -> None:
    txn = new_txn(wire)
    answer = wire.call(T.ADD_PARTITION_TO_TXN, "addPartitionToTxn", txnid_most_bits=txn[0],
                       txnid_least_bits=txn[1], partitions=["not a topic://x"])
    assert answer.addPartitionToTxnResponse.error == pb.InvalidTopicName
    answer = wire.call(T.ADD_SUBSCRIPTION_TO_TXN, "addSubscriptionToTxn",
                       txnid_most_bits=txn[0], txnid_least_bits=txn[1],
                       subscription=[pb.Subscription(topic="persistent://public/default/x",
                                                     subscription="")])
    assert answer.addSubscriptionToTxnResponse.error == pb.NotAllowedError
    # the transaction is still open and usable
    assert not end(wire, txn, pb.ABORT).HasField("error")


def test_seconds_and_milliseconds_in_the_ttl(wire: Wire) -> None:
    """Java and Go clients put milliseconds in txn_ttl_seconds; a value under 1000 is taken
    as seconds. A 1 (second) transaction is aborted by its timeout; one of 60000 (a
    minute, in milliseconds) is not."""
    short = new_txn(wire, ttl=1)
    long = new_txn(wire, ttl=60_000)
    deadline = time.monotonic() + 60
    while True:
        reply = end(wire, short, pb.COMMIT) if time.monotonic() > deadline else None
        if reply is not None:
            pytest.fail("the 1 s transaction was never timed out")
        probe = wire.call(T.ADD_PARTITION_TO_TXN, "addPartitionToTxn",
                          txnid_most_bits=short[0], txnid_least_bits=short[1],
                          partitions=["persistent://public/default/ttl"])
        body = probe.addPartitionToTxnResponse
        if body.HasField("error"):
            assert body.error == pb.InvalidTxnStatus
            assert "timed out" in body.message
            break
        time.sleep(0.2)  # polling the broker's timer, bounded by the deadline above
    reply = end(wire, short, pb.COMMIT)
    assert reply.error == pb.InvalidTxnStatus
    assert not end(wire, long, pb.COMMIT).HasField("error")


def test_every_command_answers_an_error_with_coordinators_off(no_txn_broker: BrokerProcess) -> None:
    wire = Wire(no_txn_broker.port)
    try:
        cases = [
            (T.TC_CLIENT_CONNECT_REQUEST, "tcClientConnectRequest", {"tc_id": 0},
             "tcClientConnectResponse"),
            (T.NEW_TXN, "newTxn", {"tc_id": 0}, "newTxnResponse"),
            (T.ADD_PARTITION_TO_TXN, "addPartitionToTxn",
             {"txnid_most_bits": 0, "partitions": ["persistent://public/default/x"]},
             "addPartitionToTxnResponse"),
            (T.ADD_SUBSCRIPTION_TO_TXN, "addSubscriptionToTxn", {"txnid_most_bits": 0},
             "addSubscriptionToTxnResponse"),
            (T.END_TXN, "endTxn", {"txn_action": pb.COMMIT}, "endTxnResponse"),
        ]
        for kind, field, fields, out in cases:
            answer = wire.call(kind, field, **fields)
            body = getattr(answer, out)
            assert answer.type == kind + 1
            assert body.error == pb.NotAllowedError
            assert "transactionCoordinatorEnabled=false" in body.message
    finally:
        wire.close()


def test_max_active_transactions_per_coordinator() -> None:
    broker = BrokerProcess("magnetar", maxActiveTransactionsPerCoordinator="2")
    wire = Wire(broker.port)
    try:
        first = new_txn(wire, tc=1)
        new_txn(wire, tc=1)
        answer = wire.call(T.NEW_TXN, "newTxn", tc_id=1, txn_ttl_seconds=60_000)
        body = answer.newTxnResponse
        assert body.error == pb.NotAllowedError
        assert "maxActiveTransactionsPerCoordinator=2" in body.message
        new_txn(wire, tc=2)  # another coordinator has room
        assert not end(wire, first, pb.ABORT).HasField("error")
        new_txn(wire, tc=1)  # an ended one makes room
    finally:
        wire.close()
        broker.stop()


def _send_frame(producer_id: int, seq: int, txn: tuple[int, int], value: bytes,
                bad_checksum: bool = False) -> bytes:
    """A SEND frame with its payload part, built by hand: [total][command size][command]
    [magic 0x0e01][CRC32C of the rest][metadata size][MessageMetadata][payload]
    (``bad_checksum``: a CRC32C that does not match)."""
    cmd = T(type=T.SEND, send=pb.CommandSend(
        producer_id=producer_id, sequence_id=seq, num_messages=1,
        txnid_most_bits=txn[0], txnid_least_bits=txn[1])).SerializeToString()
    meta = pb.MessageMetadata(producer_name="wire-producer", sequence_id=seq,
                              publish_time=int(time.time() * 1000),
                              txnid_most_bits=txn[0], txnid_least_bits=txn[1]
                              ).SerializeToString()
    checked = struct.pack(">I", len(meta)) + meta + value
    crc = crc32c.crc32c(checked) ^ (1 if bad_checksum else 0)
    part = b"\x0e\x01" + struct.pack(">I", crc) + checked
    return struct.pack(">II", 4 + len(cmd) + len(part), len(cmd)) + cmd + part


def _add_frame(request_id: int, txn: tuple[int, int], topic: str) -> bytes:
    body = T(type=T.ADD_PARTITION_TO_TXN, addPartitionToTxn=pb.CommandAddPartitionToTxn(
        request_id=request_id, txnid_most_bits=txn[0], txnid_least_bits=txn[1],
        partitions=[topic])).SerializeToString()
    return struct.pack(">II", len(body) + 4, len(body)) + body


def txn_producer(wire: Wire, topic: str) -> None:
    """Producer 1 on ``topic``, with ``txn_enabled``."""
    wire.rid += 1
    wire.write(T(type=T.PRODUCER, producer=pb.CommandProducer(
        topic=topic, producer_id=1, request_id=wire.rid, producer_name="wire-producer",
        txn_enabled=True)))
    answer = wire.read()
    assert answer.type == T.PRODUCER_SUCCESS, answer


def test_a_send_written_right_behind_its_add_is_stored_in_it(wire: Wire,
                                                             txn_broker: BrokerProcess) -> None:
    """A connection's commands are handled in order: an AddPartitionToTxn and the
    transaction's first Send on that partition in one write (no wait for the add's
    answer, as Magnetar's client writes them) are answered in that order, and the message
    is the transaction's (seen after the commit, not before). Behind an add refused (the
    transaction ended), the send is refused too and nothing is stored."""
    topic = f"persistent://public/default/wire-{uuid.uuid4().hex[:8]}"
    txn_producer(wire, topic)
    txn = new_txn(wire)
    wire.rid += 1
    wire.sock.sendall(_add_frame(wire.rid, txn, topic) + _send_frame(1, 0, txn, b"in-txn"))
    added = wire.read()
    assert added.type == T.ADD_PARTITION_TO_TXN_RESPONSE, added
    assert not added.addPartitionToTxnResponse.HasField("error"), added
    receipt = wire.read()
    assert receipt.type == T.SEND_RECEIPT and receipt.send_receipt.sequence_id == 0, receipt

    client = pulsar.Client(f"pulsar://127.0.0.1:{txn_broker.port}")
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        with pytest.raises(pulsar.Timeout):  # open: not readable yet
            reader.read_next(timeout_millis=300)
        assert not end(wire, txn, pb.COMMIT).HasField("error")
        assert reader.read_next(timeout_millis=10_000).data() == b"in-txn"

        ended = new_txn(wire)
        assert not end(wire, ended, pb.ABORT).HasField("error")
        wire.rid += 1
        wire.sock.sendall(_add_frame(wire.rid, ended, topic) + _send_frame(1, 1, ended, b"late"))
        refused = wire.read()
        assert refused.type == T.ADD_PARTITION_TO_TXN_RESPONSE, refused
        assert refused.addPartitionToTxnResponse.error == pb.InvalidTxnStatus
        error = wire.read()
        assert error.type == T.SEND_ERROR and error.send_error.sequence_id == 1, error
        assert error.send_error.error in (pb.InvalidTxnStatus, pb.TransactionNotFound), error
        assert end(wire, ended, pb.COMMIT).error == pb.InvalidTxnStatus
        with pytest.raises(pulsar.Timeout):  # nothing of the ended transaction stored
            reader.read_next(timeout_millis=300)
    finally:
        client.close()
