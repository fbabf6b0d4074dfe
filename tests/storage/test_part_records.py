"""`ManagedLedger.append(data, part_crc)`: a payload part whose CRC the caller checked is
stored as a *part* record carrying that CRC (nothing computed again); seeded records,
including those of data dirs written before part records existed, read alongside."""

from __future__ import annotations

import asyncio
import os
import shutil
import struct

import crc32c
import pytest

from magnetar.storage import Position, StorageError, record
from magnetar.storage.ledger import append as ledger_mod
from magnetar.storage.segment import FILE_HEADER, SEG_MAGIC

from .storage_testlib import append_all, append_parts, make_part, run


def old_style(data: bytes) -> bytes:
    """A record as versions before the part flag wrote it (a frozen copy of that format)."""
    n = len(data)
    return struct.pack("<II", n, crc32c.crc32c(data, 0x4D474E54 ^ n)) + data


def headers(path: str) -> list[tuple[int, int]]:
    """The (length word, CRC) of every record in a segment file."""
    with open(path, "rb") as fh:
        buf = fh.read()
    out = []
    off = FILE_HEADER.size
    while off < len(buf):
        word, crc = record.HEADER.unpack_from(buf, off)
        out.append((word, crc))
        off += record.HEADER_SIZE + (word & record.LENGTH_MASK)
    return out


def mixed(n: int) -> list[tuple[bytes, int | None]]:
    """Entries alternating payload parts (with their CRC) and plain entries (None)."""
    out: list[tuple[bytes, int | None]] = []
    for i in range(n):
        if i % 2:
            out.append((b"plain entry %d" % i, None))
        else:
            out.append(make_part(b"\x00\x00\x00\x02md part %d" % i))
    return out


async def append_mixed(ledger, entries):
    return list(await asyncio.gather(*(ledger.append(d, c) for d, c in entries)))


@pytest.mark.parametrize("policy", ["always", "group", "never"])
def test_append_with_part_crc_writes_part_records(make_factory, policy):
    f = make_factory(fsync=policy, read_cache_bytes=0)
    ml = f.open("t")
    entries = mixed(6)
    pos = run(append_mixed(ml, entries))
    seg = ml._segments[0]
    ml.flush()
    expected = [
        record.HEADER.unpack(
            record.encode_header(d) if c is None else record.encode_part_header(len(d), c)
        )
        for d, c in entries
    ]
    assert headers(seg.path) == expected
    assert all(w & record.PART_FLAG for w, _ in expected[::2])
    assert not any(w & record.PART_FLAG for w, _ in expected[1::2])
    data = [d for d, _ in entries]
    assert [d for _, d in ml.read_entries(pos[0], 100)] == data  # from disk: no cache

    async def cold():
        return [bytes(v) for _, v in await ml.read_cold(pos[0], 100)]

    assert run(cold()) == data


def test_append_computes_no_crc_for_a_part(make_factory, monkeypatch):
    f = make_factory()
    ml = f.open("t")
    calls = []
    real = ledger_mod._crc

    def counting(*args):
        calls.append(len(args[0]))
        return real(*args)

    monkeypatch.setattr(ledger_mod, "_crc", counting)
    part, crc = make_part(b"x" * 1000)
    run(append_parts(ml, [(part, crc)] * 3))
    assert calls == []
    run(append_all(ml, [b"plain"]))
    assert calls == [5]


def test_part_records_survive_a_crash_and_reopen(make_factory, tmp_path):
    """Mixed records in one segment, left without a sidecar as by kill -9: the recovery
    scan keeps them all, and a clean reopen reads them from the sidecar's index."""
    f = make_factory()
    ml = f.open("t")
    entries = mixed(9)
    pos = run(append_mixed(ml, entries))
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "data", crashed)  # as kill -9 leaves it: no sidecar
    assert not list(crashed.rglob("*.idx"))
    f.close()
    for data_dir in (crashed, tmp_path / "data"):
        ml = make_factory(data_dir=data_dir, read_cache_bytes=0).open("t")
        got = ml.read_entries(Position(-1, -1), 100)
        assert got == [(p, d) for p, (d, _) in zip(pos, entries, strict=True)]


def test_data_dir_of_older_versions_stays_readable(make_factory, tmp_path):
    """A segment of seeded records as older versions wrote them (no sidecar, so it is
    scanned), then part records and seeded ones appended after reopening: all read, also
    after a crash that leaves no sidecar at all."""
    f = make_factory()
    ml = f.open("t")
    old = [b"old entry %d" % i for i in range(5)] + [make_part(b"old part")[0]]
    old_pos = run(append_all(ml, old))
    seg_path = ml._segments[0].path
    f.close()
    with open(seg_path, "rb") as fh:
        written = fh.read()
    lid = old_pos[0].ledger_id
    frozen = FILE_HEADER.pack(SEG_MAGIC, lid) + b"".join(map(old_style, old))
    assert written == frozen  # what append without part_crc writes is the old format
    with open(seg_path, "wb") as fh:
        fh.write(frozen)
    if os.path.exists(seg_path[:-4] + ".idx"):  # (a clean stop writes none for a small one)
        os.unlink(seg_path[:-4] + ".idx")

    ml = make_factory(read_cache_bytes=0).open("t")
    assert [d for _, d in ml.read_entries(Position(-1, -1), 100)] == old
    new = mixed(6)
    new_pos = run(append_mixed(ml, new))
    assert new_pos[0].ledger_id > lid
    everything = [*zip(old_pos, old, strict=True), *((p, d) for p, (d, _) in zip(new_pos, new, strict=True))]
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "data", crashed)
    for idx in crashed.rglob("*.idx"):
        idx.unlink()
    for data_dir in (crashed, tmp_path / "data"):
        ml = make_factory(data_dir=data_dir, read_cache_bytes=0).open("t")
        assert ml.read_entries(Position(-1, -1), 100) == everything

        async def cold(ml=ml):
            out = []
            start = Position(-1, -1)
            while chunk := await ml.read_cold(start, 100):
                out += [(p, bytes(v)) for p, v in chunk]
                start = ml.next_position(chunk[-1][0])
                if start is None:
                    break
            return out

        assert run(cold()) == everything


#: Offsets of a part record's payload to corrupt (the header is 8 bytes before them).
WHERE = {"payload": 10, "embedded crc": 3, "magic": 0, "header crc": -3}


@pytest.mark.parametrize("where", WHERE)
def test_corrupt_part_record_is_not_read(make_factory, where):
    """Cold reads (one pread per run, on the loop or on a reader thread) check part
    records by the part rule: a read stops before a corrupt one, raising when it is first."""
    f = make_factory(read_cache_bytes=0)
    ml = f.open("t")
    parts = [make_part(b"\x00\x00\x00\x02md entry %d" % i) for i in range(5)]
    pos = run(append_parts(ml, parts))
    data = [p for p, _ in parts]
    seg = ml._segments[0]
    start, _ = seg.entry_span(2)
    with open(seg.path, "r+b") as fh:
        fh.seek(start + WHERE[where])
        b = fh.read(1)
        fh.seek(start + WHERE[where])
        fh.write(bytes([b[0] ^ 0x20]))
    assert ml.read_entries(pos[0], 100) == list(zip(pos[:2], data[:2], strict=True))
    with pytest.raises(StorageError):
        ml.read(pos[2])
    assert ml.read(pos[3]) == data[3]

    async def cold(p):
        return [(q, bytes(v)) for q, v in await ml.read_cold(p, 100)]

    assert run(cold(pos[0])) == list(zip(pos[:2], data[:2], strict=True))
    with pytest.raises(StorageError):
        run(cold(pos[2]))
    assert run(cold(pos[3])) == list(zip(pos[3:], data[3:], strict=True))

    async def find():  # the search's first probe is the middle entry: the corrupt one
        return await ml.find_position_async(lambda d: True)

    with pytest.raises(StorageError):
        run(find())
