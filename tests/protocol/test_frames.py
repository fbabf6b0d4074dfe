"""Framing: round trips, incremental decoding, checksums, limits and garbage input."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    ChecksumMismatch,
    Frame,
    FrameDecoder,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
    build_payload_part,
    command,
    encode_command,
    encode_payload_command,
    parse_payload_part,
    pb,
    peek_metadata,
    verify_checksum,
)
from magnetar.protocol.commands import FIELD_BY_TYPE
from magnetar.protocol.frames import FRAME_PADDING, part_checksum

from .helpers import metadata, minimal_command


def _crc32c_reference(data: bytes) -> int:
    """Bitwise CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), independent of crc32c."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _feed_bytewise(data: bytes, decoder: FrameDecoder | None = None) -> list[Frame]:
    decoder = decoder or FrameDecoder()
    out: list[Frame] = []
    for i in range(len(data)):
        out.extend(decoder.feed(data[i : i + 1]))
    return out


def _send_frame(seq: int, payload: bytes, bem: bytes | None = None) -> bytes:
    part = build_payload_part(metadata(sequence_id=seq), payload)
    cmd = command("SEND", producer_id=1, sequence_id=seq)
    return encode_payload_command(cmd, part, bem)


# ------------------------------------------------------------------ golden bytes


def test_reference_crc_matches_known_vector() -> None:
    assert _crc32c_reference(b"123456789") == 0xE3069283


def test_ping_frame_bytes() -> None:
    # total=9, cmd=5, BaseCommand{type: 18 (PING), ping: {}}
    assert encode_command(command("PING")) == bytes.fromhex("00000009" "00000005" "0812" "920100")


def test_payload_part_layout_and_crc() -> None:
    meta = metadata(sequence_id=3)
    part = build_payload_part(meta, b"payload")
    serialized = meta.SerializeToString()
    assert part[:2] == b"\x0e\x01"
    tail = struct.pack(">I", len(serialized)) + serialized + b"payload"
    assert part[6:] == tail
    assert struct.unpack(">I", part[2:6])[0] == _crc32c_reference(tail)


def test_payload_frame_layout_with_broker_entry_metadata() -> None:
    bem = pb.BrokerEntryMetadata(broker_timestamp=5, index=9).SerializeToString()
    part = build_payload_part(metadata(), b"x")
    cmd = command("MESSAGE", consumer_id=1, message_id={"ledgerId": 1, "entryId": 2})
    frame = encode_payload_command(cmd, part, bem)
    body = cmd.SerializeToString()
    expected = (
        struct.pack(">II", 4 + len(body) + 6 + len(bem) + len(part), len(body))
        + body + b"\x0e\x02" + struct.pack(">I", len(bem)) + bem + part
    )
    assert frame == expected
    (decoded,) = FrameDecoder().feed(frame)
    assert decoded.broker_entry_metadata == bem
    assert decoded.payload_part == part
    assert isinstance(decoded.payload_part, bytes)


# ------------------------------------------------------------------ every command type


@pytest.mark.parametrize("type_value", sorted(FIELD_BY_TYPE), ids=lambda t: pb.BaseCommand.Type.Name(t))
def test_every_command_type_round_trips(type_value: int) -> None:
    cmd = minimal_command(type_value)
    (frame,) = FrameDecoder().feed(encode_command(cmd))
    assert frame.command == cmd
    assert frame.type == type_value
    assert frame.command.HasField(FIELD_BY_TYPE[type_value])
    assert frame.payload_part is None and frame.broker_entry_metadata is None


@pytest.mark.parametrize("type_value", [pb.BaseCommand.SEND, pb.BaseCommand.MESSAGE])
def test_payload_commands_round_trip(type_value: int) -> None:
    cmd = minimal_command(type_value)
    part = build_payload_part(metadata(partition_key="k"), b"\x00\x01body")
    (frame,) = FrameDecoder(verify_checksums=True).feed(encode_payload_command(cmd, part))
    assert frame.command == cmd
    assert frame.payload_part == part
    meta, payload = parse_payload_part(frame.payload_part)
    assert meta.partition_key == "k" and payload == b"\x00\x01body"


# ------------------------------------------------------------------ incremental decoding


def test_many_frames_in_one_feed_one_byte_at_a_time_and_with_trailing_data() -> None:
    stream = b"".join(
        [encode_command(command("PING")), _send_frame(1, b"a" * 100), encode_command(command("PONG"))]
    )
    whole = FrameDecoder().feed(stream)
    assert [f.type for f in whole] == [pb.BaseCommand.PING, pb.BaseCommand.SEND, pb.BaseCommand.PONG]
    assert _feed_bytewise(stream) == whole

    decoder = FrameDecoder()
    trailing = encode_command(command("PING"))
    assert decoder.feed(stream + trailing[:5]) == whole
    assert decoder.buffered == 5
    assert decoder.feed(trailing[5:])[0].type == pb.BaseCommand.PING
    assert decoder.buffered == 0


def test_empty_feed() -> None:
    assert FrameDecoder().feed(b"") == []


def test_accepts_bytearray_and_memoryview() -> None:
    data = _send_frame(2, b"zz")
    assert FrameDecoder().feed(bytearray(data)) == FrameDecoder().feed(memoryview(data))


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=20),
)
def test_random_splits_decode_identically(payloads: list[bytes], cuts: list[int]) -> None:
    frames = []
    for i, payload in enumerate(payloads):
        if i % 3 == 2:
            frames.append(encode_command(command("FLOW", consumer_id=i, messagePermits=i)))
        else:
            bem = b"\x08\x01" if i % 2 else None
            frames.append(_send_frame(i, payload, bem))
    stream = b"".join(frames)
    expected = FrameDecoder().feed(stream)
    assert len(expected) == len(payloads)

    points = sorted({c % (len(stream) + 1) for c in cuts})
    decoder = FrameDecoder()
    got: list[Frame] = []
    prev = 0
    for point in [*points, len(stream)]:
        got.extend(decoder.feed(stream[prev:point]))
        prev = point
    assert got == expected
    assert decoder.buffered == 0


# ------------------------------------------------------------------ garbage and limits


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=2000))
def test_garbage_only_raises_protocol_error(data: bytes) -> None:
    for feeder in (
        lambda: FrameDecoder(max_frame_size=1024, verify_checksums=True).feed(data),
        lambda: _feed_bytewise(data, FrameDecoder(max_frame_size=1024)),
        lambda: FrameDecoder(max_frame_size=1024).feed(data + encode_command(command("PING"))),
    ):
        with contextlib.suppress(ProtocolError):
            feeder()


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=200), st.integers(min_value=0, max_value=199))
def test_corrupted_valid_frames_only_raise_protocol_error(noise: bytes, at: int) -> None:
    frame = bytearray(_send_frame(1, b"payload-bytes", b"\x08\x02"))
    at %= len(frame)
    frame[at : at + len(noise)] = noise
    try:
        frames = FrameDecoder(verify_checksums=True).feed(bytes(frame))
        for f in frames:
            if f.payload_part is not None:
                parse_payload_part(f.payload_part)
    except ProtocolError:
        pass


def test_frame_too_large() -> None:
    limit = 1000
    ok = _send_frame(1, b"x" * 900)
    exact = len(ok) - 4
    assert len(FrameDecoder(max_frame_size=exact).feed(ok)) == 1
    with pytest.raises(FrameTooLarge) as info:
        FrameDecoder(max_frame_size=exact - 1).feed(ok[:4])  # the header alone is enough
    assert (info.value.size, info.value.limit) == (exact, exact - 1)
    with pytest.raises(FrameTooLarge):
        _feed_bytewise(_send_frame(1, b"x" * limit), FrameDecoder(max_frame_size=limit))


def test_default_limit_is_max_message_size_plus_padding() -> None:
    decoder = FrameDecoder()
    assert decoder.max_frame_size == DEFAULT_MAX_FRAME_SIZE + FRAME_PADDING
    big = _send_frame(1, b"\0" * DEFAULT_MAX_FRAME_SIZE)
    assert len(decoder.feed(big)) == 1
    with pytest.raises(FrameTooLarge):
        FrameDecoder().feed(struct.pack(">I", DEFAULT_MAX_FRAME_SIZE + FRAME_PADDING + 1))


def test_decoder_stays_failed() -> None:
    decoder = FrameDecoder()
    with pytest.raises(MalformedFrame):
        decoder.feed(b"\x00\x00\x00\x00")
    with pytest.raises(MalformedFrame):
        decoder.feed(encode_command(command("PING")))


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x00\x00\x02\x00\x00",  # too short for the command size
        b"\x00\x00\x00\x05\x00\x00\x00\x09\x08",  # command size past the end
        b"\x00\x00\x00\x06\x00\x00\x00\x02\x08\x7f",  # unknown command type
        b"\x00\x00\x00\x06\x00\x00\x00\x02\xff\xff",  # not protobuf
        b"\x00\x00\x00\x04\x00\x00\x00\x00",  # empty command: type missing
    ],
)
def test_malformed_frames(raw: bytes) -> None:
    with pytest.raises(MalformedFrame):
        FrameDecoder().feed(raw)


def test_missing_required_sub_field_is_malformed() -> None:
    body = pb.BaseCommand(type=pb.BaseCommand.SEND, send={"producer_id": 1}).SerializePartialToString()
    with pytest.raises(MalformedFrame):
        FrameDecoder().feed(struct.pack(">II", len(body) + 4, len(body)) + body)


def test_bad_payload_magic_and_truncated_part() -> None:
    body = command("SEND", producer_id=1, sequence_id=1).SerializeToString()
    for tail in (b"\x0e\x03" + b"\x00" * 8, b"\x0e\x01\x00", b"\x0e\x01" + b"\x00" * 4 + b"\x00\x00\x00\x09"):
        raw = struct.pack(">II", 4 + len(body) + len(tail), len(body)) + body + tail
        with pytest.raises(MalformedFrame):
            FrameDecoder().feed(raw)


# ------------------------------------------------------------------ checksums


def test_checksum_mismatch_detected() -> None:
    part = bytearray(build_payload_part(metadata(), b"hello world"))
    part[-1] ^= 0x01
    bad = bytes(part)
    assert not verify_checksum(bad)
    with pytest.raises(ChecksumMismatch):
        parse_payload_part(bad)
    # without verification the damage goes unnoticed by design
    assert parse_payload_part(bad, verify=False)[1] == b"hello worle"
    assert peek_metadata(bad).producer_name == "p"

    frame = encode_payload_command(command("SEND", producer_id=1, sequence_id=0), bad)
    (decoded,) = FrameDecoder().feed(frame)  # default: checked later by the caller
    assert not verify_checksum(decoded.payload_part)
    with pytest.raises(ChecksumMismatch):
        FrameDecoder(verify_checksums=True).feed(frame)


def test_checksum_field_itself_corrupted() -> None:
    part = bytearray(build_payload_part(metadata(), b"abc"))
    part[3] ^= 0xFF
    assert not verify_checksum(bytes(part))
    assert verify_checksum(build_payload_part(metadata(), b"abc"))


@given(st.binary(max_size=64), st.integers(0, 63))
def test_part_checksum_is_the_carried_crc_when_it_matches(payload: bytes, at: int) -> None:
    part = build_payload_part(metadata(), payload)
    (carried,) = struct.unpack_from(">I", part, 2)
    assert part_checksum(part) == carried == _crc32c_reference(part[6:])
    assert part_checksum(memoryview(part)) == carried
    damaged = bytearray(part)
    damaged[at % len(part)] ^= 0x10
    assert part_checksum(bytes(damaged)) is None  # any byte, magic included
    assert part_checksum(part[:5]) is None


def test_metadata_garbage_is_malformed() -> None:
    tail = struct.pack(">I", 2) + b"\xff\xff" + b"payload"
    part = b"\x0e\x01" + struct.pack(">I", _crc32c_reference(tail)) + tail
    with pytest.raises(MalformedFrame):
        parse_payload_part(part)


def test_a_command_with_an_appended_part_reads_back_as_protobuf_writes_it() -> None:
    """`encode_command_with_part` + `repeated_string_part` (a long list serialized in
    slices) decode to the very command protobuf would have serialized whole."""
    from magnetar.protocol.frames import encode_command_with_part, repeated_string_part

    names = [f"persistent://public/default/t-{i}" for i in range(7)] + ["persistent://p/ü/é"]
    whole = pb.BaseCommand(type=pb.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE,
                           getTopicsOfNamespaceResponse=pb.CommandGetTopicsOfNamespaceResponse(
                               request_id=9, topics=names, filtered=True, changed=True))
    start = pb.BaseCommand()
    start.CopyFrom(whole)
    del start.getTopicsOfNamespaceResponse.topics[:]
    number = pb.CommandGetTopicsOfNamespaceResponse.DESCRIPTOR.fields_by_name["topics"].number
    extra = [repeated_string_part(number, names[:3]), repeated_string_part(number, names[3:])]
    pieces = encode_command_with_part(start, "getTopicsOfNamespaceResponse", extra)
    assert pieces[1:] == extra  # written as they are, not copied into one buffer
    frames = FrameDecoder().feed(b"".join(pieces))
    assert len(frames) == 1 and frames[0].command == whole
    assert repeated_string_part(number, []) == b""
