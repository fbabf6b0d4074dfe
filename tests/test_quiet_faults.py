"""Quiet under faults (issue 38, item 6): a fault that persists is logged when it starts
and when it ends, with a count, not at every check; the CLI stops quietly when the reader
of its output goes away (``magnetar admin topics lookup X | head -1``)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from pathlib import Path

import pytest

from magnetar.cli.main import BROKEN_PIPE_EXIT
from magnetar.storage.disk_usage import DiskUsage
from magnetar.testing import COMMAND, standalone


def test_an_unmeasurable_disk_is_said_once_and_again_when_it_ends(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A real statvfs failing (the directory missing, as a mount not answering makes it
    fail) 20 checks in a row: one line; measurable again: one line with the count."""
    data = tmp_path / "data"
    disk = DiskUsage(str(data), min_free_bytes=0)

    async def checks(n: int) -> None:
        for _ in range(n):
            await disk.check()

    with caplog.at_level(logging.INFO, logger="magnetar.storage.disk_usage"):
        asyncio.run(checks(20))
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1 and "cannot measure the disk usage" in said[0], said
        data.mkdir()
        asyncio.run(checks(3))
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert "works again, after 20 failed checks" in said[1], said
    assert disk.last is not None  # measured once it could be
    assert not any(r.exc_info for r in caplog.records)


def closed_reader(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``magnetar args`` with its output's reader closed before it writes."""
    proc = subprocess.Popen([*COMMAND, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head -1` does once it has its line
    err = proc.stderr.read()
    proc.stderr.close()
    return subprocess.CompletedProcess(args, proc.wait(timeout=120), "", err)


def test_the_cli_stops_quietly_when_its_reader_goes_away() -> None:
    with standalone() as broker:
        done = closed_reader("admin", "--admin-url", broker.web_service_url,
                             "topics", "lookup", "persistent://public/default/pipe")
    assert done.returncode == BROKEN_PIPE_EXIT, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
