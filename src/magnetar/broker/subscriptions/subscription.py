"""Subscriptions: a cursor plus a dispatcher, and the acknowledgement rules.

``PersistentSubscription`` keeps its place in a ManagedCursor (durable subscriptions persist
it; the Reader's non-durable ones keep it in memory and vanish with their consumer). Acks
move the cursor: individual acks delete single entries, batch-index acks narrow an entry's
ack set until every message in it is acknowledged, cumulative acks move the mark-delete
position. ``NonPersistentSubscription`` has no cursor: it pushes or drops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.entries import entry_metadata, entry_num_messages
from magnetar.broker.errors import BrokerError
from magnetar.broker.subscriptions import ack_set as ack_sets
from magnetar.broker.subscriptions.dispatcher_key_shared import KeySharedDispatcher
from magnetar.broker.subscriptions.dispatcher_shared import SharedDispatcher
from magnetar.broker.subscriptions.dispatcher_single_active import SingleActiveDispatcher
from magnetar.broker.subscriptions.limits import LimitedSubscription, TopicLimitsView
from magnetar.broker.subscriptions.pending_acks import PendingAcks, acknowledge_in_txn
from magnetar.broker.subscriptions.replicated import ReplicatedSubscription
from magnetar.broker.subscriptions.snapshot_cache import SnapshotListener
from magnetar.broker.subscriptions.txn_view import last_shown, readable
from magnetar.protocol import pb
from magnetar.protocol.ids import message_id_data, wire_position
from magnetar.storage import Position, PositionsRead, StorageError

#: how long a Reader's subscription waits, after a seek closed its consumer, for that
#: consumer to reconnect (the official clients come back within their reconnect backoff)
READER_SEEK_HOLD_SECONDS = 60.0

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.subscriptions.consumer import Consumer
    from magnetar.broker.subscriptions.dispatcher import Dispatcher
    from magnetar.broker.subscriptions.txn_view import TxnView
    from magnetar.broker.topic_name import TopicName
    from magnetar.storage import ManagedLedger

log = logging.getLogger(__name__)

SubType = pb.CommandSubscribe


def position_of(mid: pb.MessageIdData) -> Position:
    """The storage position a wire message id names (entry id -1: before the ledger's first)."""
    return Position(*wire_position(mid))


class OutCounters:
    """What a subscription's consumers that have gone received (its out counters outlive them)."""

    __slots__ = ("bytes", "msgs")

    def __init__(self) -> None:
        self.msgs = 0
        self.bytes = 0

    def keep(self, consumer: Consumer, connected: list[Consumer]) -> None:
        """Add the counters of ``consumer`` if it is one of ``connected`` (counted once)."""
        if consumer in connected:
            self.msgs += consumer.msg_out
            self.bytes += consumer.bytes_out


class SubscribedTopic(Protocol):
    """What a persistent subscription and its dispatcher use of their topic
    (``topics.PersistentTopic`` is one): the subscriptions room names no room above it."""

    @property
    def name(self) -> str: ...
    @property
    def topic_name(self) -> TopicName: ...
    @property
    def service(self) -> BrokerService: ...
    @property
    def ledger(self) -> ManagedLedger: ...
    @property
    def moving_to(self) -> tuple[str, str] | None: ...  # cluster: where its bundle goes
    @property
    def terminated(self) -> bool: ...
    @property
    def subscriptions(self) -> dict[str, Subscription]: ...
    @property
    def limits(self) -> TopicLimitsView: ...  # its rate limits (topics.topic_limits)
    @property
    def snapshot_listener(self) -> SnapshotListener | None: ...  # replicated subscriptions
    @property
    def txn_buffer(self) -> TxnView | None: ...  # its transactions (None: it never had one)
    def remove_subscription(self, name: str) -> None: ...
    def delete_subscription(self, name: str) -> Future[Any] | None: ...
    def touch(self) -> None: ...  # a figure /metrics reads changed (topics/changes.py)


class NonPersistentSubscribedTopic(Protocol):
    """What a non-persistent subscription uses of its topic (``topics.NonPersistentTopic``)."""

    @property
    def name(self) -> str: ...
    @property
    def topic_name(self) -> TopicName: ...
    @property
    def subscriptions(self) -> dict[str, Subscription]: ...
    @property
    def next_entry_id(self) -> int: ...
    @property
    def moving_to(self) -> tuple[str, str] | None: ...  # cluster: where its bundle goes
    def touch(self) -> None: ...  # a figure /metrics reads changed (topics/changes.py)


class PersistentSubscription(LimitedSubscription, ReplicatedSubscription):
    def __init__(self, topic: SubscribedTopic, name: str, cursor: Any, durable: bool) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.dispatcher: Dispatcher | None = None
        self.redelivery_counts: dict[Position, int] = {}
        self.ended_consumers: set[int] = set()
        self.skipped_entries = 0  # unreadable entries skipped (autoSkipNonRecoverableData)
        self.out_of_removed = OutCounters()
        # a Reader's subscription kept, after a seek closed its consumer, for the consumer
        # that reconnects (see `disconnect_for_seek`): the timer that drops it if none does
        self.kept_for_seek: asyncio.TimerHandle | None = None
        self.init_limits()
        self.init_replicated()  # replicated.py: markers, snapshots
        # when a consumer last came or went (or it was loaded): monotonic (expiry)
        self.last_active = time.monotonic()
        # acks held in transactions (pending_acks.py; None: it never had one)
        self.pending_acks: PendingAcks | None = PendingAcks.restore(self) if durable else None

    # -- consumers ---------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer, key_shared_meta: pb.KeySharedMeta | None) -> None:
        self.last_active = time.monotonic()
        self.topic.touch()  # its consumers count (topics/changes.py)
        if self.kept_for_seek is not None:
            self.kept_for_seek.cancel()
            self.kept_for_seek = None
        sub_type = consumer.sub_type
        if self.dispatcher is not None and self.dispatcher.sub_type != sub_type:
            if self.dispatcher.consumers:
                raise BrokerError(
                    pb.ConsumerBusy,
                    f"subscription {self.name} is of type {SubType.SubType.Name(self.dispatcher.sub_type)}; "
                    f"a {SubType.SubType.Name(sub_type)} consumer cannot join it",
                )
            self.close_dispatcher()
        if self.dispatcher is None:
            self.dispatcher = self._new_dispatcher(sub_type, key_shared_meta)
        if self.unacked_per_consumer is not None:
            consumer.set_unacked_limit(self.unacked_per_consumer)
        if isinstance(self.dispatcher, KeySharedDispatcher):
            self.dispatcher.add_consumer_with_meta(consumer, key_shared_meta)
        else:
            self.dispatcher.add_consumer(consumer)

    def _new_dispatcher(self, sub_type: int, meta: pb.KeySharedMeta | None) -> Dispatcher:
        if sub_type in (SubType.Exclusive, SubType.Failover):
            return SingleActiveDispatcher(self, sub_type)
        if sub_type == SubType.Shared:
            return SharedDispatcher(self, sub_type)
        return KeySharedDispatcher(self, sub_type, meta)

    def close_dispatcher(self) -> None:
        self.topic.touch()  # its consumers go with it
        if isinstance(self.dispatcher, SharedDispatcher):
            self.dispatcher.close()
        self.dispatcher = None

    @property
    def consumers(self) -> list[Consumer]:
        return self.dispatcher.consumers if self.dispatcher is not None else []

    def remove_consumer(self, consumer: Consumer) -> None:
        self.last_active = time.monotonic()
        self.topic.touch()
        if self.dispatcher is not None:
            self.out_of_removed.keep(consumer, self.consumers)
            self.dispatcher.remove_consumer(consumer)
        self.ended_consumers.discard(id(consumer))
        if not self.consumers and not self.durable and self.kept_for_seek is None:
            self.topic.remove_subscription(self.name)

    def disconnect_consumers(self) -> None:
        for consumer in list(self.consumers):
            consumer.close_by_broker()
            self.remove_consumer(consumer)

    def disconnect_for_seek(self) -> None:
        """Close the consumers after a seek (they reconnect and read from the new
        position). A Reader's subscription is kept, with its cursor where the seek put it,
        for the consumer that reconnects, as Pulsar keeps the cursor of a reset: that
        consumer's Subscribe may name no start (the official clients send none after a
        seek by time) or the one of an earlier seek, and must not start over from it.
        Dropped if no consumer comes back within ``READER_SEEK_HOLD_SECONDS``."""
        if not self.durable and self.consumers:
            if self.kept_for_seek is not None:
                self.kept_for_seek.cancel()
            self.kept_for_seek = asyncio.get_running_loop().call_later(
                READER_SEEK_HOLD_SECONDS, self._drop_if_unused)
        self.disconnect_consumers()

    def _drop_if_unused(self) -> None:
        self.kept_for_seek = None
        if not self.consumers and self.topic.subscriptions.get(self.name) is self:
            self.topic.remove_subscription(self.name)

    # -- acknowledgements --------------------------------------------------------------

    def acknowledge(self, consumer: Consumer, ack: pb.CommandAck) -> bool:
        """Apply ``ack``, at once unless it must wait (then True: it is applied, and
        answered through `ServerCnx.ack_applied`, once it can be). A batch-index ack
        of an entry the consumer was not sent needs the entry's message count: from the
        read cache, else read from disk off the loop (`_read_counts`); meanwhile that
        ack and every later one of the same consumer wait, so that one consumer's acks
        apply in the order they came. BrokerError: refused (nothing applied)."""
        if ack.ack_type == pb.CommandAck.Cumulative and consumer.sub_type not in (
                SubType.Exclusive, SubType.Failover):
            raise BrokerError(
                pb.NotAllowedError,
                f"cumulative acknowledgement is not allowed on a "
                f"{SubType.SubType.Name(consumer.sub_type)} subscription",
            )
        if ack.HasField("txnid_most_bits") or ack.HasField("txnid_least_bits"):
            return acknowledge_in_txn(self, consumer, ack)  # applied at commit
        waiting = consumer.acks_waiting
        if waiting is not None:
            waiting.append(ack)
            return True
        targets, unread = self.ack_targets(consumer, ack, None)
        if unread:
            self._read_counts(consumer, unread, {})
            consumer.acks_waiting = deque([ack])
            return True
        self._apply_ack(consumer, ack, targets)
        return False

    def _apply_ack(self, consumer: Consumer, ack: pb.CommandAck,
                   targets: list[tuple[Position, list[int]]]) -> None:
        """Move the cursor as ``ack`` says (``targets``: see `ack_targets`)."""
        cursor = self.cursor
        before = cursor.mark_delete_position
        if ack.ack_type == pb.CommandAck.Cumulative:
            for position, words in targets:
                if words and not ack_sets.is_all_acked(words):
                    self._mark_delete(Position(position[0], position[1] - 1))
                    cursor.set_batch_ack(position, words)
                else:
                    self._mark_delete(position)
                for p in [p for p in consumer.pending if p <= position]:
                    del consumer.pending[p]
        else:
            deleted = ack_sets.settle_individual(cursor, targets)
            if deleted:
                cursor.delete(deleted)
                for p in deleted:
                    self.redelivery_counts.pop(p, None)
                    if consumer.pending.pop(p, None) is None:
                        for other in self.consumers:
                            if other.pending.pop(p, None) is not None:
                                break
        self.acks_applied(before)

    def acks_applied(self, before: Position) -> None:
        """Acknowledgements moved the cursor (from mark-delete position ``before``)."""
        if self.blocked_on_unacked:
            self.unblock_if_drained()
        self.mark_delete_moved(before)
        self.check_end_of_topic()

    def ack_targets(
        self, consumer: Consumer, ack: pb.CommandAck, counts: dict[Position, int | Exception] | None
    ) -> tuple[list[tuple[Position, list[int]]], list[Position]]:
        """The position of each message id of ``ack`` with its batch-index ack set cut to
        the words its entry's batch can use (empty: the whole entry): a client cannot make
        the cursor keep more than the entry has messages. The count comes from what the
        consumer was sent, else from the stored entry (the read cache, or ``counts``: what
        `_read_counts` read); an entry that is gone keeps nothing. Second: the entries
        whose count must be read from disk first (when there are any, the targets are
        not complete). BrokerError if an entry could not be read."""
        targets: list[tuple[Position, list[int]]] = []
        unread: list[Position] = []
        pending = consumer.pending
        for mid in ack.message_id:
            position = position_of(mid)
            ack_set = mid.ack_set
            if not ack_set:
                targets.append((position, []))
                continue
            count = pending.get(position)
            if count is None:
                count = self.stored_count(position, counts)
                if count is None:
                    unread.append(position)
                    continue
            targets.append((position, list(ack_set[: (count + 63) // 64])))
        return targets, unread

    def stored_count(self, position: Position,
                     counts: dict[Position, int | Exception] | None = None) -> int | None:
        """The message count of the stored entry at ``position`` without touching the disk
        (0: there is no such entry; None: it must be read)."""
        ledger = self.topic.ledger
        if not ledger.contains(position):
            return 0
        data = ledger.cached_entry(position)
        if data is not None:
            return entry_num_messages(entry_metadata(data))
        known = counts.get(position) if counts is not None else None
        if isinstance(known, Exception):
            raise BrokerError(pb.UnknownError, f"cannot read entry {position[0]}:{position[1]} "
                              f"of {self.topic.name}: {known}")
        return known

    def _read_counts(self, consumer: Consumer, positions: list[Position],
                     counts: dict[Position, int | Exception]) -> None:
        """Read the entries at ``positions`` on the storage's reader threads, note their
        message counts (or why they could not be read) in ``counts``, then apply the
        consumer's waiting acks (`_apply_waiting_acks`)."""
        future = self.topic.ledger.read_positions_cold(positions)

        def read(f: asyncio.Future[PositionsRead]) -> None:
            if f.cancelled():
                failure: Exception = StorageError("the read was cancelled")
            else:
                exc = f.exception()
                if exc is None:
                    result = f.result()
                    for p, data in result.entries:
                        counts[p] = entry_num_messages(entry_metadata(data))
                    counts.update(result.failed)
                    self._apply_waiting_acks(consumer, counts)
                    return
                failure = exc if isinstance(exc, Exception) else StorageError(str(exc))
            for p in positions:
                counts[p] = failure
            self._apply_waiting_acks(consumer, counts)

        future.add_done_callback(read)

    def _apply_waiting_acks(self, consumer: Consumer,
                            counts: dict[Position, int | Exception]) -> None:
        """Apply and answer the consumer's waiting acks in order, until one needs another
        read from disk (then again once that is done) or none is left."""
        waiting = consumer.acks_waiting
        while waiting:
            ack = waiting[0]
            error: BrokerError | None = None
            try:
                targets, unread = self.ack_targets(consumer, ack, counts)
                if unread:
                    self._read_counts(consumer, unread, counts)
                    return
                if getattr(self.cursor, "closed", False):
                    raise BrokerError(pb.ServiceNotReady, f"subscription {self.name} was closed "
                                      "before the acknowledgement could be applied")
                self._apply_ack(consumer, ack, targets)
            except BrokerError as exc:
                error = exc
            except Exception:
                log.exception("applying an acknowledgement on %s/%s failed",
                              self.topic.name, self.name)
                error = BrokerError(pb.UnknownError, "internal broker error")
            waiting.popleft()
            consumer.cnx.ack_applied(ack, error)
        consumer.acks_waiting = None

    def _mark_delete(self, position: Position) -> None:
        if position > self.cursor.mark_delete_position:
            self.cursor.mark_delete(position)
            for p in [p for p in self.redelivery_counts if p <= position]:
                del self.redelivery_counts[p]

    def redeliver(self, consumer: Consumer, ids: list[Position]) -> None:
        if self.dispatcher is None:
            return
        # as in Pulsar, any redelivery request lifts the block on unacknowledged messages
        consumer.unblock_on_unacked()
        if not ids or consumer.sub_type in (SubType.Exclusive, SubType.Failover):
            self.dispatcher.redeliver_all(consumer)
            return
        positions = [p for p in ids if p in consumer.pending]
        for p in positions:
            consumer.pending.pop(p, None)
        self.dispatcher.redeliver_positions(positions, consumer)

    # -- seeking -----------------------------------------------------------------------

    def seek_to_id(self, target: Position) -> None:
        first = self.topic.ledger.first_position()
        last = self.topic.ledger.last_confirmed()
        if target[0] < 0 or first is None or target < first:
            target = first if first is not None else Position(0, 0)
        elif last is not None and target > last:
            target = Position(last[0], last[1] + 1)
        self._reset(target)

    def seek_to_time(self, publish_time_ms: int) -> None:
        """Seek to the first entry published at or after the time (searched on the loop:
        for the admin API; clients' seeks use ``seek_to_time_async``)."""
        self._seek_to_found(self.topic.ledger.find_position(_published_since(publish_time_ms)))

    async def seek_to_time_async(self, publish_time_ms: int) -> None:
        """``seek_to_time`` with the search on the storage's reader threads."""
        ledger = self.topic.ledger
        found = await ledger.find_position_async(_published_since(publish_time_ms))
        self._seek_to_found(found)

    def _seek_to_found(self, target: Position | None) -> None:
        if target is None:  # nothing that recent: after the last entry
            last = self.topic.ledger.last_confirmed()
            target = Position(last[0], last[1] + 1) if last is not None else Position(0, 0)
        self._reset(target)

    def _reset(self, target: Position) -> None:
        self.cursor.reset(target)
        self.redelivery_counts.clear()
        if self.dispatcher is not None:
            self.dispatcher.rewind()
        self.ended_consumers.clear()

    # -- queries -----------------------------------------------------------------------

    def last_message_id(self) -> tuple[pb.MessageIdData, pb.MessageIdData | None] | None:
        """GetLastMessageId's answer (the last entry's id, with the index of its last
        message when it is a batch, and the mark-delete position), from memory: None when
        the last entry is not in the read cache (`last_message_id_async` reads it)."""
        ledger = self.cursor.ledger  # the topic's, or its compacted view (read_compacted)
        txns = self.topic.txn_buffer
        last = readable(txns, ledger.last_confirmed())
        if last is None:
            return self._last_message_ids(ledger, None, None)
        data = ledger.cached_entry(last)
        if data is None:
            return None
        if txns is not None:
            metadata = entry_metadata(data)
            if metadata is not None and txns.hides(metadata):
                return None  # the last readable message is further back: read them
        return self._last_message_ids(ledger, last, data)

    async def last_message_id_async(self) -> tuple[pb.MessageIdData, pb.MessageIdData | None]:
        """`last_message_id`, reading the last entry on the storage's reader threads when
        the read cache does not hold it (the answer names the entry that was last when
        asked, even if more came while it was read)."""
        answer = self.last_message_id()
        if answer is not None:
            return answer
        ledger = self.cursor.ledger
        txns = self.topic.txn_buffer
        last = readable(txns, ledger.last_confirmed())
        if txns is not None and last is not None:
            shown = await last_shown(ledger, txns, last)
            if shown is None:  # none in that ledger: before its first entry
                md = self.cursor.mark_delete_position
                return message_id_data(last[0], -1), message_id_data(md[0], md[1])
            return self._last_message_ids(ledger, *shown)
        read = await ledger.read_positions_cold([last])
        if not read.entries:
            raise read.failed.get(last) or StorageError(f"cannot read the last entry {last}")
        position, data = read.entries[0]
        return self._last_message_ids(ledger, position, data)

    def _last_message_ids(self, ledger: Any, last: Position | None,
                          data: bytes | memoryview | None
                          ) -> tuple[pb.MessageIdData, pb.MessageIdData | None]:
        if last is None or data is None:
            ids = ledger.segment_ids()
            last_id = message_id_data(ids[-1] if ids else 0, -1)
        else:
            metadata = entry_metadata(data)
            batch_index = -1
            if metadata is not None and metadata.HasField("num_messages_in_batch"):
                batch_index = metadata.num_messages_in_batch - 1
            last_id = message_id_data(last[0], last[1], batch_index)
        md = self.cursor.mark_delete_position
        return last_id, message_id_data(md[0], md[1])

    def backlog(self) -> int:
        backlog: int = self.cursor.backlog()
        return backlog

    def check_end_of_topic(self) -> None:
        if not self.topic.terminated or self.dispatcher is None:
            return
        if self.dispatcher.has_more() or self.cursor.backlog() > 0:
            return  # as Pulsar: only once everything was read and acknowledged
        for consumer in self.consumers:
            if id(consumer) not in self.ended_consumers:
                self.ended_consumers.add(id(consumer))
                consumer.reached_end_of_topic()

    def unsubscribe(self, consumer: Consumer) -> Future[Any] | None:
        """Drop the subscription (its only consumer asks); the future: its cursor row's
        deletion, off the loop (None: nothing stored)."""
        others = [c for c in self.consumers if c is not consumer]
        if others:
            raise BrokerError(
                pb.ConsumerBusy,
                f"subscription {self.name} has other connected consumers; close them before unsubscribing",
            )
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)
            self.close_dispatcher()
        return self.topic.delete_subscription(self.name)

    def stats(self) -> dict[str, Any]:
        return {
            "type": SubType.SubType.Name(self.dispatcher.sub_type) if self.dispatcher else "None",
            "msgBacklog": self.backlog(),
            "isDurable": self.durable,
            "isReplicated": self.replicated,
            "markDeletePosition": str(self.cursor.mark_delete_position),
            "readPosition": str(self.dispatcher.read_position) if self.dispatcher else None,
            "unackedMessages": sum(c.unacked_messages for c in self.consumers),
            "msgOutCounter": self.out_of_removed.msgs + sum(c.msg_out for c in self.consumers),
            "nonRecoverableEntriesSkipped": self.skipped_entries,
            "consumers": [c.stats() for c in self.consumers],
        }


def _published_since(publish_time_ms: int) -> Callable[[bytes | memoryview], bool]:
    """Whether a stored entry was published at or after ``publish_time_ms`` (thread-safe)."""

    def published_since(data: bytes | memoryview) -> bool:
        metadata = entry_metadata(data)
        return metadata is not None and metadata.publish_time >= publish_time_ms

    return published_since


class NonPersistentDispatcher:
    """Pushes each message to one consumer with permits (round-robin) or drops it."""

    def __init__(self, sub_type: int) -> None:
        self.sub_type = sub_type
        self.consumers: list[Consumer] = []
        self.next_index = 0
        self.read_position = Position(-1, -1)

    def schedule(self) -> None:
        """Nothing is kept, so there is nothing to dispatch later."""

    def add_consumer(self, consumer: Consumer) -> None:
        if self.sub_type == SubType.Exclusive and self.consumers:
            raise BrokerError(pb.ConsumerBusy, "Exclusive consumer is already connected")
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)

    def has_more(self) -> bool:
        return False

    def offer(self, entry_id: int, payload: bytes | memoryview, num_messages: int) -> bool:
        consumers = self.consumers
        if self.sub_type in (SubType.Exclusive, SubType.Failover):
            ordered = sorted(consumers, key=lambda c: (c.priority_level, c.name))
            candidates = ordered[:1]
        else:
            candidates = consumers[self.next_index :] + consumers[: self.next_index]
            self.next_index = (self.next_index + 1) % max(1, len(consumers))
        for consumer in candidates:
            if consumer.available:
                consumer.send_entry(Position(0, entry_id), payload, num_messages, 0, None, track=False)
                return True
        return False


class NonPersistentSubscription:
    durable = False

    def __init__(self, topic: NonPersistentSubscribedTopic, name: str, sub_type: int) -> None:
        self.topic = topic
        self.name = name
        # always there (`NonPersistentTopic.publish` offers to it): a subscription without
        # consumers takes the type of the next consumer that joins
        self.dispatcher = NonPersistentDispatcher(sub_type)
        self.out_of_removed = OutCounters()

    @property
    def consumers(self) -> list[Consumer]:
        return self.dispatcher.consumers

    def add_consumer(self, consumer: Consumer, key_shared_meta: pb.KeySharedMeta | None) -> None:
        self.topic.touch()  # its consumers count (topics/changes.py)
        if not self.dispatcher.consumers:
            self.dispatcher = NonPersistentDispatcher(consumer.sub_type)
        self.dispatcher.add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        self.topic.touch()
        self.out_of_removed.keep(consumer, self.consumers)
        self.dispatcher.remove_consumer(consumer)
        if not self.consumers:
            self.topic.subscriptions.pop(self.name, None)

    def disconnect_consumers(self) -> None:
        for consumer in list(self.consumers):
            consumer.close_by_broker()
            self.remove_consumer(consumer)

    disconnect_for_seek = disconnect_consumers

    def acknowledge(self, consumer: Consumer, ack: pb.CommandAck) -> bool:
        """Nothing is kept, so acknowledgements change nothing (and never wait)."""
        return False

    def redeliver(self, consumer: Consumer, ids: list[Position]) -> None:
        """Nothing is kept, so there is nothing to redeliver."""

    def seek_to_id(self, target: Position) -> None:
        raise BrokerError(pb.NotAllowedError, "seek is not supported on non-persistent topics")

    seek_to_time = seek_to_id

    async def seek_to_time_async(self, publish_time_ms: int) -> None:
        self.seek_to_id(Position(0, 0))  # refused the same way

    def last_message_id(self) -> tuple[pb.MessageIdData, pb.MessageIdData | None]:
        return message_id_data(0, self.topic.next_entry_id - 1), None

    async def last_message_id_async(self) -> tuple[pb.MessageIdData, pb.MessageIdData | None]:
        return self.last_message_id()

    def backlog(self) -> int:
        return 0

    def check_end_of_topic(self) -> None:
        """Non-persistent topics are never terminated."""

    def unsubscribe(self, consumer: Consumer) -> Future[Any] | None:
        self.remove_consumer(consumer)
        return None

    def stats(self) -> dict[str, Any]:
        return {"msgBacklog": 0, "consumers": [c.stats() for c in self.consumers]}


Subscription = PersistentSubscription | NonPersistentSubscription
