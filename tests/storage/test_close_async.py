"""`ManagedLedger.close_async`: closing a ledger leaves its disk work to threads. Its pending
appends are committed by the flusher, the segments are sealed (reserved space cut, index
written, descriptors closed) on a readers thread; an open of the same name waits for all
of it, and a synchronous close (or open) meanwhile finishes it on the calling thread."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator

import pytest

from magnetar.storage import LedgerClosedError, ManagedLedgerFactory, Position
from magnetar.storage.segment import Segment

from .storage_testlib import append_all, run


class Held:
    """Stalls a storage function (in any thread) until ``release`` is set (10 s at most),
    noting the name of each thread that called it."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def hold(self) -> None:
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        self.release.wait(10)


@pytest.fixture
def held_seal(monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    """Writing an index sidecar and cutting reserved space stall (a slow disk)."""
    held = Held()
    real_index, real_cut = Segment.write_index, Segment.cut_reserve

    def write_index(self: Segment) -> None:
        held.hold()
        real_index(self)

    def cut_reserve(self: Segment) -> None:
        held.hold()
        real_cut(self)

    monkeypatch.setattr(Segment, "write_index", write_index)
    monkeypatch.setattr(Segment, "cut_reserve", cut_reserve)
    yield held
    held.release.set()


@pytest.fixture
def held_sync(monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    """fdatasync stalls (a slow disk)."""
    held = Held()
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        held.hold()
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    yield held
    held.release.set()


async def _turns_while(condition: Callable[[], bool], limit: float = 10) -> int:
    """Event-loop turns taken while ``condition`` holds (the loop is not blocked)."""
    turns = 0
    deadline = asyncio.get_running_loop().time() + limit
    while condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)
        turns += 1
    return turns


async def _spin(turns: int) -> None:
    """Let the loop turn a few times (what is held stays held: nothing here waits on it)."""
    for _ in range(turns):
        await asyncio.sleep(0.005)


def test_close_async_seals_off_the_loop_and_a_reopen_waits(
    make_factory: Callable[..., ManagedLedgerFactory], held_seal: Held
) -> None:
    f = make_factory()
    ml = f.open("t")
    payloads = [bytes([i]) * 1024 for i in range(100)]  # past 64 KiB: space is reserved
    positions = run(append_all(ml, payloads))
    seg = ml._segments[-1]
    assert seg.allocated > seg.end

    async def main() -> None:
        cursor = ml.open_cursor("c", "earliest")
        cursor.mark_delete(positions[9])
        closing = ml.close_async()
        assert not ml.is_open
        refused = ml.append(b"late")
        with pytest.raises(LedgerClosedError):
            await refused
        reopening = asyncio.ensure_future(f.open_async("t"))
        await _turns_while(lambda: not held_seal.entered.is_set())  # the loop turns meanwhile
        await _spin(10)
        assert not closing.done() and not reopening.done()  # the reopen waits for the close
        held_seal.release.set()
        await closing
        reopened = await reopening
        assert reopened is not ml
        got = reopened.read_entries(Position(-1, -1), 200)
        assert [d for _, d in got] == payloads
        assert reopened.cursors()["c"].mark_delete_position == positions[9]

    run(main())
    assert held_seal.threads and all(t.startswith("magnetar-read") for t in held_seal.threads)
    assert os.path.getsize(seg.path) == seg.end  # the reserved space was given back
    assert os.path.exists(seg.idx_path)
    assert seg.fd is None


def test_close_async_waits_for_the_pending_appends_without_blocking(
    make_factory: Callable[..., ManagedLedgerFactory], held_sync: Held
) -> None:
    """Appends made just before the close are committed by the flusher thread (a held
    fdatasync there holds the close, not the loop); they all succeed."""
    held_sync.release.set()
    f = make_factory(inline_sync_when_idle=False)
    ml = f.open("t")
    run(append_all(ml, [b"a"]))
    held_sync.release.clear()
    held_sync.threads.clear()

    async def main() -> list[Position]:
        pending = [ml.append(b"b%d" % i) for i in range(5)]
        closing = ml.close_async()
        await _turns_while(lambda: not held_sync.threads)
        await _spin(10)
        assert not closing.done() and not any(p.done() for p in pending)
        held_sync.release.set()
        await closing
        assert all(p.done() for p in pending)
        return [p.result() for p in pending]

    positions = run(main())
    assert not any(t == threading.main_thread().name for t in held_sync.threads)
    reopened = f.open("t")
    assert [d for _, d in reopened.read_entries(Position(-1, -1), 10)] == [b"a"] + [
        b"b%d" % i for i in range(5)]
    assert positions[-1] == reopened.last_confirmed()


def test_a_sync_open_during_close_async_finishes_the_close_first(
    make_factory: Callable[..., ManagedLedgerFactory], held_seal: Held
) -> None:
    """A synchronous open (tests, tools) of a ledger that is closing finishes the close on
    its own thread (it would wait for the loop otherwise); the close's future ends."""
    f = make_factory()
    ml = f.open("t")
    run(append_all(ml, [b"x"] * 3))

    async def main() -> None:
        closing = ml.close_async()
        threading.Timer(0.2, held_seal.release.set).start()
        reopened = f.open("t")  # blocks until the close is done, then scans
        assert not ml.is_open and reopened is not ml and reopened.entry_count() == 3
        await closing

    run(main())


def test_factory_close_finishes_a_close_async_under_way(
    make_factory: Callable[..., ManagedLedgerFactory], held_seal: Held
) -> None:
    f = make_factory()
    ml = f.open("t")
    run(append_all(ml, [b"x"] * 3))

    async def main() -> None:
        closing = ml.close_async()
        await _turns_while(lambda: not held_seal.entered.is_set())
        threading.Timer(0.2, held_seal.release.set).start()
        f.close()
        assert not f._closing
        await closing

    run(main())
    g = make_factory()
    assert g.open("t").entry_count() == 3


def test_terminate_async_writes_the_flag_off_the_loop(
    make_factory: Callable[..., ManagedLedgerFactory], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The terminated flag is written on the cursor writer thread: appends are refused at
    once, the call returns once it is stored, and a reopen sees it."""
    f = make_factory()
    ml = f.open("t")
    last = run(append_all(ml, [b"a", b"b"]))[-1]
    held = Held()
    real = f._save_ledger_meta

    def save(name: str, meta: dict[str, object]) -> None:
        held.hold()
        real(name, meta)

    monkeypatch.setattr(f, "_save_ledger_meta", save)

    async def main() -> None:
        terminating = asyncio.ensure_future(ml.terminate_async())
        again = asyncio.ensure_future(ml.terminate_async())
        await _turns_while(lambda: not held.entered.is_set())
        assert ml.is_terminated and not terminating.done() and not again.done()
        with pytest.raises(Exception, match="terminated"):
            await ml.append(b"c")
        held.release.set()
        assert await terminating == last
        assert await again == last

    run(main())
    assert held.threads == ["magnetar-meta_0"]
    ml.close()
    assert f.open("t").is_terminated
