"""Timers that turn unacknowledged messages into redelivery requests: the ack timeout
(``unacked_messages_timeout_ms``) and negative acks (``negative_ack_redelivery_delay_ms``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

#: (child consumer, (ledger, entry))
Key = tuple[Any, tuple[int, int]]


class RedeliveryTimer:
    """Entries due for redelivery at a deadline; ``fire(keys)`` gets the expired ones."""

    def __init__(self, delay: float, fire: Callable[[list[Key]], None],
                 tick: float | None = None) -> None:
        self._delay = delay
        self._fire = fire
        self._tick = tick
        self._due: dict[Key, float] = {}
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._due)

    def add(self, key: Key) -> None:
        deadline = time.monotonic() + self._delay
        self._due.pop(key, None)
        self._due[key] = deadline
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                self._tick or self._delay, self._run)

    def remove(self, key: Key) -> None:
        self._due.pop(key, None)

    def clear(self) -> None:
        self._due.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _run(self) -> None:
        self._timer = None
        now = time.monotonic()
        expired = [k for k, d in self._due.items() if d <= now]
        for k in expired:
            del self._due[k]
        if self._due:
            nearest = min(self._due.values())
            wait = max(0.001, nearest - now)
            if self._tick:
                wait = max(wait, self._tick)
            self._timer = asyncio.get_running_loop().call_later(wait, self._run)
        if expired:
            self._fire(expired)
