"""The hand-written hot-path encoders write exactly what protobuf writes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol import FrameDecoder, encode_command, encode_payload_command, pb
from magnetar.protocol.fastpath import (
    message_command,
    message_frame,
    message_frame_head,
    send_receipt_frame,
)
from magnetar.protocol.frames import build_payload_part

u64 = st.integers(min_value=0, max_value=2**64 - 1)
small = st.integers(min_value=0, max_value=2**31 - 1)


@given(u64, u64, u64, u64, u64)
def test_send_receipt_matches_protobuf(producer_id, seq, ledger, entry, highest) -> None:
    receipt = pb.CommandSendReceipt(producer_id=producer_id, sequence_id=seq, highest_sequence_id=highest)
    receipt.message_id.ledgerId = ledger
    receipt.message_id.entryId = entry
    expected = encode_command(pb.BaseCommand(type=pb.BaseCommand.SEND_RECEIPT, send_receipt=receipt))
    assert send_receipt_frame(producer_id, seq, ledger, entry, highest) == expected


def test_send_receipt_with_minus_one_ids() -> None:
    frame = send_receipt_frame(1, 2, -1, -1, 2)
    cmd = FrameDecoder().feed(frame)[0].command
    assert cmd.send_receipt.message_id.ledgerId == 2**64 - 1


@given(u64, u64, u64, st.integers(min_value=0, max_value=1000),
       st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=4),
       st.integers(min_value=-1, max_value=100_000))
def test_message_matches_protobuf(consumer_id, ledger, entry, redelivery, ack_set,
                                  partition) -> None:
    from magnetar.protocol.fastpath import partition_field

    msg = pb.CommandMessage(consumer_id=consumer_id, redelivery_count=redelivery)
    msg.message_id.ledgerId = ledger
    msg.message_id.entryId = entry
    if partition >= 0:  # a consumer of partition N: N in every id, as Pulsar's broker sends
        msg.message_id.partition = partition
    msg.ack_set.extend(ack_set)
    cmd = pb.BaseCommand(type=pb.BaseCommand.MESSAGE, message=msg)
    fast = message_command(consumer_id, ledger, entry, redelivery, ack_set,
                           partition_field(partition))
    assert fast == cmd.SerializeToString()
    part = b"\x0e\x01\x00\x00\x00\x00\x00\x00\x00\x00"
    assert message_frame(fast, part, None) == encode_payload_command(cmd, part)
    assert message_frame(fast, part, b"\x08\x01") == encode_payload_command(cmd, part, b"\x08\x01")
    # the head written before a payload part kept as it is (a memoryview of a read buffer)
    view = memoryview(b"xx" + part)[2:]
    assert message_frame_head(fast, len(view), None) + view == encode_payload_command(cmd, part)
    assert (message_frame_head(fast, len(view), memoryview(b"\x08\x01")) + view
            == encode_payload_command(cmd, part, b"\x08\x01"))


@given(
    st.integers(min_value=-1, max_value=2**63 - 1), st.integers(min_value=-1, max_value=2**63 - 1),
    st.integers(min_value=-1, max_value=10_000), st.integers(min_value=-1, max_value=10_000),
    st.integers(min_value=0, max_value=10_000),
)
def test_message_id_bytes_match_protobuf(ledger, entry, partition, batch_index, batch_size):
    from magnetar.protocol.fastpath import message_id_bytes, message_id_prefix

    mid = pb.MessageIdData(ledgerId=ledger & (2**64 - 1), entryId=entry & (2**64 - 1))
    if partition >= 0:
        mid.partition = partition
    if batch_index >= 0:
        mid.batch_index = batch_index
        if batch_size:
            mid.batch_size = batch_size
    expected = mid.SerializeToString()
    assert message_id_bytes(ledger, entry, partition, batch_index, batch_size) == expected
    prefix = message_id_prefix(ledger, entry, partition)
    assert message_id_bytes(ledger, entry, partition, batch_index, batch_size, prefix) == expected
    if batch_index >= 0:
        from magnetar.protocol.fastpath import message_id_batch_size, message_id_suffix

        assert prefix + message_id_suffix(batch_index, batch_size) == expected
        assert prefix + message_id_suffix(batch_index) + \
            (message_id_batch_size(batch_size) if batch_size else b"") == expected




# ------------------------------------------------------- MESSAGE, read by consumers
from magnetar.protocol.fastpath import message_command as _message_command  # noqa: E402
from magnetar.protocol.fastpath import parse_message_command  # noqa: E402
from magnetar.protocol.frames import MessageFrame  # noqa: E402
from magnetar.protocol.ids import to_signed64  # noqa: E402

int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def _expected(cmd: pb.BaseCommand) -> tuple[int, int, int, int, list[int]]:
    m = cmd.message
    return (m.consumer_id, to_signed64(m.message_id.ledgerId),
            to_signed64(m.message_id.entryId), m.redelivery_count, list(m.ack_set))


@given(u64, u64, u64, st.integers(min_value=0, max_value=2**32 - 1), st.lists(int64, max_size=4),
       st.one_of(st.none(), u64))
def test_parse_message_command_matches_protobuf(consumer_id, ledger, entry, redelivery,
                                                ack_set, epoch) -> None:
    msg = pb.CommandMessage(consumer_id=consumer_id, redelivery_count=redelivery)
    msg.message_id.ledgerId = ledger
    msg.message_id.entryId = entry
    msg.ack_set.extend(ack_set)
    if epoch is not None:
        msg.consumer_epoch = epoch
    cmd = pb.BaseCommand(type=pb.BaseCommand.MESSAGE, message=msg)
    data = b"xx" + cmd.SerializeToString() + b"yy"
    assert parse_message_command(data, 2, len(data) - 2) == _expected(cmd)
    assert parse_message_command(memoryview(data), 2, len(data) - 2) == _expected(cmd)
    fast = _message_command(consumer_id, ledger, entry, redelivery, ack_set)
    assert parse_message_command(fast, 0, len(fast)) == _expected(cmd)


def test_parse_message_command_declines_what_it_does_not_read() -> None:
    msg = pb.CommandMessage(consumer_id=1)
    msg.message_id.ledgerId = 2
    msg.message_id.entryId = 3
    msg.message_id.partition = 4  # read past (the consumer knows its partition)
    data = pb.BaseCommand(type=pb.BaseCommand.MESSAGE, message=msg).SerializeToString()
    assert parse_message_command(data, 0, len(data)) == (1, 2, 3, 0, [])
    msg.message_id.batch_index = 5  # a field of the id it does not read
    data = pb.BaseCommand(type=pb.BaseCommand.MESSAGE, message=msg).SerializeToString()
    assert parse_message_command(data, 0, len(data)) is None
    ping = pb.BaseCommand(type=pb.BaseCommand.PING, ping=pb.CommandPing()).SerializeToString()
    assert parse_message_command(ping, 0, len(ping)) is None
    missing = pb.BaseCommand(type=pb.BaseCommand.MESSAGE,
                             message=pb.CommandMessage(consumer_id=1)).SerializePartialToString()
    assert parse_message_command(missing, 0, len(missing)) is None  # no message_id


@given(st.binary(max_size=60))
def test_parse_message_command_on_garbage(tail: bytes) -> None:
    """Never raises; whatever it reads, protobuf reads the same."""
    data = b"\x08\x09\x4a" + bytes([len(tail)]) + tail if len(tail) < 128 else tail
    fields = parse_message_command(data, 0, len(data))
    if fields is None:
        return
    cmd = pb.BaseCommand()
    cmd.ParseFromString(data)
    assert cmd.IsInitialized()
    assert fields == _expected(cmd)


def test_message_frames_from_the_decoder() -> None:
    part = b"\x0e\x01\x00\x00\x00\x00\x00\x00\x00\x00"
    fast = message_frame(_message_command(7, 2**64 - 1, 5, 1, [3]), part, None)
    msg = pb.CommandMessage(consumer_id=7, redelivery_count=1)
    msg.message_id.ledgerId = 8
    msg.message_id.entryId = 9
    msg.message_id.partition = 2
    msg.message_id.batch_index = 1  # not read by the fast path: this one goes through protobuf
    slow = encode_payload_command(pb.BaseCommand(type=pb.BaseCommand.MESSAGE, message=msg), part)
    ping = encode_command(pb.BaseCommand(type=pb.BaseCommand.PING, ping=pb.CommandPing()))
    decoder = FrameDecoder(raw_payload=True)
    frames = decoder.feed_messages(fast + slow + ping)
    a, b, c = frames
    assert isinstance(a, MessageFrame) and not isinstance(b, MessageFrame)
    assert (a.consumer_id, a.ledger_id, a.entry_id, a.redelivery_count, a.ack_set) == \
        (7, -1, 5, 1, [3])
    assert a.payload_part == part and a.message_id == pb.MessageIdData(ledgerId=2**64 - 1,
                                                                       entryId=5)
    converted = MessageFrame.from_command(b.command.message, b.payload_part)
    assert (converted.ledger_id, converted.entry_id) == (8, 9)
    assert converted.message_id.partition == 2
    assert c.command.type == pb.BaseCommand.PING
    assert [f.command.type for f in FrameDecoder(raw_payload=True).feed(fast)] == [
        pb.BaseCommand.MESSAGE]


@given(u64, u64, st.text(max_size=20), u64)
def test_txnid_fields_match_protobuf(most, least, producer, seq) -> None:
    from magnetar.protocol.fastpath import metadata_ends_with, txnid_fields

    fields = txnid_fields(most, least)
    meta = pb.MessageMetadata(producer_name=producer, sequence_id=seq, publish_time=1,
                              txnid_most_bits=most, txnid_least_bits=least)
    assert meta.SerializeToString().endswith(fields)
    part = build_payload_part(meta, b"payload")
    assert metadata_ends_with(part, fields)
    assert metadata_ends_with(memoryview(part), fields)
    other = txnid_fields(most, (least + 1) % 2**64)
    assert not metadata_ends_with(part, other)


def test_metadata_ends_with_declines_other_layouts() -> None:
    from magnetar.protocol.fastpath import metadata_ends_with, txnid_fields

    fields = txnid_fields(0, 7)
    plain = build_payload_part(pb.MessageMetadata(producer_name="p", sequence_id=1,
                                                  publish_time=1), b"\xb0\x01\x07\xb8\x01\x00")
    assert not metadata_ends_with(plain, fields)  # the bytes in the payload do not count
    later = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1,
                               txnid_most_bits=0, txnid_least_bits=7, highest_sequence_id=3)
    assert not metadata_ends_with(build_payload_part(later, b""), fields)  # a later field
    # (a part the decoder refuses, too short for its header, is never asked about)
    assert not metadata_ends_with(b"\x0e\x01\0\0\0\0\0\0\0\x02" + fields, fields)  # in the header
    assert not metadata_ends_with(b"\x0e\x02" + bytes(20), fields)
    assert not metadata_ends_with(b"\x0e\x01\0\0\0\0\0\0\0\xff" + fields, fields)  # size past the end


@pytest.mark.parametrize("kind, field", [
    (pb.BaseCommand.NEW_TXN_RESPONSE, "newTxnResponse"),
    (pb.BaseCommand.ADD_PARTITION_TO_TXN_RESPONSE, "addPartitionToTxnResponse"),
    (pb.BaseCommand.ADD_SUBSCRIPTION_TO_TXN_RESPONSE, "addSubscriptionToTxnResponse"),
    (pb.BaseCommand.END_TXN_RESPONSE, "endTxnResponse"),
])
@settings(max_examples=50)
@given(request_id=u64, most=u64, least=u64)
def test_txn_answers_match_protobuf(kind, field, request_id, most, least) -> None:
    from magnetar.protocol.fastpath import txn_answer_frame

    answer = pb.BaseCommand(type=kind)
    getattr(answer, field).MergeFrom(type(getattr(answer, field))(
        request_id=request_id, txnid_most_bits=most, txnid_least_bits=least))
    assert txn_answer_frame(kind, request_id, most, least) == encode_command(answer)
