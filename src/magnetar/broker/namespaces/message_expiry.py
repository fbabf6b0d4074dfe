"""Message TTL: acknowledging, on behalf of subscriptions, what was published too long ago.

`MessageExpirer` (Pulsar's ``PersistentMessageExpiryMonitor``, one per broker here rather
than one per subscription) owns message expiry: finding the last entry older than a cutoff
(by binary search on publish time over the ledger, never a scan, its reads on the storage's
reader threads) and then moving the cursors of the subscriptions behind it forward, and the geo-replicators' cursors behind it (backlog_cursors.py: as Pulsar, what
expires is not replicated). `skip_to` (backlog_cursors.py) is the one way a cursor is moved
forward on the broker's initiative (TTL here, backlog-quota eviction in backlog_quota.py).
Housekeeping applies the namespace's ``message_ttl_seconds``; the admin API's
expire-messages awaits `MessageExpirer.expire_messages` for one subscription or all.
"""

from __future__ import annotations

import time

from magnetar.broker.entries import entry_metadata
from magnetar.broker.namespaces.backlog_cursors import backlog_cursors, skip_to
from magnetar.broker.subscriptions.subscription import PersistentSubscription
from magnetar.broker.topics.topic import PersistentTopic
from magnetar.storage import Position

__all__ = ["MessageExpirer", "skip_to"]


class MessageExpirer:
    """Expires messages past a time-to-live on a topic's subscriptions."""

    async def expire_messages(self, topic: PersistentTopic, ttl_seconds: float,
                              now: float | None = None, subscription: str | None = None) -> None:
        """Message TTL: acknowledge, on every subscription and replicator cursor (or only
        ``subscription``'s), the entries published more than ``ttl_seconds`` ago. The last such entry is found by
        binary search on publish time (`ManagedLedger.find_position_async`: its reads run
        on the storage's reader threads), over the entries stored when this is called; the
        cursors are moved once it is done, those of subscriptions still there and not
        already past that entry (a cursor never moves back). No search when no
        subscription has anything to expire."""
        now = time.time() if now is None else now
        cutoff = int((now - ttl_seconds) * 1000)
        ledger = topic.ledger
        last = topic.readable_last()  # never past an open transaction (transaction_buffer.py)
        if last is None or not ledger.is_open:
            return
        subs = [sub for sub in topic.subscriptions.values()
                if isinstance(sub, PersistentSubscription)
                and (subscription is None or sub.name == subscription)
                and sub.cursor.mark_delete_position < last]
        replicators = [] if subscription is not None else [
            holder for holder in backlog_cursors(topic)
            if holder.replicator is not None and holder.cursor.mark_delete_position < last]
        if not subs and not replicators:
            return

        def fresh(data: bytes | memoryview) -> bool:
            metadata = entry_metadata(data)
            return metadata is None or metadata.publish_time >= cutoff

        first_fresh = await ledger.find_position_async(fresh)
        if first_fresh is None or first_fresh > last:
            expire_to = last
        else:
            expire_to = Position(first_fresh.ledger_id, first_fresh.entry_id - 1)
        if not ledger.is_open:  # unloaded or deleted meanwhile
            return
        for sub in subs:
            if (topic.subscriptions.get(sub.name) is sub and not sub.cursor.closed
                    and sub.cursor.mark_delete_position < expire_to):
                skip_to(sub, expire_to)
        for holder in replicators:
            if holder.is_current(topic) and holder.cursor.mark_delete_position < expire_to:
                skip_to(holder, expire_to)
