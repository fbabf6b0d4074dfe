"""`ReplicatorThrottle`: a geo-replicator's dispatch rate (Pulsar's ``replicatorDispatchRate``).

What one replicator (one topic to one remote cluster) may send, in messages and bytes per
period: the topic's own ``replicatorDispatchRate``, else its namespace's (Pulsar keys that
one by the local cluster's name), else the broker's ``dispatchThrottlingRatePerReplicatorInMsg``
/ ``...InByte``; 0 or less is no limit. As Pulsar's replicator does, it reads no faster than
that: before each entry it waits until the limiter has a message (and a byte) to spend, and
the entry is counted once sent (a batch counts all its messages, so the tokens may go below
zero: that debt is paid before the next one goes, which keeps the long-run rate exact).

The limits follow the policies: `admit` applies them again whenever the policy store's
``generation`` moved, so a change (or its removal) holds from the next entry on, also for a
replicator waiting out a long period.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from magnetar.broker.rate_limiter import RateLimiter
from magnetar.broker.topic_name import TopicName

#: the longest one wait lasts before the policies are looked at again (seconds)
_RECHECK_S = 1.0


class ReplicatorRatePolicies(Protocol):
    """What the throttle reads of a topic's policies (``namespaces.policies.Policies``)."""

    @property
    def replicator_dispatch_rate_msgs(self) -> int: ...
    @property
    def replicator_dispatch_rate_bytes(self) -> int: ...
    @property
    def replicator_dispatch_rate_period(self) -> int: ...


class ReplicatorPolicySource(Protocol):
    """What the throttle reads of the policy store (``namespaces.policies.PolicyStore``)."""

    @property
    def generation(self) -> int: ...
    def for_topic(self, topic: TopicName) -> ReplicatorRatePolicies: ...


class ReplicatorThrottle:
    """One replicator's dispatch rate (see the module docstring)."""

    def __init__(self, store: ReplicatorPolicySource, topic: TopicName) -> None:
        self.store = store
        self.topic = topic
        self.generation = -1  # of the policies applied
        self.limiter: RateLimiter | None = None
        self.throttled = 0  # times a send waited for the rate (stats, tests)

    def refresh(self) -> None:
        """Apply the policies that apply to the topic now."""
        self.generation = self.store.generation
        p = self.store.for_topic(self.topic)
        msgs, size = p.replicator_dispatch_rate_msgs, p.replicator_dispatch_rate_bytes
        if msgs <= 0 and size <= 0:
            self.limiter = None
        elif self.limiter is None:
            self.limiter = RateLimiter(msgs, size, p.replicator_dispatch_rate_period)
        else:
            self.limiter.update(msgs, size, p.replicator_dispatch_rate_period)

    @property
    def rates(self) -> tuple[int, int, float] | None:
        """(messages, bytes, period) of the limit in force (None: none)."""
        if self.generation != self.store.generation:
            self.refresh()
        limiter = self.limiter
        if limiter is None:
            return None
        return limiter.msgs_per_period, limiter.bytes_per_period, limiter.period_s

    async def admit(self) -> None:
        """Return once the next entry may be sent."""
        waited = False
        while True:
            if self.generation != self.store.generation:
                self.refresh()
            limiter = self.limiter
            if limiter is None:
                return
            wait = limiter.until_available()
            if wait <= 0:
                return
            if not waited:
                waited = True
                self.throttled += 1
            await asyncio.sleep(min(wait, _RECHECK_S))

    def sent(self, msgs: int, size: int) -> None:
        """An entry of ``msgs`` messages and ``size`` bytes went to the remote cluster."""
        if self.limiter is not None:
            self.limiter.consume(msgs, size)
