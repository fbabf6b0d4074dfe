"""The record format (`magnetar.storage.record`): seeded and part records, what makes each
valid, and that a torn, zero-filled or corrupted record of either kind fails the check."""

from __future__ import annotations

import errno
import os
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.protocol import frames, pb
from magnetar.storage import record

from .storage_testlib import make_part

#: Records start after a segment's 16-byte file header; scan takes any start.
START = 16


def old_style(data: bytes) -> bytes:
    """A record as versions before the part flag wrote it (a frozen copy of that format)."""
    n = len(data)
    return struct.pack("<II", n, crc32c.crc32c(data, 0x4D474E54 ^ n)) + data


def part_record(part: bytes, crc: int) -> bytes:
    return record.encode_part_header(len(part), crc) + part


def check(rec: bytes) -> bool:
    word, crc = record.HEADER.unpack_from(rec)
    return record.verify(word, crc, rec[record.HEADER_SIZE :])


def flipped(data: bytes, at: int, mask: int = 0x01) -> bytes:
    out = bytearray(data)
    out[at] ^= mask
    return bytes(out)


def test_part_magic_is_the_protocols() -> None:
    assert struct.pack(">H", frames.MAGIC_CRC32C) == record.PART_MAGIC


def test_flag_is_above_every_valid_length() -> None:
    assert record.MAX_RECORD < record.PART_FLAG < 2**32
    assert record.MAX_RECORD & ~record.LENGTH_MASK == 0
    assert record.PART_FLAG & record.LENGTH_MASK == 0


def test_seeded_records_are_the_format_older_versions_wrote() -> None:
    for data in (b"", b"x", b"some entry" * 50):
        assert record.encode_header(data) + data == old_style(data)
        assert check(old_style(data))


def test_a_checked_payload_part_makes_a_valid_part_record() -> None:
    part = frames.build_payload_part(
        pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1), b"payload"
    )
    crc = crc32c.crc32c(part[6:])
    assert frames.verify_checksum(part)
    rec = part_record(part, crc)
    assert check(rec)
    word, hcrc = record.HEADER.unpack_from(rec)
    assert word == len(part) | record.PART_FLAG and hcrc == crc
    assert check(old_style(part))  # the same bytes as a seeded record are valid too


def test_each_rule_of_a_part_record_matters() -> None:
    part, crc = make_part(b"\x00\x00\x00\x03metadata and payload")
    assert check(part_record(part, crc))
    # bytes 6.. are covered by the CRC
    assert not check(part_record(flipped(part, 12), crc))
    # bytes 2-5 (the producer's CRC) must equal the header's CRC
    for i in range(2, 6):
        assert not check(part_record(flipped(part, i), crc))
    # the header's CRC must equal both
    assert not check(part_record(part, crc ^ 0x10000))
    # the magic is compared, though no CRC covers it
    for i in (0, 1):
        assert not check(part_record(flipped(part, i), crc))
    # the length word must match the payload
    word = len(part) | record.PART_FLAG
    assert not record.verify(word + 1, crc, part)
    assert not record.verify(word - 1, crc, part)
    assert not record.verify(word - 1, crc, part[:-1])  # the CRC no longer matches
    # the flag, flipped either way, makes the other rule fail
    assert not record.verify(len(part), crc, part)
    assert not check(flipped(old_style(part), 3, 0x80))


def test_a_part_record_is_at_least_magic_and_crc() -> None:
    assert not check(part_record(b"\x0e\x01\x00\x00\x00", 0))
    assert not check(part_record(b"\x0e\x01", 0))
    assert not check(part_record(b"", 0))
    assert check(part_record(b"\x0e\x01\x00\x00\x00\x00", 0))  # crc32c(b"") == 0


def test_zero_headers_are_never_valid() -> None:
    for n in range(64):
        assert not record.verify(0, 0, bytes(n))
        # a header whose length word landed and whose CRC did not, before zeros
        assert not record.verify(n | record.PART_FLAG, 0, bytes(n))
        assert not record.verify(n, 0, bytes(n))


# --------------------------------------------------------------------------- scan


Entries = list[tuple[bool, bytes]]
entries_st = st.lists(st.tuples(st.booleans(), st.binary(max_size=80)), min_size=1, max_size=5)


def build(entries: Entries) -> tuple[bytes, list[int]]:
    """A segment's records (after START bytes of file header) and each record's end."""
    buf = bytearray(b"H" * START)
    ends = []
    for is_part, body in entries:
        if is_part:
            buf += part_record(*make_part(body))
        else:
            buf += record.encode_header(body) + body
        ends.append(len(buf))
    return bytes(buf), ends


def scan(buf: bytes) -> tuple[int, list[int]]:
    offsets: list[int] = []
    return record.scan(buf, START, offsets), offsets


@given(entries_st)
def test_scan_finds_every_record_of_both_kinds(entries: Entries) -> None:
    buf, ends = build(entries)
    assert scan(buf) == (len(buf), ends)


def _stops_before_last_unless_intact(buf: bytes, ends: list[int], damaged: bytes) -> None:
    """Scanning ``damaged`` (``buf`` changed at or after its last record) keeps every
    record before the last, and the last only if its bytes are exactly as written."""
    last_start = ends[-2] if len(ends) > 1 else START
    good, offsets = scan(damaged)
    assert offsets[: len(ends) - 1] == ends[:-1]
    if good == last_start:
        assert offsets == ends[:-1]
    else:
        assert (good, offsets) == (ends[-1], ends)
        assert damaged[last_start:good] == buf[last_start:good]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(entries_st, st.data())
def test_scan_stops_at_a_torn_or_zero_filled_last_record(entries: Entries, data: st.DataObject) -> None:
    buf, ends = build(entries)
    last_start = ends[-2] if len(ends) > 1 else START
    cut = data.draw(st.integers(last_start, len(buf) - 1), label="cut")
    zeros = data.draw(st.sampled_from([0, len(buf) - cut, 4096]), label="zeros")
    damaged = buf[:cut] + bytes(zeros)
    _stops_before_last_unless_intact(buf, ends, damaged)
    if zeros == 0:
        assert scan(damaged) == (last_start, ends[:-1])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(entries_st, st.data())
def test_scan_stops_at_a_corrupt_last_record(entries: Entries, data: st.DataObject) -> None:
    buf, ends = build(entries)
    last_start = ends[-2] if len(ends) > 1 else START
    at = data.draw(st.integers(last_start, len(buf) - 1), label="at")
    mask = data.draw(st.integers(1, 255), label="mask")
    assert scan(flipped(buf, at, mask)) == (last_start, ends[:-1])


def test_every_single_bit_flip_of_a_part_record_is_caught() -> None:
    buf, ends = build([(False, b"before"), (True, b"\x00\x00\x00\x02mdpayload")])
    for at in range(ends[0], len(buf)):
        for bit in range(8):
            assert scan(flipped(buf, at, 1 << bit)) == (ends[0], ends[:1]), (at, bit)


def test_scan_file_reads_where_the_file_system_cannot_map(tmp_path, monkeypatch) -> None:
    """A file system without mmap (ENODEV: GlusterFS mounted ``direct-io-mode=enable``) is
    scanned from a read of the file: the same records, the same end; other errors raise."""
    body = b"\0" * START + b"".join(record.encode_header(p) + p for p in (b"a", b"bc", b"d" * 300))
    path = tmp_path / "seg"
    path.write_bytes(body + b"\x07torn")
    with path.open("rb") as f:
        mapped: list[int] = []
        end = record.scan_file(f, len(body) + 5, START, mapped)

    def refuse(errno_: int):
        def no_mmap(*args: object, **kwargs: object) -> object:
            raise OSError(errno_, os.strerror(errno_))
        return no_mmap

    monkeypatch.setattr(record.mmap, "mmap", refuse(errno.ENODEV))
    with path.open("rb") as f:
        f.read(3)  # the fallback reads from the start whatever the file's offset
        read: list[int] = []
        assert record.scan_file(f, len(body) + 5, START, read) == end == len(body)
    assert read == mapped and len(read) == 3
    monkeypatch.setattr(record.mmap, "mmap", refuse(errno.EIO))
    with path.open("rb") as f, pytest.raises(OSError):
        record.scan_file(f, len(body) + 5, START, [])
