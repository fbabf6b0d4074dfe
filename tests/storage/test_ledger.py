"""ManagedLedger: append, read, roll-over, reopen, retention, termination."""

from __future__ import annotations

import asyncio
import os

import pytest

from magnetar.storage import (
    EntryNotFoundError,
    LedgerTerminatedError,
    Position,
    StorageError,
    record,
)
from magnetar.storage.clean_stop import INDEX_MIN_BYTES
from magnetar.storage.ledger import append as ledger_mod

from .storage_testlib import append_all, run


def payloads(n: int, size: int = 10) -> list[bytes]:
    return [(b"%08d" % i).ljust(size, b".") for i in range(n)]


@pytest.mark.parametrize("policy", ["group", "always", "never"])
def test_append_and_read(make_factory, policy):
    f = make_factory(fsync=policy)
    ml = f.open("persistent://public/default/t1")
    data = payloads(50)
    positions = run(append_all(ml, data))
    lid = positions[0].ledger_id
    assert positions == [Position(lid, i) for i in range(50)]
    assert ml.entry_count() == 50
    assert ml.last_confirmed() == Position(lid, 49)
    assert ml.first_position() == Position(lid, 0)
    assert [ml.read(p) for p in positions] == data
    assert ml.read_entries(positions[10], 5) == list(
        zip(positions[10:15], data[10:15], strict=True)
    )
    with pytest.raises(EntryNotFoundError):
        ml.read(Position(lid, 50))


def test_rollover_by_entries_and_bytes(make_factory):
    f = make_factory(segment_max_entries=10, segment_max_bytes=1000)
    ml = f.open("t")
    run(append_all(ml, payloads(25)))
    ids = ml.segment_ids()
    assert len(ids) == 3 and ids == sorted(ids)
    assert [Position(i, 0) for i in ids] == [
        p for p, _ in ml.read_entries(Position(-1, -1), 100) if p.entry_id == 0
    ]
    ml2 = f.open("t-bytes")
    run(append_all(ml2, payloads(5, 300)))  # 3 records of 308 bytes fit in 1000
    assert len(ml2.segment_ids()) == 2
    assert ml2.read_entries(Position(-1, -1), 10)[3][0] == Position(ml2.segment_ids()[1], 0)


def test_position_at_counts_across_segments(make_factory):
    """The admin API's examine-message: the Nth entry from the oldest (index N-1) or the
    newest (index -N), across segments."""
    f = make_factory(segment_max_entries=10)
    ml = f.open("t")
    assert ml.position_at(0) is None and ml.position_at(-1) is None
    run(append_all(ml, payloads(25)))
    every = [p for p, _ in ml.read_entries(Position(-1, -1), 100)]
    assert len(every) == 25 and len(ml.segment_ids()) == 3
    assert [ml.position_at(i) for i in range(25)] == every
    assert [ml.position_at(-i) for i in range(1, 26)] == every[::-1]
    assert ml.position_at(25) is None and ml.position_at(-26) is None


def test_rollover_by_age(make_factory, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(ledger_mod, "_monotonic", lambda: now[0])
    monkeypatch.setattr("magnetar.storage.segment.time.monotonic", lambda: now[0])
    f = make_factory(segment_max_age_s=60)
    ml = f.open("t")
    run(append_all(ml, payloads(3)))
    now[0] += 61
    run(append_all(ml, payloads(3)))
    assert len(ml.segment_ids()) == 2


def test_reads_only_confirmed_entries(make_factory):
    f = make_factory(fsync="group")
    ml = f.open("t")

    async def go():
        fut = ml.append(b"hello")
        assert ml.last_confirmed() is None
        assert ml.read_entries(Position(-1, -1), 10) == []
        with pytest.raises(EntryNotFoundError):
            ml.read(Position(ml.segment_ids()[0], 0))
        pos = await fut
        assert ml.read(pos) == b"hello"
        assert ml.last_appended() == pos == ml.last_confirmed()

    run(go())


def test_reopen_keeps_entries_and_uses_new_segment(make_factory):
    f = make_factory(segment_max_entries=7)
    ml = f.open("t")
    before = run(append_all(ml, payloads(20)))
    other = f.open("u")
    run(append_all(other, [b"x"]))
    f.close()
    f2 = make_factory(segment_max_entries=7)
    assert sorted(f2.list()) == ["t", "u"]
    ml = f2.open("t")
    assert ml.entry_count() == 20
    assert [d for _, d in ml.read_entries(before[0], 100)] == payloads(20)
    after = run(append_all(ml, [b"new"]))[0]
    assert after.ledger_id > max(p.ledger_id for p in before)
    assert after.ledger_id not in f2.open("u").segment_ids()
    assert after.entry_id == 0
    assert ml.next_position(before[-1]) == after


@pytest.mark.parametrize("policy", ["group", "always", "never"])
def test_reopen_uses_index_sidecar(make_factory, monkeypatch, policy):
    # (past INDEX_MIN_BYTES: a clean stop writes no sidecar for a smaller segment)
    big = [p + b"x" * INDEX_MIN_BYTES for p in payloads(30)]
    f = make_factory(fsync=policy, segment_max_entries=7)
    ml = f.open("t")
    pos = run(append_all(ml, big))
    f.close()

    def no_scan(*a, **k):
        raise AssertionError("sealed segment rescanned")

    monkeypatch.setattr(record, "scan", no_scan)
    ml = make_factory(fsync=policy).open("t")
    assert len(ml.segment_ids()) == 5
    assert ml.entry_count() == 30
    assert ml.read(pos[29]) == big[29]


def test_bytes_past_index_are_dropped(make_factory):
    """A sidecar that ends before the file: the extra (failed) records never reappear."""
    f = make_factory()
    ml = f.open("t")
    # (past INDEX_MIN_BYTES: a clean stop writes no sidecar for a smaller segment without
    # failed appends' bytes, see test_clean_stop.py)
    run(append_all(ml, [p + b"x" * INDEX_MIN_BYTES for p in payloads(3)]))
    seg = ml._segments[0]
    path = seg.path
    f.close()
    with open(path, "ab") as fh:
        fh.write(record.encode_header(b"phantom") + b"phantom")
    ml = make_factory().open("t")
    assert ml.entry_count() == 3
    assert os.path.getsize(path) == seg.end


def test_read_entries_limits_and_disk_path(make_factory):
    f = make_factory(segment_max_entries=8, read_cache_bytes=0)
    ml = f.open("t")
    data = payloads(30, 100)
    pos = run(append_all(ml, data))
    assert len(ml._cache) == 0  # everything below comes from disk
    got = ml.read_entries(pos[0], 100)
    assert [d for _, d in got] == data and [p for p, _ in got] == pos
    assert len(ml.read_entries(pos[5], 100, max_bytes=350)) == 3
    assert len(ml.read_entries(pos[5], 100, max_bytes=10)) == 1  # at least one
    assert ml.read_entries(pos[5], 2) == list(zip(pos[5:7], data[5:7], strict=True))
    # a start that does not exist begins at the next entry
    assert ml.read_entries(Position(pos[7].ledger_id, 99), 1)[0][0] == pos[8]
    assert [d for _, d in ml.read_range(pos[3], pos[20])] == data[3:21]


def test_tail_reads_come_from_cache(make_factory, monkeypatch):
    f = make_factory()
    ml = f.open("t")
    pos = run(append_all(ml, payloads(100)))

    def no_disk(*a, **k):
        raise AssertionError("disk read for a cached entry")

    monkeypatch.setattr(type(ml._segments[0]), "read_records", no_disk)
    assert len(ml.read_entries(pos[0], 1000)) == 100
    assert ml.read(pos[50]) == payloads(100)[50]


def test_read_cache_is_bounded_and_shared(make_factory):
    f = make_factory(read_cache_bytes=1000)
    a, b = f.open("a"), f.open("b")
    run(append_all(a, payloads(20, 100)))
    run(append_all(b, payloads(20, 100)))
    assert f._cache.size <= 1000
    assert a._cache is b._cache
    assert [d for _, d in a.read_entries(Position(-1, -1), 100)] == payloads(20, 100)


def test_corrupt_entry_on_disk_is_not_returned(make_factory):
    f = make_factory(read_cache_bytes=0)
    ml = f.open("t")
    pos = run(append_all(ml, payloads(3, 50)))
    seg = ml._segments[0]
    start, _ = seg.entry_span(1)
    with open(seg.path, "r+b") as fh:
        fh.seek(start + 3)
        fh.write(b"X")
    assert ml.read(pos[0]) == payloads(3, 50)[0]
    with pytest.raises(StorageError):
        ml.read(pos[1])


def test_find_position(make_factory):
    f = make_factory(segment_max_entries=7)
    ml = f.open("t")
    pos = run(append_all(ml, [b"%05d" % i for i in range(40)]))
    assert ml.find_position(lambda d: int(d) >= 23) == pos[23]
    assert ml.find_position(lambda d: True) == pos[0]
    assert ml.find_position(lambda d: False) is None


def test_terminate_persists(make_factory):
    f = make_factory()
    ml = f.open("t")
    last = run(append_all(ml, payloads(2)))[-1]
    assert ml.terminate() == last
    with pytest.raises(LedgerTerminatedError):
        run(append_all(ml, [b"x"]))
    f.close()
    ml = make_factory().open("t")
    assert ml.is_terminated
    assert ml.entry_count() == 2


def test_delete_removes_files(make_factory):
    f = make_factory()
    ml = f.open("t")
    run(append_all(ml, payloads(2)))
    ml.open_cursor("c")
    d = ml.directory
    assert os.listdir(d)
    f.delete("t")
    assert not os.path.exists(d)
    assert f.list() == []
    assert f.open("t").entry_count() == 0
    assert f.open("t").cursors() == {}


def _ledger_with_segments(make_factory, n_segments=4, per=5, **kw):
    f = make_factory(segment_max_entries=per, **kw)
    ml = f.open("t")
    pos = run(append_all(ml, payloads(n_segments * per, 100)))
    return f, ml, pos


@pytest.mark.parametrize("policy", ["group", "never"])
def test_trim_respects_cursors(make_factory, policy):
    _, ml, pos = _ledger_with_segments(make_factory, fsync=policy)
    cur = ml.open_cursor("slow", "earliest")
    assert ml.trim(0, 0) == []  # nothing consumed
    cur.mark_delete(pos[7])  # first segment fully consumed, second partially
    first_id = pos[0].ledger_id
    path = ml._by_id[first_id].path
    assert ml.trim(0, 0) == [first_id]
    assert not os.path.exists(path)
    assert ml.first_position() == pos[5]
    assert ml.entry_count() == 15
    cur.mark_delete(pos[19])
    deleted = ml.trim(0, 0)
    assert deleted == [pos[5].ledger_id, pos[10].ledger_id]  # never the current one
    assert ml.segment_ids() == [pos[19].ledger_id]
    assert cur.backlog() == 0


def test_trim_retention_limits(make_factory):
    _, ml, pos = _ledger_with_segments(make_factory)
    ml.open_cursor("c", "latest")  # everything consumed
    assert ml.trim(-1, -1) == []  # infinite retention
    assert ml.trim(3600, -1) == []  # within the time limit
    seg_size = ml._segments[0].end
    # size: keep while the total stays within the limit
    deleted = ml.trim(-1, 2 * seg_size + 10)
    assert deleted == [pos[0].ledger_id, pos[5].ledger_id]
    assert ml.size_bytes() <= 2 * seg_size + 10


def test_trim_without_cursors_and_closed_segments_after_reopen(make_factory):
    f, ml, pos = _ledger_with_segments(make_factory)
    f.close()
    f2 = make_factory(segment_max_entries=5)
    ml = f2.open("t")
    assert ml.trim(0, 0) == [p.ledger_id for p in pos[0:15:5]]
    assert ml.entry_count() == 5


def test_append_after_close_fails(make_factory):
    f = make_factory()
    ml = f.open("t")
    ml.close()
    with pytest.raises(StorageError):
        run(append_all(ml, [b"x"]))


def test_close_resolves_pending_appends(make_factory):
    f = make_factory()
    ml = f.open("t")

    async def go():
        futs = [ml.append(b"a%d" % i) for i in range(10)]
        ml.close()
        assert all(fut.done() for fut in futs)
        return [fut.result() for fut in futs]

    positions = run(go())
    assert len(set(positions)) == 10
    ml = f.open("t")
    assert ml.entry_count() == 10


def test_many_appends_across_loop_iterations(make_factory):
    f = make_factory(segment_max_entries=1000, write_buffer_bytes=4096)
    ml = f.open("t")

    async def go():
        futs = []
        for i in range(5000):
            futs.append(ml.append(b"%d" % i))
            if i % 97 == 0:
                await asyncio.sleep(0)
        return await asyncio.gather(*futs)

    pos = run(go())
    assert pos == sorted(pos) and len(set(pos)) == 5000
    assert [int(d) for _, d in ml.read_range(pos[0], pos[-1])] == list(range(5000))


def test_close_after_the_event_loop_is_gone(make_factory):
    """Appends left pending when the loop ends are written and synced by close()."""
    f = make_factory()
    ml = f.open("t")

    async def go():
        for i in range(50):
            ml.append(b"%d" % i)

    run(go())
    f.close()  # no running loop here
    ml = make_factory().open("t")
    assert [d for _, d in ml.read_entries(Position(-1, -1), 100)] == [b"%d" % i for i in range(50)]


def test_read_cached_and_read_cold(make_factory):
    """``read_cached`` gives only the cached run from a position; ``read_cold`` reads the
    same entries as ``read_entries`` on a reader thread, one segment at a time, and stops
    before a corrupt entry (raising only when it is the first)."""
    f = make_factory(segment_max_entries=6, read_cache_bytes=300)
    ml = f.open("t")
    data = payloads(10, 50)
    pos = run(append_all(ml, data))
    cached = ml.read_cached(pos[0], 100)
    assert cached == [] and ml.read_cached(pos[-1], 100) == [(pos[-1], data[-1])]

    async def cold(start, n, max_bytes=None):
        return await ml.read_cold(start, n, max_bytes)

    assert run(cold(pos[0], 100)) == list(zip(pos[:6], data[:6], strict=True))  # one segment
    views = [v for _, v in run(cold(pos[0], 100))]  # of one read buffer, not copied, read-only
    assert all(isinstance(v, memoryview) and v.readonly for v in views)
    assert len({id(v.obj) for v in views}) == 1
    assert [v.tobytes() for v in views] == data[:6]
    assert run(cold(pos[6], 100)) == list(zip(pos[6:], data[6:], strict=True))
    assert run(cold(pos[1], 100, max_bytes=120)) == list(zip(pos[1:3], data[1:3], strict=True))
    seg = ml._segments[0]
    start, _ = seg.entry_span(3)
    with open(seg.path, "r+b") as fh:
        fh.seek(start + 3)
        fh.write(b"X")
    assert run(cold(pos[0], 100)) == list(zip(pos[:3], data[:3], strict=True))
    with pytest.raises(StorageError):
        run(cold(pos[3], 100))


def test_find_position_async_matches_find_position(make_factory):
    f = make_factory(segment_max_entries=7)
    ml = f.open("t")
    pos = run(append_all(ml, [b"%05d" % i for i in range(40)]))

    async def find(pred):
        return await ml.find_position_async(pred)

    for k in (0, 1, 6, 7, 23, 39):
        assert run(find(lambda d, k=k: int(d) >= k)) == pos[k] == ml.find_position(lambda d, k=k: int(d) >= k)
    assert run(find(lambda d: False)) is None
