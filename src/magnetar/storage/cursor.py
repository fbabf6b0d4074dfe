"""`ManagedCursor`: one durable subscription's acknowledgement state on a managed ledger.

State: the mark-delete position (everything ``<=`` it is acknowledged), the individually
deleted ranges above it (kept merged as ranges), and batch ack sets (bitset words as on the
wire, a set bit = still unacknowledged) for partially acknowledged batch entries.

Persistence (bounded cost): a change only marks the cursor dirty; the factory writes all
dirty cursors in one SQLite transaction at most ``cursor_persist_interval_s`` later (when an
event loop is running, on its cursor writer thread), on `persist_async()` (the same thread,
awaited) or `persist()` (blocking), and on close. A new cursor's first row is written off
the loop too, ordered after its ledger's queued work (see `ManagedLedger.open_cursor`). One write is one row per cursor holding
the mark-delete position plus at most ``cursor_max_persisted_ranges`` ranges and batch ack
sets (the lowest ones); nothing unbounded is rewritten per acknowledgement.

How far a cursor can lag after a crash (at-least-once): after a process crash, by the
acknowledgements of the last ``cursor_persist_interval_s`` (default 1 s); after a power
loss, also by SQLite commits not yet checkpointed (WAL, synchronous=NORMAL). Ranges or
ack sets beyond the persisted cap are also forgotten. Forgotten acknowledgements mean
redelivery, never loss: the cursor only ever restarts at or before where it was.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from itertools import zip_longest
from typing import TYPE_CHECKING, Any

from .errors import StorageError
from .position import EARLIEST, Position
from .ranges import PositionRangeSet

if TYPE_CHECKING:
    from .ledger import ManagedLedger

log = logging.getLogger(__name__)


class ManagedCursor:
    """Acknowledgement state of one subscription. Event loop thread only."""

    def __init__(self, ledger: ManagedLedger, name: str, mark_delete: Position) -> None:
        self.ledger = ledger
        self.name = name
        self._md = mark_delete
        self._ranges = PositionRangeSet()
        self.batch_ack_sets: dict[Position, list[int]] = {}
        # named numbers stored with the cursor (Pulsar's cursor properties), such as
        # ``pulsar.replicated.subscription``; change them through `set_property`
        self.properties: dict[str, int] = {}
        self.dirty = False
        self.closed = False
        # a new cursor's first row, while it is being written (see ManagedLedger.open_cursor)
        self.creating: Future[Any] | None = None

    # ------------------------------------------------------------------ state
    @property
    def mark_delete_position(self) -> Position:
        return self._md

    @property
    def individually_deleted(self) -> list[tuple[Position, Position]]:
        """Acknowledged ranges above the mark-delete position (inclusive, sorted)."""
        return self._ranges.ranges()

    def is_deleted(self, p: Position) -> bool:
        """True if ``p`` is acknowledged (batch entries: only once every index is)."""
        return p <= self._md or self._ranges.containing(p) >= 0

    def batch_ack_set(self, p: Position) -> list[int] | None:
        """The ack set of a partially acknowledged batch entry, if any."""
        return self.batch_ack_sets.get(p)

    # ------------------------------------------------------------------ acknowledging
    def mark_delete(self, p: Position) -> None:
        """Acknowledge everything up to and including ``p`` (never moves backwards;
        clamped to the last confirmed entry)."""
        p = Position(*p)
        lac = self.ledger.last_confirmed()
        if lac is not None and p > lac:
            p = lac
        if p <= self._md:
            return
        self._md = p
        self._absorb()
        self._changed()

    def delete(self, positions: Iterable[Position]) -> None:
        """Acknowledge individual positions."""
        lac = self.ledger.last_confirmed()
        if lac is None:
            return
        md = self._md
        ranges = self._ranges
        next_of = self.ledger.next_position
        changed = False
        for p in positions:
            if p <= md or p > lac:
                continue
            p = Position(*p)
            if ranges.add(p, next_of):
                changed = True
            self.batch_ack_sets.pop(p, None)
        if changed:
            self._absorb()
            self._changed()

    def delete_range(self, first: Position, last: Position) -> None:
        """Acknowledge every entry from ``first`` through ``last`` (inclusive; clamped to
        the last confirmed entry) in one step, however many there are: a run the reader
        skips as a whole (a segment whose file is missing)."""
        lac = self.ledger.last_confirmed()
        if lac is None:
            return
        first, last = Position(*first), Position(*min(last, lac))
        if last <= self._md or last < first:
            return
        self._ranges.add_range(first, last)
        acks = self.batch_ack_sets
        for p in [p for p in acks if first <= p <= last]:
            del acks[p]
        self._absorb()
        self._changed()

    def set_property(self, name: str, value: int | None) -> None:
        """Set (None: remove) a property; stored with the cursor's next write."""
        if self.properties.get(name) == value:
            return
        if value is None:
            self.properties.pop(name, None)
        else:
            self.properties[name] = value
        self._changed()

    def set_batch_ack(self, p: Position, ack_set: list[int]) -> None:
        """Record a partial acknowledgement of batch entry ``p``. Merged with what was
        recorded before by AND (a cleared bit = acknowledged; bits never come back).
        Once every bit is clear the entry is acknowledged as a whole. A position that
        names no stored entry is ignored (nothing is kept for it)."""
        p = Position(*p)
        if not self.ledger.contains(p) or self.is_deleted(p):
            return
        old = self.batch_ack_sets.get(p)
        words = (
            list(ack_set)
            if old is None
            else [a & b for a, b in zip_longest(old, ack_set, fillvalue=-1)]
        )
        if not any(words):
            self.delete([p])
            return
        self.batch_ack_sets[p] = words
        self._changed()

    def reset(self, p: Position) -> None:
        """Seek: the next entry to deliver becomes the first one ``>= p``. Forgets every
        acknowledgement above the new mark-delete position."""
        p = Position(*p)
        md = Position(p.ledger_id, p.entry_id - 1)
        lac = self.ledger.last_confirmed()
        if lac is None:
            md = EARLIEST
        elif md > lac:
            md = lac
        self._md = md
        self._ranges.clear()
        self.batch_ack_sets.clear()
        self._changed()

    def _absorb(self) -> None:
        """Fold ranges adjacent to the mark-delete position into it."""
        ranges = self._ranges
        md = self._md
        if ranges:
            ranges.remove_through(md)
            next_of = self.ledger.next_position
            while ranges:
                start, end = ranges.first()
                # remove_through may leave a start that names no entry (md's entry id + 1
                # when md ends its ledger): compare by order, not equality
                following = next_of(md)
                if start <= md or (following is not None and start <= following):
                    md = end
                    ranges.pop_first()
                else:
                    break
            self._md = md
        acks = self.batch_ack_sets
        if acks:
            for k in [k for k in acks if k <= md]:
                del acks[k]

    # ------------------------------------------------------------------ reading helpers
    def first_unacked_after(self, p: Position | None = None) -> Position | None:
        """The first confirmed position ``> p`` (and above the mark-delete position) that
        is not acknowledged, or None if there is none yet."""
        q = self._md if p is None or p < self._md else Position(*p)
        ledger = self.ledger
        ranges = self._ranges
        while True:
            n = ledger.next_position(q)
            if n is None:
                return None
            i = ranges.containing(n)
            if i < 0:
                return n
            q = ranges.end_of(i)

    @property
    def read_position(self) -> Position | None:
        """The first entry still to deliver from scratch (None when caught up)."""
        return self.first_unacked_after(None)

    def unacked_positions(self, after: Position | None = None) -> Iterator[Position]:
        """Positions not yet acknowledged, ascending, after ``after`` (default: from the
        mark-delete position)."""
        p = self.first_unacked_after(after)
        while p is not None:
            yield p
            p = self.first_unacked_after(p)

    def read_unacked(
        self, after: Position | None, max_entries: int, max_bytes: int | None = None
    ) -> list[tuple[Position, bytes | memoryview]]:
        """Up to ``max_entries`` unacknowledged entries after ``after`` with their data."""
        out: list[tuple[Position, bytes | memoryview]] = []
        start = self.first_unacked_after(after)
        ledger = self.ledger
        budget = max_bytes
        while start is not None and len(out) < max_entries:
            chunk = ledger.read_entries(start, max_entries - len(out), budget)
            if not chunk:
                break
            for pos, data in chunk:
                if not self.is_deleted(pos):
                    out.append((pos, data))
                    if budget is not None:
                        budget -= len(data)
            if budget is not None and budget <= 0:
                break
            start = self.first_unacked_after(chunk[-1][0])
        return out

    def backlog(self) -> int:
        """Confirmed entries not acknowledged (a partially acknowledged batch counts 1)."""
        ledger = self.ledger
        n = ledger.count_after(self._md)
        for start, end in self._ranges:
            n -= ledger.count_between(start, end)
        return n

    # ------------------------------------------------------------------ persistence
    def _changed(self) -> None:
        told = self.ledger.on_change
        if told is not None:
            told()
        if not self.dirty:
            self.dirty = True
            self.ledger._cursor_changed(self)

    def to_state(self, cap: int) -> dict[str, Any]:
        """The persisted form (at most ``cap`` ranges and ``cap`` ack sets)."""
        ranges = [[s[0], s[1], e[0], e[1]] for s, e in self._ranges.ranges()[:cap]]
        acks = sorted(self.batch_ack_sets.items())[:cap]
        state: dict[str, Any] = {
            "md": [self._md[0], self._md[1]],
            "r": ranges,
            "b": [[p[0], p[1], words] for p, words in acks],
        }
        if self.properties:
            state["p"] = dict(self.properties)
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        self._md = Position(*state["md"])
        self._ranges.clear()
        for sl, se, el, ee in state.get("r", ()):
            self._ranges.add_range(Position(sl, se), Position(el, ee))
        self.batch_ack_sets = {Position(lid, eid): list(w) for lid, eid, w in state.get("b", ())}
        self.properties = {str(k): int(v) for k, v in (state.get("p") or {}).items()}
        self._absorb()

    def persist(self) -> None:
        """Write the cursor now, on the calling thread (blocking: tests, tools)."""
        self.ledger._persist_cursors([self])

    async def persist_async(self) -> None:
        """Write the cursor's state as it is now on the factory's cursor writer thread
        (after the writes queued before it, its first row included) and wait for it: what
        the broker's explicit cursor moves (seek, reset, skip, clear backlog) await.
        StorageError if the write failed (the cursor stays dirty: the timer tries again)."""
        future = self.ledger._persist_cursor_later(self)
        if future is None:
            return
        try:
            await asyncio.shield(asyncio.wrap_future(future))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not self.closed:
                self.dirty = False
                self._changed()
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"persisting cursor {self.name} failed: {exc}") from exc

    def __repr__(self) -> str:
        return (
            f"ManagedCursor({self.ledger.name!r}, {self.name!r}, md={self._md}, "
            f"ranges={len(self._ranges)}, batch={len(self.batch_ack_sets)})"
        )
