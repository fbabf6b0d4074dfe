"""Reading into the decoder's own buffers (``get_buffer`` / ``buffer_updated``, what the
broker's transport does) and the SEND fast path (``parse_send_command``, ``SendFrame``).

The reference is the ``feed`` decoder with protobuf: for any stream and any way the
socket cuts it, the buffered reads return the same frames; a SEND read without protobuf
carries the same fields protobuf reads, and anything the fast path does not read is left
to protobuf.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol import (
    FrameDecoder,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
    build_payload_part,
    command,
    encode_command,
    encode_payload_command,
    pb,
)
from magnetar.protocol.fastpath import parse_send_command
from magnetar.protocol.frames import LARGE_FRAME, READ_BUFFER_SIZE, SendFrame

from .helpers import metadata

u64 = st.integers(min_value=0, max_value=2**64 - 1)


def _send(seq: int, payload: bytes, **fields: int | bool) -> bytes:
    part = build_payload_part(metadata(sequence_id=seq), payload)
    return encode_payload_command(command("SEND", producer_id=7, sequence_id=seq, **fields), part)


def _read(decoder: FrameDecoder, stream: bytes, cuts: list[int]) -> list:
    """Feed ``stream`` through get_buffer/buffer_updated, never more per read than the
    buffer offered, ending reads at ``cuts`` (as a socket might)."""
    out: list = []
    pos = 0
    points = sorted({c % (len(stream) + 1) for c in cuts} | {len(stream)})
    for point in points:
        while pos < point:
            buf = decoder.get_buffer(-1)
            n = min(len(buf), point - pos)
            assert n > 0
            buf[:n] = stream[pos:pos + n]
            buf.release()
            out.extend(decoder.buffer_updated(n))
            pos += n
    return out


def _same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.type == y.type
        assert x.command == y.command
        assert x.payload_part == y.payload_part
        assert x.broker_entry_metadata == y.broker_entry_metadata


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 10, 900, LARGE_FRAME - 200, LARGE_FRAME + 5, 70_000, 200_000]),
                   min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=600_000), max_size=12),
)
def test_buffered_reads_match_feed(sizes: list[int], cuts: list[int]) -> None:
    frames = []
    for i, size in enumerate(sizes):
        if i % 3 == 2:
            frames.append(encode_command(command("FLOW", consumer_id=i, messagePermits=i)))
        else:
            frames.append(_send(i, bytes([i]) * size, num_messages=i + 1))
    stream = b"".join(frames)
    expected = FrameDecoder(send_frames=True).feed(stream)
    got = _read(FrameDecoder(send_frames=True), stream, cuts)
    _same(got, expected)
    assert all(type(f) is SendFrame for f in got if f.type == pb.BaseCommand.SEND)


def test_small_buffer_grows_and_large_frame_gets_its_own() -> None:
    decoder = FrameDecoder(send_frames=True)
    first = decoder.get_buffer(-1)
    assert len(first) < READ_BUFFER_SIZE  # an idle connection holds little
    first.release()
    big = _send(1, b"z" * 300_000)
    got = _read(decoder, big, [len(big) // 3])
    assert len(got) == 1 and bytes(got[0].payload_part).endswith(b"z" * 1000)
    part = got[0].payload_part  # a read-only view of the frame's own buffer: not copied
    assert isinstance(part, memoryview) and part.readonly
    assert part.obj is not decoder.get_buffer(-1).obj  # and not the buffer reused for reads
    # reads that fill the buffer make it grow, up to READ_BUFFER_SIZE
    small = b"".join(_send(i, b"s" * 1000) for i in range(200))
    assert len(_read(decoder, small, [])) == 200
    assert len(decoder.get_buffer(-1)) <= READ_BUFFER_SIZE


def test_buffered_limits_and_garbage_fail_for_good() -> None:
    decoder = FrameDecoder(max_frame_size=1000, send_frames=True)
    with pytest.raises(FrameTooLarge):
        _read(decoder, _send(1, b"x" * 2000), [])
    with pytest.raises(FrameTooLarge):  # the decoder stays failed
        _read(decoder, encode_command(command("PING")), [])
    with pytest.raises(MalformedFrame):
        _read(FrameDecoder(send_frames=True), b"\x00\x00\x00\x02\x00\x05", [])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000), st.lists(st.integers(min_value=0, max_value=3000), max_size=5))
def test_buffered_garbage_only_raises_protocol_error(data: bytes, cuts: list[int]) -> None:
    with contextlib.suppress(ProtocolError):
        _read(FrameDecoder(max_frame_size=100_000, send_frames=True), data, cuts)


# ------------------------------------------------------------------ SEND without protobuf


@settings(max_examples=300, deadline=None)
@given(
    producer_id=u64, sequence_id=u64,
    num_messages=st.none() | st.integers(min_value=0, max_value=2**31 - 1),
    highest=st.none() | u64, is_chunk=st.none() | st.booleans(), marker=st.none() | st.booleans(),
    most=st.none() | u64, least=st.none() | u64,
)
def test_parse_send_matches_protobuf(producer_id, sequence_id, num_messages, highest, is_chunk,
                                     marker, most, least) -> None:
    send = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id)
    for name, value in (("num_messages", num_messages), ("highest_sequence_id", highest),
                        ("is_chunk", is_chunk), ("marker", marker),
                        ("txnid_most_bits", most), ("txnid_least_bits", least)):
        if value is not None:
            setattr(send, name, value)
    raw = pb.BaseCommand(type=pb.BaseCommand.SEND, send=send).SerializeToString()
    fields = parse_send_command(raw, 0, len(raw))
    txnid = None if most is None and least is None else (most or 0, least or 0)
    assert fields == (producer_id, sequence_id, send.num_messages,
                      highest if highest is not None else -1, send.is_chunk, send.marker, txnid)
    part = build_payload_part(metadata(sequence_id=1), b"p")
    fast = SendFrame(*fields, part)
    slow = SendFrame.from_command(pb.BaseCommand.FromString(raw), part)
    rebuilt = SendFrame.from_command(fast.command, part)  # the command, built on demand
    for name in SendFrame.__slots__:
        if not name.startswith("_"):
            assert getattr(fast, name) == getattr(slow, name) == getattr(rebuilt, name), name


@pytest.mark.parametrize("value", [127, 128, 300, 16383, 16384, 2**21, 2**64 - 1])
def test_parse_send_reads_varints_of_each_length(value: int) -> None:
    send = pb.CommandSend(producer_id=value, sequence_id=value, num_messages=min(value, 2**31 - 1),
                          txnid_most_bits=value, txnid_least_bits=value, highest_sequence_id=value)
    raw = pb.BaseCommand(type=pb.BaseCommand.SEND, send=send).SerializeToString()
    assert parse_send_command(raw + b"\xff\xff", 0, len(raw)) == (
        value, value, min(value, 2**31 - 1), value, False, False, (value, value))


def test_parse_send_declines_what_it_does_not_read() -> None:
    def raw(**fields: object) -> bytes:
        return command("SEND", producer_id=1, sequence_id=2, **fields).SerializeToString()

    for declined in (
        raw(message_id=pb.MessageIdData(ledgerId=1, entryId=2)),
        raw(num_messages=-1),
        pb.BaseCommand(type=pb.BaseCommand.SEND_RECEIPT, send_receipt=pb.CommandSendReceipt(
            producer_id=1, sequence_id=2)).SerializeToString(),
        raw()[:-1],  # truncated
    ):
        assert parse_send_command(declined, 0, len(declined)) is None
    # missing a required field: declined here, and protobuf refuses it
    partial = pb.BaseCommand(type=pb.BaseCommand.SEND)
    partial.send.producer_id = 1
    data = partial.SerializePartialToString()
    assert parse_send_command(data, 0, len(data)) is None


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=60))
def test_parse_send_on_garbage(tail: bytes) -> None:
    data = b"\x08\x06\x32" + tail
    fields = parse_send_command(data, 0, len(data))
    if fields is not None:  # whatever it reads, protobuf reads the same
        cmd = pb.BaseCommand.FromString(data)
        slow = SendFrame.from_command(cmd, None)
        assert fields == (slow.producer_id, slow.sequence_id, slow.num_messages,
                          slow.highest_sequence_id, slow.is_chunk, slow.marker, slow.txnid)


def test_decoder_reads_transactional_sends_without_protobuf() -> None:
    stream = (_send(3, b"abc", txnid_least_bits=1, txnid_most_bits=2) + _send(4, b"def")
              + _send(5, b"ghi", txnid_least_bits=7))
    txn, plain, least_only = FrameDecoder(send_frames=True).feed(stream)
    assert type(txn) is SendFrame and txn.txnid == (2, 1) and txn.sequence_id == 3
    assert txn.command.send.txnid_most_bits == 2 and txn.command.send.txnid_least_bits == 1
    assert type(plain) is SendFrame and plain.txnid is None and plain.sequence_id == 4
    assert not plain.command.send.HasField("txnid_most_bits")
    assert least_only.txnid == (0, 7)  # as protobuf reads a Send with one of the two
