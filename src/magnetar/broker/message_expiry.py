"""Message TTL: acknowledging, on behalf of subscriptions, what was published too long ago.

`MessageExpirer` (Pulsar's ``PersistentMessageExpiryMonitor``, one per broker here rather
than one per subscription) owns message expiry: finding the last entry older than a cutoff
(by binary search on publish time over the ledger, never a scan) and moving the cursors of
the subscriptions behind it forward. `skip_to` is the one way a subscription is moved
forward on the broker's initiative (TTL here, backlog-quota eviction in backlog_quota.py).
Housekeeping applies the namespace's ``message_ttl_seconds``; the admin API's
expire-messages calls `MessageExpirer.expire_messages` for one subscription or all.
"""

from __future__ import annotations

import time

from magnetar.broker.dispatcher import entry_metadata
from magnetar.broker.subscription import PersistentSubscription
from magnetar.broker.topic import PersistentTopic
from magnetar.storage import Position


def skip_to(sub: PersistentSubscription, position: Position) -> None:
    """Acknowledge everything up to ``position`` on behalf of the subscription."""
    sub.cursor.mark_delete(position)
    if sub.dispatcher is not None:
        sub.dispatcher.schedule()
    sub.check_end_of_topic()


class MessageExpirer:
    """Expires messages past a time-to-live on a topic's subscriptions."""

    def expire_messages(self, topic: PersistentTopic, ttl_seconds: float, now: float | None = None,
                        subscription: str | None = None) -> None:
        """Message TTL: acknowledge, on every subscription (or only ``subscription``), the
        entries published more than ``ttl_seconds`` ago (found by binary search on publish
        time, not by a scan)."""
        now = time.time() if now is None else now
        cutoff = int((now - ttl_seconds) * 1000)
        ledger = topic.ledger
        last = ledger.last_confirmed()
        if last is None:
            return

        def fresh(data: bytes) -> bool:
            metadata = entry_metadata(data)
            return metadata is None or metadata.publish_time >= cutoff

        first_fresh = ledger.find_position(fresh)
        if first_fresh is None:
            expire_to = last
        else:
            expire_to = Position(first_fresh.ledger_id, first_fresh.entry_id - 1)
        for sub in list(topic.subscriptions.values()):
            if subscription is not None and sub.name != subscription:
                continue
            if isinstance(sub, PersistentSubscription) and sub.cursor.mark_delete_position < expire_to:
                skip_to(sub, expire_to)
