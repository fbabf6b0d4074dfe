"""``split_columns`` against protobuf (``decode_batch``): uniform runs (decoded by
vectorised gathers), layouts that change mid-batch (a sequence id gaining a varint byte,
keys of other lengths), random batches (walked), compacted messages and bad input."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol import MalformedFrame, pb
from magnetar.protocol.batch import decode_batch, encode_batch
from magnetar.protocol.columnar import split_columns


def _view(payload: bytes, count: int) -> list[tuple]:
    """Each message as (value, key or None, properties, sequence id, event time,
    compacted) read from the columns."""
    c = split_columns(payload, count)
    assert c.count == count
    out = []
    for i in range(count):
        key = None
        if c.key_start[i] >= 0:
            key = payload[c.key_start[i]:c.key_end[i]].decode()
        props = [(payload[ks:ke].decode(), payload[vs:ve].decode())
                 for ks, ke, vs, ve in c.prop_bounds[c.prop_offsets[i]:c.prop_offsets[i + 1]]]
        out.append((payload[c.value_start[i]:c.value_end[i]], key, props,
                    int(c.sequence_ids[i]), int(c.event_times[i]), i in c.compacted))
    flat = [int(x) for i in range(count) for x in
            (c.value_start[i], c.value_end[i])]
    assert flat == sorted(flat)
    return out


def _expected(payload: bytes, count: int) -> list[tuple]:
    return [(data, m.partition_key if m.HasField("partition_key") else None,
             [(kv.key, kv.value) for kv in m.properties],
             m.sequence_id if m.HasField("sequence_id") else -1, m.event_time,
             m.compacted_out) for m, data in decode_batch(payload, count)]


def _check(messages: list[tuple[pb.SingleMessageMetadata, bytes]], trailing: bytes = b"") -> None:
    payload = encode_batch(messages) + trailing
    assert _view(payload, len(messages)) == _expected(payload, len(messages))


def test_uniform_batch_as_the_official_client_writes_it() -> None:
    # payload_size and sequence_id, values of one size; ids cross 128 and 16384 (the
    # varint gains a byte: the run breaks and starts again)
    for first in (0, 16000, 2**21 - 500):
        _check([(pb.SingleMessageMetadata(sequence_id=first + i), b"%06d" % i + b"x" * 94)
                for i in range(1000)])


def test_uniform_with_keys_properties_and_event_times() -> None:
    msgs = []
    for i in range(500):
        smm = pb.SingleMessageMetadata(sequence_id=i, partition_key=f"k{i:03d}",
                                       event_time=1_700_000_000_000 + i)
        smm.properties.add(key="a", value=f"{i:04d}")
        smm.properties.add(key=f"b{i % 10}", value="v")
        msgs.append((smm, b"%05d" % i))
    _check(msgs)


def test_changing_layouts_and_sizes() -> None:
    msgs = []
    for i in range(700):
        smm = pb.SingleMessageMetadata(sequence_id=i)
        if i % 7 == 0:
            smm.partition_key = f"key-{i}"
        if 100 <= i < 300:
            smm.properties.add(key="p", value="x" * (i % 5))
        if i % 50 == 3:
            smm.compacted_out = True
        if i % 3 == 0:
            smm.event_time = i
        msgs.append((smm, b"v" * (i % 13 if i > 400 else 20)))
    _check(msgs, b"tail")


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 100_000])
def test_value_sizes(size: int) -> None:
    _check([(pb.SingleMessageMetadata(sequence_id=i), bytes([i]) * size) for i in range(20)])


def test_unknown_fields_and_field_order() -> None:
    # compacted_out before payload_size, an unknown fixed64 field, an ordering key
    smm = b"\x20\x01\x18\x03\x59" + bytes(8) + b"\x3a\x02ok"
    one = struct.pack(">I", len(smm)) + smm + b"abc"
    payload = one * 30
    assert _view(payload, 30) == _expected(payload, 30)


_smms = st.builds(
    lambda key, props, seq, event_time, compacted: pb.SingleMessageMetadata(
        **({"partition_key": key} if key is not None else {}),
        **({"properties": [pb.KeyValue(key=k, value=v) for k, v in props]} if props else {}),
        **({"sequence_id": seq} if seq is not None else {}),
        **({"event_time": event_time} if event_time else {}),
        **({"compacted_out": True} if compacted else {})),
    st.none() | st.text(max_size=5), st.lists(st.tuples(st.text(max_size=3),
                                                        st.text(max_size=3)), max_size=2),
    st.none() | st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.booleans())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_smms, st.binary(max_size=300)), max_size=20),
       st.integers(1, 30), st.binary(max_size=3))
def test_agrees_with_decode_batch(messages, repeat, trailing) -> None:
    # repeated: runs of alike records, then the next pattern
    _check([m for m in messages for _ in range(repeat)], trailing)


def test_truncation_and_garbage_raise_malformed() -> None:
    payload = encode_batch([(pb.SingleMessageMetadata(), b"a"),
                            (pb.SingleMessageMetadata(partition_key="k"), b"defg")] * 3)
    for cut in range(len(payload)):
        with pytest.raises(MalformedFrame):
            split_columns(payload[:cut], 6)
    with pytest.raises(MalformedFrame):
        split_columns(payload, 7)
    with pytest.raises(MalformedFrame):
        split_columns(struct.pack(">I", 2) + b"\xff\xff", 1)
    with pytest.raises(MalformedFrame):  # a property without its value
        smm = b"\x0a\x03\x0a\x01k\x18\x00"
        split_columns(struct.pack(">I", len(smm)) + smm, 1)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.integers(0, 20))
def test_garbage_raises_only_malformed(data: bytes, count: int) -> None:
    with contextlib.suppress(MalformedFrame):
        c = split_columns(data, count)
        assert (c.value_end <= len(data)).all()
