"""ManagedLedger.cached_entry and read_positions_cold: the read cache alone, and reads of
arbitrary positions on the reader threads (what a dispatcher's replay, a batch ack's entry
count and GetLastMessageId use so that a cache miss never reads the disk on the loop)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from magnetar.storage import (
    CorruptEntryError,
    EntryNotFoundError,
    Position,
    PositionsRead,
    SegmentFileMissingError,
)
from magnetar.storage.ledger import reads as ledger_mod
from magnetar.storage.ledger.segment_files import remove_segment_files

from .storage_testlib import append_all, run


def payloads(n: int, size: int = 50) -> list[bytes]:
    return [(b"%08d" % i).ljust(size, b".") for i in range(n)]


def read(ml: Any, positions: list[Position], max_bytes: int | None = None) -> PositionsRead:
    async def go() -> PositionsRead:
        return await ml.read_positions_cold(positions, max_bytes)

    return run(go())


def read_cold(ml: Any, start: Position, count: int) -> list[tuple[Position, Any]]:
    async def go() -> list[tuple[Position, Any]]:
        return await ml.read_cold(start, count)

    return run(go())


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int, str]]:
    """Every `read_span` call of the ledger module: (ledger id, first entry, records,
    thread name)."""
    calls: list[tuple[int, int, int, str]] = []
    real = ledger_mod.read_span

    def counted(span: Any, views: bool = False) -> Any:
        calls.append((span.ledger_id, span.first, len(span.offsets) - 1,
                      threading.current_thread().name))
        return real(span, views)

    monkeypatch.setattr(ledger_mod, "read_span", counted)
    return calls


def test_cached_entry_never_reads_the_disk(make_factory: Any) -> None:
    f = make_factory(segment_max_entries=6, read_cache_bytes=300)
    ml = f.open("t")
    data = payloads(10)
    pos = run(append_all(ml, data))
    assert ml.cached_entry(pos[-1]) == data[-1]  # the newest stay in the cache
    assert ml.cached_entry(pos[0]) is None  # evicted: a miss, not a read
    assert ml.cached_entry(Position(pos[-1][0], pos[-1][1] + 1)) is None  # no such entry
    assert ml.cached_entry(Position(pos[-1][0] + 50, 0)) is None


def test_read_positions_cold_reads_each_run_with_one_pread_on_a_reader_thread(
    make_factory: Any, spans: list[tuple[int, int, int, str]],
) -> None:
    f = make_factory(segment_max_entries=6, read_cache_bytes=0)
    ml = f.open("t")
    data = payloads(12)
    pos = run(append_all(ml, data))
    wanted = [pos[1], pos[2], pos[3], pos[5], pos[6], pos[7], pos[11]]
    got = read(ml, wanted)
    assert got.failed == {}
    assert [(p, bytes(v)) for p, v in got.entries] == [(p, data[pos.index(p)]) for p in wanted]
    assert all(isinstance(v, memoryview) and v.readonly for _, v in got.entries)
    # runs: 1-3 and 5 in the first segment, 6-7 (ids 0-1) and 11 (id 5) in the second
    assert [(lid, first, n) for lid, first, n, _ in spans] == [
        (pos[1][0], 1, 3), (pos[5][0], 5, 1), (pos[6][0], 0, 2), (pos[11][0], 5, 1)]
    assert all(name.startswith("magnetar-read") for *_, name in spans)


def test_read_positions_cold_reports_what_it_cannot_read(make_factory: Any) -> None:
    f = make_factory(segment_max_entries=6, read_cache_bytes=0)
    ml = f.open("t")
    data = payloads(12)
    pos = run(append_all(ml, data))
    lid = pos[0][0]
    missing = [Position(lid, 6), Position(lid + 99, 0)]  # past the segment, no segment
    seg = ml._segments[0]
    start, _ = seg.entry_span(2)
    with open(seg.path, "r+b") as fh:  # entry 2 fails its checksum
        fh.seek(start + 3)
        fh.write(b"X")
    got = read(ml, [pos[1], pos[2], pos[3], missing[0], missing[1], pos[7]])
    assert [(p, bytes(v)) for p, v in got.entries] == [
        (pos[1], data[1]), (pos[3], data[3]), (pos[7], data[7])]  # the rest of the run too
    assert set(got.failed) == {pos[2], *missing}
    assert isinstance(got.failed[pos[2]], CorruptEntryError)
    assert all(isinstance(got.failed[p], EntryNotFoundError) for p in missing)



def test_a_segment_gone_is_trimmed_or_missing(
    make_factory: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A segment file that is not there when its run is read: the segment trimmed while
    the read was under way reads as `EntryNotFoundError`; the file of a segment that is
    still the ledger's (a mount not there, a file removed by hand) as
    `SegmentFileMissingError`, an I/O error (``OSError``) its readers try again and a
    `StorageError`, and read again once it is back."""
    f = make_factory(segment_max_entries=6, read_cache_bytes=0)
    ml = f.open("t")
    data = payloads(12)
    pos = run(append_all(ml, data))
    seg = ml._segments[0]
    os.rename(seg.path, seg.path + ".away")
    got = read(ml, [pos[0], pos[1], pos[6]])
    assert [p for p, _ in got.entries] == [pos[6]]
    assert set(got.failed) == {pos[0], pos[1]}
    assert all(isinstance(e, SegmentFileMissingError) and isinstance(e, OSError)
               for e in got.failed.values())
    with pytest.raises(SegmentFileMissingError, match="missing"):
        read_cold(ml, pos[0], 3)
    os.rename(seg.path + ".away", seg.path)
    assert [bytes(v) for _, v in read(ml, [pos[0], pos[1]]).entries] == data[:2]
    assert [bytes(v) for _, v in read_cold(ml, pos[0], 3)] == data[:3]

    real = ledger_mod.read_span

    def trimmed_meanwhile(span: Any, views: bool = False) -> Any:
        if span.ledger_id == seg.ledger_id:  # the loop trims it as the thread reads
            ml._by_id.pop(seg.ledger_id, None)
            if os.path.exists(seg.path):
                os.rename(seg.path, seg.path + ".trimmed")
        return real(span, views)

    monkeypatch.setattr(ledger_mod, "read_span", trimmed_meanwhile)
    got = read(ml, [pos[0], pos[1], pos[6]])
    assert [p for p, _ in got.entries] == [pos[6]]
    assert set(got.failed) == {pos[0], pos[1]}
    assert all(isinstance(e, EntryNotFoundError) for e in got.failed.values())
    assert read_cold(ml, pos[0], 3) == []


def test_a_segment_file_missing_at_open_keeps_its_entries(
    make_factory: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    """A sealed segment whose file is gone when its ledger opens (removed by hand, or
    lost by its file system while nothing ran), its sidecar index still there: the
    ledger keeps its entries, and every read of them fails with
    `SegmentFileMissingError` (naming the segment's last entry, for a reader that skips
    it) until the file is back, with one error log naming the file. Before, the ledger
    opened without them: its readers went on past them without a word."""
    f = make_factory(segment_max_entries=6, read_cache_bytes=0)
    ml = f.open("t")
    data = payloads(14)
    pos = run(append_all(ml, data))
    first = ml._segments[0]
    ids = [s.ledger_id for s in ml._segments]
    f.close()
    assert os.path.exists(first.idx_path)  # sealed: its sidecar written
    os.rename(first.path, first.path + ".away")
    f = make_factory(segment_max_entries=6, read_cache_bytes=0)
    with caplog.at_level(logging.ERROR):
        ml = f.open("t")
    assert [s.ledger_id for s in ml._segments] == ids
    assert ml.last_confirmed() == pos[-1]
    got = read(ml, [pos[0], pos[5], pos[6]])
    assert [p for p, _ in got.entries] == [pos[6]]
    assert set(got.failed) == {pos[0], pos[5]}
    assert all(isinstance(e, SegmentFileMissingError) for e in got.failed.values())
    with pytest.raises(SegmentFileMissingError) as info:
        read_cold(ml, pos[0], 3)
    assert info.value.segment == (first.ledger_id, 5)
    with pytest.raises(SegmentFileMissingError):
        ml.read(pos[1])  # a read on the calling thread (the descriptor opened for it)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert sum(first.path in m and "held 6 entries" in m for m in said) == 1
    os.rename(first.path + ".away", first.path)
    assert [bytes(v) for _, v in read_cold(ml, pos[0], 3)] == data[:3]
    assert bytes(ml.read(pos[1])) == data[1]


def test_a_trim_removes_the_sidecar_before_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """So that a crash between the two leaves a segment file without its sidecar (opened
    and scanned again, as before), never a sidecar without its file, which would stand
    for a segment lost."""
    seg, idx = tmp_path / "000000000001.seg", tmp_path / "000000000001.idx"
    seg.write_bytes(b"s")
    idx.write_bytes(b"i")
    unlinked: list[str] = []
    real = os.unlink

    def unlink(path: Any) -> None:
        unlinked.append(str(path))
        real(path)

    monkeypatch.setattr(os, "unlink", unlink)
    remove_segment_files([(str(seg), str(idx), None)])
    assert unlinked == [str(idx), str(seg)]


def test_read_positions_cold_fails_a_run_on_an_io_error(
    make_factory: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    f = make_factory(segment_max_entries=6, read_cache_bytes=0)
    ml = f.open("t")
    data = payloads(12)
    pos = run(append_all(ml, data))
    real = ledger_mod.read_span
    broken = pos[6][0]

    def failing(span: Any, views: bool = False) -> Any:
        if span.ledger_id == broken:
            raise OSError(5, "Input/output error")
        return real(span, views)

    monkeypatch.setattr(ledger_mod, "read_span", failing)
    got = read(ml, [pos[4], pos[6], pos[7]])
    assert [(p, bytes(v)) for p, v in got.entries] == [(pos[4], data[4])]
    assert set(got.failed) == {pos[6], pos[7]}
    assert all(isinstance(e, OSError) for e in got.failed.values())


def test_read_positions_cold_stays_within_max_bytes(make_factory: Any) -> None:
    f = make_factory(segment_max_entries=6, read_cache_bytes=0)
    ml = f.open("t")
    data = payloads(12, 50)
    pos = run(append_all(ml, data))
    got = read(ml, pos[:5], max_bytes=120)
    assert [p for p, _ in got.entries] == pos[:2] and got.failed == {}  # the rest: not read
    got = read(ml, [pos[3]], max_bytes=10)  # at least one entry
    assert [p for p, _ in got.entries] == [pos[3]]
    assert read(ml, []) == PositionsRead([], {})
