"""Protobuf base-128 varints, for the code that writes or reads protobuf bytes by hand (the
hot-path encoders in ``fastpath``, batch headers, the client's batch reader, Snappy's
length preamble, which uses the same encoding)."""

from __future__ import annotations

__all__ = ["decode_varint", "encode_varint"]

_U64 = 1 << 64


#: the varints of 0..127, one byte each (most ids, counts and lengths on the hot path)
_ONE_BYTE = tuple(bytes((i,)) for i in range(0x80))


def encode_varint(value: int) -> bytes:
    """The varint of a non-negative value; a negative one as its 64-bit two's complement
    (how protobuf writes a negative ``int32``/``int64``)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value += _U64
    elif value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    elif value < 0x200000:  # (sequence and request ids, a coordinator's sequence)
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes | bytearray | memoryview, pos: int, limit: int = 10) -> tuple[int, int]:
    """``(value, position after it)`` of the varint at ``pos``; ``ValueError`` when it runs
    past the data or past ``limit`` bytes."""
    value = 0
    end = min(len(data), pos + limit)
    shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise ValueError("truncated or overlong varint")
