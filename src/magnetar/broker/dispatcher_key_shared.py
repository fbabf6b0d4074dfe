"""Key_Shared subscriptions: each key hash belongs to one consumer (AUTO_SPLIT or STICKY ranges).

Per-key order holds while consumers come and go:
- an entry whose consumer has no permits is held back (replay), and so is every later entry
  of the same key hash in the same pass;
- a consumer that joins when others are already reading gets a ``max_read_position`` (the
  read position at its arrival): it receives nothing at or past it until every entry before
  it is acknowledged, so keys moved to it cannot overtake messages still held by others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.dispatcher_shared import SharedDispatcher
from magnetar.broker.errors import BrokerError
from magnetar.broker.key_shared import AutoSplitSelector, StickySelector, sticky_key
from magnetar.protocol import pb
from magnetar.protocol.hashing import sticky_key_hash

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.storage import Position

MAX_HELD_BACK = 10_000


class KeySharedDispatcher(SharedDispatcher):
    def __init__(
        self, subscription: PersistentSubscription, sub_type: int, meta: pb.KeySharedMeta | None
    ) -> None:
        super().__init__(subscription, sub_type)
        self.mode = meta.keySharedMode if meta is not None else pb.AUTO_SPLIT
        self.allow_out_of_order = bool(meta is not None and meta.allowOutOfOrderDelivery)
        self.selector: AutoSplitSelector | StickySelector = (
            StickySelector() if self.mode == pb.STICKY else AutoSplitSelector()
        )

    def add_consumer_with_meta(self, consumer: Consumer, meta: pb.KeySharedMeta | None) -> None:
        mode = meta.keySharedMode if meta is not None else pb.AUTO_SPLIT
        if mode != self.mode:
            raise BrokerError(
                pb.ConsumerAssignError,
                f"subscription {self.sub.name} uses Key_Shared mode "
                f"{pb.KeySharedMode.Name(self.mode)}, not {pb.KeySharedMode.Name(mode)}",
            )
        try:
            if isinstance(self.selector, StickySelector):
                ranges = [(r.start, r.end) for r in meta.hashRanges] if meta is not None else []
                self.selector.add_consumer(consumer, ranges)
            else:
                self.selector.add_consumer(consumer)
        except ValueError as exc:
            raise BrokerError(pb.ConsumerAssignError, str(exc)) from exc
        if self.consumers and not self.allow_out_of_order:
            consumer.max_read_position = self.read_position
        self.add_consumer(consumer)
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        self.selector.remove_consumer(consumer)
        super().remove_consumer(consumer)

    def on_mark_delete(self, mark_delete: Position) -> None:
        released = False
        for c in self.consumers:
            if c.max_read_position is not None and mark_delete >= _previous(c.max_read_position):
                c.max_read_position = None
                released = True
        if released:
            self.schedule()

    def dispatch(self) -> None:
        for _ in range(64):  # bounded work per event-loop turn; reschedules itself if more
            if not self._available() or not self.has_more():
                break
            entries = self.read_replay(self.max_read())
            replayed = len(entries)
            if len(self.replay) + replayed < MAX_HELD_BACK:
                entries += self.read_new(self.max_read())
            prepared = self.prepare(entries, replayed)
            if not prepared:
                continue  # all held for later delivery or already acknowledged
            if self.assign(prepared) == 0:
                break
        else:
            self.schedule()
        self.sub.check_end_of_topic()

    def assign(self, entries: list) -> int:  # type: ignore[override]
        blocked_hashes: set[int] = set()
        sent = 0
        for position, data, metadata in entries:
            key = sticky_key(
                metadata.partition_key.encode() if metadata is not None and metadata.HasField("partition_key") else None,
                metadata.ordering_key if metadata is not None and metadata.HasField("ordering_key") else None,
            )
            key_hash = sticky_key_hash(key)
            consumer = self.selector.select(key_hash)
            if (
                consumer is None
                or key_hash in blocked_hashes
                or not consumer.available
                or (consumer.max_read_position is not None and position >= consumer.max_read_position)
            ):
                blocked_hashes.add(key_hash)
                self.replay.add(position)
                continue
            from magnetar.broker.dispatcher import entry_num_messages

            self.send(consumer, position, data, entry_num_messages(metadata))
            sent += 1
        return sent


def _previous(position: Position) -> Position:
    return type(position)(position[0], position[1] - 1)
