"""Process-wide storage measurements for the metrics endpoint: how long each fdatasync
took and how many appends each group commit covered.

Cheap by design (a bucket increment under a lock, next to a system call that costs
~100 µs); histograms with fixed upper bounds, as Prometheus expects them. Every broker in
a process shares them (normally there is one).
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

FSYNC_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5)
GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass
class Histogram:
    """Counts per upper bound (the last slot is +Inf) and the sum of observations."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(self.bounds, value)] += 1
            self.total += value

    def snapshot(self) -> tuple[list[tuple[str, int]], float]:
        """Cumulative (upper bound, count) pairs ending with +Inf, and the sum."""
        with self._lock:
            counts, total = list(self.counts), self.total
        out, running = [], 0
        for bound, count in zip([*map(str, self.bounds), "+Inf"], counts, strict=True):
            running += count
            out.append((bound, running))
        return out, total


#: seconds per fdatasync of a segment (flusher thread, inline syncs, ``always``)
fsync_seconds = Histogram(FSYNC_BUCKETS_S)
#: appends (batches of entries) made durable by one group-commit round
group_commit_batches = Histogram(tuple(float(b) for b in GROUP_BUCKETS))
