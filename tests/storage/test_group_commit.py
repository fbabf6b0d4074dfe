"""Group commit: futures resolve in order, and only after an fdatasync that started after
their write (checked by recording os.fdatasync calls)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from magnetar.storage import Position
from magnetar.storage.flusher import Batch, Flusher

from .storage_testlib import append_all, run


class SyncRecorder:
    """Replaces os.fdatasync: counts calls, can hold the first one until released."""

    def __init__(self, hold_first: bool = False) -> None:
        self.real = os.fdatasync
        self.calls = 0
        self.completed = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold_first:
            self.release.set()

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.entered.set()
        self.release.wait(10)
        self.real(fd)
        self.completed += 1


def test_futures_resolve_in_order_after_fsync(make_factory, monkeypatch):
    rec = SyncRecorder(hold_first=True)
    monkeypatch.setattr(os, "fdatasync", rec)
    f = make_factory(fsync="group", inline_sync_when_idle=False)  # every sync on the thread
    ml = f.open("t")
    resolved: list[tuple[Position, int]] = []

    def note(fut):
        resolved.append((fut.result(), rec.completed))

    async def go():
        loop = asyncio.get_running_loop()
        first = [ml.append(b"a%d" % i) for i in range(20)]
        for fut in first:
            fut.add_done_callback(note)
        await loop.run_in_executor(None, rec.entered.wait)  # flusher is inside fdatasync
        assert not any(fut.done() for fut in first)
        second = [ml.append(b"b%d" % i) for i in range(20)]
        for fut in second:
            fut.add_done_callback(note)
        await asyncio.sleep(0)  # one loop iteration: the second batch is written
        assert not any(fut.done() for fut in first + second)
        assert ml.last_confirmed() is None
        rec.release.set()
        return await asyncio.gather(*first), await asyncio.gather(*second)

    first, second = run(go())
    order = [p for p, _ in resolved]
    assert order == sorted(order) == first + second
    calls_for = dict(resolved)
    # the first batch was covered by the held fsync, the second needed a later one
    assert all(calls_for[p] >= 1 for p in first)
    assert all(calls_for[p] >= 2 for p in second)


def _record_sync_threads(monkeypatch) -> list[int]:
    """Replace os.fdatasync by one that notes the calling thread of each call."""
    threads: list[int] = []
    real = os.fdatasync

    def record(fd: int) -> None:
        threads.append(threading.get_ident())
        real(fd)

    monkeypatch.setattr(os, "fdatasync", record)
    return threads


async def _flusher_idle(factory: Any) -> None:
    """Wait (bounded) until the flusher is idle: a `fresh` pool job lets its ledger go
    (and the thread ends its round) just after handing the batches back, and no sync is
    inline before."""
    for _ in range(1000):
        if factory._flusher.idle:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the flusher stayed busy for 5 s")


def test_idle_flusher_lets_the_loop_sync_a_lone_batch(make_factory, monkeypatch):
    threads = _record_sync_threads(monkeypatch)
    # (no slow-sync back-off here, whatever a busy machine's disk does: tested below)
    f = make_factory(fsync="group", inline_sync_slow_s=60)
    ml = f.open("t")

    async def go():
        loop_thread = threading.get_ident()
        await ml.append(b"first")  # (a fresh segment's first sync is never inline: below)
        await _flusher_idle(f)
        for i in range(5):  # one send at a time, as an unbatched producer does
            before = len(threads)
            fut = ml.append(b"x%d" % i)
            assert not fut.done()  # written and synced at the end of the loop iteration
            await fut
            assert threads[before:] == [loop_thread]  # one fdatasync, on the loop thread
            assert ml.last_confirmed() == fut.result()

    run(go())


def test_no_inline_sync_while_a_ledger_is_being_closed(make_factory, monkeypatch):
    """While another ledger's close is under way (its seal goes through the file system's
    journal, which an fdatasync then waits for), a lone batch is synced on the flusher
    thread, not on the loop; once the close is done, inline again."""
    threads = _record_sync_threads(monkeypatch)
    f = make_factory(fsync="group", inline_sync_slow_s=60)
    closing, staying = f.open("closing"), f.open("staying")

    async def go():
        loop_thread = threading.get_ident()
        await closing.append(b"first")
        await staying.append(b"first")
        await _flusher_idle(f)
        closed = closing.close_async()
        before = len(threads)
        await staying.append(b"during the close")
        assert threads[before:] and loop_thread not in threads[before:]
        await closed
        await _flusher_idle(f)
        before = len(threads)
        await staying.append(b"after the close")
        assert threads[before:] == [loop_thread]

    run(go())


def test_a_big_batch_goes_to_the_flusher_thread_even_when_idle(make_factory, monkeypatch):
    threads = _record_sync_threads(monkeypatch)
    f = make_factory(fsync="group")
    ml = f.open("t")

    async def go():
        await asyncio.gather(*[ml.append(b"z") for _ in range(256)])  # a stream, not a lone send
        assert threads and threading.get_ident() not in threads

    run(go())


def test_concurrent_batches_still_go_to_the_flusher_thread(make_factory, monkeypatch):
    threads = _record_sync_threads(monkeypatch)
    f = make_factory(fsync="group", inline_sync_slow_s=60)
    ledgers = [f.open(f"t{i}") for i in range(3)]

    async def go():
        loop_thread = threading.get_ident()
        # each ledger's first segment file is made on a storage thread: make them first
        await asyncio.gather(*[ml.append(b"w") for ml in ledgers])
        await _flusher_idle(f)
        del threads[:]
        futs = [ml.append(b"y") for ml in ledgers]  # three batches in one loop iteration
        await asyncio.gather(*futs)
        assert threads.count(loop_thread) == 1  # at most one inline sync per iteration
        assert len(threads) == 3

    run(go())


def test_one_fsync_covers_many_appends(make_factory, monkeypatch):
    rec = SyncRecorder()
    monkeypatch.setattr(os, "fdatasync", rec)
    f = make_factory(fsync="group")
    ml = f.open("t")
    run(append_all(ml, [b"x" * 100] * 2000))
    assert rec.calls < 100  # group commit, not one fsync per entry


def test_always_syncs_every_append(make_factory, monkeypatch):
    rec = SyncRecorder()
    monkeypatch.setattr(os, "fdatasync", rec)
    f = make_factory(fsync="always")
    ml = f.open("t")

    async def go():
        fut = ml.append(b"x")
        assert fut.done()  # written and synced inside append
        return [fut.result(), *await append_all(ml, [b"y"] * 9)]

    run(go())
    assert rec.calls >= 10


def test_never_does_not_sync(make_factory, monkeypatch):
    rec = SyncRecorder()
    monkeypatch.setattr(os, "fdatasync", rec)
    f = make_factory(fsync="never")
    ml = f.open("t")
    pos = run(append_all(ml, [b"x"] * 100))
    assert rec.calls == 0
    assert ml.read(pos[-1]) == b"x"


def test_several_ledgers_share_one_flusher(make_factory, monkeypatch):
    f = make_factory(fsync="group")
    ledgers = [f.open(f"t{i}") for i in range(5)]

    async def go():
        futs = [ml.append(b"%d" % k) for k in range(50) for ml in ledgers]
        return await asyncio.gather(*futs)

    run(go())
    names = {t.name for t in threading.enumerate() if t.name.startswith("magnetar-storage")}
    assert len(names) == 1
    assert all(ml.entry_count() == 50 for ml in ledgers)


class FakeClock:
    """The flusher's clock: a fake segment's sync advances it by its duration."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


class TimedSegment:
    """Stands in for a Segment: ``sync`` takes ``durations`` in turn (then the last one)
    on the fake clock and notes the thread it ran on."""

    path = "fake.seg"
    directory = "fake"
    dir_sync: list[str] = []  # (synced before: never a fresh segment)

    def __init__(self, clock: FakeClock, *durations: float) -> None:
        self.clock = clock
        self.durations = list(durations)
        self.threads: list[int] = []

    def sync(self) -> float:
        self.threads.append(threading.get_ident())
        took = self.durations.pop(0) if len(self.durations) > 1 else self.durations[0]
        self.clock.advance(took)
        return took


def test_a_slow_sync_stops_inline_syncs_for_the_back_off():
    """A sync slower than the threshold, on the loop or on the thread, keeps the loop from
    syncing inline for the back-off period (counted from the last slow sync); once that
    passed, the next lone batch is synced inline again (the probe)."""
    clock = FakeClock()
    flusher = Flusher(inline=True, slow_sync_s=0.002, backoff_s=10.0, clock=clock)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        done: list[Batch] = []

        def batch(seg: TimedSegment, on_done: Any = None) -> Batch:
            return Batch(seg, 0, [], [], loop, on_done or (lambda b, err: done.append(b)))  # type: ignore[arg-type]

        async def sync_on_thread(seg: TimedSegment) -> None:
            completed = asyncio.Event()

            def on_done(b: Batch, err: BaseException | None) -> None:
                done.append(b)
                completed.set()

            flusher.submit(batch(seg, on_done))
            await asyncio.wait_for(completed.wait(), 10)

        fast = TimedSegment(clock, 0.0002)
        for _ in range(3):  # fast syncs: the loop syncs each lone batch itself
            assert flusher.try_inline(batch(fast))
            await asyncio.sleep(0)  # next loop iteration
        assert fast.threads == [loop_thread] * 3 and not flusher.inline_paused

        slow = TimedSegment(clock, 0.3, 0.0002)
        assert flusher.try_inline(batch(slow))  # the first slow sync still runs on the loop
        await asyncio.sleep(0)
        assert flusher.inline_paused and flusher.slow_syncs == 1
        assert not flusher.try_inline(batch(fast))  # the thread takes it instead
        clock.advance(9.0)
        assert not flusher.try_inline(batch(fast))

        thread_slow = TimedSegment(clock, 0.05)
        await sync_on_thread(thread_slow)  # slow on the thread too: the back-off restarts
        assert thread_slow.threads and thread_slow.threads[0] != loop_thread
        assert flusher.slow_syncs == 2
        clock.advance(9.0)  # 18 s after the first slow sync, 9 s after the last
        assert not flusher.try_inline(batch(fast))
        await sync_on_thread(fast)  # fast syncs on the thread do not shorten it
        assert not flusher.try_inline(batch(fast))

        clock.advance(1.1)  # 10 s without a slow sync: probe again
        assert not flusher.inline_paused
        # (the thread marks itself idle just after it hands back its last round's results)
        deadline = time.monotonic() + 10
        while flusher._busy and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        inline_before = flusher.inline_rounds
        assert flusher.try_inline(batch(fast))
        assert flusher.inline_rounds == inline_before + 1
        assert len(done) == 3 + 1 + 2 + 1

    try:
        run(go())
    finally:
        flusher.stop()


def test_no_back_off_when_inline_syncs_are_off():
    """With inline syncs off, slow thread syncs are counted but change nothing."""
    clock = FakeClock()
    flusher = Flusher(inline=False, slow_sync_s=0.002, backoff_s=10.0, clock=clock)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        completed = asyncio.Event()
        seg = TimedSegment(clock, 0.5)
        flusher.submit(Batch(seg, 0, [], [], loop, lambda b, err: completed.set()))  # type: ignore[arg-type]
        await asyncio.wait_for(completed.wait(), 10)
        assert flusher.slow_syncs == 1
        assert not flusher.try_inline(Batch(seg, 0, [], [], loop, lambda b, err: None))  # type: ignore[arg-type]

    try:
        run(go())
    finally:
        flusher.stop()


def test_fast_syncs_keep_the_inline_saving(make_factory, monkeypatch):
    """With the default threshold and syncs that are fast, a lone sender's batches are
    synced inline (the optimisation is not lost to the back-off)."""
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)
    f = make_factory(fsync="group")
    ml = f.open("t")

    async def go() -> None:
        for i in range(50):
            await ml.append(b"x%d" % i)

    run(go())
    # (all but the first: a fresh segment's first sync is never inline)
    assert f._flusher.inline_rounds >= 49 and f._flusher.slow_syncs == 0


def test_a_fresh_segment_syncs_apart_and_its_ledger_keeps_its_order(make_factory, monkeypatch):
    """A new ledger's first sync (its directory too) runs on a `fresh` thread, never on
    the loop: while it is stalled, another ledger's appends are confirmed, and the new
    ledger's later appends wait for it and resolve in order."""
    from magnetar.storage import segment as segment_module

    real_fsync_dir = segment_module.fsync_dir
    stalled = threading.Event()
    release = threading.Event()
    threads: list[int] = []

    def fsync_dir(path: str) -> None:  # (patched once the steady ledger's was synced)
        threads.append(threading.get_ident())
        stalled.set()
        release.wait(30)
        real_fsync_dir(path)

    f = make_factory(fsync="group", inline_sync_slow_s=60, dir_fsync="always")
    steady = f.open("steady")

    async def go() -> None:
        loop_thread = threading.get_ident()
        await steady.append(b"s")  # its first sync done
        monkeypatch.setattr(segment_module, "fsync_dir", fsync_dir)
        fresh = f.open("new")
        resolved: list[Position] = []
        futs = [fresh.append(b"n%d" % i) for i in range(3)]
        for fut in futs:
            fut.add_done_callback(lambda d: resolved.append(d.result()))
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, stalled.wait, 30)
        more = [fresh.append(b"m%d" % i) for i in range(3)]  # behind the stalled sync
        for fut in more:
            fut.add_done_callback(lambda d: resolved.append(d.result()))
        for i in range(3):  # the other ledger is not held up
            await asyncio.wait_for(steady.append(b"s%d" % i), 30)
        assert not any(fut.done() for fut in futs + more)
        release.set()
        await asyncio.wait_for(asyncio.gather(*futs, *more), 30)
        assert resolved == sorted(resolved) and len(resolved) == 6
        assert threads and loop_thread not in threads

    try:
        run(go())
    finally:
        release.set()


class StalledFreshSegment:
    """Stands in for a new ledger's first segment: its sync waits for ``release``."""

    path = "fresh/0.seg"
    directory = "fresh"

    def __init__(self) -> None:
        self.dir_sync = [self.directory]
        self.started = threading.Event()
        self.release = threading.Event()

    def sync(self) -> float:
        self.started.set()
        assert self.release.wait(30)
        self.dir_sync = []
        return 0.0


def test_no_inline_sync_while_a_new_ledgers_first_sync_is_under_way():
    """While another ledger's first sync (its directory and new size: the journal's
    running transaction) is under way, the loop leaves a lone batch to the thread instead
    of blocking on an fdatasync that waits for that commit; once it ended, inline again."""
    clock = FakeClock()
    flusher = Flusher(inline=True, slow_sync_s=10.0, backoff_s=10.0, clock=clock)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        fresh = StalledFreshSegment()
        fresh_done = asyncio.Event()
        flusher.submit(Batch(fresh, 0, [], [], loop, lambda b, err: fresh_done.set()))  # type: ignore[arg-type]
        assert await loop.run_in_executor(None, fresh.started.wait, 30)
        other = TimedSegment(clock, 0.0002)
        other_done = asyncio.Event()
        other_batch = Batch(other, 0, [], [], loop, lambda b, err: other_done.set())  # type: ignore[arg-type]
        deadline = time.monotonic() + 10
        while flusher._busy and time.monotonic() < deadline:  # the round handed it off
            await asyncio.sleep(0.001)
        assert not flusher.try_inline(other_batch)
        flusher.submit(other_batch)  # the thread syncs it meanwhile
        await asyncio.wait_for(other_done.wait(), 10)
        assert not fresh_done.is_set()
        fresh.release.set()
        await asyncio.wait_for(fresh_done.wait(), 10)
        while not flusher.idle and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0)  # a new loop iteration
        assert flusher.try_inline(Batch(other, 1, [], [], loop, lambda b, err: None))  # type: ignore[arg-type]

    try:
        run(go())
    finally:
        flusher.stop()
