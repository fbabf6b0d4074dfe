"""One step of a coroutine run by hand, without a task (`step`).

The broker runs some coroutines eagerly, up to where they first wait, so that a command
whose answer is known at once is answered in the loop turn that read it (the coordinator's
commands on a broker alone, a transaction's first send on a topic). `step` sends None into
the coroutine and tells what happened: it finished (with its result), it raised (an
``Exception``: anything else, a cancellation included, goes up to the caller), or it
waits for something (what it yielded: a future, or None for a bare turn of the loop).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Final

#: `step`'s first element: the coroutine finished, the second is its result
DONE: Final = 0
#: the coroutine raised, the second element is the exception
RAISED: Final = 1
#: the coroutine waits, the second element is what it yielded
WAITS: Final = 2


def step(coro: Coroutine[Any, Any, Any]) -> tuple[int, Any]:
    """Send None into ``coro``: ``(DONE, result)``, ``(RAISED, exception)`` or
    ``(WAITS, what it yielded)``. A ``BaseException`` that is not an ``Exception``
    (``asyncio.CancelledError``, ``KeyboardInterrupt``) is not caught."""
    try:
        waiting = coro.send(None)
    except StopIteration as stop:
        return DONE, stop.value
    except Exception as exc:
        return RAISED, exc
    return WAITS, waiting


__all__ = ["DONE", "RAISED", "WAITS", "step"]
