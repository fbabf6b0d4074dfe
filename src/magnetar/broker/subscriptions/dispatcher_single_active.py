"""Exclusive and Failover subscriptions: one active consumer receives everything, in order.

Failover picks the active consumer by priority level, then consumer name; on a partitioned
topic the partition index chooses among them (``index % count``) so that partitions spread
over consumers. When the active consumer changes, every consumer is told
(ActiveConsumerChange) and the read position rewinds to the first unacknowledged entry; a
consumer that joins without changing the active one is told only about itself.
Marker entries are never sent: the subscription takes them (`replicated.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.entries import entry_metadata, entry_num_messages
from magnetar.broker.errors import BrokerError
from magnetar.broker.subscriptions.dispatcher import (
    MAX_READS_PER_PASS,
    Dispatcher,
)
from magnetar.protocol import pb

if TYPE_CHECKING:
    from magnetar.broker.subscriptions.consumer import Consumer
    from magnetar.broker.subscriptions.subscription import PersistentSubscription
    from magnetar.storage import Position


class SingleActiveDispatcher(Dispatcher):
    def __init__(self, subscription: PersistentSubscription, sub_type: int) -> None:
        super().__init__(subscription, sub_type)
        self.active: Consumer | None = None

    def add_consumer(self, consumer: Consumer) -> None:
        if self.sub_type == pb.CommandSubscribe.Exclusive and self.consumers:
            raise BrokerError(pb.ConsumerBusy, f"Exclusive consumer is already connected to {self.sub.name}")
        super().add_consumer(consumer)
        self._elect(joined=consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        was_active = consumer is self.active
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        consumer.pending.clear()
        if was_active:
            self.active = None
            self._elect(force_rewind=True)

    def redeliver_all(self, consumer: Consumer) -> None:
        if consumer is self.active:
            for p in consumer.pending:
                self.sub.redelivery_counts[p] = self.sub.redelivery_counts.get(p, 0) + 1
            consumer.msg_redelivered += consumer.unacked_messages
            self.rewind()

    def redeliver_positions(self, positions: list[Position], consumer: Consumer | None,
                            count: bool = True) -> None:
        # Single-active subscriptions keep order: any redelivery rewinds to the first unacked.
        if consumer is not None and consumer is self.active:
            self.redeliver_all(consumer)

    def _elect(self, force_rewind: bool = False, joined: Consumer | None = None) -> None:
        if not self.consumers:
            self.active = None
            return
        ordered = sorted(self.consumers, key=lambda c: (c.priority_level, c.name))
        if self.sub_type == pb.CommandSubscribe.Failover:
            index = self.sub.topic.topic_name.partition_index
            top = [c for c in ordered if c.priority_level == ordered[0].priority_level]
            chosen = top[index % len(top)] if index >= 0 else top[0]
        else:
            chosen = ordered[0]
        changed = chosen is not self.active
        if changed and self.active is not None:
            self.active.pending.clear()
        self.active = chosen
        if self.sub_type == pb.CommandSubscribe.Failover:
            # Everyone hears of a change; otherwise only a newcomer learns where it stands.
            for c in self.consumers if changed else [joined] if joined is not None else []:
                c.active_consumer_change(c is chosen)
        if changed or force_rewind:
            self.rewind()

    def dispatch(self) -> None:
        consumer = self.active
        for _ in range(MAX_READS_PER_PASS):  # bounded work per turn; reschedules itself if more
            if consumer is None or not consumer.available or not self.has_more():
                break
            allowed = self.rate_allowance()
            if not allowed:
                break  # a dispatch rate: its timer runs the next pass
            most = min(self.max_read(), allowed)
            entries = self.read_replay(most) or self.read_new(min(consumer.permits, most))
            if not entries:
                break
            txns = self.sub.topic.txn_buffer
            for position, data in entries:
                metadata = entry_metadata(data)
                if metadata is not None and (metadata.HasField("marker_type") or (
                        txns is not None and txns.hides(metadata))):
                    self.sub.marker_read(position, data, metadata)  # never sent
                    continue
                self.send(consumer, position, data, entry_num_messages(metadata))
        else:
            self.schedule()
        self.sub.check_end_of_topic()
