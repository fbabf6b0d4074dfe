"""`PublishThrottle`: a topic's publish rate (Pulsar's ``publishMaxMessageRate``), enforced
as Pulsar enforces it: while the topic is over its rate, the broker stops reading from the
connections of the producers that sent to it (sends wait in the client and the kernel, none
fails), and reads again once the tokens spent over the rate are paid back.

Each Send counts its messages and payload bytes once read (`RateLimiter.consume`); a
connection that sends while the topic is over is held (`ThrottledCnx.hold_reading`) until
the one timer of the topic finds the limiter back at zero, which releases every held
connection together. Other topics' producers on other connections are untouched; producers
sharing a held connection wait with it (the same in Pulsar: throttling is per connection).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from magnetar.broker.rate_limiter import RateLimiter


class ThrottledCnx(Protocol):
    """What the throttle uses of a producer's connection."""

    @property
    def closed(self) -> bool: ...
    def hold_reading(self) -> None: ...
    def release_reading(self) -> None: ...


class PublishThrottle:
    """One topic's publish rate and the connections it holds."""

    def __init__(self, msgs_per_s: int, bytes_per_s: int) -> None:
        self.limiter = RateLimiter(msgs_per_s, bytes_per_s)
        self.held: set[ThrottledCnx] = set()
        self._timer: asyncio.TimerHandle | None = None
        self.throttled_count = 0  # how many times a connection was held (stats)

    @property
    def rates(self) -> tuple[int, int]:
        return self.limiter.msgs_per_period, self.limiter.bytes_per_period

    def update(self, msgs_per_s: int, bytes_per_s: int) -> None:
        self.limiter.update(msgs_per_s, bytes_per_s)
        if self._timer is not None and self.limiter.delay() == 0:
            self._release()

    def published(self, cnx: ThrottledCnx, msgs: int, size: int) -> None:
        """A Send of ``msgs`` messages, ``size`` bytes, read from ``cnx``."""
        if not self.limiter.consume(msgs, size):
            return
        if cnx not in self.held:
            self.held.add(cnx)
            self.throttled_count += 1
            cnx.hold_reading()
        if self._timer is None:
            self._schedule()

    def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        # a little past the exact time: a refill of a few microseconds short would
        # otherwise cost one more timer round
        self._timer = loop.call_later(self.limiter.delay() + 0.001, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if self.limiter.delay() > 0:  # still over (sends read after the hold)
            self._schedule()
            return
        self._release()

    def _release(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self.held = self.held, set()
        for cnx in held:
            cnx.release_reading()

    def close(self) -> None:
        """The topic goes (or its rate was removed): read from every held connection again."""
        self._release()
