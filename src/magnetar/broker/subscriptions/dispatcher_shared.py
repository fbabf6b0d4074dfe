"""Shared subscriptions: entries go round-robin to consumers that have permits.

Delayed delivery lives here (and in Key_Shared): an entry whose metadata asks for a later
``deliver_at_time`` is held in the DelayedDeliveryTracker and replayed when it is due.
Marker entries are never sent: the subscription takes them (`replicated.py`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from magnetar.broker.entries import entry_metadata, entry_num_messages
from magnetar.broker.subscriptions.delayed_delivery import DelayedDeliveryTracker
from magnetar.broker.subscriptions.dispatcher import (
    MAX_READS_PER_PASS,
    Dispatcher,
    Entry,
)
from magnetar.storage import Position

if TYPE_CHECKING:
    import asyncio

    from magnetar.broker.subscriptions.consumer import Consumer
    from magnetar.broker.subscriptions.subscription import PersistentSubscription
    from magnetar.protocol import pb

#: An entry ready to assign: its position, data as stored and MessageMetadata (if readable).
Prepared = tuple["Position", "bytes | memoryview", "pb.MessageMetadata | None"]


class SharedDispatcher(Dispatcher):
    def __init__(self, subscription: PersistentSubscription, sub_type: int) -> None:
        super().__init__(subscription, sub_type)
        self.next_index = 0
        self.delayed = DelayedDeliveryTracker()
        self._delay_timer: asyncio.TimerHandle | None = None

    def redeliver_all(self, consumer: Consumer) -> None:
        super().redeliver_all(consumer)

    def _available(self) -> list[Consumer]:
        return [c for c in self.consumers if c.available]

    def read_for_dispatch(self, max_entries: int) -> list[Prepared]:
        """Replay first, then new entries; entries not due yet go to the delay tracker."""
        entries: list[Entry] = self.read_replay(max_entries)
        replayed = len(entries)
        if not entries:
            entries = self.read_new(max_entries)
        return self.prepare(entries, replayed)

    def prepare(
        self, entries: list[Entry], replayed: int
    ) -> list[Prepared]:
        """Attach metadata; hold back new entries whose deliver_at_time is in the future;
        marker entries and aborted transactions' messages go to the subscription
        (`marker_read`: acknowledged), not to consumers."""
        out = []
        now_ms = int(time.time() * 1000)
        delayed_enabled = self.config.delayedDeliveryEnabled
        txns = self.sub.topic.txn_buffer
        for i, (position, data) in enumerate(entries):
            metadata = entry_metadata(data)
            if metadata is not None and (metadata.HasField("marker_type") or (
                    txns is not None and txns.hides(metadata))):
                self.sub.marker_read(position, data, metadata)  # never sent
                continue
            if (
                delayed_enabled
                and i >= replayed
                and metadata is not None
                and metadata.HasField("deliver_at_time")
                and metadata.deliver_at_time > now_ms
                and self.delayed.add(position[0], position[1], metadata.deliver_at_time)
            ):
                continue
            out.append((position, data, metadata))
        self._arm_delay_timer()
        return out

    def _arm_delay_timer(self) -> None:
        due = self.delayed.next_delivery_ms()
        if due is None or self._delay_timer is not None:
            return
        delay = max(0.0, due / 1000 - time.time())
        self._delay_timer = self._loop.call_later(delay, self._delayed_due)

    def _delayed_due(self) -> None:
        self._delay_timer = None
        now_ms = int(time.time() * 1000)
        for ledger_id, entry_id in self.delayed.ready_positions(now_ms, 10_000):
            self.replay.add(Position(ledger_id, entry_id))
        self._arm_delay_timer()
        self.schedule()

    def dispatch(self) -> None:
        for _ in range(MAX_READS_PER_PASS):  # bounded work per turn; reschedules itself if more
            available = self._available()
            if not available or not self.has_more():
                break
            allowed = self.rate_allowance()
            if not allowed:
                break  # a dispatch rate: its timer runs the next pass
            budget = max(1, min(sum(c.dispatch_budget for c in available), self.max_read(),
                                allowed))
            entries = self.read_for_dispatch(budget)
            if entries:  # none: all acknowledged or delayed; the next pass reads further
                self.assign(entries)
        else:
            self.schedule()
        self.sub.check_end_of_topic()

    def assign(self, entries: list[Prepared]) -> None:
        consumers = self.consumers
        for position, data, metadata in entries:
            chosen = None
            for _ in range(len(consumers)):
                candidate = consumers[self.next_index % len(consumers)]
                self.next_index += 1
                if candidate.available:
                    chosen = candidate
                    break
            if chosen is None:
                self.replay.add(position)
                continue
            self.send(chosen, position, data, entry_num_messages(metadata))

    def close(self) -> None:
        if self._delay_timer is not None:
            self._delay_timer.cancel()
            self._delay_timer = None
