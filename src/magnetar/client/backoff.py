"""Exponential reconnection backoff with jitter, and retrying a first connection."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from magnetar.client.errors import (
    RETRIABLE_CODES,
    ConnectError,
    NotConnected,
    ServerError,
    Timeout,
    TlsError,
    WrongServiceUrl,
)

R = TypeVar("R")


class Backoff:
    def __init__(self, initial: float = 0.1, maximum: float = 30.0) -> None:
        self._initial = initial
        self._max = maximum
        self._next = initial

    def next(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._max)
        return delay * (0.9 + 0.2 * random.random())

    def reset(self) -> None:
        self._next = self._initial


def retriable(exc: BaseException) -> bool:
    """Worth another try: the broker was unreachable, busy or not ready yet."""
    if isinstance(exc, ServerError):
        return exc.code in RETRIABLE_CODES
    if isinstance(exc, TlsError | WrongServiceUrl):
        return False
    return isinstance(exc, ConnectError | NotConnected | Timeout | OSError)


async def with_retries(attempt: Callable[[], Awaitable[R]], budget: float,
                       connect_budget: float | None = None) -> R:
    """Run ``attempt`` until it succeeds, retrying retriable failures with backoff for
    up to ``budget`` seconds (the client's operation timeout). ``connect_budget``, when
    given, bounds the retries of a broker that cannot be reached at all (the client's
    connection timeout, while it has never reached its service URL): a wrong URL fails
    within it, with the last error and how long it was tried."""
    start = time.monotonic()
    deadline = start + budget
    backoff = Backoff()
    while True:
        try:
            return await attempt()
        except Exception as exc:
            delay = backoff.next()
            now = time.monotonic()
            if not retriable(exc) or now + delay > deadline:
                raise
            if (connect_budget is not None and isinstance(exc, ConnectError)
                    and now + delay > start + connect_budget):
                raise ConnectError(f"{exc} (tried for {now - start:.0f} s, within the connection "
                                   f"timeout of {connect_budget:g} s)") from None
        await asyncio.sleep(delay)
