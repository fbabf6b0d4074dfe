"""Transactions over the raw protocol (``magnetar.protocol`` only, no client code): sends
in a transaction, acks in one, and the participant commands a coordinator's broker sends
(EndTxnOnPartition / EndTxnOnSubscription), for the transaction buffer and pending-ack
tests."""

from __future__ import annotations

import time

from magnetar.protocol import pb
from magnetar.protocol.batch import encode_batch
from magnetar.protocol.commands import command
from magnetar.protocol.frames import Frame, build_payload_part, encode_payload_command

from .rawclient import RawClient
from .rawconsumer import expect, reply_to

T = pb.BaseCommand
Txn = tuple[int, int]


def begin(raw: RawClient, partitions: str | list[str] | tuple[str, ...] = (),
          subscriptions: str | list[tuple[str, str]] | tuple[tuple[str, str], ...] = (),
          tc: int = 0, ttl_ms: int = 600_000) -> Txn:
    """A real transaction from coordinator ``tc`` (NewTxn), with ``partitions`` and
    ``subscriptions`` added to it (as a client does before its first send or ack): the
    participants ask the coordinator about it. The test then plays the coordinator's part
    in ending it (``end_on_partition`` / ``end_on_subscription``)."""
    if isinstance(partitions, str):  # begin(raw, topic[, subscription of it])
        if isinstance(subscriptions, str):
            subscriptions = [(partitions, subscriptions)]
        partitions = [partitions]
    assert not isinstance(subscriptions, str), "a subscription name needs its topic"
    rid = raw.next_request_id()
    raw.send(T(type=T.NEW_TXN, newTxn=pb.CommandNewTxn(request_id=rid, tc_id=tc,
                                                        txn_ttl_seconds=ttl_ms)))
    answer = reply_to(raw, rid, timeout=15).newTxnResponse
    assert not answer.HasField("error"), answer
    txn = (answer.txnid_most_bits, answer.txnid_least_bits)
    if partitions:
        rid = raw.next_request_id()
        raw.send(T(type=T.ADD_PARTITION_TO_TXN, addPartitionToTxn=pb.CommandAddPartitionToTxn(
            request_id=rid, txnid_most_bits=txn[0], txnid_least_bits=txn[1],
            partitions=list(partitions))))
        assert not reply_to(raw, rid, timeout=15).addPartitionToTxnResponse.HasField("error")
    if subscriptions:
        rid = raw.next_request_id()
        raw.send(T(type=T.ADD_SUBSCRIPTION_TO_TXN,
                   addSubscriptionToTxn=pb.CommandAddSubscriptionToTxn(
                       request_id=rid, txnid_most_bits=txn[0], txnid_least_bits=txn[1],
                       subscription=[pb.Subscription(topic=t, subscription=s)
                                     for t, s in subscriptions])))
        assert not reply_to(raw, rid, timeout=15).addSubscriptionToTxnResponse.HasField("error")
    return txn


def producer(raw: RawClient, topic: str, producer_id: int = 1, txn_enabled: bool = True) -> None:
    rid = raw.next_request_id()
    raw.send("PRODUCER", topic=topic, producer_id=producer_id, request_id=rid,
             txn_enabled=txn_enabled)
    answer = reply_to(raw, rid, timeout=15)
    assert answer.type == T.PRODUCER_SUCCESS, answer


def send(raw: RawClient, producer_id: int, seq: int, payload: bytes | list[bytes],
         txn: Txn | None = None, txn_in_metadata: bool = True, key: str | None = None) -> None:
    """A SEND of one message (or a batch of several), in ``txn`` if given; the id goes in
    the command and, unless ``txn_in_metadata`` is False, in the MessageMetadata too."""
    metadata = pb.MessageMetadata(producer_name=f"raw-{producer_id}", sequence_id=seq,
                                  publish_time=int(time.time() * 1000))
    if key is not None:
        metadata.partition_key = key
    count = 1
    if isinstance(payload, list):
        count = len(payload)
        metadata.num_messages_in_batch = count
        body = encode_batch([(pb.SingleMessageMetadata(payload_size=len(p)), p) for p in payload])
    else:
        body = payload
    fields: dict[str, int] = {"producer_id": producer_id, "sequence_id": seq, "num_messages": count}
    if txn is not None:
        fields["txnid_most_bits"], fields["txnid_least_bits"] = txn
        if txn_in_metadata:
            metadata.txnid_most_bits, metadata.txnid_least_bits = txn
    raw.send_bytes(encode_payload_command(command("SEND", **fields), build_payload_part(metadata, body)))


def receipt(raw: RawClient, seq: int, timeout: float = 15.0) -> pb.BaseCommand:
    """The SendReceipt or SendError of sequence id ``seq``."""

    def match(f: Frame) -> bool:
        c = f.command
        return (c.type == T.SEND_RECEIPT and c.send_receipt.sequence_id == seq) or (
            c.type == T.SEND_ERROR and c.send_error.sequence_id == seq)

    return expect(raw, match, timeout).command


def send_ok(raw: RawClient, producer_id: int, seq: int, payload: bytes | list[bytes],
            txn: Txn | None = None, txn_in_metadata: bool = True,
            key: str | None = None) -> pb.CommandSendReceipt:
    send(raw, producer_id, seq, payload, txn, txn_in_metadata, key)
    answer = receipt(raw, seq)
    assert answer.type == T.SEND_RECEIPT, answer
    return answer.send_receipt


def end_on_partition(raw: RawClient, topic: str, txn: Txn, commit: bool = True,
                     timeout: float = 15.0) -> pb.CommandEndTxnOnPartitionResponse:
    rid = raw.next_request_id()
    raw.send(T(type=T.END_TXN_ON_PARTITION, endTxnOnPartition=pb.CommandEndTxnOnPartition(
        request_id=rid, txnid_most_bits=txn[0], txnid_least_bits=txn[1], topic=topic,
        txn_action=pb.COMMIT if commit else pb.ABORT)))
    answer = reply_to(raw, rid, timeout)
    assert answer.type == T.END_TXN_ON_PARTITION_RESPONSE, answer
    return answer.endTxnOnPartitionResponse


def end_on_subscription(raw: RawClient, topic: str, subscription: str, txn: Txn,
                        commit: bool = True, timeout: float = 15.0
                        ) -> pb.CommandEndTxnOnSubscriptionResponse:
    rid = raw.next_request_id()
    raw.send(T(type=T.END_TXN_ON_SUBSCRIPTION, endTxnOnSubscription=pb.CommandEndTxnOnSubscription(
        request_id=rid, txnid_most_bits=txn[0], txnid_least_bits=txn[1],
        subscription=pb.Subscription(topic=topic, subscription=subscription),
        txn_action=pb.COMMIT if commit else pb.ABORT)))
    answer = reply_to(raw, rid, timeout)
    assert answer.type == T.END_TXN_ON_SUBSCRIPTION_RESPONSE, answer
    return answer.endTxnOnSubscriptionResponse


def ack(raw: RawClient, consumer_id: int, positions: list[tuple[int, int]], txn: Txn | None = None,
        cumulative: bool = False, ack_set: list[int] | None = None) -> pb.CommandAckResponse:
    """Acknowledge ``positions`` (with a batch-index ``ack_set``: set bits unacknowledged),
    in ``txn`` if given; returns the AckResponse."""
    rid = raw.next_request_id()
    ids = []
    for ledger_id, entry_id in positions:
        mid = pb.MessageIdData(ledgerId=ledger_id, entryId=entry_id)
        if ack_set is not None:
            mid.ack_set.extend(ack_set)
        ids.append(mid)
    cmd = pb.CommandAck(consumer_id=consumer_id, request_id=rid,
                        ack_type=pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual,
                        message_id=ids)
    if txn is not None:
        cmd.txnid_most_bits, cmd.txnid_least_bits = txn
    raw.send(T(type=T.ACK, ack=cmd))
    answer = reply_to(raw, rid)
    assert answer.type == T.ACK_RESPONSE, answer
    return answer.ackResponse


# -- the coordinator's commands (a broker with transactionCoordinatorEnabled, the default) --

def _call(raw: RawClient, kind: int, field: str, **fields: object) -> pb.BaseCommand:
    rid = raw.next_request_id()
    cmd = T(type=kind)
    getattr(cmd, field).CopyFrom(type(getattr(cmd, field))(request_id=rid, **fields))
    raw.send(cmd)
    return reply_to(raw, rid, timeout=30)


def new_txn(raw: RawClient, ttl_ms: int = 300_000, tc: int = 0) -> Txn:
    """A new transaction from coordinator ``tc`` (NewTxn; Java clients' milliseconds in
    ``txn_ttl_seconds``, as the broker expects)."""
    answer = _call(raw, T.NEW_TXN, "newTxn", tc_id=tc, txn_ttl_seconds=ttl_ms).newTxnResponse
    assert not answer.HasField("error"), answer
    return answer.txnid_most_bits, answer.txnid_least_bits


def end_txn(raw: RawClient, txn: Txn, commit: bool = True) -> pb.CommandEndTxnResponse:
    """EndTxn to the coordinator (it tells the participants before answering)."""
    answer = _call(raw, T.END_TXN, "endTxn", txnid_most_bits=txn[0], txnid_least_bits=txn[1],
                   txn_action=pb.COMMIT if commit else pb.ABORT)
    assert answer.type == T.END_TXN_RESPONSE, answer
    return answer.endTxnResponse


def end_ok(raw: RawClient, txn: Txn, commit: bool = True) -> None:
    answer = end_txn(raw, txn, commit)
    assert not answer.HasField("error"), answer
