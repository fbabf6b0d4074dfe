"""Compression codecs: round trips, wire format checks, known vectors, bad input."""

from __future__ import annotations

import os
import zlib

import cramjam
import lz4.block
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol import CompressionError, pb
from magnetar.protocol.compression import compress, decompress

CODECS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]
SAMPLES = [b"", b"x", b"hello world", os.urandom(4096), b"abcabcabc" * 5000]


@pytest.mark.parametrize("kind", CODECS, ids=pb.CompressionType.Name)
@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: f"{len(d)}B")
def test_round_trip(kind: int, data: bytes) -> None:
    packed = compress(kind, data)
    assert decompress(kind, packed, len(data)) == data
    if kind != pb.NONE and len(data) > 1000 and data[:3] == b"abc":
        assert len(packed) < len(data) // 10


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=3000))
def test_round_trip_property(kind: int, data: bytes) -> None:
    assert decompress(kind, compress(kind, data), len(data)) == data


def test_lz4_is_a_raw_block_without_size_prefix() -> None:
    data = b"pulsar " * 200
    ours = compress(pb.LZ4, data)
    assert ours == lz4.block.compress(data, store_size=False)
    assert lz4.block.compress(data, store_size=True)[4:] == ours
    # hand-made block: one token (5 literals, no match) then the literals
    assert decompress(pb.LZ4, b"\x50hello", 5) == b"hello"


def test_zlib_is_a_zlib_stream() -> None:
    ours = compress(pb.ZLIB, b"data" * 100)
    assert ours[0] == 0x78  # deflate, 32K window
    assert zlib.decompress(ours) == b"data" * 100
    assert decompress(pb.ZLIB, zlib.compress(b"abc", 9), 3) == b"abc"


def test_zstd_is_one_frame() -> None:
    ours = compress(pb.ZSTD, b"zstd" * 100)
    assert ours[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompress(ours) == b"zstd" * 100
    # a frame without a content-size field must work too
    cobj = zstandard.ZstdCompressor(write_content_size=False)
    assert decompress(pb.ZSTD, cobj.compress(b"abc" * 10), 30) == b"abc" * 10


def test_snappy_is_a_raw_block() -> None:
    ours = compress(pb.SNAPPY, b"hello")
    assert not ours.startswith(b"\xff\x06\x00\x00sNaPpY")
    assert bytes(cramjam.snappy.decompress_raw(ours)) == b"hello"
    # hand-made block: varint length 5, literal tag ((5 - 1) << 2), bytes
    assert decompress(pb.SNAPPY, b"\x05\x10hello", 5) == b"hello"


@pytest.mark.parametrize("kind", CODECS[1:], ids=pb.CompressionType.Name)
def test_wrong_declared_size(kind: int) -> None:
    packed = compress(kind, b"0123456789" * 10)
    for size in (0, 99, 101, 10_000):
        with pytest.raises(CompressionError):
            decompress(kind, packed, size)


def test_none_ignores_declared_size() -> None:
    # producers leave uncompressed_size at 0 on uncompressed payloads
    assert decompress(pb.NONE, b"abc", 3) == b"abc"
    assert decompress(pb.NONE, b"abc", 0) == b"abc"


@pytest.mark.parametrize("kind", CODECS[1:], ids=pb.CompressionType.Name)
@settings(max_examples=100, deadline=None)
@given(garbage=st.binary(max_size=200), size=st.integers(min_value=0, max_value=5000))
def test_garbage_only_raises_compression_error(kind: int, garbage: bytes, size: int) -> None:
    try:
        out = decompress(kind, garbage, size)
    except CompressionError:
        return
    assert len(out) == size


def test_unknown_codec_and_absurd_size() -> None:
    with pytest.raises(CompressionError):
        compress(99, b"x")
    with pytest.raises(CompressionError):
        decompress(99, b"x", 1)
    with pytest.raises(CompressionError):
        decompress(pb.LZ4, b"\x50hello", 1 << 40)
