"""Exponential reconnection backoff with jitter."""

from __future__ import annotations

import random


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
