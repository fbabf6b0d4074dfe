"""The process's file descriptors: its limit, how it is shared, and running out of them.

- `raise_open_files_limit` lifts the soft ``RLIMIT_NOFILE`` to the hard limit (what
  Pulsar's start scripts and most servers do at start).
- `plan_descriptors` shares the soft limit out: a fixed reserve (databases, listening
  sockets, the loop, files opened for a moment on the storage threads), then the segment
  files the storage keeps open (`FileLimiter`, at most ``magnetarMaxOpenFiles``), then room
  for connections, of which a part is kept for the HTTP port.
- `out_of_descriptors` recognises ``EMFILE``/``ENFILE`` anywhere in an exception's chain;
  `DescriptorAlarm` turns one into the message a client gets
  (``too many open files (limit N)``) and a log line at most once per interval that
  names the limit and what to do, never a traceback.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from dataclasses import dataclass
from typing import Any

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows
    resource = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

#: descriptors kept apart from every cache and connection (see the module docstring)
DEFAULT_RESERVE = 64
#: a floor on the segment files kept open, however low the limit
MIN_OPEN_FILES = 16
UNLIMITED = 1 << 30


def open_files_limit() -> tuple[int, int]:
    """The soft and hard ``RLIMIT_NOFILE`` (``UNLIMITED`` for infinity, or where unknown)."""
    if resource is None:  # pragma: no cover
        return UNLIMITED, UNLIMITED
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (UNLIMITED if soft == resource.RLIM_INFINITY else soft,
            UNLIMITED if hard == resource.RLIM_INFINITY else hard)


def raise_open_files_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; the soft limit in force after."""
    if resource is None:  # pragma: no cover
        return UNLIMITED
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError) as exc:  # e.g. a hard limit above the kernel's nr_open
            log.info("cannot raise the open files limit from %d to %d: %s", soft, hard, exc)
        else:
            log.debug("open files limit raised from %d to %d", soft, hard)
    return open_files_limit()[0]


@dataclass(frozen=True)
class DescriptorPlan:
    """How the soft limit is shared out (`plan_descriptors`)."""

    limit: int  #: the soft RLIMIT_NOFILE
    open_files: int  #: segment files the storage keeps open at most
    connections: int  #: binary-protocol connections at most (both ports)
    http_connections: int  #: HTTP connections at most


def plan_descriptors(limit: int, max_open_files: int, max_http_connections: int,
                     reserve: int = DEFAULT_RESERVE) -> DescriptorPlan:
    """Share ``limit`` descriptors out: ``reserve`` apart, then at most half of the rest
    (and at most ``max_open_files``) for segment files, the remainder for connections, of
    which a quarter at most (and at most ``max_http_connections``, 0: no cap) for HTTP."""
    if limit >= UNLIMITED:  # no limit to share
        return DescriptorPlan(limit, max_open_files, UNLIMITED,
                              max_http_connections if max_http_connections > 0 else UNLIMITED)
    usable = max(limit - reserve, 2 * MIN_OPEN_FILES)
    files = max(MIN_OPEN_FILES, min(max_open_files, usable // 2))
    room = max(usable - files, 2)
    http_share = max(1, room // 4)
    http = min(max_http_connections, http_share) if max_http_connections > 0 else http_share
    return DescriptorPlan(limit, files, max(1, room - http), http)


def out_of_descriptors(exc: BaseException | None) -> bool:
    """Whether ``exc`` or an exception in its chain (cause, context) is EMFILE/ENFILE."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class DescriptorAlarm:
    """Reports running out of descriptors: the client's message, one log line per
    ``interval`` seconds (with how many times it happened since the last line)."""

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self.count = 0
        self._unlogged = 0
        self._last_log = -interval

    @staticmethod
    def message() -> str:
        """What a refused client is told (retryable: ServiceNotReady)."""
        return f"too many open files (limit {open_files_limit()[0]})"

    def raised(self, where: str) -> str:
        """Count one refusal (``where``: what could not be done); the client's message."""
        self.count += 1
        self._unlogged += 1
        now = time.monotonic()
        if now - self._last_log >= self.interval:
            self._last_log = now
            soft, hard = open_files_limit()
            log.warning(
                "too many open files (limit %d, hard limit %d): %s; %d refusal(s) since the "
                "last report. Raise the limit (ulimit -n, systemd LimitNOFILE=) or lower "
                "magnetarMaxOpenFiles / brokerMaxConnections", soft, hard, where,
                self._unlogged)
            self._unlogged = 0
        return self.message()


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Make the loop report running out of descriptors (asyncio's accept loop logs it
    with a traceback, then retries a second later) through `ALARM`; other errors go to
    the handler set before."""
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if out_of_descriptors(context.get("exception")):
            ALARM.raised(str(context.get("message") or "accepting a connection"))
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


#: the process's one alarm (descriptors are the process's, whoever runs out)
ALARM = DescriptorAlarm()
