"""Batch payload encoding and decoding."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol import MalformedFrame, pb
from magnetar.protocol.batch import decode_batch, encode_batch


def _smm(**fields: object) -> pb.SingleMessageMetadata:
    return pb.SingleMessageMetadata(**fields)


def test_layout() -> None:
    smm = _smm(partition_key="k")
    encoded = encode_batch([(smm, b"abc")])
    meta = pb.SingleMessageMetadata(partition_key="k", payload_size=3).SerializeToString()
    assert encoded == struct.pack(">I", len(meta)) + meta + b"abc"


def test_round_trip_with_metadata() -> None:
    messages = [
        (_smm(partition_key="a", properties=[pb.KeyValue(key="x", value="y")], sequence_id=5), b"one"),
        (_smm(null_value=True), b""),
        (_smm(ordering_key=b"\x00\x01", event_time=7), b"three" * 100),
    ]
    decoded = decode_batch(encode_batch(messages), 3)
    assert [p for _, p in decoded] == [b"one", b"", b"three" * 100]
    assert decoded[0][0].partition_key == "a"
    assert decoded[0][0].properties[0].value == "y"
    assert decoded[0][0].sequence_id == 5
    assert decoded[1][0].null_value
    assert decoded[2][0].ordering_key == b"\x00\x01"
    assert [m.payload_size for m, _ in decoded] == [3, 0, 500]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=10), st.binary(max_size=200)), max_size=20))
def test_round_trip_property(items: list[tuple[str, bytes]]) -> None:
    messages = [(_smm(partition_key=k), p) for k, p in items]
    decoded = decode_batch(encode_batch(messages), len(items))
    assert [(m.partition_key, p) for m, p in decoded] == items


def test_trailing_bytes_ignored_and_truncation_detected() -> None:
    encoded = encode_batch([(_smm(), b"a"), (_smm(), b"bb")])
    assert len(decode_batch(encoded + b"junk", 2)) == 2
    assert len(decode_batch(encoded, 1)) == 1
    for cut in range(len(encoded)):
        with pytest.raises(MalformedFrame):
            decode_batch(encoded[:cut], 2)
    with pytest.raises(MalformedFrame):
        decode_batch(encoded, 3)


def test_bad_entries() -> None:
    with pytest.raises(MalformedFrame):
        decode_batch(struct.pack(">I", 2) + b"\xff\xff", 1)  # not protobuf
    with pytest.raises(MalformedFrame):
        decode_batch(struct.pack(">I", 0), 1)  # payload_size missing
    with pytest.raises(MalformedFrame):
        decode_batch(b"", 10**9)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=50))
def test_garbage_only_raises_malformed(data: bytes, count: int) -> None:
    with contextlib.suppress(MalformedFrame):
        decode_batch(data, count)


# ---------------------------------------------------------------- scan_batch (hot path)
from magnetar.protocol.batch import batch_message_at, scan_batch  # noqa: E402

_smm_strategy = st.builds(
    pb.SingleMessageMetadata,
    partition_key=st.one_of(st.none(), st.text(max_size=8)),
    properties=st.lists(st.builds(pb.KeyValue, key=st.text(max_size=5),
                                  value=st.text(max_size=5)), max_size=2),
    compacted_out=st.one_of(st.none(), st.booleans()),
    event_time=st.one_of(st.none(), st.integers(min_value=0, max_value=2**64 - 1)),
    ordering_key=st.one_of(st.none(), st.binary(max_size=4)),
    sequence_id=st.one_of(st.none(), st.integers(min_value=0, max_value=2**64 - 1)),
    null_value=st.one_of(st.none(), st.booleans()),
)


def _scanned(buf: bytes, start: int, count: int) -> list[tuple[bytes, bytes, bool]]:
    ends, compacted = scan_batch(buf, start, count)
    assert len(ends) == count
    out = []
    for i in range(count):
        meta_at, at, end = batch_message_at(buf, start, ends, i)
        out.append((buf[meta_at:at], buf[at:end], i in compacted))
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_smm_strategy, st.binary(max_size=300)), max_size=12),
       st.binary(max_size=8), st.binary(max_size=4))
def test_scan_agrees_with_protobuf(items, prefix: bytes, trailing: bytes) -> None:
    buf = prefix + encode_batch(items) + trailing
    decoded = decode_batch(buf[len(prefix):], len(items))
    scanned = _scanned(buf, len(prefix), len(items))
    assert [(smm.SerializeToString(), p, smm.compacted_out) for smm, p in decoded] == scanned


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 100_000])
def test_scan_payload_size_varints(size: int) -> None:
    items = [(pb.SingleMessageMetadata(sequence_id=i), bytes([i]) * size) for i in range(3)]
    buf = encode_batch(items)
    assert [p for _, p, _ in _scanned(buf, 0, 3)] == [p for _, p in items]


def test_scan_compacted_out_after_payload_size() -> None:
    items = [(pb.SingleMessageMetadata(compacted_out=True), b"gone"),
             (pb.SingleMessageMetadata(compacted_out=False), b"kept"),
             (pb.SingleMessageMetadata(), b"also")]
    assert scan_batch(encode_batch(items), 0, 3)[1] == [0]


def test_scan_fields_out_of_order() -> None:
    # compacted_out before payload_size, an unknown fixed64 field: still parsed right
    smm = b"\x20\x01\x18\x03\x59" + bytes(8)
    buf = struct.pack(">I", len(smm)) + smm + b"abc"
    assert _scanned(buf, 0, 1) == [(smm, b"abc", True)]
    assert decode_batch(buf, 1)[0][0].compacted_out


def test_scan_truncation_and_garbage_raise_malformed() -> None:
    encoded = encode_batch([(_smm(), b"a"), (_smm(sequence_id=9), b"bb")])
    for cut in range(len(encoded)):
        with pytest.raises(MalformedFrame):
            scan_batch(encoded[:cut], 0, 2)
    with pytest.raises(MalformedFrame):
        scan_batch(encoded, 0, 3)
    with pytest.raises(MalformedFrame):
        scan_batch(struct.pack(">I", 2) + b"\xff\xff", 0, 1)
    with pytest.raises(MalformedFrame):
        scan_batch(struct.pack(">I", 0), 0, 1)
    with pytest.raises(MalformedFrame):
        scan_batch(b"", 0, 10**9)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=50))
def test_scan_garbage_only_raises_malformed(data: bytes, count: int) -> None:
    """Garbage raises only ``MalformedFrame`` and never yields bounds outside the data. (The
    scan reads a member's metadata only as far as its size, and assumes protobuf's field
    order for that, so on non-canonical metadata it may disagree with the protobuf parser;
    on anything a serializer writes it agrees: ``test_scan_agrees_with_protobuf``.)"""
    with contextlib.suppress(MalformedFrame):
        for meta, payload, _ in _scanned(data, 0, count):
            assert len(meta) + len(payload) <= len(data)
