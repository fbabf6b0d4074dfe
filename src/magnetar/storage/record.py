"""On-disk framing of one entry: an 8-byte header (payload length, CRC32C) then the payload.

The CRC32C covers the payload and is seeded with the length, so a torn header, a torn
payload and a zero-filled tail all fail the check (an all-zero header is never valid).
"""

from __future__ import annotations

import mmap
import struct

import crc32c

HEADER = struct.Struct("<II")
HEADER_SIZE = HEADER.size
_SEED = 0x4D474E54  # any constant that makes crc(len=0, payload=b"") non-zero
#: Largest payload a record may declare; anything larger is treated as corruption.
MAX_RECORD = 1 << 30


def checksum(data: bytes | memoryview, length: int) -> int:
    """CRC32C of ``data`` seeded with its length."""
    return crc32c.crc32c(data, _SEED ^ length)


def encode_header(data: bytes) -> bytes:
    """The header that precedes ``data`` on disk."""
    n = len(data)
    return HEADER.pack(n, crc32c.crc32c(data, _SEED ^ n))


def scan(buf: bytes | memoryview | mmap.mmap, start: int, offsets: list[int]) -> int:
    """Walk valid records in ``buf`` from ``start``; append each record's end offset to
    ``offsets``. Returns the offset just past the last valid record (where a torn or
    corrupt tail, if any, begins)."""
    mv = memoryview(buf)
    size = len(mv)
    off = start
    unpack = HEADER.unpack_from
    while off + HEADER_SIZE <= size:
        n, crc = unpack(mv, off)
        end = off + HEADER_SIZE + n
        if n > MAX_RECORD or end > size:
            break
        if crc32c.crc32c(mv[off + HEADER_SIZE : end], _SEED ^ n) != crc:
            break
        offsets.append(end)
        off = end
    return off
