"""Delayed delivery: hold back entries whose ``deliver_at_time`` has not come yet.

Theory of operation
-------------------
Modelled on Pulsar's InMemoryDelayedDeliveryTracker, one per Shared / Key_Shared
subscription. When the dispatcher reads an entry whose metadata carries
``deliver_at_time`` it calls :meth:`DelayedDeliveryTracker.add`; ``False`` means "due
already, dispatch it now", ``True`` means the tracker now owns it and the dispatcher
skips it. Later the dispatcher asks :meth:`ready_positions` for what has come due and
re-reads those entries by position. :meth:`next_delivery_ms` tells it when to arm a
timer. Nothing here sleeps or reads a clock unless asked to: every call takes ``now_ms``
or falls back to the ``clock`` given at construction.

*Cut-off.* An entry is due when ``deliver_at_ms <= cutoff``. With ``strict=True`` (the
default here) the cut-off is ``now_ms``. With ``strict=False`` it is ``now_ms + tick_ms``,
Pulsar's default behaviour (``delayedDeliveryTickTimeMillis=1000``,
``isDelayedDeliveryDeliverAtTimeStrict=false``): messages may go out up to one tick early
so they do not bounce back into the tracker while being dispatched.

*Order.* A binary heap of ``(deliver_at_ms, ledger_id, entry_id)``: ``add`` and each
popped position cost O(log n); due positions come out by time, then position. A position
is tracked once: adding it again while it is still held is a no-op that returns ``True``
(a redelivery of a held entry must not deliver it twice). :meth:`remove` drops a position
lazily (its heap slot is skipped when reached).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

__all__ = ["DelayedDeliveryTracker", "Position"]

Position = tuple[int, int]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class DelayedDeliveryTracker:
    """Positions waiting for their delivery time; see the module docstring."""

    def __init__(
        self,
        *,
        tick_ms: int = 1000,
        strict: bool = True,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        if tick_ms < 0:
            raise ValueError("tick_ms must be >= 0")
        self.tick_ms = tick_ms
        self.strict = strict
        self._clock = clock
        self._heap: list[tuple[int, int, int]] = []
        self._due: dict[Position, int] = {}  # live positions -> deliver_at_ms

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, position: object) -> bool:
        return position in self._due

    def cutoff_ms(self, now_ms: int | None = None) -> int:
        """Entries with ``deliver_at_ms`` at or below this are due."""
        now = self._clock() if now_ms is None else now_ms
        return now if self.strict else now + self.tick_ms

    def next_delivery_ms(self) -> int | None:
        """The earliest held ``deliver_at_ms``, or ``None`` when nothing is held."""
        self._drop_stale_top()
        return self._heap[0][0] if self._heap else None

    def has_ready(self, now_ms: int | None = None) -> bool:
        nxt = self.next_delivery_ms()
        return nxt is not None and nxt <= self.cutoff_ms(now_ms)

    # ------------------------------------------------------------------ updates

    def add(
        self, ledger_id: int, entry_id: int, deliver_at_ms: int, now_ms: int | None = None
    ) -> bool:
        """Hold ``(ledger_id, entry_id)`` until ``deliver_at_ms``.

        Returns ``False`` (and holds nothing) when it is due already, so the caller
        dispatches it at once; ``True`` when the tracker holds it.
        """
        pos = (ledger_id, entry_id)
        if pos in self._due:
            return True
        if deliver_at_ms < 0 or deliver_at_ms <= self.cutoff_ms(now_ms):
            return False
        self._due[pos] = deliver_at_ms
        heapq.heappush(self._heap, (deliver_at_ms, ledger_id, entry_id))
        return True

    def ready_positions(self, now_ms: int | None = None, limit: int | None = None) -> list[Position]:
        """Remove and return up to ``limit`` due positions, by time then position."""
        cutoff = self.cutoff_ms(now_ms)
        out: list[Position] = []
        heap = self._heap
        while heap and (limit is None or len(out) < limit):
            at, ledger_id, entry_id = heap[0]
            pos = (ledger_id, entry_id)
            if self._due.get(pos) != at:  # removed since it was pushed
                heapq.heappop(heap)
                continue
            if at > cutoff:
                break
            heapq.heappop(heap)
            del self._due[pos]
            out.append(pos)
        return out

    def remove(self, ledger_id: int, entry_id: int) -> bool:
        """Stop holding a position (e.g. it was acknowledged); True if it was held."""
        found = self._due.pop((ledger_id, entry_id), None) is not None
        if found and len(self._heap) > 2 * len(self._due) + 64:
            # too many dead slots: rebuild from the live positions, O(n)
            self._heap = [(at, lid, eid) for (lid, eid), at in self._due.items()]
            heapq.heapify(self._heap)
        return found

    def clear(self) -> None:
        self._heap.clear()
        self._due.clear()

    def _drop_stale_top(self) -> None:
        heap = self._heap
        while heap:
            at, ledger_id, entry_id = heap[0]
            if self._due.get((ledger_id, entry_id)) == at:
                return
            heapq.heappop(heap)
