"""`BacklogTimes`, a persistent topic's oldest backlog entry and its publish time (for the
backlog time quota and the sweep), read from memory when it can, else from disk; the last
one read is kept, so a check right after an async read does no disk read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.entries import entry_metadata
from magnetar.storage import EntryNotFoundError

if TYPE_CHECKING:
    from magnetar.broker.subscriptions.subscription import Subscription
    from magnetar.broker.topics.replicated import TopicReplicator
    from magnetar.storage import ManagedLedger, Position

#: `oldest_backlog_publish_time_async` reads again while acknowledgements move the oldest
#: backlog entry during its read, this many times at most.
_OLDEST_READS = 8


class BacklogTimes:
    """The oldest-backlog part of `PersistentTopic` (a mixin)."""

    ledger: ManagedLedger
    subscriptions: dict[str, Subscription]
    replicators: dict[str, TopicReplicator]
    _publish_time_read: tuple[Position, float | None] | None

    def oldest_backlog_position(self) -> Position | None:
        """The oldest entry some durable subscription has not acknowledged, or some
        geo-replicator has not replicated (its cursor holds the backlog too; None: none)."""
        from magnetar.broker.subscriptions.subscription import PersistentSubscription

        cursors = [sub.cursor for sub in self.subscriptions.values()
                   if isinstance(sub, PersistentSubscription) and sub.durable]
        cursors += [r.cursor for r in self.replicators.values() if r.cursor and not r.cursor.closed]
        return min((p for c in cursors if (p := c.read_position) is not None), default=None)

    def _known_publish_time(self, position: Position) -> tuple[bool, float | None]:
        """(known, publish time in epoch seconds or None without metadata) of the entry at
        ``position``, from memory: the last one read for this, or the read cache."""
        known = self._publish_time_read
        if known is not None and known[0] == position:
            return True, known[1]
        cached = self.ledger.read_cached(position, 1)
        if cached and cached[0][0] == position:
            return True, self._remember_publish_time(position, cached[0][1])
        return False, None

    def knows_publish_time(self, position: Position) -> bool:
        """Whether the publish time of the entry at ``position`` is known without a disk
        read (then `oldest_backlog_publish_time` answers from memory for it)."""
        return self._known_publish_time(position)[0]

    def _remember_publish_time(self, position: Position, data: bytes | memoryview) -> float | None:
        """The publish time of ``data``, the entry at ``position``, kept for the next ask."""

        metadata = entry_metadata(data)
        published = None if metadata is None else metadata.publish_time / 1000
        self._publish_time_read = (position, published)
        return published

    def oldest_backlog_publish_time(self) -> float | None:
        """Publish time (epoch seconds) of the oldest message some durable subscription has
        not acknowledged; None without backlog (or without its metadata). From memory when
        it can (see `oldest_backlog_publish_time_async`), else read from disk on the calling
        thread (tests, tools); the read may raise StorageError."""
        oldest = self.oldest_backlog_position()
        if oldest is None:
            return None
        known, published = self._known_publish_time(oldest)
        if known:
            return published
        return self._remember_publish_time(oldest, self.ledger.read(oldest))

    async def oldest_backlog_publish_time_async(self) -> float | None:
        """`oldest_backlog_publish_time` with the entry from the read cache, else read on
        the storage's reader threads. What it returns is what `oldest_backlog_publish_time`
        answers from memory in the same event-loop step (so a check made right after
        awaiting this does no disk read). May raise StorageError."""
        for _ in range(_OLDEST_READS):
            oldest = self.oldest_backlog_position()
            if oldest is None:
                return None
            known, published = self._known_publish_time(oldest)
            if known:
                return published
            found = await self.ledger.read_cold(oldest, 1)
            if not found or found[0][0] != oldest:
                raise EntryNotFoundError(f"{self.ledger.name}: no entry at {oldest}")
            published = self._remember_publish_time(oldest, found[0][1])
        return published  # acknowledgements kept moving it: the last one read will do
