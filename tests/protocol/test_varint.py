"""Hand-written varints against protobuf's own encoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import pb
from magnetar.protocol.varint import decode_varint, encode_varint


@given(st.integers(min_value=-(2**63), max_value=2**64 - 1))
def test_encode_matches_protobuf(value: int) -> None:
    if value < 0:
        mid = pb.MessageIdData(ledgerId=0, entryId=0)
        mid.ack_set.append(value)  # int64: negatives as 10-byte two's complement
        assert mid.SerializeToString().endswith(encode_varint(value))
    else:
        body = pb.MessageIdData(ledgerId=value, entryId=0).SerializeToString()
        assert body[1 : 1 + len(encode_varint(value))] == encode_varint(value)


@pytest.mark.parametrize("value", [0, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1,
                                   2**28, 2**63, 2**64 - 1, -1])
def test_encode_each_length_matches_protobuf(value: int) -> None:
    """The boundaries of each hand-written length (one, two and three bytes, then the
    loop), which random 64-bit values almost never hit."""
    mid = pb.MessageIdData(ledgerId=0, entryId=0)
    mid.ack_set.append(value if value < 2**63 else value - 2**64)
    assert mid.SerializeToString().endswith(encode_varint(value))


@given(st.integers(min_value=0, max_value=2**64 - 1), st.binary(max_size=4))
def test_decode_roundtrip(value: int, tail: bytes) -> None:
    data = b"\x00" + encode_varint(value) + tail
    assert decode_varint(data, 1) == (value, 1 + len(encode_varint(value)))


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff" * 11])
def test_decode_refuses_truncated_or_overlong(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_varint(data, 0)
