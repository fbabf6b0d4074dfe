"""Namespace bundles: a namespace's topic-hash space cut into ranges, one owner per range.

Theory of operation
-------------------
Every topic name (the full name, ``persistent://tenant/ns/topic``, a partition by its own
``...-partition-N`` name) hashes to a 32-bit value: the CRC-32 of its UTF-8 bytes, read as
unsigned, which is what Pulsar's bundle factory computes. A namespace's hash space
``[0x00000000, 0xffffffff]`` is cut by a sorted list of *boundaries* (first ``0x00000000``,
last ``0xffffffff``); consecutive boundaries make a bundle, closed at its lower end and open
at its upper end, except the last bundle, which also holds ``0xffffffff``. A bundle is named
by its two ends, ``0x00000000_0x40000000``, and the namespace's boundaries are what Pulsar
keeps as ``BundlesData`` (``{"boundaries": [...], "numBundles": N}``).

A new namespace gets ``n`` bundles (``defaultNumberOfNamespaceBundles``, 4 by default) cut
every ``2**32 // n``, the last boundary being ``0xffffffff``. Splitting a bundle replaces it
by consecutive sub-ranges; the split points come from an algorithm named as in Pulsar's
``defaultNamespaceBundleSplitAlgorithm``: ``range_equally_divide`` (equal hash widths),
``topic_count_equally_divide`` (between the two middle topic hashes) and
``specified_positions_divide`` (points the caller gives).

Everything here is pure: values in, values out, no I/O.
"""

from __future__ import annotations

import bisect
import itertools
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_NUMBER_OF_BUNDLES",
    "FULL_LOWER",
    "FULL_UPPER",
    "RANGE_EQUALLY_DIVIDE",
    "SPLIT_ALGORITHMS",
    "BundleRange",
    "NamespaceBundles",
    "split_points",
    "topic_hash",
]

FULL_LOWER = 0x00000000
FULL_UPPER = 0xFFFFFFFF
DEFAULT_NUMBER_OF_BUNDLES = 4
RANGE_EQUALLY_DIVIDE = "range_equally_divide"
TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"
SPECIFIED_POSITIONS_DIVIDE = "specified_positions_divide"
SPLIT_ALGORITHMS = (RANGE_EQUALLY_DIVIDE, TOPIC_COUNT_EQUALLY_DIVIDE,
                    SPECIFIED_POSITIONS_DIVIDE)
_RANGE = re.compile(r"(0x[0-9a-fA-F]{1,8})_(0x[0-9a-fA-F]{1,8})")


def topic_hash(topic: str) -> int:
    """The bundle hash of a full topic name: unsigned CRC-32 of its UTF-8 bytes."""
    return zlib.crc32(topic.encode("utf-8")) & 0xFFFFFFFF


def _boundary(value: int | str) -> int:
    v = int(value, 0) if isinstance(value, str) else int(value)
    if not FULL_LOWER <= v <= FULL_UPPER:
        raise ValueError(f"bundle boundary {value!r} is outside 0x00000000..0xffffffff")
    return v


@dataclass(frozen=True, slots=True, order=True)
class BundleRange:
    """One bundle's hash range ``[lower, upper)`` (``upper`` included when it is the top)."""

    lower: int
    upper: int

    def __post_init__(self) -> None:
        if not FULL_LOWER <= self.lower < self.upper <= FULL_UPPER:
            raise ValueError(f"invalid bundle range {self.lower:#x}..{self.upper:#x}")

    @property
    def name(self) -> str:
        """Pulsar's bundle name, ``0x00000000_0x40000000``."""
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def parse(text: str) -> BundleRange:
        """A bundle from its name; ``ValueError`` for anything else."""
        m = _RANGE.fullmatch(text.strip())
        if m is None:
            raise ValueError(f"invalid bundle range {text!r} (expected 0xLLLLLLLL_0xUUUUUUUU)")
        return BundleRange(int(m.group(1), 16), int(m.group(2), 16))

    def contains(self, h: int) -> bool:
        return self.lower <= h < self.upper or (h == self.upper == FULL_UPPER)

    @property
    def splittable(self) -> bool:
        return self.upper - self.lower > 1


def split_points(algorithm: str, bundle: BundleRange, parts: int = 2,
                 topics: Iterable[str] = (),
                 positions: Sequence[int] = ()) -> list[int]:
    """Where to cut ``bundle``: strictly increasing points strictly inside it.

    ``topics`` (full names) feed ``topic_count_equally_divide``; ``positions`` feed
    ``specified_positions_divide``. Raises ``ValueError`` when the bundle cannot be split
    that way (unknown algorithm, too narrow, fewer than two topics, no usable position).
    """
    if not bundle.splittable:
        raise ValueError(f"bundle {bundle} cannot be split further")
    if algorithm == RANGE_EQUALLY_DIVIDE:
        if parts < 2:
            raise ValueError("a bundle splits into at least 2 parts")
        step = (bundle.upper - bundle.lower) // parts
        if step < 1:
            raise ValueError(f"bundle {bundle} is too narrow for {parts} parts")
        return [bundle.lower + step * i for i in range(1, parts)]
    if algorithm == TOPIC_COUNT_EQUALLY_DIVIDE:
        hashes = sorted(topic_hash(t) for t in topics)
        if len(hashes) < 2:
            raise ValueError(f"bundle {bundle} has fewer than 2 topics to divide")
        lo = hashes[max(len(hashes) // 2 - 1, 0)]
        hi = hashes[len(hashes) // 2]
        point = lo + (hi - lo) // 2
        if not bundle.lower < point < bundle.upper:
            raise ValueError(f"bundle {bundle}: its topics give no split point inside it")
        return [point]
    if algorithm == SPECIFIED_POSITIONS_DIVIDE:
        points = sorted({p for p in positions if bundle.lower < p < bundle.upper})
        if not points:
            raise ValueError(f"no split position strictly inside bundle {bundle}")
        return points
    raise ValueError(f"unknown bundle split algorithm {algorithm!r} "
                     f"(one of {', '.join(SPLIT_ALGORITHMS)})")


@dataclass(frozen=True, slots=True)
class NamespaceBundles:
    """A namespace's bundle boundaries (immutable: a split makes a new value)."""

    boundaries: tuple[int, ...]

    def __post_init__(self) -> None:
        b = self.boundaries
        if len(b) < 2 or b[0] != FULL_LOWER or b[-1] != FULL_UPPER:
            raise ValueError("bundle boundaries must start at 0x00000000 and end at 0xffffffff")
        if any(x >= y for x, y in itertools.pairwise(b)):
            raise ValueError("bundle boundaries must be strictly increasing")

    @staticmethod
    def evenly(n: int = DEFAULT_NUMBER_OF_BUNDLES) -> NamespaceBundles:
        """``n`` bundles of equal width, as Pulsar cuts a new namespace."""
        if not 0 < n <= 1 << 32:
            raise ValueError("the number of bundles must be in (0, 2^32]")
        step = (1 << 32) // n
        return NamespaceBundles((*(step * i for i in range(n)), FULL_UPPER))

    @staticmethod
    def from_boundaries(values: Iterable[int | str]) -> NamespaceBundles:
        """From Pulsar's ``boundaries`` list (hex strings or ints; repeats dropped)."""
        return NamespaceBundles(tuple(sorted({_boundary(v) for v in values})))

    @staticmethod
    def from_json(data: dict[str, Any]) -> NamespaceBundles:
        """From Pulsar's ``BundlesData`` JSON (``boundaries``; ``numBundles`` alone means
        that many even bundles)."""
        if data.get("boundaries"):
            return NamespaceBundles.from_boundaries(data["boundaries"])
        return NamespaceBundles.evenly(int(data.get("numBundles", DEFAULT_NUMBER_OF_BUNDLES)))

    def to_json(self) -> dict[str, Any]:
        """Pulsar's ``BundlesData``: ``{"boundaries": ["0x...", ...], "numBundles": N}``."""
        return {"boundaries": [f"0x{b:08x}" for b in self.boundaries],
                "numBundles": len(self.boundaries) - 1}

    def __len__(self) -> int:
        return len(self.boundaries) - 1

    @property
    def ranges(self) -> list[BundleRange]:
        b = self.boundaries
        return [BundleRange(b[i], b[i + 1]) for i in range(len(b) - 1)]

    def find(self, h: int) -> BundleRange:
        """The bundle holding hash ``h``."""
        if not FULL_LOWER <= h <= FULL_UPPER:
            raise ValueError(f"hash {h:#x} is outside 0x00000000..0xffffffff")
        b = self.boundaries
        i = min(bisect.bisect_right(b, h) - 1, len(b) - 2)
        return BundleRange(b[i], b[i + 1])

    def bundle_of(self, topic: str) -> BundleRange:
        """The bundle of a full topic name."""
        return self.find(topic_hash(topic))

    def __contains__(self, bundle: object) -> bool:
        if not isinstance(bundle, BundleRange):
            return False
        i = bisect.bisect_left(self.boundaries, bundle.lower)
        return (i < len(self.boundaries) - 1 and self.boundaries[i] == bundle.lower
                and self.boundaries[i + 1] == bundle.upper)

    def split(self, bundle: BundleRange, points: Sequence[int]) -> NamespaceBundles:
        """These bundles with ``bundle`` cut at ``points`` (each strictly inside it)."""
        if bundle not in self:
            raise ValueError(f"bundle {bundle} is not one of this namespace's bundles")
        cut = sorted(set(points))
        if not cut or any(not bundle.lower < p < bundle.upper for p in cut):
            raise ValueError(f"split points must lie strictly inside bundle {bundle}")
        return NamespaceBundles(tuple(sorted({*self.boundaries, *cut})))
