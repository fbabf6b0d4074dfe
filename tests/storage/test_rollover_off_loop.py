"""Segment roll-over off the event loop (issue 9, item 3): a new segment's file is made on
a ``readers`` thread (after its id block is durably stored, when it starts one) while the
ledger goes on taking appends, held in memory and written in order once the file exists;
a sealed segment's reserved space and index sidecar are dealt with on a ``readers`` thread;
and a dirty descriptor past ``max_open_files`` is synced there before it is closed.

A stalled disk call is simulated by holding the call (on any thread but the test's) until
the test releases it; each test waits for outcomes with futures or bounded polls.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.storage import LedgerClosedError, ManagedLedgerFactory, StorageError
from magnetar.storage import factory as factory_module
from magnetar.storage import segment as segment_module
from magnetar.storage.filelimit import FileLimiter

from .storage_testlib import append_all, run

Segment = segment_module.Segment


class Gate:
    """Holds calls made on other threads than the test's until ``release`` (10 s at most),
    while ``want(subject)`` says so; notes the calling threads."""

    def __init__(self, want: Callable[[Any], bool] = lambda _: True) -> None:
        self.want = want
        self.release = threading.Event()
        self.entered = threading.Event()
        self.threads: list[str] = []
        self.fail_next = 0  # calls to fail (OSError) once released

    def hold(self, subject: Any) -> None:
        if threading.current_thread() is threading.main_thread() or not self.want(subject):
            return
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        self.release.wait(10)
        if self.fail_next:
            self.fail_next -= 1
            raise OSError(5, "injected: cannot create the segment file")


@pytest.fixture
def creation(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    """`Segment.create_file` (making a new segment's file) waits at the gate."""
    gate = Gate()
    real = Segment.create_file

    def held(self: Segment) -> int:
        gate.hold(self)
        return real(self)

    monkeypatch.setattr(Segment, "create_file", held)
    yield gate
    gate.release.set()


def _seg_files(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".seg"))


def _reopened(tmp_path: Path, name: str, **kw: Any) -> list[bytes]:
    """Every entry of ledger ``name`` as a fresh factory over the same data reads it."""
    with ManagedLedgerFactory(factory_module.StorageConfig(data_dir=tmp_path / "data", **kw)) as f:
        ml = f.open(name)
        first = ml.first_position()
        if first is None:
            return []
        return [bytes(p) for _, p in ml.read_entries(first, 1 << 20)]


def wait_until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_a_stalled_segment_creation_holds_only_its_own_ledger(make_factory, creation, tmp_path):
    f = make_factory(fsync="group")
    slow, fast = f.open("slow"), f.open("fast")
    creation.want = lambda seg: seg.directory == slow.directory

    async def go() -> None:
        held = [slow.append(b"s%d" % i) for i in range(10)]
        await asyncio.sleep(0)
        assert creation.entered.wait(5)
        # another ledger of the same storage appends, syncs and confirms meanwhile
        done = await append_all(fast, [b"f%d" % i for i in range(50)])
        assert len(done) == 50 and fast.last_confirmed() == done[-1]
        assert not any(h.done() for h in held)
        assert slow.last_confirmed() is None
        creation.release.set()
        positions = await asyncio.gather(*held)
        assert [p.entry_id for p in positions] == list(range(10))
        assert [bytes(p) for _, p in slow.read_entries(positions[0], 100)] == [
            b"s%d" % i for i in range(10)]

    run(go())
    assert creation.threads and all(t.startswith("magnetar-read") for t in creation.threads)
    f.close()
    assert _reopened(tmp_path, "slow") == [b"s%d" % i for i in range(10)]


def test_appends_across_several_held_segments_keep_their_order(make_factory, creation, tmp_path):
    f = make_factory(fsync="group", segment_max_entries=2)
    ml = f.open("t")

    async def go() -> list[Any]:
        futs = [ml.append(b"e%d" % i) for i in range(7)]
        await asyncio.sleep(0)
        assert creation.entered.wait(5)
        assert not any(x.done() for x in futs)
        creation.release.set()
        return list(await asyncio.gather(*futs))

    positions = run(go())
    assert positions == sorted(positions)
    assert len({p.ledger_id for p in positions}) == 4  # 2 + 2 + 2 + 1
    assert len(_seg_files(ml.directory)) == 4
    f.close()
    assert _reopened(tmp_path, "t", segment_max_entries=2) == [b"e%d" % i for i in range(7)]


def test_a_failed_creation_fails_its_appends_and_the_ledger_goes_on(make_factory, creation,
                                                                    tmp_path):
    f = make_factory(fsync="group")
    ml = f.open("t")
    creation.fail_next = 1

    async def go() -> None:
        futs = [ml.append(b"lost%d" % i) for i in range(3)]
        creation.release.set()
        results = await asyncio.gather(*futs, return_exceptions=True)
        assert all(isinstance(r, StorageError) for r in results), results
        assert "cannot create a segment" in str(results[0])
        assert ml.segment_ids() == []  # the segment without a file left the ledger
        pos = await ml.append(b"kept")  # a new segment, a new file
        assert ml.last_confirmed() == pos
        assert bytes(ml.read(pos)) == b"kept"

    run(go())
    f.close()
    assert _reopened(tmp_path, "t") == [b"kept"]


def test_the_always_policy_waits_for_the_file_and_syncs(make_factory, creation, tmp_path):
    f = make_factory(fsync="always")
    ml = f.open("t")
    opener = threading.Thread(target=lambda: creation.entered.wait(5) and creation.release.set())
    opener.start()

    async def go() -> None:
        pos = await ml.append(b"one")
        assert ml.last_confirmed() == pos

    run(go())
    opener.join()
    assert creation.threads  # the file was made on a storage thread
    f.close()
    assert _reopened(tmp_path, "t") == [b"one"]


def test_close_async_waits_for_a_held_creation(make_factory, creation, tmp_path):
    f = make_factory(fsync="group")
    ml = f.open("t")

    async def go() -> None:
        fut = ml.append(b"late")
        await asyncio.sleep(0)
        assert creation.entered.wait(5)
        closing = ml.close_async()
        await asyncio.sleep(0.01)
        assert not closing.done() and not fut.done()
        creation.release.set()
        await closing
        assert fut.done() and fut.exception() is None

    run(go())
    f.close()
    assert _reopened(tmp_path, "t") == [b"late"]


def test_a_delete_during_a_held_creation_leaves_no_files(make_factory, creation):
    f = make_factory(fsync="group")
    ml = f.open("t")
    directory = ml.directory

    async def go() -> None:
        fut = ml.append(b"gone")
        await asyncio.sleep(0)
        assert creation.entered.wait(5)
        deleting = asyncio.ensure_future(f.delete_async("t"))
        with pytest.raises(LedgerClosedError):
            await fut
        creation.release.set()
        assert await deleting

    run(go())
    assert not os.path.exists(directory)


def test_sealing_runs_on_reader_threads(make_factory, monkeypatch):
    calls: list[tuple[str, str]] = []
    for name in ("cut_reserve", "write_index"):
        real = getattr(Segment, name)

        def traced(self: Segment, _real: Any = real, _name: str = name) -> None:
            calls.append((_name, threading.current_thread().name))
            _real(self)

        monkeypatch.setattr(Segment, name, traced)
    f = make_factory(fsync="group", segment_max_entries=3)
    ml = f.open("t")
    run(append_all(ml, [b"x" * 100_000 for _ in range(10)]))  # 4 segments, 3 sealed
    sealed = ml._segments[:3]
    wait_until(lambda: all(s.index_written for s in sealed))
    assert {n for n, _ in calls} == {"cut_reserve", "write_index"}
    assert all(t.startswith("magnetar-read") for _, t in calls), calls
    for seg in sealed:
        assert os.path.exists(seg.idx_path)
        assert os.path.getsize(seg.path) == seg.end  # the reserved space was given back


def test_the_id_block_is_stored_before_any_file_of_it(make_factory, monkeypatch, tmp_path):
    monkeypatch.setattr(factory_module, "_ID_BLOCK", 2)
    f = make_factory(fsync="group", segment_max_entries=1)
    ml = f.open("t")
    gate = Gate(lambda items: "ids" in items)
    real_put = f._store.put_many

    def put_many(items: Any, durable: bool = False) -> None:
        gate.hold(items)
        real_put(items, durable)

    monkeypatch.setattr(f._store, "put_many", put_many)

    async def go() -> list[Any]:
        futs = [ml.append(b"%d" % i) for i in range(3)]  # ids 0, 1 | 2 needs the next block
        await asyncio.sleep(0)
        assert gate.entered.wait(5)
        await asyncio.sleep(0.05)
        assert not any(x.done() for x in futs)
        assert _seg_files(ml.directory) == []  # no file before its block is stored
        gate.release.set()
        return list(await asyncio.gather(*futs))

    positions = run(go())
    assert [p.ledger_id for p in positions] == [0, 1, 2]
    assert f._store.get("ids") == {"limit": 4}
    f.close()
    # a restart starts past every id on disk
    with ManagedLedgerFactory(factory_module.StorageConfig(data_dir=tmp_path / "data",
                                                           segment_max_entries=1)) as f2:
        ml2 = f2.open("t")

        async def append() -> Any:
            return await ml2.append(b"after")

        pos = run(append())
        assert pos.ledger_id > positions[-1].ledger_id


def test_a_failed_id_block_write_is_tried_again(make_factory, monkeypatch):
    monkeypatch.setattr(factory_module, "_ID_BLOCK", 2)
    f = make_factory(fsync="group", segment_max_entries=1)
    ml = f.open("t")
    real_put = f._store.put_many
    failures = [1]

    def put_many(items: Any, durable: bool = False) -> None:
        if "ids" in items and failures[0]:
            failures[0] -= 1
            raise OSError(28, "injected: no space for the id block")
        real_put(items, durable)

    monkeypatch.setattr(f._store, "put_many", put_many)

    async def go() -> None:
        results = await asyncio.gather(ml.append(b"a"), return_exceptions=True)
        assert isinstance(results[0], StorageError)
        pos = await ml.append(b"b")
        assert bytes(ml.read(pos)) == b"b"

    run(go())
    assert f._store.get("ids")["limit"] > 1


def test_dirty_descriptors_past_the_limit_are_synced_off_the_loop(make_factory, monkeypatch):
    """Stall the flusher's syncs so segments stay dirty; the file limiter then retires the
    least recently used ones: synced on reader threads, closed on the loop afterwards."""
    flusher_gate = Gate(lambda _: threading.current_thread().name.startswith("magnetar-storage-flusher"))
    sync_threads: list[str] = []
    real_sync = Segment.sync

    def sync(self: Segment) -> float:
        sync_threads.append(threading.current_thread().name)
        flusher_gate.hold(self)
        return real_sync(self)

    monkeypatch.setattr(Segment, "sync", sync)
    retired: list[Segment] = []
    real_retire = FileLimiter._retire

    def retire(self: FileLimiter, seg: Segment, loop: Any) -> bool:
        retired.append(seg)
        return real_retire(self, seg, loop)

    monkeypatch.setattr(FileLimiter, "_retire", retire)
    f = make_factory(fsync="group", max_open_files=8, inline_sync_when_idle=False)
    ledgers = [f.open(f"t{i}") for i in range(12)]  # 4 past the limit: as many may retire

    async def go() -> None:
        futs = [ml.append(b"x") for ml in ledgers]
        deadline = time.monotonic() + 10  # the files are made and written (the flusher waits)
        while not all(ml._segments and ml._segments[0].written > 16 for ml in ledgers):
            assert time.monotonic() < deadline, "the appends were not written"
            await asyncio.sleep(0.005)
        assert retired, "no segment was retired"
        assert f.open_file_count() <= 8 + 4
        flusher_gate.release.set()
        await asyncio.gather(*futs)

    run(go())
    main = threading.main_thread().name
    assert main not in sync_threads
    assert any(t.startswith("magnetar-read") for t in sync_threads)
    wait_until(lambda: f._files.retiring_count() == 0)


def test_batches_held_for_a_new_file_are_written_and_synced_as_one(
        make_factory, creation, monkeypatch, tmp_path):
    """Batches of several loop turns held while the segment's file was made go to the file
    in one write and one sync (issue 31: on FUSE, a write waits out a concurrent fsync of
    its file, so one write and sync per held batch blocked the event loop once each)."""
    f = make_factory(fsync="group")
    ml = f.open("t")
    writes: list[int] = []
    real_write = Segment.write

    def counted(self: Segment, bufs: list[bytes], offset: int) -> None:
        writes.append(len(bufs))
        real_write(self, bufs, offset)

    monkeypatch.setattr(Segment, "write", counted)

    async def go() -> list[Any]:
        futs = []
        for turn in range(5):  # five loop turns: five write batches held
            futs += [ml.append(b"t%d-%d" % (turn, i)) for i in range(3)]
            await asyncio.sleep(0)
        assert creation.entered.wait(5)
        creation.release.set()
        return list(await asyncio.gather(*futs))

    positions = run(go())
    assert [p.entry_id for p in positions] == list(range(15))
    assert writes == [30]  # 15 headers and 15 payloads, in one write
    f.close()
    assert _reopened(tmp_path, "t") == [b"t%d-%d" % (t, i) for t in range(5) for i in range(3)]
