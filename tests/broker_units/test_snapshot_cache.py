"""A replicated subscription's snapshot cache (`broker.subscriptions.snapshot_cache`)."""

from __future__ import annotations

from magnetar.broker.subscriptions.snapshot_cache import SnapshotCache
from magnetar.protocol.markers import ClusterPosition, Snapshot
from magnetar.storage import Position


def _snap(entry: int, ledger: int = 1) -> Snapshot:
    return Snapshot(f"s{ledger}-{entry}", (ledger, entry), (ClusterPosition("B", 9, entry * 2),))


def test_advanced_returns_the_newest_passed_snapshot_and_forgets_older_ones() -> None:
    cache = SnapshotCache(10)
    for entry in (10, 20, 30):
        cache.add(_snap(entry))
    assert cache.advanced(Position(1, 9)) is None
    assert cache.advanced(Position(1, 25)) == _snap(20)
    assert len(cache) == 1
    assert cache.advanced(Position(1, 29)) is None
    assert cache.advanced(Position(2, 0)) == _snap(30)
    assert len(cache) == 0


def test_an_older_snapshot_means_a_rewind_and_starts_over() -> None:
    cache = SnapshotCache(10)
    cache.add(_snap(10))
    cache.add(_snap(20))
    cache.add(_snap(5))
    assert [p for p, _ in cache.snapshots] == [Position(1, 5)]


def test_thinning_keeps_the_ends_and_spreads_the_rest() -> None:
    cache = SnapshotCache(4)
    for entry in (0, 100, 101, 200, 300):
        cache.add(_snap(entry))
    # 101 sits closest to its neighbours' span: it goes; the first and last stay
    assert [p[1] for p, _ in cache.snapshots] == [0, 100, 200, 300]
    for entry in range(301, 320):
        cache.add(_snap(entry))
    kept = [p[1] for p, _ in cache.snapshots]
    assert len(kept) == 4 and kept[0] == 0 and kept[-1] == 319


def test_at_least_three_are_kept() -> None:
    cache = SnapshotCache(1)
    for entry in range(10):
        cache.add(_snap(entry))
    assert len(cache) == 3
