"""The data directory's disk usage and the read-only mode it puts the storage in
(`DiskUsage`), as BookKeeper's disk checker does for a bookie.

Theory of operation. Every ``interval_s`` one ``statvfs`` of the data directory (on a
thread: a stalled file system holds up no event loop) gives the space used and the space
left. Past ``warn`` (the fraction of the file system used) one warning is logged. Past
``full``, or with less than ``min_free_bytes`` left (the floor that keeps room for cursors,
metadata and the segments already open), the storage is *read-only*: `refusal` then says
why, naming the disk and its free space, and the broker refuses new writes with that text
while reads and acknowledgements go on. It is writable again once a check finds the usage
below ``lwm`` (the low-water mark: no flapping on the edge) and the floor free. A write the
file system refused for want of space (`no_space`, from ENOSPC or EDQUOT) makes it
read-only at once, whatever the fractions say, until a check finds ``min_free_bytes`` free
and at least `NO_SPACE_ROOM` (so a disk at 100% does not turn writable at every check, to
fail the next write again), one interval after the failure at the earliest (a quota or
inodes run out while statvfs shows room: writes are then tried again once an interval).
Each change of state is one log line; so are the start and the end of a time the
directory cannot be measured (a network file system not answering), however long.

`update` is the state machine alone (no I/O), so it is tested with made-up usages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass

from .episodes import Episode
from .errors import is_no_space

log = logging.getLogger(__name__)

__all__ = ["OK", "READ_ONLY", "WARN", "DiskUsage", "Usage", "is_no_space", "measure"]

OK = "ok"
WARN = "warn"
READ_ONLY = "read-only"
#: After a write failed for want of space, writable again only with this much free (and
#: the floor): a disk at 100% would otherwise turn writable at every check.
NO_SPACE_ROOM = 8 * 1024 * 1024


@dataclass(frozen=True)
class Usage:
    """One measurement of the file system holding ``path``: bytes in all and bytes free
    for an unprivileged writer (``f_bavail``: root's reserved blocks do not count)."""

    path: str
    total: int
    free: int

    @property
    def used(self) -> float:
        """The fraction of the file system in use (0.0 to 1.0)."""
        return (self.total - self.free) / self.total if self.total > 0 else 0.0


def measure(path: str) -> Usage:
    """``statvfs`` of ``path`` (raises OSError)."""
    st = os.statvfs(path)
    return Usage(path, st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MB"


class DiskUsage:
    """The data directory's disk state: ``state`` is OK, WARN or READ_ONLY; ``read_only``
    is the one attribute the publish path reads."""

    def __init__(
        self,
        path: str,
        warn: float = 0.90,
        full: float = 0.95,
        lwm: float = 0.90,
        min_free_bytes: int = 100 * 1024 * 1024,
        interval_s: float = 0.5,
    ) -> None:
        if not 0 < full <= 1 or not 0 < warn <= 1 or not 0 < lwm <= full:
            raise ValueError(
                f"disk usage thresholds must be fractions in (0, 1] with lwm <= full "
                f"(warn {warn}, full {full}, lwm {lwm})")
        if min_free_bytes < 0 or interval_s <= 0:
            raise ValueError("the free-space floor must be >= 0 and the check interval > 0")
        self.path = path
        self.warn = warn
        self.full = full
        self.lwm = lwm
        self.min_free_bytes = min_free_bytes
        self.interval_s = interval_s
        self.state = OK
        self.read_only = False
        self.last: Usage | None = None
        self._no_space: str | None = None  # what a write refused for want of space said
        self._no_space_at = 0.0  # when (monotonic)
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self.unmeasurable = Episode(log, f"cannot measure the disk usage of {path}")

    # -- the state machine ----------------------------------------------------------

    def update(self, usage: Usage) -> None:
        """Take a measurement: move between OK, WARN and READ_ONLY (one log line each)."""
        self.last = usage
        low_floor = usage.free < self.min_free_bytes
        if (self._no_space is not None and usage.free >= max(self.min_free_bytes, NO_SPACE_ROOM)
                and time.monotonic() - self._no_space_at >= self.interval_s):
            self._no_space = None
        if self.read_only:
            over = self._no_space is not None or low_floor or usage.used >= self.lwm
        else:
            over = low_floor or usage.used >= self.full
        if over:
            self._enter(READ_ONLY, usage)
        elif usage.used >= self.warn:
            self._enter(WARN, usage)
        else:
            self._enter(OK, usage)

    def no_space(self, detail: str) -> None:
        """A write failed for want of space: read-only now, until a check finds room."""
        self._no_space = detail
        self._no_space_at = time.monotonic()
        if not self.read_only:
            self.state = READ_ONLY
            self.read_only = True
            log.error("data directory %s is read-only: a write failed for want of space (%s); "
                      "producers are refused until space is freed", self.path, detail)
        if self._wake is not None:
            self._wake.set()  # measure now

    def _enter(self, state: str, usage: Usage) -> None:
        if state == self.state:
            return
        before, self.state = self.state, state
        self.read_only = state == READ_ONLY
        where = f"{self.path}: {usage.used:.1%} used, {_mb(usage.free)} free of {_mb(usage.total)}"
        if state == READ_ONLY:
            log.error("data directory %s: read-only (threshold %.0f%%, floor %s): new writes "
                      "are refused, reads and acknowledgements go on", where, self.full * 100,
                      _mb(self.min_free_bytes))
        elif state == WARN:
            log.warning("data directory %s: past the warning threshold %.0f%%%s", where,
                        self.warn * 100, " (writable again)" if before == READ_ONLY else "")
        else:
            log.info("data directory %s: %s", where,
                     "writable again" if before == READ_ONLY else "below the warning threshold")

    def refusal(self) -> str | None:
        """Why writes are refused (the disk and its free space), or None when writable."""
        if not self.read_only:
            return None
        usage = self.last
        free = "" if usage is None else (
            f": {_mb(usage.free)} free of {_mb(usage.total)} ({usage.used:.1%} used)")
        if self._no_space is not None:
            return (f"disk of {self.path} is full{free}; writes are refused until space is "
                    f"freed ({self._no_space})")
        return (f"disk of {self.path} is full{free}; writes are refused until it is below "
                f"{self.lwm:.0%} used with {_mb(self.min_free_bytes)} free")

    def status(self) -> dict[str, object]:
        """The state for the health endpoint and metrics."""
        usage = self.last
        return {
            "path": self.path,
            "state": self.state,
            "readOnly": self.read_only,
            "usedFraction": None if usage is None else round(usage.used, 4),
            "freeBytes": None if usage is None else usage.free,
            "totalBytes": None if usage is None else usage.total,
        }

    # -- the periodic check ---------------------------------------------------------

    async def check(self) -> None:
        """One measurement, on a thread; an unreadable directory is skipped (logged when
        that starts and when it ends, not at every check)."""
        try:
            usage = await asyncio.get_running_loop().run_in_executor(None, measure, self.path)
        except OSError as exc:
            self.unmeasurable.failed(exc)
            return
        self.unmeasurable.succeeded()
        self.update(usage)

    def start(self) -> None:
        """Check now and every ``interval_s`` (and at once after `no_space`), until `stop`."""
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._run())

    def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            wake.clear()  # (a `no_space` during the check wakes the next one at once)
            await self.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self.interval_s)
