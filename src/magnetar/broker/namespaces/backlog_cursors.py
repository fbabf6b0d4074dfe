"""The cursors that hold a persistent topic's backlog, and moving them forward.

A topic's backlog is held by its durable subscriptions and by its geo-replicators' cursors
(``pulsar.repl.{remote}``): as in Pulsar, a replicator's cursor is a consumer of the backlog
like any other, so the backlog quotas (backlog_quota.py) measure it and
``consumer_backlog_eviction`` moves it forward, and message TTL (message_expiry.py) expires
its entries, as they do a subscription's. What is moved past is not replicated: the remote
cluster never gets it (Pulsar drops it for the remote too). `skip_to` is the one way the
broker moves such a cursor forward on its own initiative.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.broker.subscriptions.subscription import PersistentSubscription
from magnetar.broker.topics.replicated import TopicReplicator
from magnetar.broker.topics.topic import PersistentTopic
from magnetar.storage import Position
from magnetar.storage.cursor import ManagedCursor


@dataclass(frozen=True, slots=True)
class BacklogCursor:
    """A durable subscription's cursor, or a replicator's (``replicator`` set)."""

    name: str
    cursor: ManagedCursor
    subscription: PersistentSubscription | None = None
    replicator: TopicReplicator | None = None

    def backlog(self) -> int:
        """Entries not acknowledged (not replicated, for a replicator's)."""
        if self.subscription is not None:
            return self.subscription.backlog()
        return self.cursor.backlog()

    def is_current(self, topic: PersistentTopic) -> bool:
        """Whether it still holds ``topic``'s backlog (not removed or closed meanwhile)."""
        if self.cursor.closed:
            return False
        if self.subscription is not None:
            return topic.subscriptions.get(self.subscription.name) is self.subscription
        return any(r is self.replicator for r in topic.replicators.values())


def backlog_cursors(topic: PersistentTopic, subscriptions_only: bool = False) -> list[BacklogCursor]:
    """The cursors holding ``topic``'s backlog: its durable subscriptions' and (unless
    ``subscriptions_only``) its replicators'."""
    out = [BacklogCursor(name, sub.cursor, subscription=sub)
           for name, sub in topic.subscriptions.items()
           if isinstance(sub, PersistentSubscription) and sub.durable]
    if not subscriptions_only:
        for replicator in topic.replicators.values():
            cursor = replicator.cursor
            if cursor is not None and not cursor.closed:
                out.append(BacklogCursor(cursor.name, cursor, replicator=replicator))
    return out


def skip_to(holder: PersistentSubscription | BacklogCursor, position: Position) -> None:
    """Acknowledge everything up to ``position`` on behalf of a subscription, or move a
    replicator's cursor there (what it skips counts as expired in its stats; it resumes
    from there by itself)."""
    if isinstance(holder, BacklogCursor):
        if holder.subscription is None:
            before = holder.cursor.backlog()
            holder.cursor.mark_delete(position)
            if holder.replicator is not None:
                holder.replicator.msg_expired += max(0, before - holder.cursor.backlog())
            return
        holder = holder.subscription
    holder.cursor.mark_delete(position)
    if holder.dispatcher is not None:
        holder.dispatcher.schedule()
    holder.check_end_of_topic()
