"""Batch payload encoding and decoding."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol import MalformedFrame, pb
from magnetar.protocol.batch import decode_batch, encode_batch, split_batch


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


# ------------------------------------------------------------------ split_batch
_smms = st.builds(
    lambda key, props, seq, event_time, compacted: _smm(
        **({"partition_key": key} if key is not None else {}),
        **({"properties": [pb.KeyValue(key=k, value=v) for k, v in props]} if props else {}),
        **({"sequence_id": seq} if seq is not None else {}),
        **({"event_time": event_time} if event_time else {}),
        **({"compacted_out": True} if compacted else {})),
    st.none() | st.text(max_size=5), st.lists(st.tuples(st.text(max_size=3),
                                                        st.text(max_size=3)), max_size=2),
    st.none() | st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.booleans())


@settings(max_examples=200)
@given(st.lists(st.tuples(_smms, st.binary(max_size=300)), max_size=20), st.binary(max_size=3))
def test_split_batch_agrees_with_decode_batch(messages, trailing) -> None:
    payload = encode_batch(messages) + trailing
    split = split_batch(payload, len(messages))
    decoded = decode_batch(payload, len(messages))
    b = split.bounds
    assert len(b) == 2 * len(messages) + 1 and b[0] == 0 and b == sorted(b)
    assert [payload[b[2 * i + 1]:b[2 * i + 2]] for i in range(len(messages))] == \
        [data for _, data in decoded]
    assert split.sequence_ids == [m.sequence_id if m.HasField("sequence_id") else -1
                                  for m, _ in decoded]
    assert split.event_times == [m.event_time for m, _ in decoded]
    for i, (m, _) in enumerate(decoded):
        simple = not (m.partition_key or m.properties or m.compacted_out or
                      m.HasField("partition_key"))
        assert (i in split.metadata) == (not simple)
        if not simple:
            assert split.metadata[i] == m


def test_split_batch_of_simple_metadata_parses_nothing() -> None:
    messages = [(_smm(sequence_id=1000 + i, event_time=5 if i % 2 else 0), b"x" * i)
                for i in range(300)]
    split = split_batch(encode_batch(messages), 300)
    assert split.metadata == {}
    assert split.sequence_ids == list(range(1000, 1300))
    assert split.event_times == [5 if i % 2 else 0 for i in range(300)]


@given(st.binary(max_size=60), st.integers(0, 20))
def test_split_batch_raises_only_malformed_frame(data, count) -> None:
    with contextlib.suppress(MalformedFrame):
        split_batch(data, count)


def test_split_batch_truncated() -> None:
    payload = encode_batch([(_smm(), b"abc"), (_smm(partition_key="k"), b"defg")])
    for cut in range(1, len(payload)):
        with pytest.raises(MalformedFrame):
            split_batch(payload[:cut], 2)
