"""Tests for magnetar.broker.subscriptions.delayed_delivery (explicit clocks, no sleeping)."""

from __future__ import annotations

import heapq
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.subscriptions.delayed_delivery import DelayedDeliveryTracker


class FakeClock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_past_and_present_are_not_held() -> None:
    t = DelayedDeliveryTracker()
    assert t.add(1, 1, 999, now_ms=1000) is False
    assert t.add(1, 2, 1000, now_ms=1000) is False
    assert t.add(1, 3, -5, now_ms=1000) is False
    assert len(t) == 0
    assert t.next_delivery_ms() is None
    assert t.add(1, 4, 1001, now_ms=1000) is True
    assert len(t) == 1
    assert (1, 4) in t


def test_ready_positions_order_and_limit() -> None:
    t = DelayedDeliveryTracker()
    now = 0
    assert t.add(3, 1, 500, now)
    assert t.add(1, 9, 300, now)
    assert t.add(1, 2, 300, now)
    assert t.add(2, 0, 100, now)
    assert t.add(9, 9, 10_000, now)
    assert t.next_delivery_ms() == 100
    assert t.ready_positions(50) == []
    assert t.has_ready(100)
    assert not t.has_ready(99)
    assert t.ready_positions(400, limit=2) == [(2, 0), (1, 2)]
    assert t.ready_positions(400, limit=10) == [(1, 9)]
    assert len(t) == 2
    assert t.next_delivery_ms() == 500
    assert t.ready_positions(20_000) == [(3, 1), (9, 9)]
    assert len(t) == 0
    assert t.next_delivery_ms() is None
    assert t.ready_positions(10**12, limit=0) == []


def test_position_held_once() -> None:
    t = DelayedDeliveryTracker()
    assert t.add(1, 1, 100, now_ms=0)
    assert t.add(1, 1, 100, now_ms=0)  # redelivered while held: still held, not twice
    assert t.add(1, 1, 50, now_ms=0)
    assert len(t) == 1
    assert t.ready_positions(1000) == [(1, 1)]
    assert t.ready_positions(1000) == []


def test_remove_and_clear() -> None:
    t = DelayedDeliveryTracker()
    for e in range(5):
        t.add(1, e, 100 + e, now_ms=0)
    assert t.remove(1, 0)
    assert not t.remove(1, 0)
    assert t.next_delivery_ms() == 101
    assert t.ready_positions(1000) == [(1, 1), (1, 2), (1, 3), (1, 4)]
    t.add(2, 2, 500, now_ms=0)
    t.remove(2, 2)
    t.add(2, 2, 500, now_ms=0)  # re-added after removal: delivered once
    assert t.ready_positions(1000) == [(2, 2)]
    t.add(3, 3, 700, now_ms=0)
    t.clear()
    assert len(t) == 0
    assert t.ready_positions(10_000) == []


def test_many_removals_compact() -> None:
    t = DelayedDeliveryTracker()
    for e in range(1000):
        t.add(1, e, 10 + e, now_ms=0)
    for e in range(999):
        t.remove(1, e)
    assert len(t._heap) < 200  # dead heap slots were dropped
    assert t.ready_positions(10**9) == [(1, 999)]


def test_non_strict_tick_delivers_up_to_a_tick_early() -> None:
    # Pulsar's default: cut-off = now + tick
    t = DelayedDeliveryTracker(tick_ms=1000, strict=False)
    assert t.add(1, 1, 1500, now_ms=1000) is False  # within one tick: dispatch now
    assert t.add(1, 2, 2500, now_ms=1000) is True
    assert t.ready_positions(1499) == []
    assert t.ready_positions(1500) == [(1, 2)]
    assert t.cutoff_ms(0) == 1000


def test_clock_used_when_now_omitted() -> None:
    clock = FakeClock(1000)
    t = DelayedDeliveryTracker(clock=clock)
    assert t.add(1, 1, 1000) is False
    assert t.add(1, 2, 2000) is True
    assert t.ready_positions() == []
    assert not t.has_ready()
    clock.now = 2000
    assert t.has_ready()
    assert t.ready_positions() == [(1, 2)]


def test_default_clock_is_wall_clock_ms() -> None:
    t = DelayedDeliveryTracker()
    # an hour from now is held, an hour ago is not
    now = int(time.time() * 1000)
    assert t.add(1, 1, now + 3_600_000)
    assert not t.add(1, 2, now - 3_600_000)


@settings(max_examples=200)
@given(
    items=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 20), st.integers(-10, 1000)),
        max_size=60,
    ),
    polls=st.lists(st.tuples(st.integers(0, 1200), st.integers(1, 10)), max_size=10),
)
def test_model(items: list[tuple[int, int, int]], polls: list[tuple[int, int]]) -> None:
    t = DelayedDeliveryTracker()
    model: dict[tuple[int, int], int] = {}
    for lid, eid, at in items:
        held = t.add(lid, eid, at, now_ms=0)
        if (lid, eid) in model:
            assert held
        elif at > 0:
            assert held
            model[(lid, eid)] = at
        else:
            assert not held
    assert len(t) == len(model)
    for now, limit in sorted(polls):
        due = sorted((at, lid, eid) for (lid, eid), at in model.items() if at <= now)
        expect = [(lid, eid) for _, lid, eid in heapq.nsmallest(limit, due)]
        got = t.ready_positions(now, limit)
        assert got == expect
        for p in got:
            del model[p]
        nxt = t.next_delivery_ms()
        assert nxt == (min(model.values()) if model else None)
