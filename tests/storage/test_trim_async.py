"""`ManagedLedger.trim_async`: retention decided on the event loop, its disk work (the
files' stat for the time window, their unlink and descriptor close) on the factory's
reader threads. The segments chosen leave the ledger at once; a failure to remove their
files is logged, not raised; an open of the ledger after its close waits for the removal."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from magnetar.storage import EntryNotFoundError, ManagedLedger, ManagedLedgerFactory

from .storage_testlib import append_all, run

PER = 5  # entries per segment


class Held:
    """Holds one ``os`` call on ``.seg`` / ``.idx`` files (any thread but the test's) until
    ``release`` (10 s at most), noting the calling threads and paths."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.paths: list[str] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail: type[OSError] | None = None

    def hold(self, path: Any) -> None:
        if (not isinstance(path, str) or not path.endswith((".seg", ".idx"))
                or threading.current_thread() is threading.main_thread()):
            return
        self.threads.append(threading.current_thread().name)
        self.paths.append(path)
        self.entered.set()
        self.release.wait(10)
        if self.fail is not None:
            raise self.fail(f"injected: {path}")


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Held]]:
    """``held("stat")`` / ``held("unlink")``: that call on segment files stalls."""
    one = Held()

    def make(call: str) -> Held:
        real = getattr(os, call)

        def slow(path: Any, *args: Any, **kwargs: Any) -> Any:
            one.hold(path)
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, call, slow)
        return one

    yield make
    one.release.set()


def _ledger(make_factory: Callable[..., ManagedLedgerFactory], segments: int = 4
            ) -> tuple[ManagedLedgerFactory, ManagedLedger, list[Any]]:
    factory = make_factory(segment_max_entries=PER)
    ml = factory.open("t")
    pos = run(append_all(ml, [b"%04d" % i for i in range(segments * PER)]))
    return factory, ml, pos


def _seg_files(ml: ManagedLedger) -> list[str]:
    return sorted(n for n in os.listdir(ml.directory) if n.endswith(".seg"))


def test_segments_leave_at_once_and_files_go_on_a_reader_thread(make_factory, held) -> None:
    _, ml, pos = _ledger(make_factory)
    cur = ml.open_cursor("c", "earliest")
    cur.mark_delete(pos[2 * PER + 1])  # the first two segments consumed
    paths = [ml._by_id[p.ledger_id].path for p in pos[0:2 * PER:PER]]
    unlink = held("unlink")

    async def go() -> list[int]:
        trim = asyncio.ensure_future(ml.trim_async(0, 0))
        while not unlink.entered.is_set():  # the loop stays free meanwhile
            await asyncio.sleep(0.005)
        assert ml.segment_ids() == [p.ledger_id for p in pos[2 * PER::PER]]
        assert ml.first_position() == pos[2 * PER]
        with pytest.raises(EntryNotFoundError):
            ml.read(pos[0])
        assert all(os.path.exists(p) for p in paths)  # the files: still there
        assert not trim.done()
        unlink.release.set()
        return await trim

    assert run(go()) == [p.ledger_id for p in pos[0:2 * PER:PER]]
    assert not any(os.path.exists(p) or os.path.exists(p[:-4] + ".idx") for p in paths)
    assert unlink.threads and all(t.startswith("magnetar-read") for t in unlink.threads)
    assert ml.read(pos[2 * PER]) == b"%04d" % (2 * PER)


def test_retention_zero_and_size_rules_need_no_stat(make_factory, held) -> None:
    _, ml, pos = _ledger(make_factory)
    ml.open_cursor("c", "latest")  # everything consumed
    stat = held("stat")
    stat.release.set()  # (noted, not held)
    seg_size = ml._segments[0].end
    assert run(ml.trim_async(-1, 2 * seg_size + 10)) == [pos[0].ledger_id, pos[PER].ledger_id]
    assert run(ml.trim_async(0, -1)) == [pos[2 * PER].ledger_id]
    assert stat.paths == []
    assert run(ml.trim_async(-1, -1)) == []  # infinite retention


def test_the_time_window_reads_mtimes_off_the_loop(make_factory, held) -> None:
    _, ml, pos = _ledger(make_factory)
    ml.open_cursor("c", "latest")
    files = [ml._by_id[p.ledger_id].path for p in pos[::PER]]
    for path in files[:2]:  # two hours old; the others are new
        st = os.stat(path)
        os.utime(path, (st.st_atime - 7200, st.st_mtime - 7200))
    stat = held("stat")

    async def go() -> list[int]:
        trim = asyncio.ensure_future(ml.trim_async(3600, -1))
        while not stat.entered.is_set():
            await asyncio.sleep(0.005)
        assert len(ml.segment_ids()) == 4  # nothing decided before the times are known
        stat.release.set()
        return await trim

    assert run(go()) == [pos[0].ledger_id, pos[PER].ledger_id]
    assert all(t.startswith("magnetar-read") for t in stat.threads)
    assert set(stat.paths) <= set(files[:-1])  # only consumed segments, never the last
    assert [os.path.exists(p) for p in files] == [False, False, True, True]


def test_the_decision_is_made_again_after_the_stat(make_factory, held) -> None:
    """A cursor that moves back (a reset) while the files' times are read keeps what it
    needs: the plan is made again from the ledger's state once they are known."""
    _, ml, pos = _ledger(make_factory)
    cur = ml.open_cursor("c", "latest")
    for path in [ml._by_id[p.ledger_id].path for p in pos[::PER]]:
        st = os.stat(path)
        os.utime(path, (st.st_atime - 7200, st.st_mtime - 7200))
    stat = held("stat")

    async def go() -> list[int]:
        trim = asyncio.ensure_future(ml.trim_async(3600, -1))
        while not stat.entered.is_set():
            await asyncio.sleep(0.005)
        cur.reset(pos[PER + 1])  # back into the second segment
        stat.release.set()
        return await trim

    assert run(go()) == [pos[0].ledger_id]
    assert ml.first_position() == pos[PER]


def test_a_ledger_closed_during_the_stat_is_not_trimmed(make_factory, held) -> None:
    factory, ml, _ = _ledger(make_factory)
    ml.open_cursor("c", "latest")
    before = _seg_files(ml)
    stat = held("stat")

    async def go() -> list[int]:
        trim = asyncio.ensure_future(ml.trim_async(1, -1))
        while not stat.entered.is_set():
            await asyncio.sleep(0.005)
        closing = ml.close_async()
        stat.release.set()
        await closing
        return await trim

    assert run(go()) == []
    assert _seg_files(ml) == before
    assert factory.open("t").entry_count() == 4 * PER


def test_a_failed_removal_is_logged_not_raised(make_factory, held, caplog) -> None:
    _, ml, pos = _ledger(make_factory)
    ml.open_cursor("c", "latest")
    unlink = held("unlink")
    unlink.fail = PermissionError
    unlink.release.set()
    with caplog.at_level(logging.ERROR, logger="magnetar.storage.ledger"):
        deleted = run(ml.trim_async(0, 0))
    assert deleted == [p.ledger_id for p in pos[0:3 * PER:PER]]
    assert ml.segment_ids() == [pos[3 * PER].ledger_id]  # gone from the ledger all the same
    assert "removing the files of trimmed segments" in caplog.text
    assert "injected" in caplog.text


def test_a_reopen_waits_for_the_removal(make_factory, held) -> None:
    """The files of trimmed segments are removed before a reopen scans the directory (it
    would find them again otherwise)."""
    factory, ml, pos = _ledger(make_factory)
    ml.open_cursor("c", "latest")
    unlink = held("unlink")

    async def go() -> ManagedLedger:
        trim = asyncio.ensure_future(ml.trim_async(0, 0))
        while not unlink.entered.is_set():
            await asyncio.sleep(0.005)
        await ml.close_async()
        reopening = asyncio.ensure_future(factory.open_async("t"))
        await asyncio.sleep(0.2)
        assert not reopening.done()  # it waits for the files' removal
        unlink.release.set()
        await trim
        return await reopening

    reopened = run(go())
    assert reopened.segment_ids() == [pos[3 * PER].ledger_id]
    assert reopened.first_position() == pos[3 * PER]


def test_the_blocking_trim_still_stats_and_unlinks_on_its_thread(make_factory) -> None:
    _, ml, pos = _ledger(make_factory)
    ml.open_cursor("c", "latest")
    path = ml._by_id[pos[0].ledger_id].path
    st = os.stat(path)
    os.utime(path, (st.st_atime - 7200, st.st_mtime - 7200))
    started = time.monotonic()
    assert ml.trim(3600, -1) == [pos[0].ledger_id]
    assert time.monotonic() - started < 5
    assert not os.path.exists(path)
