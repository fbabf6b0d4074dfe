"""Scale: thousands of ledgers keep open descriptors bounded by max_open_files."""

from __future__ import annotations

import asyncio
import os

from magnetar.storage import Position
from magnetar.storage.flusher import FRESH_THREADS


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_thousands_of_ledgers_bounded_fds(make_factory):
    bound = 64
    f = make_factory(fsync="group", max_open_files=bound)
    before = _fd_count()
    n = 3000

    async def go():
        peak = 0
        for i in range(0, n, 100):
            ledgers = [f.open(f"persistent://public/default/t{j}") for j in range(i, i + 100)]
            await asyncio.gather(*(ml.append(b"entry %d" % j) for j, ml in enumerate(ledgers, i)))
            peak = max(peak, _fd_count() - before)
        return peak

    peak = asyncio.run(go())
    # (beyond the bound: descriptors the storage threads hold a moment, such as the
    # directories the flusher's fresh-segment threads sync, FRESH_THREADS at most)
    assert peak <= bound + 8 + FRESH_THREADS, peak
    assert f.open_file_count() <= bound
    # everything is still readable (reopening evicted files as needed)
    for j in range(0, n, 37):
        ml = f.open(f"persistent://public/default/t{j}")
        assert ml.read_entries(Position(-1, -1), 2)[0][1] == b"entry %d" % j
    assert _fd_count() - before <= bound + 8
    assert len(f.list()) == n


def test_evicted_sealed_segments_drop_their_index(make_factory):
    """An idle sealed segment costs neither a descriptor nor its offset index in memory."""
    f = make_factory(fsync="group", max_open_files=4, segment_max_entries=50, read_cache_bytes=0)

    async def go():
        ledgers = [f.open(f"persistent://public/default/ix{j}") for j in range(6)]
        for j, ml in enumerate(ledgers):
            # 120 entries: two sealed segments of 50 and an active one
            await asyncio.gather(*(ml.append(b"%d-%d" % (j, k)) for k in range(120)))
        return ledgers

    ledgers = asyncio.run(go())
    for _ in range(2):  # read everything twice: the LRU keeps evicting and reloading
        for j, ml in enumerate(ledgers):
            got = [d for _, d in ml.read_entries(Position(-1, -1), 200)]
            assert got == [b"%d-%d" % (j, k) for k in range(120)]
    segments = [s for ml in ledgers for s in ml._segments]
    open_now = [s for s in segments if s.fd is not None]
    assert len(open_now) <= 4
    released = [s for s in segments if s._offsets is None]
    assert released and all(s.sealed and s.fd is None for s in released)
    assert len(released) >= len([s for s in segments if s.sealed]) - 4


def _ten_ledgers_of_one_entry(f, prefix):
    """Ten ledgers of ``f``, each with one entry (``e<j>``) appended."""

    async def go():
        ledgers = [f.open(f"persistent://public/default/{prefix}{j}") for j in range(10)]
        await asyncio.gather(*(ml.append(b"e%d" % j) for j, ml in enumerate(ledgers)))
        return ledgers

    return asyncio.run(go())


def test_idle_segment_files_close(make_factory):
    """`close_idle_files`: a segment unused since the previous call loses its descriptor;
    one used meanwhile keeps it; the data reads back either way."""
    f = make_factory(fsync="group", max_open_files=64, read_cache_bytes=0)
    ledgers = _ten_ledgers_of_one_entry(f, "idle")
    assert f.open_file_count() == 10
    assert f.close_idle_files() == 0  # all used since the start: a round marks them
    busy = ledgers[3]
    assert busy.read_entries(Position(-1, -1), 1)[0][1] == b"e3"
    assert f.close_idle_files() == 9
    assert f.open_file_count() == 1
    assert f.close_idle_files() == 1
    assert f.open_file_count() == 0
    for j, ml in enumerate(ledgers):
        assert ml.read_entries(Position(-1, -1), 1)[0][1] == b"e%d" % j


def test_idle_segment_files_close_a_slice_at_a_time(make_factory):
    """`close_idle_files_in_slices`: one round, ``size`` files a step; a segment used
    between two steps keeps its descriptor (the round is not done in one go)."""
    f = make_factory(fsync="group", max_open_files=64, read_cache_bytes=0)
    ledgers = _ten_ledgers_of_one_entry(f, "sliced")
    assert f.close_idle_files() == 0  # a round marks them all
    steps = f.close_idle_files_in_slices(4)
    assert next(steps) == 4
    assert f.open_file_count() == 6
    # one still open (in a later slice) used before its slice's turn
    late = next(j for j, ml in enumerate(ledgers) if ml._segments[-1].fd is not None)
    assert ledgers[late].read_entries(Position(-1, -1), 1)[0][1] == b"e%d" % late
    assert sum(steps) == 5  # the used one was left open
    assert f.open_file_count() == 1
    for j, ml in enumerate(ledgers):
        assert ml.read_entries(Position(-1, -1), 1)[0][1] == b"e%d" % j
