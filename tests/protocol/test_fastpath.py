"""The hand-written hot-path encoders write exactly what protobuf writes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import FrameDecoder, encode_command, encode_payload_command, pb
from magnetar.protocol.fastpath import message_command, message_frame, send_receipt_frame

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
       st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=4))
def test_message_matches_protobuf(consumer_id, ledger, entry, redelivery, ack_set) -> None:
    msg = pb.CommandMessage(consumer_id=consumer_id, redelivery_count=redelivery)
    msg.message_id.ledgerId = ledger
    msg.message_id.entryId = entry
    msg.ack_set.extend(ack_set)
    cmd = pb.BaseCommand(type=pb.BaseCommand.MESSAGE, message=msg)
    fast = message_command(consumer_id, ledger, entry, redelivery, ack_set)
    assert fast == cmd.SerializeToString()
    part = b"\x0e\x01\x00\x00\x00\x00\x00\x00\x00\x00"
    assert message_frame(fast, part, None) == encode_payload_command(cmd, part)
    assert message_frame(fast, part, b"\x08\x01") == encode_payload_command(cmd, part, b"\x08\x01")


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
