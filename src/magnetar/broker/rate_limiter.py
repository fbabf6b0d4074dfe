"""`RateLimiter`: a token bucket over messages and bytes, the one measure behind the
publish rate, the dispatch rates and the subscribe rate (pure: a clock is all it reads).

Theory of operation: each bucket holds at most one period's worth of tokens (its rate,
Pulsar's ``...RateInMsg`` / ``...RateInByte`` per ``ratePeriodInSecond``) and refills
continuously at rate / period. It starts full. Work is counted after it happened
(`consume`), so the tokens may go below zero: that debt is repaid before anything more is
allowed, which keeps the long-run rate exact whatever the size of each step (a read of
many sends at once, a dispatch of a whole batch). A limit of 0 or less is no limit, as in
Pulsar; a limiter with neither limit is `enabled` False and callers drop it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

_UNLIMITED = float("inf")


class RateLimiter:
    """Messages and bytes per period (see the module docstring)."""

    __slots__ = ("_clock", "_last", "byte_tokens", "bytes_per_period", "msg_tokens",
                 "msgs_per_period", "period_s")

    def __init__(self, msgs_per_period: int, bytes_per_period: int, period_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.msgs_per_period = 0
        self.bytes_per_period = 0
        self.period_s = 1.0
        self.msg_tokens = _UNLIMITED
        self.byte_tokens = _UNLIMITED
        self._last = clock()
        self.update(msgs_per_period, bytes_per_period, period_s)

    @property
    def enabled(self) -> bool:
        return self.msgs_per_period > 0 or self.bytes_per_period > 0

    def update(self, msgs_per_period: int, bytes_per_period: int, period_s: float = 1.0) -> None:
        """New limits; a limit that changes starts again from a full bucket (as a new
        policy applies at once)."""
        self._refill()
        period = period_s if period_s > 0 else 1.0
        msgs = max(0, msgs_per_period)
        size = max(0, bytes_per_period)
        if (msgs, size, period) == (self.msgs_per_period, self.bytes_per_period, self.period_s):
            return
        self.msgs_per_period, self.bytes_per_period, self.period_s = msgs, size, period
        self.msg_tokens = float(msgs) if msgs else _UNLIMITED
        self.byte_tokens = float(size) if size else _UNLIMITED

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._last
        self._last = now
        if elapsed <= 0:
            return
        if self.msgs_per_period:
            self.msg_tokens = min(float(self.msgs_per_period), self.msg_tokens
                                  + elapsed * self.msgs_per_period / self.period_s)
        if self.bytes_per_period:
            self.byte_tokens = min(float(self.bytes_per_period), self.byte_tokens
                                   + elapsed * self.bytes_per_period / self.period_s)

    def consume(self, msgs: int, size: int) -> bool:
        """Count ``msgs`` messages of ``size`` bytes done; True when the limiter is now
        over its rate (tokens below zero: the caller stops until `delay` has passed)."""
        self._refill()
        self.msg_tokens -= msgs
        self.byte_tokens -= size
        return self.msg_tokens < 0 or self.byte_tokens < 0

    def available(self) -> tuple[float, float]:
        """(messages, bytes) allowed now (``inf`` where there is no limit; 0 or less: none)."""
        self._refill()
        return self.msg_tokens, self.byte_tokens

    def delay(self) -> float:
        """Seconds until neither bucket is below zero (0: not over now)."""
        self._refill()
        wait = 0.0
        if self.msg_tokens < 0:
            wait = -self.msg_tokens * self.period_s / self.msgs_per_period
        if self.byte_tokens < 0:
            wait = max(wait, -self.byte_tokens * self.period_s / self.bytes_per_period)
        return wait

    def until_available(self) -> float:
        """Seconds until at least one message may go (tokens of at least one per bucket
        with a limit; bytes: above zero)."""
        self._refill()
        wait = 0.0
        if self.msg_tokens < 1:
            wait = (1 - self.msg_tokens) * self.period_s / self.msgs_per_period
        if self.byte_tokens <= 0:
            wait = max(wait, (1 - self.byte_tokens) * self.period_s / self.bytes_per_period)
        return wait
