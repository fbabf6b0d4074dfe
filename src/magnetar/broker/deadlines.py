"""`Deadlines`: many keyed deadlines on one timer of the event loop.

A timer handle of the loop is not free: arming one allocates it, and cancelling one (or its
firing) closes it, which costs the loop one more turn. A transaction coordinator arms a
deadline for every transaction it opens and drops it at nearly every end, long before it
is due; with one timer per transaction that is an arming, a cancel and a loop turn per
transaction. Here the deadlines wait in a heap and one timer is armed at the earliest:
dropping a deadline is forgetting its key (its heap entry is skipped when it surfaces), and
a later deadline arms nothing, so a coordinator whose transactions all have one timeout
re-arms its timer about once per timeout, not once per transaction. The heap is rebuilt
from the live deadlines when the dropped ones outnumber them (amortized constant time).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

log = logging.getLogger(__name__)

#: how early a deadline may be taken as passed (the loop's timers are in milliseconds: one
#: may fire a little before the time it was armed for)
_EARLY = 0.001
#: dropped entries the heap may hold beyond twice the live ones before it is rebuilt
_SLACK = 64


class Deadlines(Generic[K]):
    """Keyed deadlines; ``expire(key)`` is called on the loop once a key's deadline has
    passed (and it was neither dropped nor set again meanwhile)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, expire: Callable[[K], None]) -> None:
        self._loop = loop
        self._expire = expire
        self._due: dict[K, float] = {}  # key -> its deadline (the loop's clock)
        self._heap: list[tuple[float, int, K]] = []  # (deadline, tie-break, key)
        self._pushed = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, key: object) -> bool:
        return key in self._due

    def set(self, key: K, delay: float) -> None:
        """``expire(key)`` in ``delay`` seconds (replacing the key's earlier deadline)."""
        at = self._loop.time() + max(0.0, delay)
        self._due[key] = at
        heap = self._heap
        if len(heap) > 2 * len(self._due) + _SLACK:
            heap[:] = [(when, n, k) for when, n, k in heap if self._due.get(k) == when]
            heapq.heapify(heap)
        self._pushed += 1
        heapq.heappush(heap, (at, self._pushed, key))
        if self._timer is None or at < self._timer_at:
            self._arm(at)

    def drop(self, key: K) -> None:
        """Forget ``key``'s deadline (nothing is cancelled: the timer, armed at the earliest
        deadline, skips it)."""
        self._due.pop(key, None)

    def clear(self) -> None:
        """Forget every deadline and cancel the timer."""
        self._due.clear()
        self._heap.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(at, self._fire)
        self._timer_at = at

    def _fire(self) -> None:
        self._timer = None
        heap, due = self._heap, self._due
        now = self._loop.time() + _EARLY
        expired: list[K] = []
        while heap and heap[0][0] <= now:
            at, _, key = heapq.heappop(heap)
            if due.get(key) == at:
                del due[key]
                expired.append(key)
        while heap and due.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)  # dropped, or set again later: not what the timer waits for
        if heap:
            self._arm(heap[0][0])
        for key in expired:
            try:
                self._expire(key)
            except Exception:  # (the other keys expire whatever one's owner raised)
                log.exception("expiring %r failed", key)


__all__ = ["Deadlines"]
