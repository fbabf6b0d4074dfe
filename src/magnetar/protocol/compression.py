"""Payload compression, byte-compatible with the official clients.

Formats per ``CompressionType``:

* ``LZ4``: a raw LZ4 *block* with no size prefix (the size travels in
  ``MessageMetadata.uncompressed_size``);
* ``ZLIB``: a zlib stream (2-byte header, deflate data, Adler-32);
* ``ZSTD``: one Zstandard frame;
* ``SNAPPY``: a raw Snappy block (no framing format).

Every failure to decompress, and any result whose length differs from the declared
uncompressed size, raises ``CompressionError``.
"""

from __future__ import annotations

import threading
import zlib

import cramjam
import lz4.block
import zstandard

from magnetar.protocol import pulsar_pb2 as pb
from magnetar.protocol.errors import CompressionError
from magnetar.protocol.varint import decode_varint

__all__ = ["MAX_UNCOMPRESSED_SIZE", "ZSTD_LEVEL", "compress", "decompress"]

#: Refuse to inflate payloads declaring more than this (guards against bombs).
MAX_UNCOMPRESSED_SIZE = 256 * 1024 * 1024
#: Level used by the Java and C++ clients.
ZSTD_LEVEL = 3

_local = threading.local()


def _zstd_compressor() -> zstandard.ZstdCompressor:
    comp = getattr(_local, "zc", None)
    if comp is None:
        comp = _local.zc = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return comp


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_local, "zd", None)
    if dec is None:
        dec = _local.zd = zstandard.ZstdDecompressor()
    return dec


def compress(kind: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress ``data`` with codec ``kind`` (a ``pb.CompressionType`` value)."""
    if kind == pb.NONE:
        return bytes(data)
    if kind == pb.LZ4:
        return bytes(lz4.block.compress(data, store_size=False))
    if kind == pb.ZLIB:
        return zlib.compress(data)
    if kind == pb.ZSTD:
        return _zstd_compressor().compress(data)
    if kind == pb.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(bytes(data)))
    raise CompressionError(f"unknown compression type {kind}")


def _inflate(kind: int, data: bytes, size: int) -> bytes:
    if kind == pb.LZ4:
        return bytes(lz4.block.decompress(data, uncompressed_size=size))
    if kind == pb.ZLIB:
        dec = zlib.decompressobj()
        # max_length=0 would mean "unbounded": ask for one byte so excess shows up
        out = dec.decompress(data, size or 1)
        if dec.unconsumed_tail or not dec.eof:
            raise CompressionError("zlib stream longer than the declared size or truncated")
        return out
    if kind == pb.ZSTD:
        declared = zstandard.frame_content_size(data)
        if declared not in (-1, size):
            raise CompressionError(f"zstd frame declares {declared} bytes, metadata says {size}")
        return _zstd_decompressor().decompress(data, max_output_size=size or 1)
    if kind == pb.SNAPPY:
        declared = _snappy_preamble(data)
        if declared != size:
            raise CompressionError(f"snappy block declares {declared} bytes, metadata says {size}")
        return bytes(cramjam.snappy.decompress_raw(data))
    raise CompressionError(f"unknown compression type {kind}")


def _snappy_preamble(data: bytes) -> int:
    """The uncompressed length a raw Snappy block starts with (a little-endian varint)."""
    try:
        return decode_varint(data, 0, limit=5)[0]
    except ValueError:
        raise CompressionError("snappy block without a valid length preamble") from None


def decompress(kind: int, data: bytes | bytearray | memoryview, uncompressed_size: int) -> bytes:
    """Inflate ``data`` and check it is exactly ``uncompressed_size`` bytes long.

    For ``NONE`` the data is returned as is: producers leave ``uncompressed_size`` unset
    (0) on uncompressed messages, so there is nothing to check against.
    """
    if kind == pb.NONE:
        return bytes(data)
    if not 0 <= uncompressed_size <= MAX_UNCOMPRESSED_SIZE:
        raise CompressionError(f"declared uncompressed size {uncompressed_size} out of range")
    try:
        out = _inflate(kind, bytes(data), uncompressed_size)
    except CompressionError:
        raise
    except Exception as exc:  # each codec has its own error types
        name = pb.CompressionType.Name(kind)
        raise CompressionError(f"cannot decompress {name} payload: {exc}") from None
    if len(out) != uncompressed_size:
        raise CompressionError(
            f"decompressed to {len(out)} bytes, metadata says {uncompressed_size}"
        )
    return out
