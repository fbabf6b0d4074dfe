"""Scale: thousands of ledgers keep open descriptors bounded by max_open_files."""

from __future__ import annotations

import asyncio
import os

from magnetar.storage import Position


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
    assert peak <= bound + 8, peak
    assert f.open_file_count() <= bound
    # everything is still readable (reopening evicted files as needed)
    for j in range(0, n, 37):
        ml = f.open(f"persistent://public/default/t{j}")
        assert ml.read_entries(Position(-1, -1), 2)[0][1] == b"entry %d" % j
    assert _fd_count() - before <= bound + 8
    assert len(f.list()) == n
