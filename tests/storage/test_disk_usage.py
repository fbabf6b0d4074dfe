"""`DiskUsage`'s state machine with made-up measurements (no I/O), and one real check."""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from pathlib import Path

import pytest

from magnetar.storage.disk_usage import NO_SPACE_ROOM, OK, READ_ONLY, WARN, DiskUsage, Usage
from magnetar.storage.errors import NoSpaceError, StorageError, append_error, is_no_space

MB = 1024 * 1024
TOTAL = 1000 * MB


def used(fraction: float) -> Usage:
    return Usage("/data", TOTAL, int(TOTAL * (1 - fraction)))


def test_thresholds_warn_then_read_only_then_back_below_the_low_water_mark(
        caplog: pytest.LogCaptureFixture) -> None:
    disk = DiskUsage("/data", warn=0.80, full=0.95, lwm=0.90, min_free_bytes=10 * MB)
    caplog.set_level(logging.INFO, logger="magnetar.storage.disk_usage")
    disk.update(used(0.5))
    assert disk.state == OK and disk.refusal() is None
    disk.update(used(0.85))
    assert disk.state == WARN and not disk.read_only
    disk.update(used(0.96))
    assert disk.state == READ_ONLY and disk.read_only
    refusal = disk.refusal()
    assert refusal is not None and "/data" in refusal and "40.0 MB free" in refusal
    disk.update(used(0.96))  # no new log line for the same state
    disk.update(used(0.92))  # below the threshold, above the low-water mark: still read-only
    assert disk.read_only
    disk.update(used(0.89))
    assert disk.state == WARN and not disk.read_only
    assert len([r for r in caplog.records if "read-only" in r.getMessage()]) == 1
    assert len(caplog.records) == 3  # warn, read-only, warn (writable again): one line each


def test_the_free_space_floor_makes_it_read_only_whatever_the_fraction() -> None:
    disk = DiskUsage("/data", full=0.95, lwm=0.90, min_free_bytes=100 * MB)
    disk.update(Usage("/data", 120 * MB, 90 * MB))  # 25 % used, but under the floor
    assert disk.read_only
    disk.update(Usage("/data", 220 * MB, 190 * MB))
    assert not disk.read_only


def test_a_write_refused_for_want_of_space_holds_until_there_is_room() -> None:
    disk = DiskUsage("/data", full=1.0, lwm=1.0, min_free_bytes=0, interval_s=0.05)
    disk.update(Usage("/data", TOTAL, MB))
    assert not disk.read_only
    disk.no_space("append to t failed: [Errno 28] No space left on device")
    assert disk.read_only
    refusal = disk.refusal()
    assert refusal is not None and "No space left" in refusal
    disk.update(Usage("/data", TOTAL, MB))  # a check at once: no room yet, no flapping
    assert disk.read_only
    disk.update(Usage("/data", TOTAL, NO_SPACE_ROOM))  # room, but at once: still read-only
    assert disk.read_only
    time.sleep(disk.interval_s)
    disk.update(Usage("/data", TOTAL, NO_SPACE_ROOM))
    assert not disk.read_only and disk.refusal() is None


def test_bad_thresholds_are_refused() -> None:
    with pytest.raises(ValueError):
        DiskUsage("/data", full=0.9, lwm=0.95)
    with pytest.raises(ValueError):
        DiskUsage("/data", full=1.5)


def test_no_space_errors_are_told_apart() -> None:
    full = OSError(errno.ENOSPC, "No space left on device")
    assert isinstance(append_error("append failed", full), NoSpaceError)
    assert is_no_space(OSError(errno.EDQUOT, "Disk quota exceeded"))
    other = append_error("append failed", OSError(errno.EIO, "Input/output error"))
    assert type(other) is StorageError and not is_no_space(other)


def test_a_real_check_measures_the_directory(tmp_path: Path) -> None:
    disk = DiskUsage(str(tmp_path), full=1.0, lwm=1.0, min_free_bytes=0)

    async def check() -> None:
        await disk.check()

    asyncio.run(check())
    assert disk.last is not None and disk.last.total > 0
    assert disk.status()["path"] == str(tmp_path)
