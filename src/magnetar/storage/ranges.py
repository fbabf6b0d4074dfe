"""`PositionRangeSet`: disjoint, sorted, inclusive ranges of positions (acknowledged holes).

Adjacent positions are merged into one range, so a subscription acknowledging in order
keeps one range however many entries it covers. Adjacency is decided by the caller's
``next_of`` (the next existing position), since entry ids restart in every ledger.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator

from .position import Position

NextOf = Callable[[Position], Position | None]


class PositionRangeSet:
    """Sorted inclusive ranges ``[start, end]`` of positions."""

    __slots__ = ("_ends", "_starts")

    def __init__(self) -> None:
        self._starts: list[Position] = []
        self._ends: list[Position] = []

    def __len__(self) -> int:
        return len(self._starts)

    def __iter__(self) -> Iterator[tuple[Position, Position]]:
        return zip(self._starts, self._ends, strict=True)

    def ranges(self) -> list[tuple[Position, Position]]:
        return list(zip(self._starts, self._ends, strict=True))

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()

    def containing(self, p: Position) -> int:
        """Index of the range holding ``p``, or -1."""
        i = bisect_right(self._starts, p) - 1
        if i >= 0 and self._ends[i] >= p:
            return i
        return -1

    def __contains__(self, p: object) -> bool:
        return isinstance(p, tuple) and self.containing(p) >= 0  # type: ignore[arg-type]

    def end_of(self, i: int) -> Position:
        return self._ends[i]

    def first(self) -> tuple[Position, Position]:
        return self._starts[0], self._ends[0]

    def pop_first(self) -> None:
        del self._starts[0]
        del self._ends[0]

    def add(self, p: Position, next_of: NextOf) -> bool:
        """Add one position, merging with adjacent ranges; False if already present."""
        starts, ends = self._starts, self._ends
        i = bisect_right(starts, p)
        if i > 0 and ends[i - 1] >= p:
            return False
        left = i > 0 and next_of(ends[i - 1]) == p
        right = i < len(starts) and next_of(p) == starts[i]
        if left and right:
            ends[i - 1] = ends[i]
            del starts[i]
            del ends[i]
        elif left:
            ends[i - 1] = p
        elif right:
            starts[i] = p
        else:
            starts.insert(i, p)
            ends.insert(i, p)
        return True

    def add_range(self, start: Position, end: Position) -> None:
        """Add ``[start, end]`` (restoring persisted state; overlaps are merged)."""
        starts, ends = self._starts, self._ends
        i = bisect_right(starts, start)
        if i > 0 and ends[i - 1] >= start:
            i -= 1
            start = starts[i]
            end = max(end, ends[i])
            del starts[i]
            del ends[i]
        while i < len(starts) and starts[i] <= end:
            end = max(end, ends[i])
            del starts[i]
            del ends[i]
        starts.insert(i, start)
        ends.insert(i, end)

    def remove_through(self, p: Position) -> None:
        """Drop everything ``<= p``."""
        starts, ends = self._starts, self._ends
        k = 0
        while k < len(starts) and ends[k] <= p:
            k += 1
        if k:
            del starts[:k]
            del ends[:k]
        if starts and starts[0] <= p:
            starts[0] = Position(p[0], p[1] + 1)
