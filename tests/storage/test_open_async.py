"""`ManagedLedgerFactory.open_async`: the recovery scan and storage.db reads of an open run on
the readers threads; concurrent opens of one ledger share one scan, and a synchronous open
or a delete meanwhile waits for that scan instead of scanning the same files again."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from magnetar.storage import LedgerClosedError, ManagedLedgerFactory, Position
from magnetar.storage import factory as factory_module
from magnetar.storage.segment import Segment

from .storage_testlib import append_all, run


@pytest.fixture
def counted_scans(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], threading.Event]:
    """Every scan_segments call is recorded (with its thread name) and waits for the event."""
    scans: list[str] = []
    release = threading.Event()
    real = factory_module.scan_segments

    def scan(directory: str, synced_before: int | None = None) -> list[Segment]:
        scans.append(threading.current_thread().name)
        release.wait(10)
        return real(directory, synced_before)

    monkeypatch.setattr(factory_module, "scan_segments", scan)
    return scans, release


def test_open_async_scans_off_the_loop_once_for_concurrent_opens(
    make_factory: Callable[..., ManagedLedgerFactory], counted_scans: tuple[list[str], threading.Event]
) -> None:
    scans, release = counted_scans
    f = make_factory()
    release.set()
    ml = f.open("t")
    positions = run(append_all(ml, [b"a", b"b", b"c"]))
    ml.open_cursor("c", "earliest").mark_delete(positions[0])
    ml.close()
    scans.clear()
    release.clear()

    async def main() -> list[Any]:
        opens = [asyncio.ensure_future(f.open_async("t")) for _ in range(3)]
        ticks = 0
        while not scans or ticks < 5:  # the loop keeps turning while the scan waits
            await asyncio.sleep(0.01)
            ticks += 1
        assert not any(o.done() for o in opens)
        release.set()
        return list(await asyncio.gather(*opens))

    opened = run(main())
    assert opened[0] is opened[1] is opened[2]
    assert len(scans) == 1 and scans[0].startswith("magnetar-read")
    reopened = opened[0]
    assert [d for _, d in reopened.read_entries(Position(-1, -1), 10)] == [b"a", b"b", b"c"]
    assert reopened.cursors()["c"].mark_delete_position == positions[0]
    assert f.open("t") is reopened


def test_a_sync_open_or_delete_during_open_async_waits_for_its_scan(
    make_factory: Callable[..., ManagedLedgerFactory], counted_scans: tuple[list[str], threading.Event]
) -> None:
    scans, release = counted_scans
    f = make_factory()

    async def main() -> None:
        pending = asyncio.ensure_future(f.open_async("t"))
        while not scans:
            await asyncio.sleep(0.01)
        threading.Timer(0.2, release.set).start()
        ml = f.open("t")  # blocks for the scan under way, does not start another
        assert len(scans) == 1
        assert await pending is ml

        release.clear()
        scans.clear()
        ml.close()
        pending = asyncio.ensure_future(f.open_async("t"))
        while not scans:
            await asyncio.sleep(0.01)
        threading.Timer(0.2, release.set).start()
        f.delete("t")
        with pytest.raises(LedgerClosedError):
            await pending
        assert len(scans) == 1
        assert not f.exists("t")

    run(main())


def test_open_async_reports_a_failed_scan_and_a_later_open_retries(
    make_factory: Callable[..., ManagedLedgerFactory], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = make_factory()
    real = factory_module.scan_segments
    failures = [OSError("disk on fire (injected)")]

    def scan(directory: str, synced_before: int | None = None) -> list[Segment]:
        if failures:
            raise failures.pop()
        return real(directory, synced_before)

    monkeypatch.setattr(factory_module, "scan_segments", scan)
    with pytest.raises(Exception, match="disk on fire"):
        run(f.open_async("t"))
    ml = run(f.open_async("t"))
    assert f.open("t") is ml
