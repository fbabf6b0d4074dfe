"""The replicated part of a persistent subscription (`ReplicatedSubscription`, a part of
`PersistentSubscription`, as `limits.LimitedSubscription` is): the markers its dispatcher
reads, its snapshots, and its mark-delete position moved by another cluster.

Marker entries (``protocol.markers``) are server-only: the dispatchers hand each one to
`marker_read`, which acknowledges it for the subscription (no consumer ever gets it, no
permit is spent on it) and, for a replicated subscription, keeps the snapshots in its
`SnapshotCache`. Whenever a replicated subscription's mark-delete position moves past a
snapshot, its topic's `SnapshotListener` (the replication room's controller) hears of it.
A subscription is replicated once a consumer subscribed with ``replicate_subscription_state``
(or another cluster's update created it); the flag is stored with its durable cursor
(``pulsar.replicated.subscription``, as Pulsar's cursor property).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from magnetar.broker.entries import split_entry
from magnetar.broker.subscriptions.snapshot_cache import REPLICATED_PROPERTY, SnapshotCache
from magnetar.protocol import pb
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import parse_payload_part
from magnetar.protocol.markers import REPLICATED_SUBSCRIPTION_SNAPSHOT, Snapshot, decode_marker

if TYPE_CHECKING:
    from magnetar.broker.subscriptions.consumer import Consumer
    from magnetar.broker.subscriptions.dispatcher import Dispatcher
    from magnetar.broker.subscriptions.subscription import SubscribedTopic
    from magnetar.storage import Position

log = logging.getLogger(__name__)


class ReplicatedSubscription:
    """The replicated-subscription part of a persistent subscription (see the module)."""

    # what the subscription itself provides
    name: str
    durable: bool
    topic: SubscribedTopic
    cursor: Any
    dispatcher: Dispatcher | None
    redelivery_counts: dict[Position, int]
    #: the snapshots read (None: the subscription is not replicated)
    snapshots: SnapshotCache | None = None

    @property
    def consumers(self) -> list[Consumer]:
        raise NotImplementedError

    def _mark_delete(self, position: Position) -> None:
        raise NotImplementedError

    def init_replicated(self) -> None:
        """Replicated if its stored cursor says so."""
        if getattr(self.cursor, "properties", {}).get(REPLICATED_PROPERTY):
            self.set_replicated(True)

    @property
    def replicated(self) -> bool:
        return self.snapshots is not None

    def set_replicated(self, enabled: bool) -> None:
        """Make the subscription replicated (its state follows it to the other clusters)
        or not; stored with a durable cursor."""
        if enabled and self.snapshots is None:
            config = self.topic.service.config
            self.snapshots = SnapshotCache(config.replicatedSubscriptionsSnapshotMaxCachedPerSubscription)
        elif not enabled:
            self.snapshots = None
        if self.durable and hasattr(self.cursor, "set_property"):
            self.cursor.set_property(REPLICATED_PROPERTY, 1 if enabled else None)

    def marker_read(self, position: Position, data: bytes | memoryview,
                    metadata: pb.MessageMetadata) -> None:
        """The dispatcher read a marker entry (never sent): acknowledge it for this
        subscription; a replicated subscription keeps the snapshots it reads."""
        before = self.cursor.mark_delete_position
        if self.snapshots is not None and metadata.marker_type == REPLICATED_SUBSCRIPTION_SNAPSHOT:
            try:
                _, part = split_entry(data)
                _, payload = parse_payload_part(part, verify=False)
                snapshot = decode_marker(metadata.marker_type, payload)
            except ProtocolError as exc:
                log.warning("%s/%s: unreadable snapshot marker at %s: %s",
                            self.topic.name, self.name, position, exc)
            else:
                if isinstance(snapshot, Snapshot):
                    self.snapshots.add(snapshot)
        self.cursor.delete([position])
        self.redelivery_counts.pop(position, None)
        self.mark_delete_moved(before)

    def mark_delete_to(self, position: Position) -> None:
        """Acknowledge everything up to ``position`` as a cumulative ack would (another
        cluster's update of a replicated subscription)."""
        before = self.cursor.mark_delete_position
        self._mark_delete(position)
        for consumer in self.consumers:
            for p in [p for p in consumer.pending if p <= position]:
                del consumer.pending[p]
        self.mark_delete_moved(before)
        if self.dispatcher is not None:
            self.dispatcher.schedule()

    def mark_delete_moved(self, before: Position) -> None:
        """Tell the topic when the mark-delete position (``before``: where it was) moved
        past a snapshot."""
        if self.snapshots is None:
            return
        after = self.cursor.mark_delete_position
        if after <= before:
            return
        snapshot = self.snapshots.advanced(after)
        listener = self.topic.snapshot_listener
        if snapshot is not None and listener is not None:
            listener.local_subscription_updated(self.name, snapshot)
