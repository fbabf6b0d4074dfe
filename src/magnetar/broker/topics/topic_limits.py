"""A topic's rate limits (`TopicLimits`): its publish rate, its dispatch rate (the one
limiter its subscriptions share) and its subscribe rate, set from the policies that apply.

`PublishThrottle`: a topic's publish rate (Pulsar's ``publishMaxMessageRate``), enforced
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

from magnetar.broker.errors import BrokerError
from magnetar.broker.rate_limiter import RateLimiter
from magnetar.broker.topic_name import TopicName
from magnetar.protocol import pb

#: consumers whose subscribe rate a topic tracks before it forgets those not limited now
SUBSCRIBE_LIMITERS_KEPT = 1024


class RatePolicies(Protocol):
    """What the limits read of a topic's policies (``namespaces.policies.Policies``)."""

    @property
    def publish_rate_msgs(self) -> int: ...
    @property
    def publish_rate_bytes(self) -> int: ...
    @property
    def dispatch_rate_msgs(self) -> int: ...
    @property
    def dispatch_rate_bytes(self) -> int: ...
    @property
    def dispatch_rate_period(self) -> int: ...
    @property
    def subscribe_rate(self) -> int: ...
    @property
    def subscribe_rate_period(self) -> int: ...


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


class PolicySource(Protocol):
    """What the limits read of the policy store (``namespaces.policies.PolicyStore``)."""

    @property
    def generation(self) -> int: ...
    def for_topic(self, topic: TopicName) -> RatePolicies: ...


class TopicLimits:
    """One topic's rate limits (None / 0: no limit), following its policies: `refresh`
    applies them again whenever the store's ``generation`` moved (a change applies at
    once: the connection checks before a send's count, the dispatcher before a pass)."""

    def __init__(self, store: PolicySource, name: TopicName) -> None:
        self.store = store
        self.name = name
        self.generation = -1  # of the policies applied
        self.publish_throttle: PublishThrottle | None = None
        # dispatchRate: what all the topic's subscriptions together may be sent
        self.dispatch_limiter: RateLimiter | None = None
        # subscribeRate: (subscribes, period), one limiter per (host, consumer name, id)
        self.subscribe_rate = (0, 30)
        self._subscribe_limiters: dict[tuple[str, str, int], RateLimiter] = {}

    def refresh(self) -> None:
        """Apply the policies that apply to the topic now."""
        self.generation = self.store.generation
        self.apply(self.store.for_topic(self.name))

    def apply(self, policies: RatePolicies) -> None:
        """Follow ``policies`` (limiters whose limits did not change keep their state)."""
        msgs, size = policies.publish_rate_msgs, policies.publish_rate_bytes
        throttle = self.publish_throttle
        if msgs <= 0 and size <= 0:
            if throttle is not None:
                self.publish_throttle = None
                throttle.close()
        elif throttle is None:
            self.publish_throttle = PublishThrottle(msgs, size)
        elif throttle.rates != (msgs, size):
            throttle.update(msgs, size)
        msgs, size = policies.dispatch_rate_msgs, policies.dispatch_rate_bytes
        if msgs <= 0 and size <= 0:
            self.dispatch_limiter = None
        elif self.dispatch_limiter is None:
            self.dispatch_limiter = RateLimiter(msgs, size, policies.dispatch_rate_period)
        else:
            self.dispatch_limiter.update(msgs, size, policies.dispatch_rate_period)
        subscribe_rate = (policies.subscribe_rate, policies.subscribe_rate_period)
        if subscribe_rate != self.subscribe_rate:
            self.subscribe_rate = subscribe_rate
            self._subscribe_limiters.clear()

    def acquire_subscribe(self, host: str, consumer_name: str, consumer_id: int) -> None:
        """Count one subscribe of that consumer (Pulsar's identity of a consumer for this
        limit); NotAllowed when it is over the subscribe rate, as Pulsar answers."""
        if self.generation != self.store.generation:  # the policies changed
            self.refresh()
        rate, period = self.subscribe_rate
        if rate <= 0:
            return
        limiters = self._subscribe_limiters
        key = (host, consumer_name, consumer_id)
        limiter = limiters.get(key)
        if limiter is None:
            if len(limiters) >= SUBSCRIBE_LIMITERS_KEPT:  # forget the ones back at full
                for k in [k for k, v in limiters.items() if v.available()[0] >= rate]:
                    del limiters[k]
            limiter = limiters[key] = RateLimiter(rate, 0, period)
        if limiter.available()[0] < 1:
            raise BrokerError(pb.NotAllowedError,
                              "Subscribe limited by subscribe rate limit per consumer.")
        limiter.consume(1, 0)

    def close(self) -> None:
        """The topic goes: read from the connections its publish rate holds."""
        if self.publish_throttle is not None:
            self.publish_throttle.close()
