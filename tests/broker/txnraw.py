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


def producer(raw: RawClient, topic: str, producer_id: int = 1, txn_enabled: bool = True) -> None:
    rid = raw.next_request_id()
    raw.send("PRODUCER", topic=topic, producer_id=producer_id, request_id=rid,
             txn_enabled=txn_enabled)
    answer = reply_to(raw, rid, timeout=15)
    assert answer.type == T.PRODUCER_SUCCESS, answer


def send(raw: RawClient, producer_id: int, seq: int, payload: bytes | list[bytes],
         txn: Txn | None = None, txn_in_metadata: bool = True) -> None:
    """A SEND of one message (or a batch of several), in ``txn`` if given; the id goes in
    the command and, unless ``txn_in_metadata`` is False, in the MessageMetadata too."""
    metadata = pb.MessageMetadata(producer_name=f"raw-{producer_id}", sequence_id=seq,
                                  publish_time=int(time.time() * 1000))
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
            txn: Txn | None = None, txn_in_metadata: bool = True) -> pb.CommandSendReceipt:
    send(raw, producer_id, seq, payload, txn, txn_in_metadata)
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
