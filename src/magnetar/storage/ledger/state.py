"""`LedgerState`: the fields every part of `ManagedLedger` shares (segments, write
buffer, cursors, lifecycle state, set up in ``__init__``), and what positions the ledger
holds (`next_position`, `last_confirmed`, counts). The parts in the sibling modules are
mixins over it.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from ..cursor import ManagedCursor
from ..errors import (
    LedgerClosedError,
)
from ..fence import Fence
from ..flusher import Batch
from ..position import EARLIEST, Position
from ..segment import Segment
from .segment_files import scan_segments

if TYPE_CHECKING:
    from ..factory import ManagedLedgerFactory

_Future = asyncio.Future

#: Told the outcome of one append: its position, or None and the error.
AppendCallback = Callable[[Position | None, BaseException | None], None]
#: Who waits for an append: a future (`append`) or a callback (`append_then`).
Waiter = asyncio.Future[Position] | AppendCallback
#: A write batch held until its segment's file exists (`ManagedLedger._unwritten`):
#: (segment, buffers, file offset, waiters, positions, loop, payload bytes).
UnwrittenBatch = tuple[
    Segment, list[bytes | memoryview], int, list[Waiter], list[Position],
    asyncio.AbstractEventLoop, int,
]


_SEGMENTS = attrgetter("_segments")
_ENDS = partial(map, attrgetter("end"))


def sizes_bytes(ledgers: Iterable[LedgerState]) -> list[int]:
    """`LedgerState.size_bytes` of each of ``ledgers``, in C-level loops (no Python frame
    per ledger: /metrics reads 100,000 of them per scrape)."""
    return list(map(sum, map(_ENDS, map(_SEGMENTS, ledgers))))


class LedgerState:
    """The shared state of a ledger and its positions."""

    # Values most ledgers keep at their default are class attributes, set on the instance
    # only once they change: an instance of a class with at most 29 attributes in its
    # ``__init__`` shares its keys with the class (~0.3 KB per ledger instead of ~1.6 KB;
    # 100,000 loaded topics each hold one ledger). Keep ``__init__`` under that count.
    _roll_at = 0.0  # (monotonic) when the active segment rolls over by age
    _wbytes = 0
    _wseg: Segment | None = None
    _wloop: asyncio.AbstractEventLoop | None = None
    _loop: asyncio.AbstractEventLoop | None = None  # the loop of the last append
    _wstart = 0
    _write_scheduled = False
    #: the write buffer holds only entries that may wait (`append_then`'s ``linger_s``):
    #: no turn of the loop is scheduled to write it, only ``_linger``, a timer
    _wlinger = False
    _linger: asyncio.TimerHandle | None = None
    _linger_until = 0.0  # (the loop's clock) when the entries lingering now must be written
    #: Called once after the waiters of each completed batch were told (see `append_then`).
    after_appends: Callable[[], None] | None = None
    #: Called after a cursor moved or a segment was dropped (the owner's figures changed).
    on_change: Callable[[], None] | None = None
    #: Shared storage: this ledger's fence (`fence.py`), checked before each batch is
    #: written and after it is synced, before it is confirmed. None: not shared.
    fence: Fence | None = None
    _terminating: Future[Any] | None = None  # terminate_async's write, under way
    _close_task: asyncio.Task[None] | None = None
    _close_done: Future[None] | None = None  # the factory's: set once closed
    _seal_job: Future[None] | None = None

    def __init__(
        self,
        factory: ManagedLedgerFactory,
        name: str,
        directory: str,
        meta: dict[str, Any],
        segments: list[Segment] | None = None,
    ) -> None:
        """``segments``: the directory's segments as `scan_segments` found them (scanned
        here when None)."""
        cfg = factory.config
        self.name = name
        self.directory = directory
        self._factory = factory
        self._cfg = cfg  # (fsync policy, segment limits, write buffer size: one attribute)
        self._cache = factory._cache
        self._files = factory._files
        self._segments: list[Segment] = []
        self._ids: list[int] = []
        self._by_id: dict[int, Segment] = {}
        self._active: Segment | None = None
        # write buffer (all for self._wseg, starting at byte offset self._wstart)
        self._wbuf: list[bytes | memoryview] = []
        self._wfuts: list[Waiter] = []
        self._wpos: list[Position] = []
        self._pending: list[Batch] = []  # (a list: an empty deque takes 624 bytes)
        self._cursors: dict[str, ManagedCursor] = {}
        self._terminated = bool(meta.get("terminated", False))
        # small named values stored with the ledger's row (Pulsar's managed ledger
        # properties): the broker keeps a topic's epoch there
        self._properties: dict[str, str] = dict(meta.get("properties") or {})
        self._state = "open"  # "closing" (close_async under way), "closed", "deleted"
        # write batches held until their segment's file exists (in append order):
        # (segment, buffers, file offset, waiters, positions, loop, payload bytes)
        self._unwritten: list[UnwrittenBatch] = []
        # the file jobs on storage threads (segment creation, sealing) maybe under way
        self._file_work: list[Future[Any]] = []
        for seg in scan_segments(directory) if segments is None else segments:
            self._add_segment(seg)

    def _add_segment(self, seg: Segment) -> None:
        self._segments.append(seg)
        self._ids.append(seg.ledger_id)
        self._by_id[seg.ledger_id] = seg

    def _locate(self, p: Position) -> tuple[int, int] | None:
        """(segment index, entry id) of the first confirmed entry ``>= p``."""
        lid, eid = p
        segs = self._segments
        i = bisect_left(self._ids, lid)
        if eid < 0:
            eid = 0
        while i < len(segs):
            seg = segs[i]
            if seg.ledger_id != lid:
                eid = 0
            if eid < seg.confirmed:
                return i, eid
            i += 1
        return None

    def next_position(self, p: Position) -> Position | None:
        """The first confirmed position after ``p``."""
        lid, eid = p
        seg = self._by_id.get(lid)
        if seg is not None and 0 <= eid + 1 < seg.confirmed:
            return Position(lid, eid + 1)
        loc = self._locate(Position(lid, eid + 1))
        if loc is None:
            return None
        return Position(self._segments[loc[0]].ledger_id, loc[1])

    def contains(self, p: Position) -> bool:
        """Whether ``p`` names a confirmed entry that is still stored."""
        seg = self._by_id.get(p[0])
        return seg is not None and 0 <= p[1] < seg.confirmed

    def first_position(self) -> Position | None:
        """The oldest confirmed entry."""
        loc = self._locate(EARLIEST)
        return None if loc is None else Position(self._segments[loc[0]].ledger_id, loc[1])

    def position_at(self, index: int) -> Position | None:
        """The confirmed entry at ``index`` among those stored (0 the oldest, -1 the
        newest, as a list's index); None when out of range."""
        segs = self._segments if index >= 0 else list(reversed(self._segments))
        k = index if index >= 0 else -index - 1
        for seg in segs:
            if k < seg.confirmed:
                return Position(seg.ledger_id, k if index >= 0 else seg.confirmed - 1 - k)
            k -= seg.confirmed
        return None

    def last_confirmed(self) -> Position | None:
        """The newest confirmed (durable, readable) entry."""
        for seg in reversed(self._segments):
            if seg.confirmed:
                return Position(seg.ledger_id, seg.confirmed - 1)
        return None

    def last_appended(self) -> Position | None:
        """The newest appended entry, confirmed or not."""
        for seg in reversed(self._segments):
            if seg.count:
                return Position(seg.ledger_id, seg.count - 1)
        return None

    def entry_count(self) -> int:
        """Confirmed entries in the ledger."""
        return sum(s.confirmed for s in self._segments)

    def size_bytes(self) -> int:
        """Bytes of the segment files."""
        return sum(s.end for s in self._segments)

    def count_after(self, p: Position) -> int:
        """Confirmed entries ``> p``."""
        lid, eid = p
        segs = self._segments
        i = bisect_left(self._ids, lid)
        n = 0
        if i < len(segs) and segs[i].ledger_id == lid:
            n = max(0, segs[i].confirmed - max(eid + 1, 0))
            i += 1
        for seg in segs[i:]:
            n += seg.confirmed
        return n

    def count_between(self, start: Position, end: Position) -> int:
        """Confirmed entries in ``[start, end]``."""
        if start[0] == end[0]:
            seg = self._by_id.get(start[0])
            if seg is None:
                return 0
            lo = max(start[1], 0)
            hi = min(end[1], seg.confirmed - 1)
            return max(0, hi - lo + 1)
        return self.count_after(Position(start[0], start[1] - 1)) - self.count_after(end)

    def segment_ids(self) -> list[int]:
        """Ledger ids of the segments, ascending."""
        return list(self._ids)

    @property
    def is_open(self) -> bool:
        """False once the ledger is closed or deleted."""
        return self._state == "open"

    @property
    def is_terminated(self) -> bool:
        return self._terminated

    def _check_open(self) -> None:
        if self._state != "open":
            raise LedgerClosedError(f"ledger {self.name} is {self._state}")

    def __repr__(self) -> str:
        return f"ManagedLedger({self.name!r}, segments={self._ids}, state={self._state})"
