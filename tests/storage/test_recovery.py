"""Crash recovery: a torn or corrupt tail record is cut off, never exposed."""

from __future__ import annotations

import os
import shutil

import pytest

from magnetar.storage import ManagedLedgerFactory, Position, StorageConfig

from .storage_testlib import append_all, run

PAYLOADS = [b"first entry", b"second entry", b"third entry", b"the tail record!" * 3]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A data dir holding one ledger with 4 entries, as left by a crash (no sidecar)."""
    root = tmp_path_factory.mktemp("tmpl")
    f = ManagedLedgerFactory(StorageConfig(root / "data"))
    ml = f.open("t")
    pos = run(append_all(ml, PAYLOADS))
    seg = ml._segments[0]
    tail_start = seg.offsets[3]
    path = os.path.relpath(seg.path, root / "data")
    f.close()
    os.unlink(os.path.join(root / "data", path)[:-4] + ".idx")
    return root / "data", path, tail_start, pos


def _check_recovered(data_dir, seg_rel, tail_start, pos, expect_tail: bool):
    seg_path = os.path.join(data_dir, seg_rel)
    f = ManagedLedgerFactory(StorageConfig(data_dir))
    ml = f.open("t")
    n = 4 if expect_tail else 3
    assert ml.entry_count() == n
    assert [d for _, d in ml.read_entries(Position(-1, -1), 10)] == PAYLOADS[:n]
    assert ml.last_confirmed() == pos[n - 1]
    if not expect_tail:
        assert os.path.getsize(seg_path) == tail_start  # the torn bytes are gone
    new = run(append_all(ml, [b"after recovery"]))[0]
    assert new.ledger_id > pos[0].ledger_id and new.entry_id == 0
    f.close()
    f = ManagedLedgerFactory(StorageConfig(data_dir))
    ml = f.open("t")
    assert [d for _, d in ml.read_entries(Position(-1, -1), 10)] == [
        *PAYLOADS[:n],
        b"after recovery",
    ]
    f.close()


def test_torn_at_every_byte_of_the_tail_record(template, tmp_path):
    data_dir, seg_rel, tail_start, pos = template
    with open(os.path.join(data_dir, seg_rel), "rb") as fh:
        full = fh.read()
    assert len(full) > tail_start
    for cut in range(tail_start, len(full) + 1):
        case = tmp_path / f"cut{cut}"
        shutil.copytree(data_dir, case)
        with open(case / seg_rel, "r+b") as fh:
            fh.truncate(cut)
        _check_recovered(case, seg_rel, tail_start, pos, expect_tail=cut == len(full))
        shutil.rmtree(case)


@pytest.mark.parametrize("where", ["header", "payload", "last byte"])
def test_corrupt_tail_record_is_dropped(template, tmp_path, where):
    data_dir, seg_rel, tail_start, pos = template
    case = tmp_path / "case"
    shutil.copytree(data_dir, case)
    size = os.path.getsize(case / seg_rel)
    off = {"header": tail_start + 1, "payload": tail_start + 12, "last byte": size - 1}[where]
    with open(case / seg_rel, "r+b") as fh:
        fh.seek(off)
        b = fh.read(1)
        fh.seek(off)
        fh.write(bytes([b[0] ^ 0x40]))
    _check_recovered(case, seg_rel, tail_start, pos, expect_tail=False)


def test_zero_filled_tail_is_not_an_entry(template, tmp_path):
    data_dir, seg_rel, tail_start, pos = template
    case = tmp_path / "case"
    shutil.copytree(data_dir, case)
    with open(case / seg_rel, "r+b") as fh:
        fh.truncate(tail_start)
        fh.seek(tail_start)
        fh.write(b"\0" * 4096)
    _check_recovered(case, seg_rel, tail_start, pos, expect_tail=False)


def test_segment_with_torn_file_header_is_discarded(tmp_path):
    data = tmp_path / "data"
    f = ManagedLedgerFactory(StorageConfig(data))
    ml = f.open("t")
    pos = run(append_all(ml, [b"a"]))[0]
    path = ml._segments[0].path
    f.close()
    os.unlink(path[:-4] + ".idx")
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
