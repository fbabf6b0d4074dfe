"""Small helpers for handing storage work between the event loop and the storage threads
with `concurrent.futures.Future`: futures nobody can cancel, waiting for several, copying
an outcome, running a function into a future, and the running loop if any."""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from .errors import LedgerClosedError


def all_done(futures: builtins.list[Future[Any]]) -> Future[None]:
    """A future done (with None) once every one of ``futures`` is, however it ended."""
    out: Future[None] = running_future()
    left = [len(futures)]
    lock = threading.Lock()

    def one(_: Future[Any]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            out.set_result(None)

    if not futures:
        out.set_result(None)
    for f in futures:
        f.add_done_callback(one)
    return out


def pending(future: Future[Any] | None) -> bool:
    return future is not None and not future.done()


def running_future() -> Future[Any]:
    """A future its owner completes, which nobody can cancel."""
    future: Future[Any] = Future()
    future.set_running_or_notify_cancel()
    return future


def run_into(out: Future[Any], fn: Callable[..., Any], *args: Any) -> None:
    """``fn(*args)`` here, its outcome into ``out``."""
    try:
        result = fn(*args)
    except BaseException as exc:
        out.set_exception(exc)
    else:
        out.set_result(result)


def copy_outcome(source: Future[Any], out: Future[Any]) -> None:
    if source.cancelled():
        out.set_exception(LedgerClosedError("storage work cancelled: shutting down"))
        return
    exc = source.exception()
    if exc is not None:
        out.set_exception(exc)
    else:
        out.set_result(source.result())


def running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
