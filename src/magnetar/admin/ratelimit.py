"""The admin HTTP service's request rate limit, Pulsar's ``httpRequestsLimitEnabled`` /
``httpRequestsMaxPerSecond``.

One token bucket for the whole service (every path, HTTP and HTTPS alike, as Pulsar's
filter is one limiter for the web service): it holds at most one second's worth of requests
(``max(1, rate)`` tokens, full at start) and refills at ``rate`` tokens a second. A request
takes a token or, with none left, is answered 429 Too Many Requests with a JSON
``{"reason": ...}`` and a ``Retry-After`` header, before authentication or any handler runs.
A refused request takes no token, so a client retrying gets in as soon as one refills.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from magnetar.admin.routing import Handler, error_response

log = logging.getLogger(__name__)


class TokenBucket:
    """``rate`` tokens a second, at most ``max(1, rate)`` stored; ``clock`` in seconds."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not rate > 0:
            raise ValueError("the rate must be positive")
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.tokens = self.capacity
        self.clock = clock
        self.updated = clock()
        self.refused = 0

    def _refill(self) -> None:
        now = self.clock()
        if now > self.updated:
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    def try_take(self) -> bool:
        self._refill()
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.refused += 1
        return False

    def seconds_to_next(self) -> float:
        """How long until a token is there (0 if one is)."""
        self._refill()
        return max(0.0, (1.0 - self.tokens) / self.rate)


def rate_limit_middleware(rate: float) -> Any:
    """An aiohttp middleware answering 429 past ``rate`` requests a second."""
    bucket = TokenBucket(rate)
    last_log = [-math.inf]

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if bucket.try_take():
            return await handler(request)
        now = time.monotonic()
        if now - last_log[0] > 60:
            last_log[0] = now
            log.warning("HTTP request refused with 429: more than httpRequestsMaxPerSecond=%g "
                        "(%d refused so far)", rate, bucket.refused)
        response = error_response(
            429, f"Too Many Requests: the admin service takes at most {rate:g} requests a "
            "second (httpRequestsMaxPerSecond)")
        response.headers["Retry-After"] = str(max(1, math.ceil(bucket.seconds_to_next())))
        return response

    middleware.bucket = bucket  # type: ignore[attr-defined]  # for tests and metrics
    return middleware
