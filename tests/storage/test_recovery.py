"""Crash recovery: a torn or corrupt tail record is cut off, never exposed."""

from __future__ import annotations

import os
import shutil

import pytest

from magnetar.storage import ManagedLedgerFactory, Position, StorageConfig, record
from magnetar.storage.clean_stop import MARK

from .storage_testlib import append_all, append_parts, make_part, run

PAYLOADS = [b"first entry", b"second entry", b"third entry", b"the tail record!" * 3]
#: The same entries as payload parts, stored as part records (with the CRC the broker checked).
PARTS = [make_part(p) for p in PAYLOADS]


@pytest.fixture(scope="module", params=["seeded", "part"])
def kind(request):
    """Which kind of record the template's entries are (see `magnetar.storage.record`)."""
    return request.param


@pytest.fixture(scope="module")
def template(tmp_path_factory, kind):
    """A data dir holding one ledger with 4 entries, as left by a crash (no sidecar)."""
    root = tmp_path_factory.mktemp("tmpl")
    f = ManagedLedgerFactory(StorageConfig(root / "data"))
    ml = f.open("t")
    pos = run(append_parts(ml, PARTS) if kind == "part" else append_all(ml, PAYLOADS))
    seg = ml._segments[0]
    tail_start = seg.offsets[3]
    path = os.path.relpath(seg.path, root / "data")
    f.close()
    _as_after_a_crash(root / "data", os.path.join(root / "data", path))
    with open(os.path.join(root / "data", path), "rb") as fh:
        fh.seek(tail_start)
        word, _ = record.HEADER.unpack(fh.read(record.HEADER_SIZE))
    assert bool(word & record.PART_FLAG) == (kind == "part")
    return root / "data", path, tail_start, pos


def _as_after_a_crash(data_dir, seg_path):
    """Leave what a crash leaves after a clean close: no sidecar, no clean-stop mark."""
    for path in (seg_path[:-4] + ".idx", os.path.join(data_dir, MARK)):
        if os.path.exists(path):
            os.unlink(path)


def stored(kind):
    return [p for p, _ in PARTS] if kind == "part" else PAYLOADS


def _check_recovered(data_dir, seg_rel, cut_at, pos, n: int, kind: str = "seeded"):
    """Recovery kept the first ``n`` of the 4 entries, the file ends at ``cut_at`` when
    some were dropped, and the ledger goes on (a new segment) and reopens with them."""
    payloads = stored(kind)
    seg_path = os.path.join(data_dir, seg_rel)
    f = ManagedLedgerFactory(StorageConfig(data_dir))
    ml = f.open("t")
    assert ml.entry_count() == n
    assert [d for _, d in ml.read_entries(Position(-1, -1), 10)] == payloads[:n]
    assert ml.last_confirmed() == (pos[n - 1] if n else None)
    if n < 4:
        assert os.path.getsize(seg_path) == cut_at  # the torn bytes are gone
    new = run(append_parts(ml, [make_part(b"after recovery")]))[0]
    assert new.ledger_id > pos[0].ledger_id and new.entry_id == 0
    f.close()
    f = ManagedLedgerFactory(StorageConfig(data_dir))
    ml = f.open("t")
    assert [d for _, d in ml.read_entries(Position(-1, -1), 10)] == [
        *payloads[:n],
        make_part(b"after recovery")[0],
    ]
    f.close()


def test_torn_at_every_byte_of_the_tail_record(template, tmp_path, kind):
    data_dir, seg_rel, tail_start, pos = template
    with open(os.path.join(data_dir, seg_rel), "rb") as fh:
        full = fh.read()
    assert len(full) > tail_start
    for cut in range(tail_start, len(full) + 1):
        case = tmp_path / f"cut{cut}"
        shutil.copytree(data_dir, case)
        with open(case / seg_rel, "r+b") as fh:
            fh.truncate(cut)
        _check_recovered(case, seg_rel, tail_start, pos, 4 if cut == len(full) else 3, kind)
        shutil.rmtree(case)


#: Offsets in a record (8-byte header, then the payload) to corrupt: in the header's
#: length word, its flag bit, its CRC; in a part record's payload the magic, the embedded
#: CRC and what that CRC covers (in a seeded record, all of it is payload under its CRC).
CORRUPTIONS = {
    "length": (1, 0x40),
    "flag": (3, 0x80),
    "header crc": (5, 0x40),
    "magic": (8, 0x40),
    "magic 2nd byte": (9, 0x01),
    "embedded crc": (11, 0x40),
    "payload": (16, 0x40),
}


def _flip(path, off, mask):
    with open(path, "r+b") as fh:
        fh.seek(off)
        b = fh.read(1)
        fh.seek(off)
        fh.write(bytes([b[0] ^ mask]))


@pytest.mark.parametrize("where", [*CORRUPTIONS, "last byte"])
def test_corrupt_tail_record_is_dropped(template, tmp_path, where, kind):
    data_dir, seg_rel, tail_start, pos = template
    case = tmp_path / "case"
    shutil.copytree(data_dir, case)
    size = os.path.getsize(case / seg_rel)
    off, mask = (size - 1 - tail_start, 0x40) if where == "last byte" else CORRUPTIONS[where]
    _flip(case / seg_rel, tail_start + off, mask)
    _check_recovered(case, seg_rel, tail_start, pos, 3, kind)


@pytest.mark.parametrize("where", ["payload", "embedded crc", "magic"])
def test_corrupt_record_cuts_the_segment_there(template, tmp_path, where, kind):
    """A corrupt record before the tail: recovery keeps what precedes it and cuts the
    file at its start, as for a torn tail (what follows cannot be trusted to be framed)."""
    data_dir, seg_rel, _, pos = template
    case = tmp_path / "case"
    shutil.copytree(data_dir, case)
    second = 16 + record.HEADER_SIZE + len(stored(kind)[0])  # file header, first record
    off, mask = CORRUPTIONS[where]
    _flip(case / seg_rel, second + off, mask)
    _check_recovered(case, seg_rel, second, pos, 1, kind)


def test_zero_filled_tail_is_not_an_entry(template, tmp_path, kind):
    data_dir, seg_rel, tail_start, pos = template
    case = tmp_path / "case"
    shutil.copytree(data_dir, case)
    with open(case / seg_rel, "r+b") as fh:
        fh.truncate(tail_start)
        fh.seek(tail_start)
        fh.write(b"\0" * 4096)
    _check_recovered(case, seg_rel, tail_start, pos, 3, kind)


@pytest.mark.parametrize("landed", [4, 8, 8 + 6])
def test_tail_record_that_landed_in_part_before_zeros_is_dropped(template, tmp_path, landed, kind):
    """A crash with the reserved space past the end: the length word only, the header, or
    the header and a part's magic and CRC reached the disk, and zeros follow."""
    data_dir, seg_rel, tail_start, pos = template
    case = tmp_path / "case"
    shutil.copytree(data_dir, case)
    size = os.path.getsize(case / seg_rel)
    with open(case / seg_rel, "r+b") as fh:
        fh.seek(tail_start + landed)
        fh.write(bytes(size - tail_start - landed + 4096))
    _check_recovered(case, seg_rel, tail_start, pos, 3, kind)


def test_segment_with_torn_file_header_is_discarded(tmp_path):
    data = tmp_path / "data"
    f = ManagedLedgerFactory(StorageConfig(data))
    ml = f.open("t")
    pos = run(append_all(ml, [b"a"]))[0]
    path = ml._segments[0].path
    f.close()
    _as_after_a_crash(data, path)
    with open(path, "r+b") as fh:
        fh.truncate(5)
    f = ManagedLedgerFactory(StorageConfig(data))
    ml = f.open("t")
    assert ml.entry_count() == 0 and ml.segment_ids() == []
    assert run(append_all(ml, [b"b"]))[0].ledger_id > pos.ledger_id
    f.close()


def test_space_reserved_ahead_is_cut_quietly_after_a_crash(tmp_path, caplog):
    """Segments reserve space ahead of their writes; a crash leaves that tail as zeros.
    Recovery keeps every entry, cuts the reserve without calling it corruption, and a
    clean close leaves no reserve behind."""
    data = tmp_path / "data"
    f = ManagedLedgerFactory(StorageConfig(data))
    ml = f.open("t")
    padding = [b"p" * 1000] * 70  # past the size from which a segment reserves space
    pos = run(append_all(ml, padding + PAYLOADS))
    seg = ml._segments[0]
    if seg.allocated == 0:
        pytest.skip("this file system does not reserve space")
    assert os.path.getsize(seg.path) > seg.end  # reserved past the last record
    crashed = tmp_path / "crashed"
    shutil.copytree(data, crashed)  # the files as a kill -9 would leave them
    f.close()
    assert os.path.getsize(seg.path) == seg.end  # a clean close gives the reserve back

    caplog.set_level("DEBUG", logger="magnetar.storage")
    f = ManagedLedgerFactory(StorageConfig(crashed))
    ml = f.open("t")
    assert [p for p, _ in ml.read_entries(Position(-1, -1), 100)] == pos
    assert [d for _, d in ml.read_entries(Position(-1, -1), 100)] == padding + PAYLOADS
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert os.path.getsize(os.path.join(crashed, os.path.relpath(seg.path, data))) == seg.end
    f.close()


def test_small_segments_reserve_nothing(tmp_path):
    """Quiet topics (10,000 of them) cost no disk space beyond their records."""
    f = ManagedLedgerFactory(StorageConfig(tmp_path / "data"))
    ml = f.open("t")
    run(append_all(ml, PAYLOADS))
    seg = ml._segments[0]
    assert seg.allocated == 0 and os.path.getsize(seg.path) == seg.end
    f.close()
