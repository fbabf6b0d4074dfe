"""Reads (`LedgerReads`): confirmed entries from the shared read cache, or from the
segment files, on the calling thread or on the factory's ``readers`` threads (`read_cold`,
`read_positions_cold`), and positions found by binary search on a predicate.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from .. import record
from ..cold_span import ColdSpan, read_span
from ..errors import (
    CorruptEntryError,
    EntryNotFoundError,
    SegmentFileMissingError,
)
from ..position import Position
from ..segment import Segment
from .state import LedgerState

_get_loop = asyncio.get_running_loop
_HS = record.HEADER_SIZE


class PositionsRead(NamedTuple):
    """What `ManagedLedger.read_positions_cold` read: the entries it could read (in the
    order they were asked for) and the positions it could not, each with its error. A
    position past the read's byte budget is in neither."""

    entries: list[tuple[Position, memoryview]]
    failed: dict[Position, Exception]


def _missing(span: ColdSpan, segments: Mapping[int, Segment]) -> SegmentFileMissingError | None:
    """Why ``span``'s file is not there (`read_span` read nothing), on a ``readers``
    thread: None when its segment left the ledger meanwhile (trimmed or deleted: the
    ledger takes a segment out before its file is removed), so there is nothing to read;
    else the file of a live segment is missing (a data directory whose mount is not there,
    a file removed by hand): `SegmentFileMissingError`, never "no entries"."""
    seg = segments.get(span.ledger_id)
    if seg is None or seg.path != span.path:
        return None
    return seg.missing_error()


def _read_runs(runs: list[ColdSpan], failed: dict[Position, Exception],
               segments: Mapping[int, Segment]) -> PositionsRead:
    """The disk work of `ManagedLedger.read_positions_cold` (a ``readers`` thread): each
    run with one pread (`read_span`); a record that fails its checksum is reported and the
    rest of its run read on, a file that is gone (trimmed meanwhile; missing while its
    segment is live: `_missing`) or an I/O error fails what is left of its run."""
    entries: list[tuple[Position, memoryview]] = []
    for run in runs:
        lid, first, offs = run.ledger_id, run.first, run.offsets
        count = len(offs) - 1
        k = 0
        while k < count:
            part = run if k == 0 else ColdSpan(run.path, lid, first + k, offs[k:])
            try:
                got = read_span(part, views=True)
            except CorruptEntryError as exc:  # the first record of ``part``
                failed[Position(lid, first + k)] = exc
                k += 1
                continue
            except Exception as exc:  # OSError and the like: nothing more of this run
                for j in range(k, count):
                    failed[Position(lid, first + j)] = exc
                break
            if not got:
                gone: Exception = _missing(run, segments) or EntryNotFoundError(
                    f"{run.path}: segment {lid} was deleted (trimmed)")
                for j in range(k, count):
                    failed[Position(lid, first + j)] = gone
                break
            for data in got:
                entries.append((Position(lid, first + k), data))
                k += 1
    return PositionsRead(entries, failed)


class LedgerReads(LedgerState):
    """Reading confirmed entries: cache first, disk on reader threads."""

    def read(self, position: Position) -> bytes | memoryview:
        """One confirmed entry (`EntryNotFoundError` if there is none there)."""
        lid, eid = position
        seg = self._by_id.get(lid)
        if seg is None or not 0 <= eid < seg.confirmed:
            raise EntryNotFoundError(f"{self.name}: no entry at {lid}:{eid}")
        data = self._cache.get(position)
        if data is not None:
            return data
        self._files.use(seg)
        return seg.read_records(eid, eid)[0]

    def read_entries(
        self, start: Position, max_entries: int, max_bytes: int | None = None
    ) -> list[tuple[Position, bytes | memoryview]]:
        """Up to ``max_entries`` confirmed entries from ``start`` (inclusive, or the first
        one after it), stopping before ``max_bytes`` of payload (but at least one entry).
        Entries still in the read cache never touch the disk; a run of misses is read
        with one pread."""
        out: list[tuple[Position, bytes | memoryview]] = []
        loc = self._locate(start) if max_entries > 0 else None
        if loc is None:
            return out
        i, eid = loc
        segs = self._segments
        cache_get = self._cache.get
        budget = -1 if max_bytes is None else max_bytes  # -1: unlimited
        while i < len(segs):
            seg = segs[i]
            lid = seg.ledger_id
            last = min(seg.confirmed - 1, eid + max_entries - len(out) - 1)
            while eid <= last:
                pos = Position(lid, eid)
                data = cache_get(pos)
                if data is None:
                    k, nbytes = self._read_disk(seg, eid, last, budget, out)
                    if k == 0:
                        return out
                    eid += k
                    if budget >= 0:
                        budget -= nbytes
                        if budget <= 0:
                            return out
                    continue
                if budget >= 0:
                    n = len(data)
                    if n > budget and out:
                        return out
                    budget -= n
                    out.append((pos, data))
                    if budget <= 0:
                        return out
                else:
                    out.append((pos, data))
                eid += 1
            if len(out) >= max_entries:
                return out
            i += 1
            eid = 0
        return out

    def read_cached(
        self, start: Position, max_entries: int, max_bytes: int | None = None
    ) -> list[tuple[Position, bytes | memoryview]]:
        """Like ``read_entries``, but only the run of entries from ``start`` that the read
        cache holds (empty when the first one is not cached): never touches the disk."""
        out: list[tuple[Position, bytes | memoryview]] = []
        loc = self._locate(start) if max_entries > 0 else None
        if loc is None:
            return out
        i, eid = loc
        segs = self._segments
        cache_get = self._cache.get
        budget = -1 if max_bytes is None else max_bytes
        while i < len(segs) and len(out) < max_entries:
            seg = segs[i]
            lid = seg.ledger_id
            while eid < seg.confirmed and len(out) < max_entries:
                data = cache_get(Position(lid, eid))
                if data is None:
                    return out
                if budget >= 0:
                    if len(data) > budget and out:
                        return out
                    budget -= len(data)
                out.append((Position(lid, eid), data))
                eid += 1
            i += 1
            eid = 0
        return out

    def read_cold(
        self, start: Position, max_entries: int, max_bytes: int | None = None
    ) -> asyncio.Future[list[tuple[Position, memoryview]]]:
        """Entries from ``start`` (as ``read_entries``) read from disk on the factory's
        reader threads: at most one segment's worth, at least one entry when one exists.
        The event loop only plans the read (positions and offsets); the thread opens the
        file itself, so nothing the loop owns is touched there. The run is read with one
        pread and each record checked against its CRC32C; the entries are read-only
        ``memoryview``s of that one buffer (no copy per entry). A segment trimmed meanwhile
        reads as nothing; a live segment whose file is missing fails with
        `SegmentFileMissingError` (a `StorageError` and an ``OSError``)."""
        loop = asyncio.get_running_loop()
        loc = self._locate(start) if max_entries > 0 else None
        if loc is None:
            done: asyncio.Future[list[tuple[Position, memoryview]]] = loop.create_future()
            done.set_result([])
            return done
        i, first = loc
        seg = self._segments[i]
        last = min(seg.confirmed - 1, first + max_entries - 1)
        offs = seg.offsets
        if max_bytes is not None:
            j = first
            while j < last and offs[j + 2] - offs[first] - _HS * (j + 2 - first) <= max_bytes:
                j += 1
            last = j
        span = seg.span(first, last)
        lid = seg.ledger_id
        segments = self._by_id

        def read() -> list[tuple[Position, memoryview]]:
            got = read_span(span, views=True)
            if not got:
                missing = _missing(span, segments)
                if missing is not None:
                    raise missing
            return [(Position(lid, first + k), data) for k, data in enumerate(got)]

        return loop.run_in_executor(self._factory.readers, read)

    def cached_entry(self, position: Position) -> bytes | memoryview | None:
        """The confirmed entry at ``position`` if the read cache holds it; None for a miss
        (or no such entry: `read_positions_cold` tells which). Never touches the disk."""
        lid, eid = position
        seg = self._by_id.get(lid)
        if seg is None or not 0 <= eid < seg.confirmed:
            return None
        return self._cache.get(position)

    def read_positions_cold(
        self, positions: list[Position], max_bytes: int | None = None
    ) -> asyncio.Future[PositionsRead]:
        """The entries at ``positions`` (any confirmed ones, in the order given) read from
        disk on the factory's reader threads, as `read_cold` reads a run: the loop plans
        the read (each run of consecutive entries of a segment is one pread of a thread's
        own descriptor), stopping before ``max_bytes`` of payload (at least one entry);
        each record is checked against its CRC32C and handed back as a read-only
        ``memoryview``. What cannot be read is reported rather than raised: a position
        that names no confirmed entry (`EntryNotFoundError`, known at once), a record
        that fails its checksum (`CorruptEntryError`), a segment deleted meanwhile, an I/O
        error. The positions left out by ``max_bytes`` are in neither list."""
        loop = asyncio.get_running_loop()
        failed: dict[Position, Exception] = {}
        runs: list[ColdSpan] = []
        budget = -1 if max_bytes is None else max_bytes  # -1: unlimited
        planned = 0
        seg: Segment | None = None
        run_last = -1
        for p in positions:
            lid, eid = p
            if seg is None or seg.ledger_id != lid:
                seg = self._by_id.get(lid)
            if seg is None or not 0 <= eid < seg.confirmed:
                failed[Position(lid, eid)] = EntryNotFoundError(f"{self.name}: no entry at {lid}:{eid}")
                continue
            offs = seg.offsets
            if budget >= 0:
                size = offs[eid + 1] - offs[eid] - _HS
                if size > budget and planned:
                    break
                budget = max(0, budget - size)
            planned += 1
            if runs and run_last + 1 == eid and runs[-1].ledger_id == lid:
                runs[-1].offsets.append(offs[eid + 1])  # one more record of the same run
            else:
                runs.append(ColdSpan(seg.path, lid, eid, [offs[eid], offs[eid + 1]]))
            run_last = eid
        if not runs:
            done: asyncio.Future[PositionsRead] = loop.create_future()
            done.set_result(PositionsRead([], failed))
            return done
        return loop.run_in_executor(self._factory.readers, _read_runs, runs, failed, self._by_id)

    def _read_disk(
        self, seg: Segment, first: int, last: int, budget: int, out: list[tuple[Position, bytes | memoryview]]
    ) -> tuple[int, int]:
        """Append ``first..last`` of ``seg`` to ``out`` (fewer if ``budget`` >= 0 bytes
        runs out; at least one if ``out`` is empty), in one pread. Returns (entries, bytes).
        A corrupt entry ends the read before it; it raises only as the read's first entry,
        so a reader gets every good entry before it and then learns which one is bad."""
        offs = seg.offsets
        base = offs[first]
        if budget >= 0:
            if offs[first + 1] - base - _HS > budget and out:
                return 0, 0
            j = first
            while j < last and offs[j + 2] - base - _HS * (j + 2 - first) <= budget:
                j += 1
            last = j
        self._files.use(seg)
        lid = seg.ledger_id
        nbytes = 0
        try:
            records = seg.read_records(first, last)
        except CorruptEntryError as exc:
            bad = exc.position[1] if exc.position is not None else first
            if bad <= first:
                if out:
                    return 0, 0
                raise
            records = seg.read_records(first, bad - 1)
        for k, data in enumerate(records):
            out.append((Position(lid, first + k), data))
            nbytes += len(data)
        return len(records), nbytes

    def read_range(
        self, start: Position, end_inclusive: Position
    ) -> Iterator[tuple[Position, bytes | memoryview]]:
        """Every confirmed entry in ``[start, end_inclusive]``, in order, read in chunks."""
        pos: Position | None = start
        while pos is not None:
            chunk = self.read_entries(pos, 1024, 16 * 1024 * 1024)
            if not chunk:
                return
            for p, data in chunk:
                if p > end_inclusive:
                    return
                yield p, data
            pos = self.next_position(chunk[-1][0])

    def find_position(self, predicate: Callable[[bytes | memoryview], bool]) -> Position | None:
        """Binary search: the first entry whose data satisfies ``predicate``, assuming it is
        false then true along the ledger (e.g. ``publish_time >= t``); None if none does."""
        segs = [s for s in self._segments if s.confirmed]
        if not segs:
            return None
        starts = []
        total = 0
        for s in segs:
            starts.append(total)
            total += s.confirmed

        def at(k: int) -> Position:
            i = bisect_left(starts, k + 1) - 1
            return Position(segs[i].ledger_id, k - starts[i])

        lo, hi = 0, total
        while lo < hi:
            mid = (lo + hi) // 2
            if predicate(self.read(at(mid))):
                hi = mid
            else:
                lo = mid + 1
        return at(lo) if lo < total else None

    def find_position_async(
        self, predicate: Callable[[bytes | memoryview], bool]
    ) -> asyncio.Future[Position | None]:
        """``find_position`` on the factory's reader threads (for searches a client asks
        for, such as a seek by publish time): the loop takes a snapshot of the confirmed
        entries' offsets, the thread reads each probe with its own descriptor."""
        loop = asyncio.get_running_loop()
        segs = [(s.path, s.ledger_id, s.offsets, s.confirmed) for s in self._segments if s.confirmed]
        starts: list[int] = []
        total = 0
        for *_, confirmed in segs:
            starts.append(total)
            total += confirmed

        def at(k: int) -> tuple[int, int]:
            i = bisect_left(starts, k + 1) - 1
            return i, k - starts[i]

        def search() -> Position | None:
            lo, hi = 0, total
            while lo < hi:
                mid = (lo + hi) // 2
                i, eid = at(mid)
                path, lid, offs, _ = segs[i]
                records = read_span(ColdSpan(path, lid, eid, [offs[eid], offs[eid + 1]]))
                if not records:  # trimmed meanwhile: what is left starts later
                    lo = mid + 1
                elif predicate(records[0]):
                    hi = mid
                else:
                    lo = mid + 1
            if lo >= total:
                return None
            i, eid = at(lo)
            return Position(segs[i][1], eid)

        return loop.run_in_executor(self._factory.readers, search)
