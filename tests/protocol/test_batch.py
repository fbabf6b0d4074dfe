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
