"""What limits one persistent subscription (`LimitedSubscription`, a part of
`PersistentSubscription`): its dispatch rates (the topic's limiter shared by its
subscriptions, the subscription's own) and its unacknowledged messages, per consumer
(``maxUnackedMessagesPerConsumer``, applied to each consumer) and for the consumers
together (``maxUnackedMessagesPerSubscription``: Pulsar's blocked dispatcher).

The dispatcher hands it the policies' values (`SubscriptionLimits`) whenever the policy
store's generation moved (`Dispatcher.follow_policies`), so a change applies at once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.rate_limiter import RateLimiter
from magnetar.protocol import pb

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from magnetar.broker.subscriptions.consumer import Consumer
    from magnetar.broker.subscriptions.dispatcher import Dispatcher
    from magnetar.broker.subscriptions.subscription import SubscribedTopic

SubType = pb.CommandSubscribe

#: `Dispatcher.rate_allowance` when nothing limits a read
UNLIMITED = 1 << 30


@dataclass(frozen=True)
class SubscriptionLimits:
    """What the policies limit of one subscription (0 or less: no limit)."""

    dispatch_msgs: int = 0
    dispatch_bytes: int = 0
    dispatch_period: int = 1
    unacked_per_consumer: int = 0
    unacked_per_subscription: int = 0


class TopicLimitsView(Protocol):
    """What a subscription uses of its topic's limits (``topics.topic_limits.TopicLimits``)."""

    @property
    def generation(self) -> int: ...  # of the policies applied
    @property
    def dispatch_limiter(self) -> RateLimiter | None: ...  # dispatchRate: all subscriptions
    def refresh(self) -> None: ...


class LimitedSubscription:
    """The limits part of a persistent subscription (see the module docstring)."""

    # what the subscription itself provides
    name: str
    durable: bool
    topic: SubscribedTopic
    dispatcher: Dispatcher | None

    @property
    def consumers(self) -> list[Consumer]:
        raise NotImplementedError

    def init_limits(self) -> None:
        # the dispatch rates this subscription obeys (its topic's, its own), as of the
        # policy store's generation `limits_generation`
        self.limits_generation = -1
        self.dispatch_limiter: RateLimiter | None = None
        self.dispatch_limiters: tuple[RateLimiter, ...] = ()
        # maxUnackedMessagesPerConsumer as the policies say (None: not applied yet, the
        # broker's), maxUnackedMessagesPerSubscription and its block (`unacked_room`)
        self.unacked_per_consumer: int | None = None
        self.max_unacked = 0
        self.blocked_on_unacked = False

    def apply_limits(self, generation: int, limits: SubscriptionLimits) -> None:
        """Follow ``limits`` (and the topic's own dispatch limiter), as of the policies'
        ``generation``: a change applies at once, to the consumers attached too."""
        self.limits_generation = generation
        msgs, size, period = limits.dispatch_msgs, limits.dispatch_bytes, limits.dispatch_period
        if msgs <= 0 and size <= 0:
            self.dispatch_limiter = None
        elif self.dispatch_limiter is None:
            self.dispatch_limiter = RateLimiter(msgs, size, period)
        else:
            self.dispatch_limiter.update(msgs, size, period)
        found = (self.topic.limits.dispatch_limiter, self.dispatch_limiter)
        self.dispatch_limiters = tuple(limiter for limiter in found if limiter is not None)
        self.unacked_per_consumer = limits.unacked_per_consumer
        for consumer in self.consumers:
            consumer.set_unacked_limit(limits.unacked_per_consumer)
        self.max_unacked = limits.unacked_per_subscription
        if self.blocked_on_unacked:
            self.unblock_if_drained()

    def unacked_room(self) -> int:
        """How many more messages the subscription's consumers may hold unacknowledged
        (``maxUnackedMessagesPerSubscription``, Shared and Key_Shared subscriptions):
        0 while it is blocked, which lasts until acknowledgements bring it down to half
        the limit (Pulsar's blocked dispatcher)."""
        limit = self.max_unacked
        if limit <= 0 or self.dispatcher is None or self.dispatcher.sub_type not in (
                SubType.Shared, SubType.Key_Shared) or not self.durable:
            self.blocked_on_unacked = False
            return UNLIMITED
        held = sum(c.pending.messages for c in self.consumers)
        if self.blocked_on_unacked and held > limit // 2:
            return 0
        if held >= limit:
            if not self.blocked_on_unacked:
                _log.debug("subscription %s on %s blocked: %d unacknowledged messages",
                          self.name, self.topic.name, held)
            self.blocked_on_unacked = True
            return 0
        self.blocked_on_unacked = False
        return limit - held

    def unblock_if_drained(self) -> None:
        """Acknowledgements came: dispatch again if they took the subscription out of its
        block (`unacked_room`)."""
        if self.unacked_room() and self.dispatcher is not None:
            self.dispatcher.schedule()
