"""On-disk framing of one entry: an 8-byte header (length word, CRC32C) then the payload.

Both header fields are little-endian u32. The low 31 bits of the length word are the
payload length (at most ``MAX_RECORD``); its top bit, ``PART_FLAG``, says which of two
rules the CRC follows. `verify` is the one place that applies them (the recovery scan
`scan` and every read of a record go through it), `encode_header` and
`encode_part_header` the one statement of what a writer puts there (the ledger's
`append` inlines the same two expressions, as it is measured per call).

*Seeded* record (flag clear; the only kind before the flag existed, so older data dirs
read as they are): the CRC is the CRC32C of the whole payload, seeded with
``SEED ^ length``. Seeding with the length means a torn header, a torn payload and a
zero-filled tail all fail the check (an all-zero header is never valid:
``crc32c(b"", SEED) != 0``).

*Part* record (flag set): the payload is a Pulsar payload part whose checksum the writer
verified on receipt: bytes 0-1 are the magic ``PART_MAGIC`` (0x0e 0x01), bytes 2-5 the
producer's CRC32C of bytes 6.. (big-endian), and the header's CRC is that same value. The
broker then computes one CRC32C per send (its check of what the producer sent), not a
second one for the record. Such a record is valid when its length is at least
``PART_MIN`` (6), ``crc32c(payload[6:])`` (seed 0) equals the header's CRC, bytes 2-5
hold the header's CRC and bytes 0-1 the magic, so no byte is left unchecked:

- bytes 6.. are covered by the CRC;
- bytes 2-5 are compared with the header's CRC, which is compared with the CRC of
  bytes 6..: a flip in either fails;
- a flipped magic byte fails the magic comparison here, on recovery and on every read
  (unchecked, it would go out to consumers, which take a part without the magic for one
  without a checksum and misread it; flipped to 0x0e02 the broker itself would take the
  entry for one that starts with broker entry metadata);
- a wrong length (a flip in its low bits) moves the end of the CRC's range or of the
  record, and a flipped flag bit makes the record be read by the other rule, whose CRC
  differs: both fail but for a 2**-32 chance, as with the seeded rule;
- an all-zero or zero-filled header has the flag clear and fails the seeded rule; a
  header whose CRC half is torn (zeros) fails unless the payload's CRC is zero; a payload
  torn in its first 6 bytes (left as zeros) fails the magic comparison, one torn later
  fails the CRC.

A length word with the flag set is above ``MAX_RECORD``, which versions before the flag
take for corruption (their reads fail, and a rescan cuts the segment at the first part
record): a data dir holding part records must not go back to them.

Storage imports nothing from ``magnetar.protocol``: the magic is restated here
(``tests/storage/test_record.py`` checks it against the protocol's).
"""

from __future__ import annotations

import errno
import mmap
import struct
from typing import BinaryIO

import crc32c

HEADER = struct.Struct("<II")
HEADER_SIZE = HEADER.size
SEED = 0x4D474E54  # any constant that makes crc(len=0, payload=b"") non-zero
#: Largest payload a record may declare; anything larger is treated as corruption.
MAX_RECORD = 1 << 30
#: Set in a record's length word: a *part* record (see above). Above ``MAX_RECORD``, so
#: no record written before the flag existed has it.
PART_FLAG = 1 << 31
#: The length bits of a length word.
LENGTH_MASK = PART_FLAG - 1
#: The first two bytes of a part record's payload (Pulsar's payload-part magic 0x0e01).
PART_MAGIC = b"\x0e\x01"
#: Shortest payload of a part record: magic and CRC.
PART_MIN = 6

_crc = crc32c.crc32c
_be32 = struct.Struct(">I").unpack_from
_MAGIC0, _MAGIC1 = PART_MAGIC


def verify(word: int, crc: int, payload: bytes | memoryview | mmap.mmap) -> bool:
    """True when a record whose header is (``word``, ``crc``) holds exactly ``payload``
    (the bytes between its header and the next record): the length and the CRC agree with
    it, by the seeded or the part rule as the flag says. The one place of the rule."""
    if word & PART_FLAG:
        n = len(payload)
        return (
            (word ^ PART_FLAG) == n
            and n >= PART_MIN
            and payload[0] == _MAGIC0
            and payload[1] == _MAGIC1
            and _be32(payload, 2)[0] == crc
            and _crc(memoryview(payload)[PART_MIN:]) == crc
        )
    return bool(word == len(payload) and _crc(payload, SEED ^ word) == crc)


def encode_header(data: bytes | memoryview) -> bytes:
    """The header of a seeded record holding ``data``."""
    n = len(data)
    return HEADER.pack(n, _crc(data, SEED ^ n))


def encode_part_header(length: int, part_crc: int) -> bytes:
    """The header of a part record: ``length`` bytes of a payload part whose CRC32C of
    bytes 6.. (also carried in bytes 2-5) is ``part_crc``. The caller has checked that."""
    return HEADER.pack(length | PART_FLAG, part_crc)


def scan(buf: bytes | memoryview | mmap.mmap, start: int, offsets: list[int]) -> int:
    """Walk valid records in ``buf`` from ``start``; append each record's end offset to
    ``offsets``. Returns the offset just past the last valid record (where a torn or
    corrupt tail, if any, begins)."""
    mv = memoryview(buf)
    size = len(mv)
    off = start
    unpack = HEADER.unpack_from
    while off + HEADER_SIZE <= size:
        word, crc = unpack(mv, off)
        n = word & LENGTH_MASK
        end = off + HEADER_SIZE + n
        if n > MAX_RECORD or end > size:
            break
        if not verify(word, crc, mv[off + HEADER_SIZE : end]):
            break
        offsets.append(end)
        off = end
    return off


def scan_file(f: BinaryIO, size: int, start: int, offsets: list[int]) -> int:
    """`scan` over the first ``size`` bytes of an open file, mapped; read into memory where
    the file system cannot map files (ENODEV: a FUSE mount with direct I/O, as GlusterFS
    mounted ``direct-io-mode=enable``)."""
    try:
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
            return scan(mm, start, offsets)
    except OSError as exc:
        if exc.errno != errno.ENODEV:
            raise
    f.seek(0)
    return scan(f.read(size), start, offsets)
