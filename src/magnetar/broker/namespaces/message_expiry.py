"""Message TTL: acknowledging, on behalf of subscriptions, what was published too long ago.

`MessageExpirer` (Pulsar's ``PersistentMessageExpiryMonitor``, one per broker here rather
than one per subscription) owns message expiry: finding the last entry older than a cutoff
(by binary search on publish time over the ledger, never a scan, its reads on the storage's
reader threads) and then moving the cursors of the subscriptions behind it forward. `skip_to` is the one way a subscription is moved
forward on the broker's initiative (TTL here, backlog-quota eviction in backlog_quota.py).
Housekeeping applies the namespace's ``message_ttl_seconds``; the admin API's
expire-messages awaits `MessageExpirer.expire_messages` for one subscription or all.
"""

from __future__ import annotations

import time

from magnetar.broker.entries import entry_metadata
from magnetar.broker.subscriptions.subscription import PersistentSubscription
from magnetar.broker.topics.topic import PersistentTopic
from magnetar.storage import Position


def skip_to(sub: PersistentSubscription, position: Position) -> None:
    """Acknowledge everything up to ``position`` on behalf of the subscription."""
    sub.cursor.mark_delete(position)
    if sub.dispatcher is not None:
        sub.dispatcher.schedule()
    sub.check_end_of_topic()


class MessageExpirer:
    """Expires messages past a time-to-live on a topic's subscriptions."""

    async def expire_messages(self, topic: PersistentTopic, ttl_seconds: float,
                              now: float | None = None, subscription: str | None = None) -> None:
        """Message TTL: acknowledge, on every subscription (or only ``subscription``), the
        entries published more than ``ttl_seconds`` ago. The last such entry is found by
        binary search on publish time (`ManagedLedger.find_position_async`: its reads run
        on the storage's reader threads), over the entries stored when this is called; the
        cursors are moved once it is done, those of subscriptions still there and not
        already past that entry (a cursor never moves back). No search when no
        subscription has anything to expire."""
        now = time.time() if now is None else now
        cutoff = int((now - ttl_seconds) * 1000)
        ledger = topic.ledger
        last = ledger.last_confirmed()
        if last is None or not ledger.is_open:
            return
        subs = [sub for sub in topic.subscriptions.values()
                if isinstance(sub, PersistentSubscription)
                and (subscription is None or sub.name == subscription)
                and sub.cursor.mark_delete_position < last]
        if not subs:
            return

        def fresh(data: bytes | memoryview) -> bool:
            metadata = entry_metadata(data)
            return metadata is None or metadata.publish_time >= cutoff

        first_fresh = await ledger.find_position_async(fresh)
        if first_fresh is None:
            expire_to = last
        else:
            expire_to = Position(first_fresh.ledger_id, first_fresh.entry_id - 1)
        if not ledger.is_open:  # unloaded or deleted meanwhile
            return
        for sub in subs:
            if (topic.subscriptions.get(sub.name) is sub and not sub.cursor.closed
                    and sub.cursor.mark_delete_position < expire_to):
                skip_to(sub, expire_to)
