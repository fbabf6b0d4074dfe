"""Backlog quotas: how far subscriptions may fall behind before producers or readers pay.

`BacklogQuotaManager` (Pulsar's name) owns the size and time quotas. As in Pulsar: the size
quota (``backlogQuotaDefaultLimitBytes``) bounds the estimated backlog of the slowest durable
subscription or geo-replicator cursor (backlog_cursors.py: a remote cluster that is down
holds the backlog as a slow consumer does), the time quota (``backlogQuotaDefaultLimitSecond``) the age of the oldest
unacknowledged message; the namespace policies can override both. They are checked when a
producer connects (`producer_error`: refused with ProducerBlockedQuotaExceededError for
``producer_request_hold``, so the client keeps retrying and its sends wait;
ProducerBlockedQuotaExceededException for ``producer_exception``, so the client fails its
pending sends) and by housekeeping every ``backlogQuotaCheckIntervalInSeconds`` (`enforce`),
which disconnects the producers of a topic over quota (they reconnect and meet the check
above) or, for ``consumer_backlog_eviction``, moves the slowest cursors forward until the
backlog is back under 90% of the limit (size) or expires the messages older than 90% of it
(time).

The time quota needs the publish time of the oldest unacknowledged entry: from the read
cache (or the topic's last such read), else read on the storage's reader threads, by
`enforce` and, for a new producer, by `producer_read` (ServerCnx answers the Producer
command once it is done); `producer_error` then finds it in memory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Coroutine
from typing import Any

from magnetar.broker.namespaces.backlog_cursors import BacklogCursor, backlog_cursors, skip_to
from magnetar.broker.namespaces.message_expiry import MessageExpirer
from magnetar.broker.namespaces.policies import PolicyStore
from magnetar.broker.topics.topic import PersistentTopic
from magnetar.protocol import pb
from magnetar.storage import Position
from magnetar.storage.cursor import ManagedCursor

log = logging.getLogger(__name__)


class BacklogQuotaManager:
    """Measures topic backlogs and applies the namespaces' backlog quota policies."""

    def __init__(self, policies: PolicyStore, expirer: MessageExpirer) -> None:
        self.policies = policies
        self.expirer = expirer

    def backlog_bytes(self, topic: PersistentTopic) -> tuple[int, BacklogCursor | None]:
        """Estimated backlog bytes of the slowest durable subscription or replicator
        cursor (backlog_cursors.py), and that cursor."""
        slowest: BacklogCursor | None = None
        entries = 0
        for holder in backlog_cursors(topic):
            backlog = holder.backlog()
            if slowest is None or backlog > entries:
                slowest, entries = holder, backlog
        if slowest is None or entries == 0:
            return 0, slowest
        ledger = topic.ledger
        count = ledger.entry_count()
        average = ledger.size_bytes() / count if count else 0.0
        return int(entries * average), slowest

    def backlog_age(self, topic: PersistentTopic, now: float) -> float:
        """Seconds since the oldest message some durable subscription has not acknowledged
        (or some replicator has not replicated) was published (0 without backlog)."""
        published = topic.oldest_backlog_publish_time()
        return 0.0 if published is None else max(0.0, now - published)

    def over_quota(self, topic: PersistentTopic, now: float) -> tuple[bool, bool, str]:
        """(size quota exceeded, time quota exceeded, why)."""
        policies = self.policies.for_topic(topic.topic_name)
        limit = policies.backlog_quota_limit_bytes
        size = self.backlog_bytes(topic)[0] if limit >= 0 else 0
        over_size = limit >= 0 and size > limit
        seconds = policies.backlog_quota_limit_seconds
        age = self.backlog_age(topic, now) if seconds > 0 else 0.0
        over_time = seconds > 0 and age > seconds
        why = (f"backlog of {size} bytes over the {limit}-byte quota" if over_size else
               f"unacknowledged messages {age:.0f} s old, over the {seconds}-second quota")
        return over_size, over_time, why

    def _checks_producers(self, topic: PersistentTopic) -> bool:
        """Whether a new producer on ``topic`` meets a quota check at all (not under
        ``consumer_backlog_eviction``, not without subscriptions, replicators or quotas)."""
        policies = self.policies.for_topic(topic.topic_name)
        if policies.backlog_quota_policy == "consumer_backlog_eviction" or not (
                topic.subscriptions or topic.replicators):
            return False
        return policies.backlog_quota_limit_bytes >= 0 or policies.backlog_quota_limit_seconds > 0

    def producer_read(self, topic: PersistentTopic) -> Coroutine[Any, Any, Any] | None:
        """The read a new producer's check (`producer_error`) needs off the event loop
        first, or None: the oldest unacknowledged entry's publish time for the time quota,
        when neither the read cache nor the last such read has it (read on the storage's
        reader threads, `PersistentTopic.oldest_backlog_publish_time_async`)."""
        if not self._checks_producers(topic):
            return None
        if self.policies.for_topic(topic.topic_name).backlog_quota_limit_seconds <= 0:
            return None
        oldest = topic.oldest_backlog_position()
        if oldest is None or topic.knows_publish_time(oldest):
            return None
        return topic.oldest_backlog_publish_time_async()

    def producer_error(self, topic: PersistentTopic,
                       now: float | None = None) -> tuple[pb.ServerError, str] | None:
        """The error for a new producer on a topic over its backlog quota, else None. The
        time quota's publish time of the oldest unacknowledged entry comes from memory
        once `producer_read` is done (ServerCnx awaits it before the Producer command gets
        here); elsewhere (tests, tools) a miss is read on the calling thread."""
        if not self._checks_producers(topic):
            return None
        over_size, over_time, why = self.over_quota(topic, time.time() if now is None else now)
        if not (over_size or over_time):
            return None
        why = f"{topic.name}: {why}"
        if self.policies.for_topic(topic.topic_name).backlog_quota_policy == "producer_exception":
            return pb.ProducerBlockedQuotaExceededException, why
        return pb.ProducerBlockedQuotaExceededError, why + "; producers are on hold"

    async def enforce(self, topic: PersistentTopic, now: float | None = None) -> None:
        """Enforce the size and time quotas on a topic now (see the module's docstring).
        The time quota's read of the oldest unacknowledged entry comes from the read
        cache, else the storage's reader threads; its expiry searches there too."""
        policies = self.policies.for_topic(topic.topic_name)
        limit = policies.backlog_quota_limit_bytes
        seconds = policies.backlog_quota_limit_seconds
        if limit < 0 and seconds <= 0:
            return
        now = time.time() if now is None else now
        if seconds > 0:
            await topic.oldest_backlog_publish_time_async()  # (over_quota finds it in memory)
            if not topic.ledger.is_open:
                return
        over_size, over_time, why = self.over_quota(topic, now)
        if not (over_size or over_time):
            return
        if policies.backlog_quota_policy != "consumer_backlog_eviction":
            log.info("topic %s: %s: disconnecting producers", topic.name, why)
            for producer in list(topic.producers.values()):
                producer.close_by_broker()
                topic.remove_producer(producer)
            return
        if over_time:  # as Pulsar: expire what is older than 90% of the time quota
            log.info("topic %s: %s: expiring older messages", topic.name, why)
            await self.expirer.expire_messages(topic, seconds * 0.9, now)
            if not topic.ledger.is_open:
                return
        if over_size:
            self.evict_to_size(topic, limit)

    def evict_to_size(self, topic: PersistentTopic, limit: int) -> None:
        """Move the slowest cursors forward until the backlog is under 90% of ``limit``."""
        size, slowest = self.backlog_bytes(topic)
        target = int(limit * 0.9)
        previous: ManagedCursor | None = None
        while size > target and slowest is not None and slowest.cursor is not previous:
            ledger = topic.ledger
            average = ledger.size_bytes() / max(1, ledger.entry_count())
            skip = max(1, int((size - target + average - 1) // average))
            position = position_after(ledger, slowest.cursor.mark_delete_position, skip)
            log.info("topic %s: backlog quota exceeded (%d > %d bytes): %s %s skips "
                     "%d entries", topic.name, size, limit,
                     "subscription" if slowest.replicator is None else "replicator cursor",
                     slowest.name, skip)
            skip_to(slowest, position)
            previous = slowest.cursor
            size, slowest = self.backlog_bytes(topic)


def position_after(ledger: Any, start: Position, n: int) -> Position:
    """The position ``n`` entries after ``start`` (or the last one), without reading data."""
    last = ledger.last_confirmed()
    for lid in ledger.segment_ids():
        if lid < start.ledger_id:
            continue
        first_eid = start.entry_id + 1 if lid == start.ledger_id else 0
        available = ledger.count_between(Position(lid, first_eid), Position(lid, 2**62))
        if n <= available:
            return Position(lid, first_eid + n - 1)
        n -= available
    return last if last is not None else start
