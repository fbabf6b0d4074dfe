"""The snapshots a replicated subscription has read (Pulsar's
``ReplicatedSubscriptionSnapshotCache``), and the hook a topic offers to hear of them.

A replicated subscription's dispatcher hands every snapshot marker it reads to its
`SnapshotCache` (in position order: the local position of each snapshot grows). When the
subscription's mark-delete position moves, `advanced` returns the newest snapshot at or
before it (dropping it and all older ones), which the topic's `SnapshotListener` turns into
an update for the other clusters. At most ``max_cached`` snapshots are kept
(``replicatedSubscriptionsSnapshotMaxCachedPerSubscription``); past that, the inner snapshot
whose removal leaves the smallest gap (in entries between its neighbours) goes, so the
kept ones stay spread over the backlog.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from magnetar.protocol.markers import Snapshot
from magnetar.storage import Position

log = logging.getLogger(__name__)

#: the cursor property that marks a subscription as replicated (Pulsar's name)
REPLICATED_PROPERTY = "pulsar.replicated.subscription"


class SnapshotListener(Protocol):
    """What a replicated subscription tells its topic (the replication room's controller)."""

    def local_subscription_updated(self, subscription: str, snapshot: Snapshot) -> None:
        """The subscription's mark-delete position passed ``snapshot``."""


class SnapshotCache:
    """The snapshots one subscription read and has not passed yet, oldest first."""

    def __init__(self, max_cached: int, distance: Callable[[Position, Position], int] | None = None) -> None:
        """``distance(a, b)``: the entries between two positions (what thinning keeps
        spread); by default the entry ids' difference within a ledger."""
        self.max_cached = max(3, max_cached)
        self._distance = distance or _entry_distance
        self.snapshots: list[tuple[Position, Snapshot]] = []

    def add(self, snapshot: Snapshot) -> None:
        position = Position(*snapshot.local)
        if self.snapshots and position <= self.snapshots[-1][0]:
            self.snapshots.clear()  # an older one: the subscription was rewound (a seek)
        self.snapshots.append((position, snapshot))
        if len(self.snapshots) > self.max_cached:
            self._thin()

    def _thin(self) -> None:
        """Drop the inner snapshot whose neighbours are closest to each other."""
        kept = self.snapshots
        best, best_gap = 1, -1
        for i in range(1, len(kept) - 1):
            gap = self._distance(kept[i - 1][0], kept[i + 1][0])
            if best_gap < 0 or gap < best_gap:
                best, best_gap = i, gap
        del kept[best]

    def advanced(self, mark_delete: Position) -> Snapshot | None:
        """The newest snapshot at or before ``mark_delete`` (None: none), forgetting it
        and every older one."""
        kept = self.snapshots
        n = 0
        while n < len(kept) and kept[n][0] <= mark_delete:
            n += 1
        if not n:
            return None
        found = kept[n - 1][1]
        del kept[:n]
        return found

    def __len__(self) -> int:
        return len(self.snapshots)


def _entry_distance(a: Position, b: Position) -> int:
    if a[0] == b[0]:
        return max(0, b[1] - a[1])
    return 1 << 40  # another ledger: far apart
