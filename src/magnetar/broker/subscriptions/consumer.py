"""Consumer: one client consumer on a subscription, its permits and its unacknowledged entries.

Permits are counted in messages, as the official clients expect: an entry holding a batch of
N messages costs N permits. ``pending`` (a ``PendingAcks``) maps each entry sent and not yet
acknowledged to its message count; it is what gets redelivered when the consumer goes away
or asks for it.

``maxUnackedMessagesPerConsumer`` (Shared and Key_Shared consumers of durable subscriptions
on persistent topics, as in Pulsar): once a consumer holds that many unacknowledged
messages it is *blocked* (``blocked_on_unacked``) and gets nothing more, whatever its
permits, until acknowledgements bring it down to half the limit or it asks for a
redelivery. 0 turns the limit off.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.entries import split_entry
from magnetar.protocol import pb
from magnetar.protocol.fastpath import message_command, message_frame_head, partition_field

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.errors import BrokerError
    from magnetar.broker.subscriptions.subscription import Subscription
    from magnetar.storage import Position

log = logging.getLogger(__name__)

T = pb.BaseCommand
_U64 = 1 << 64
_MISSING: Any = object()


class PendingAcks(dict["Position", int]):
    """Entries sent to one consumer and not yet acknowledged: position -> message count.

    Key_Shared also records each entry's key hash (``add_hash``) and keeps a count per hash,
    so that the dispatcher can tell whether this consumer still holds messages of a key;
    ``on_release(hash)`` runs when the last of them is acknowledged or taken back. Removal
    through ``pop``, ``del`` and ``clear`` keeps the counts right, and ``messages`` (the
    sum of the values: the consumer's unacknowledged messages) too; the one writer,
    ``Consumer.send_entry``, adds to it itself.
    """

    def __init__(self) -> None:
        super().__init__()
        self.key_hashes: dict[Position, int] = {}
        self.hash_counts: dict[int, int] = {}
        self.on_release: Callable[[int], None] | None = None
        # the sum of the values, kept up to date (the sender adds, removals subtract)
        self.messages = 0
        # once ``messages`` drops to ``drained_at`` or below, ``on_drained`` runs (once)
        self.drained_at = -1
        self.on_drained: Callable[[], None] | None = None

    def _removed(self, count: int) -> None:
        self.messages -= count
        if self.messages <= self.drained_at:
            self.drained_at = -1
            if self.on_drained is not None:
                self.on_drained()

    def add_hash(self, position: Position, key_hash: int) -> None:
        if position in self.key_hashes:
            return
        self.key_hashes[position] = key_hash
        self.hash_counts[key_hash] = self.hash_counts.get(key_hash, 0) + 1

    def _forget(self, position: Position) -> None:
        key_hash = self.key_hashes.pop(position, None)
        if key_hash is None:
            return
        left = self.hash_counts[key_hash] - 1
        if left:
            self.hash_counts[key_hash] = left
            return
        del self.hash_counts[key_hash]
        if self.on_release is not None:
            self.on_release(key_hash)

    def pop(self, position: Position, default: Any = _MISSING) -> Any:
        if position in self:
            value = super().pop(position)
            self._forget(position)
            self._removed(value)
            return value
        if default is _MISSING:
            raise KeyError(position)
        return default

    def __delitem__(self, position: Position) -> None:
        value = self[position]
        super().__delitem__(position)
        self._forget(position)
        self._removed(value)

    def clear(self) -> None:
        released = list(self.hash_counts)
        super().clear()
        self.key_hashes.clear()
        self.hash_counts.clear()
        if self.on_release is not None:
            for key_hash in released:
                self.on_release(key_hash)
        self._removed(self.messages)


class ConsumerCnx(Protocol):
    """What consumers and subscriptions use of the connection a consumer came in on
    (``connection.ServerCnx`` is one): the subscriptions room names no room above it."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def remote_protocol_version(self) -> int: ...
    @property
    def understands_end_of_topic(self) -> bool: ...
    @property
    def writable(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def peer(self) -> str: ...
    def send(self, cmd: pb.BaseCommand) -> None: ...
    def write_frame(self, head: bytes, payload: bytes | memoryview) -> None: ...
    def ack_applied(self, ack: pb.CommandAck, error: BrokerError | None) -> None: ...
    def consumer_closed_by_broker(self, consumer: Consumer) -> None: ...


class Consumer:
    """A consumer as the broker sees it."""

    def __init__(
        self,
        cnx: ConsumerCnx,
        subscription: Subscription,
        consumer_id: int,
        name: str,
        priority_level: int,
        sub_type: int,
        metadata: dict[str, str],
    ) -> None:
        self.cnx = cnx
        self.subscription = subscription
        self.consumer_id = consumer_id
        self.name = name
        self.priority_level = priority_level
        self.sub_type = sub_type
        self.metadata = metadata
        # subscribed with an AUTO_CONSUME schema (does not make the topic "in use" for schemas)
        self.auto_consume_schema = False
        self.permits = 0
        self.pending = PendingAcks()
        # acks waiting, in order, behind one whose entry is being read from disk (see
        # PersistentSubscription.acknowledge); None: none waits
        self.acks_waiting: deque[pb.CommandAck] | None = None
        # Pulsar counts unacknowledged messages (and blocks on them) only for individual
        # acknowledgements on durable subscriptions of persistent topics
        limit = cnx.config.maxUnackedMessagesPerConsumer
        individual = sub_type in (pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared)
        self.max_unacked = limit if limit > 0 and individual and subscription.durable else 0
        self.blocked_on_unacked = False
        self.msg_out = 0
        self.bytes_out = 0
        self.msg_redelivered = 0
        self.connected_since = time.time()
        self.send_entry_metadata = (
            cnx.config.exposingBrokerEntryMetadataToClientEnabled and cnx.remote_protocol_version >= 18
        )
        # the partition index of the topic (of a ``...-partition-N`` name) goes into the id of
        # every message sent, as Pulsar's broker does: encoded once here, not per message
        self.partition_index = subscription.topic.topic_name.partition_index
        self.partition_field = partition_field(self.partition_index)

    @property
    def available(self) -> bool:
        return (
            self.permits > 0 and not self.blocked_on_unacked and self.cnx.writable
            and not self.cnx.closed
        )

    @property
    def unacked_messages(self) -> int:
        return self.pending.messages

    def _block_on_unacked(self) -> None:
        self.blocked_on_unacked = True
        self.pending.drained_at = self.max_unacked // 2
        self.pending.on_drained = self.unblock_on_unacked
        log.debug("consumer %s on %s blocked: %d unacknowledged messages", self.name,
                  self.subscription.name, self.pending.messages)

    def unblock_on_unacked(self) -> None:
        """Dispatch to this consumer again (acks brought it to half the limit, or it asked
        for a redelivery)."""
        if not self.blocked_on_unacked:
            return
        self.blocked_on_unacked = False
        self.pending.drained_at = -1
        dispatcher = self.subscription.dispatcher
        if dispatcher is not None:
            dispatcher.schedule()

    def set_unacked_limit(self, limit: int) -> None:
        """A new ``maxUnackedMessagesPerConsumer`` (the namespace's policy; 0: none),
        applied at once: a blocked consumer whose new limit lets it go is unblocked."""
        individual = self.sub_type in (pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared)
        self.max_unacked = limit if limit > 0 and individual and self.subscription.durable else 0
        if self.blocked_on_unacked:
            if not self.max_unacked or self.pending.messages <= self.max_unacked // 2:
                self.unblock_on_unacked()
            else:
                self.pending.drained_at = self.max_unacked // 2
        elif self.max_unacked and self.pending.messages >= self.max_unacked:
            self._block_on_unacked()

    @property
    def dispatch_budget(self) -> int:
        """How many messages this consumer may get now: its permits, and no more than it
        may hold unacknowledged."""
        if self.max_unacked:
            return max(0, min(self.permits, self.max_unacked - self.pending.messages))
        return self.permits

    def flow(self, permits: int) -> None:
        self.permits += permits
        dispatcher = self.subscription.dispatcher
        if dispatcher is not None:
            dispatcher.schedule()

    def send_entry(
        self,
        position: Position,
        data: bytes | memoryview,
        num_messages: int,
        redelivery_count: int,
        ack_set: list[int] | None,
        track: bool = True,
    ) -> None:
        """Push one stored entry to the client (payload bytes as stored, unparsed, not
        copied: the frame's head and the stored payload part go out as two pieces of one
        ``writev``)."""
        entry_metadata, payload = split_entry(data)
        if track:
            pending = self.pending
            pending.messages += num_messages - pending.get(position, 0)
            pending[position] = num_messages
            if self.max_unacked and pending.messages >= self.max_unacked and not self.blocked_on_unacked:
                self._block_on_unacked()
        self.permits -= num_messages
        self.msg_out += num_messages
        self.bytes_out += len(payload)
        cmd = message_command(self.consumer_id, position[0] % _U64, position[1] % _U64,
                              redelivery_count, ack_set, self.partition_field)
        self.cnx.write_frame(
            message_frame_head(cmd, len(payload), entry_metadata if self.send_entry_metadata else None),
            payload,
        )

    def active_consumer_change(self, is_active: bool) -> None:
        change = pb.CommandActiveConsumerChange(consumer_id=self.consumer_id, is_active=is_active)
        self.cnx.send(T(type=T.ACTIVE_CONSUMER_CHANGE, active_consumer_change=change))

    def reached_end_of_topic(self) -> None:
        if not self.cnx.understands_end_of_topic:
            return  # the peer would drop the connection; it learns of the end when it reads
        end = pb.CommandReachedEndOfTopic(consumer_id=self.consumer_id)
        self.cnx.send(T(type=T.REACHED_END_OF_TOPIC, reachedEndOfTopic=end))

    def close_by_broker(self) -> None:
        self.cnx.consumer_closed_by_broker(self)

    def stats(self) -> dict[str, object]:
        return {
            "consumerName": self.name,
            "availablePermits": self.permits,
            "unackedMessages": self.unacked_messages,
            "blockedConsumerOnUnackedMsgs": self.blocked_on_unacked,
            "msgOutCounter": self.msg_out,
            "bytesOutCounter": self.bytes_out,
            "msgRedeliverCounter": self.msg_redelivered,
            "address": self.cnx.peer,
            "connectedSince": self.connected_since,
            "priorityLevel": self.priority_level,
            "metadata": self.metadata,
        }

    def stats_response(self, request_id: int) -> pb.CommandConsumerStatsResponse:
        """ConsumerStatsResponse; rates are averages since the consumer connected."""
        elapsed = max(time.time() - self.connected_since, 1e-3)
        return pb.CommandConsumerStatsResponse(
            request_id=request_id,
            consumerName=self.name,
            msgRateOut=self.msg_out / elapsed,
            msgThroughputOut=self.bytes_out / elapsed,
            msgRateRedeliver=self.msg_redelivered / elapsed,
            availablePermits=max(0, self.permits),
            unackedMessages=self.unacked_messages,
            address=self.cnx.peer,
            connectedSince=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.connected_since)),
            type=pb.CommandSubscribe.SubType.Name(self.sub_type),
            msgBacklog=self.subscription.backlog(),
            blockedConsumerOnUnackedMsgs=self.blocked_on_unacked,
        )
