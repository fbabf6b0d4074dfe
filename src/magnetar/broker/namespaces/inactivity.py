"""`InactivityMonitor`: subscriptions and topics nobody uses, removed as Pulsar removes them
(its ``BrokerService`` inactivity monitor).

- Subscription expiry (``subscription_expiration_time_minutes``, broker default
  ``subscriptionExpirationTimeMinutes``; 0: never): a durable subscription without
  consumers for that long is deleted with its cursor (checked every
  ``subscriptionExpiryCheckIntervalInMinutes``).
- Inactive topics (``inactive_topic_policies``, broker defaults
  ``brokerDeleteInactiveTopicsEnabled`` / ``...Mode`` / ``...MaxInactiveDurationSeconds``,
  checked every ``brokerDeleteInactiveTopicsFrequencySeconds``): a topic without producers
  and consumers for ``maxInactiveDurationSeconds`` is deleted, with
  ``delete_when_no_subscriptions`` only if it has no durable subscription, with
  ``delete_when_subscriptions_caught_up`` only if every subscription has read everything.
  Partitions of a partitioned topic are left alone (deleting one would break the topic).

Both work on loaded topics. A subscription is inactive from the time its last consumer
left (or it was loaded); a topic from the first round that found it without producers or
consumers and without a message published since the round before (so a producer that
comes and goes between two rounds keeps it), or from when a consumer last left one of its
subscriptions if later. An idle topic that the broker unloaded
(``magnetarTopicUnloadIdleSeconds``) is looked at again once something loads it. Errors
are logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from magnetar.broker.heap import loaded_slices, no_pause, topic_names
from magnetar.broker.subscriptions.subscription import PersistentSubscription
from magnetar.broker.topics.topic import PersistentTopic

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.topic import Topic

log = logging.getLogger(__name__)

#: names of topics seen checked per turn of the loop when forgetting the unloaded ones
FORGET_SLICE = 5_000


def _in_use(topic: Topic) -> bool:
    return bool(topic.producers or topic.waiting_exclusive
                or any(sub.consumers for sub in topic.subscriptions.values())
                or getattr(topic, "replicators", None))  # geo-replicated: kept


class InactivityMonitor:
    """Expires subscriptions and deletes inactive topics (see the module docstring)."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        # per loaded topic: (its msg_in counter at the last round, idle since: monotonic)
        self._seen: dict[str, tuple[int, float]] = {}

    def interval(self) -> float:
        """Seconds between two rounds: the shorter of the two checks' intervals."""
        cfg = self.service.config
        return float(max(1, min(cfg.brokerDeleteInactiveTopicsFrequencySeconds,
                                cfg.subscriptionExpiryCheckIntervalInMinutes * 60)))

    async def run(self, now: float | None = None) -> tuple[int, int]:
        """One round over the loaded persistent topics (``now``: time.monotonic(), for
        tests); returns how many subscriptions and topics it deleted."""
        now = time.monotonic() if now is None else now
        service = self.service
        subscriptions = topics = 0
        await self._forget_unloaded()
        # the names (a tuple of strings, heap.py: untracked by the first young collection,
        # not walked by the full ones while the round goes on), topics taken within the
        # periodic rounds' shared budget per turn of the loop
        async for loaded in loaded_slices(service.topics, 1, no_pause):
            await service.turns.pause()  # (the periodic rounds' budget per turn, turns.py)
            topic = loaded[0] if loaded else None  # (None: unloaded meanwhile)
            if not isinstance(topic, PersistentTopic):
                continue
            try:
                idle_since = self._idle_since(topic, now)
                policies = service.policies.for_topic(topic.topic_name)
                minutes = policies.subscription_expiration_time_minutes
                if minutes > 0:
                    subscriptions += await self._expire_subscriptions(topic, now - minutes * 60)
                if (policies.inactive_topic_delete_while_inactive
                        and idle_since < now - policies.inactive_topic_max_inactive_seconds
                        and await self._delete_if_inactive(topic, policies.inactive_topic_delete_mode,
                                                           now - idle_since)):
                    topics += 1
            except Exception:
                log.exception("inactivity check of topic %s failed", topic.name)
        return subscriptions, topics

    async def _forget_unloaded(self) -> None:
        """Forget the topics seen that are no longer loaded, `FORGET_SLICE` names per
        turn of the loop. A comprehension over every loaded topic held the loop 0.1-0.25 s
        at 100,000 topics on a loaded machine, and the set difference of the two dicts'
        keys that replaced it, one C call, still 50-90 ms (a set of 100,000 names made,
        then probed)."""
        seen, live = self._seen, self.service.topics
        names = topic_names(seen)
        for start in range(0, len(names), FORGET_SLICE):
            if start:
                await asyncio.sleep(0)
            for name in names[start:start + FORGET_SLICE]:
                if name not in live:
                    seen.pop(name, None)

    async def _expire_subscriptions(self, topic: PersistentTopic, before: float) -> int:
        expired = [name for name, sub in topic.subscriptions.items()
                   if isinstance(sub, PersistentSubscription) and sub.durable
                   and not sub.consumers and sub.last_active < before]
        for name in expired:
            log.info("topic %s: subscription %s expired (no consumer for longer than "
                     "subscription_expiration_time_minutes)", topic.name, name)
            deleted = topic.delete_subscription(name)
            if deleted is not None:
                await asyncio.wrap_future(deleted)
        return len(expired)

    def _idle_since(self, topic: PersistentTopic, now: float) -> float:
        """Since when ``topic`` has had no client and no publish (see the docstring)."""
        seen = self._seen.get(topic.name)
        active = _in_use(topic) or seen is None or seen[0] != topic.msg_in
        since = now if active or seen is None else seen[1]
        if active:  # (an idle topic keeps its tuple: none made per round)
            self._seen[topic.name] = (topic.msg_in, since)
        left = [s.last_active for s in topic.subscriptions.values()
                if isinstance(s, PersistentSubscription)]
        return max([since, *left])

    async def _delete_if_inactive(self, topic: PersistentTopic, mode: str, idle: float) -> bool:
        if _in_use(topic) or topic.topic_name.is_partition:
            return False
        subs = [s for s in topic.subscriptions.values()
                if isinstance(s, PersistentSubscription) and s.durable]
        if mode == "delete_when_no_subscriptions" and subs:
            return False
        if mode == "delete_when_subscriptions_caught_up" and any(s.backlog() for s in subs):
            return False
        log.info("topic %s: deleted after %d s without producers or consumers "
                 "(inactive_topic_policies, %s)", topic.name, int(idle), mode)
        await self.service.delete_topic(topic.name)
        return True
