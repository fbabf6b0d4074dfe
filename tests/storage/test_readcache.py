"""The read cache: bounded in bytes (FIFO) and, as Pulsar's, in entry age."""

from __future__ import annotations

import pytest

from magnetar.storage import Position, readcache
from magnetar.storage.readcache import ReadCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(readcache, "monotonic", c)
    return c


def _keys(cache: ReadCache) -> list[int]:
    return [p.entry_id for p in cache._data]


def test_bytes_bound_evicts_oldest_first() -> None:
    cache = ReadCache(max_bytes=30)
    for i in range(5):
        cache.put(Position(1, i), b"x" * 10)
    assert _keys(cache) == [2, 3, 4] and cache.size == 30


def test_entries_past_the_age_limit_leave_on_a_later_put(clock: Clock) -> None:
    cache = ReadCache(max_bytes=1 << 20, max_age_s=1.0)
    for i in range(3):
        cache.put(Position(1, i), b"old")
    clock.now += 0.5
    cache.put(Position(1, 3), b"mid")
    clock.now += 0.7  # entries 0-2 are 1.2 s old, entry 3 is 0.7 s old
    cache.put(Position(1, 4), b"new")
    assert _keys(cache) == [1, 2, 3, 4]  # the checkpoint at entry 0 aged out
    clock.now += 0.4  # the checkpoint at entry 3 is 1.1 s old
    cache.put(Position(1, 5), b"newer")
    assert _keys(cache) == [4, 5]
    assert cache.size == 8


def test_idle_cache_ages_out_on_the_timer(clock: Clock) -> None:
    cache = ReadCache(max_bytes=1 << 20, max_age_s=1.0)
    cache.put(Position(1, 0), b"a")
    clock.now += 0.02
    cache.put(Position(1, 1), b"b")
    clock.now += 5
    cache.evict_expired()
    assert _keys(cache) == [] and cache.size == 0


def test_no_age_limit_keeps_everything(clock: Clock) -> None:
    cache = ReadCache(max_bytes=1 << 20)
    cache.put(Position(1, 0), b"a")
    clock.now += 3600
    cache.put(Position(1, 1), b"b")
    cache.evict_expired()
    assert _keys(cache) == [0, 1]


def test_a_discarded_checkpoint_never_evicts_newer_entries(clock: Clock) -> None:
    cache = ReadCache(max_bytes=1 << 20, max_age_s=1.0)
    cache.put(Position(1, 0), b"a")  # checkpoint at this entry
    cache.discard(Position(1, 0))  # rolled back
    clock.now += 0.005
    cache.put(Position(1, 1), b"b")  # no new checkpoint (same tick)
    clock.now += 2
    cache.evict_expired()
    assert _keys(cache) == [1]  # kept: its age is unknown, so it is not dropped early


def test_entries_before_a_discarded_checkpoint_still_age_out(clock: Clock) -> None:
    """Eviction follows insertion order: a rolled-back entry that held a checkpoint does
    not stop the age bound before the older entries."""
    cache = ReadCache(max_bytes=1 << 20, max_age_s=1.0)
    cache.put(Position(1, 0), b"a")  # checkpoint
    clock.now += 0.02
    cache.put(Position(1, 1), b"b")  # checkpoint
    cache.discard(Position(1, 1))  # rolled back: its checkpoint goes with it
    clock.now += 1.1  # entry 0 is past the limit
    cache.put(Position(1, 2), b"c")
    assert _keys(cache) == [2] and cache.size == 1


def test_the_tail_of_an_idle_cache_ages_out(clock: Clock) -> None:
    cache = ReadCache(max_bytes=1 << 20, max_age_s=1.0)
    cache.put(Position(1, 0), b"a")  # checkpoint
    clock.now += 0.001
    cache.put(Position(1, 1), b"b")  # same tick: no checkpoint of its own
    clock.now += 1.5
    cache.evict_expired()
    assert _keys(cache) == [1]  # not known to be old enough yet: kept
    clock.now += 0.5
    cache.evict_expired()
    assert _keys(cache) == [1]  # the checkpoint taken at the last timer is 0.5 s old
    clock.now += 0.6
    cache.evict_expired()
    assert _keys(cache) == [] and cache.size == 0  # no longer kept for ever
