"""`RateLimiter` (the token bucket of every rate limit) on a fake clock."""

from __future__ import annotations

import pytest

from magnetar.broker.rate_limiter import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_steady_rate_with_debt() -> None:
    clock = Clock()
    limiter = RateLimiter(1000, 0, clock=clock)
    assert limiter.enabled
    assert not limiter.consume(1000, 10**9)  # one period's burst, bytes unlimited
    assert limiter.consume(500, 0)  # 500 over: a debt
    assert limiter.delay() == pytest.approx(0.5)
    clock.now += 0.25
    assert limiter.delay() == pytest.approx(0.25)
    clock.now += 0.25
    assert limiter.delay() == 0
    # long run: what is let through over 10 s is 10 x the rate (+ the first burst)
    sent = 0
    for _ in range(1000):
        clock.now += 0.01
        while limiter.delay() == 0:
            limiter.consume(7, 0)  # steps that do not divide the rate
            sent += 7
    assert 10000 <= sent <= 10000 + 7


def test_bytes_and_period_and_update() -> None:
    clock = Clock()
    limiter = RateLimiter(0, 1000, period_s=10, clock=clock)
    assert limiter.consume(1, 1500)
    assert limiter.delay() == pytest.approx(5.0)  # 500 bytes at 100 bytes/s
    assert limiter.until_available() == pytest.approx(5.01)
    limiter.update(0, 1000, 10)  # unchanged: keeps the debt
    assert limiter.delay() == pytest.approx(5.0)
    limiter.update(0, 2000, 10)  # a new limit starts from a full bucket
    assert limiter.delay() == 0
    assert limiter.available() == (float("inf"), 2000)
    limiter.update(-1, 0)
    assert not limiter.enabled
    assert not limiter.consume(10**6, 10**9)
