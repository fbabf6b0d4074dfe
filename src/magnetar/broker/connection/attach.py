"""Attaching producers and consumers to topics (the broker side of Producer and Subscribe).

`TopicAttacher` owns what happens between a connection's Producer / Subscribe command and
a producer or consumer being ready: finding (or auto-creating) the topic, the per-topic
producer and consumer limits of the namespace policies, the schema check (topic_schemas.py),
producer and consumer names, creating a subscription (a durable cursor, or a Reader's
`NonDurableCursor` and where it starts), and switching a ``read_compacted`` subscription to
its topic's compacted view. Pulsar spreads this over ``ServerCnx.handleProducer`` /
``handleSubscribe`` and ``PersistentTopic.subscribe``.

`create_producer` and `subscribe` do no I/O: the connection first loads the topic
(`BrokerService.load_topic`) and awaits `producer_work` / `subscribe_work` (schemas read
or stored, a compacted view opened), each off the event loop, then calls them.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, cast

from magnetar.broker.errors import BrokerError
from magnetar.broker.subscriptions.consumer import Consumer
from magnetar.broker.subscriptions.dispatcher import Dispatcher
from magnetar.broker.subscriptions.subscription import (
    NonPersistentSubscription,
    PersistentSubscription,
    Subscription,
    position_of,
)
from magnetar.broker.topics.compaction import CompactedView
from magnetar.broker.topics.producer import Producer
from magnetar.broker.topics.topic import NonPersistentTopic, PersistentTopic, Topic
from magnetar.broker.topics.topic_schemas import has_schema
from magnetar.protocol import pb
from magnetar.storage import Position
from magnetar.storage.cursor import ManagedCursor

if TYPE_CHECKING:
    from magnetar.broker.connection.server_cnx import ServerCnx
    from magnetar.broker.service import BrokerService
    from magnetar.storage import ManagedLedger


class NonDurableCursor(ManagedCursor):
    """A Reader's cursor: same acknowledgement logic, kept in memory only."""

    def _changed(self) -> None:
        self.dirty = False

    def persist(self) -> None:
        """Nothing to persist."""

    async def persist_async(self) -> None:
        """Nothing to persist."""


class TopicAttacher:
    """Creates producers and consumers on the broker's topics for its connections."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.names = itertools.count()  # numbers broker-chosen producer and consumer names

    # ------------------------------------------------------------------ producers

    def producer_work(self, req: pb.CommandProducer) -> Coroutine[Any, Any, Any] | None:
        """What `create_producer` needs done off the loop first (None: nothing)."""
        return self.service.topic_schemas.producer_work(req)

    def quota_read(self, req: pb.CommandProducer) -> Coroutine[Any, Any, Any] | None:
        """What the backlog time quota check of `create_producer` needs read off the loop
        first (None: nothing): the oldest unacknowledged entry, when it is not in memory
        (`BacklogQuotaManager.producer_read`). The topic is loaded already."""
        topic = self.service.topics.get(str(self.service.check_topic_name(req.topic)))
        if not isinstance(topic, PersistentTopic) or topic.terminated:
            return None
        if topic.fenced_until and time.monotonic() < topic.fenced_until:
            return None  # refused before any quota check
        return self.service.backlog_quota.producer_read(topic)

    def create_producer(self, cnx: ServerCnx, req: pb.CommandProducer) -> None:
        """Attach a producer (answered on ``cnx``: at once, or when an exclusive producer
        waiting for the topic gets it)."""
        service = self.service
        topic = service.get_topic(req.topic)
        limit = service.policies.for_topic(topic.topic_name).max_producers_per_topic
        if limit > 0 and len(topic.producers) >= limit:
            raise BrokerError(pb.ProducerBusy, f"Topic {topic.name} reached max producers limit")
        user_named = req.HasField("producer_name") and bool(req.producer_name)
        name = (req.producer_name if user_named
                else f"{service.config.clusterName}-{service.instance}-{next(self.names)}")
        schema_version = None
        if has_schema(req):
            schema_version = service.topic_schemas.get_or_create(req.topic, req.schema)
        elif (service.config.isSchemaValidationEnforced
              and service.schemas.get(topic.topic_name.schema_name) is not None):
            raise BrokerError(pb.IncompatibleSchema, "Producers cannot connect or send message "
                              "without a schema to topics with a schema if SchemaValidationEnforced "
                              "is enabled")
        producer = Producer(
            cnx, topic, req.producer_id, name,
            req.producer_access_mode if req.HasField("producer_access_mode") else pb.Shared,
            user_named, schema_version,
            req.topic_epoch if req.HasField("topic_epoch") else None,
        )
        producer.txn_enabled = req.txn_enabled
        ready = topic.add_producer(producer, req.request_id)
        if ready:
            topic.producer_ready(producer, req.request_id)
        else:
            cnx.producers[producer.producer_id] = producer
            producer.ready = False
            cnx.send(producer.success_command(req.request_id, ready=False))

    # ------------------------------------------------------------------ consumers

    def subscribe_work(self, req: pb.CommandSubscribe) -> Coroutine[Any, Any, Any] | None:
        """What `subscribe` needs done off the loop first (None: nothing), one piece per
        call (the connection calls again once it is done): the compacted view of a
        ``read_compacted`` subscriber, the schemas to check, and a new durable
        subscription's cursor row (stored before the Subscribe is answered, after the
        checks that would refuse it). The topic is loaded already."""
        topic = self.service.get_topic(req.topic, create=req.force_topic_creation)
        compactor = self.service.compactor
        if req.read_compacted and isinstance(topic, PersistentTopic) and not compactor.known(topic):
            return compactor.view_async(topic)
        work = self.service.topic_schemas.consumer_work(topic, req)
        if work is not None or not req.durable or not isinstance(topic, PersistentTopic):
            return work
        existing = topic.subscriptions.get(req.subscription)
        if existing is not None and not existing.durable:
            return None  # a Reader's subscription of that name: nothing is stored
        cursor = topic.ledger.cursor(req.subscription)
        if cursor is not None and (cursor.creating is None or cursor.creating.done()):
            return None
        self.check_subscribe(topic, req)
        earliest = req.initialPosition == pb.CommandSubscribe.Earliest
        return topic.ledger.open_cursor_async(req.subscription, "earliest" if earliest else "latest")

    def check_subscribe(self, topic: Topic, req: pb.CommandSubscribe) -> None:
        """The refusals of a Subscribe that come before its subscription is created."""
        service = self.service
        if (req.subType == pb.CommandSubscribe.Key_Shared
                and not service.config.subscriptionKeySharedEnable):
            raise BrokerError(pb.NotAllowedError, "Key_Shared subscriptions are disabled on this broker")
        if has_schema(req):
            service.topic_schemas.check_consumer(topic, req.schema)
        policies = service.policies.for_topic(topic.topic_name)
        limit = policies.max_consumers_per_topic
        if limit > 0 and sum(len(s.consumers) for s in topic.subscriptions.values()) >= limit:
            raise BrokerError(pb.ConsumerBusy, f"Topic {topic.name} reached max consumers limit")
        limit = policies.max_subscriptions_per_topic
        if (limit > 0 and req.subscription not in topic.subscriptions
                and len(topic.subscriptions) >= limit):
            raise BrokerError(pb.NotAllowedError, "Exceed the maximum number of subscriptions "
                              f"of the topic: {topic.name} (maxSubscriptionsPerTopic {limit})")

    def subscribe(self, cnx: ServerCnx, req: pb.CommandSubscribe) -> None:
        """Attach a consumer, creating its subscription if needed (answered on ``cnx``)."""
        service = self.service
        topic = service.get_topic(req.topic, create=req.force_topic_creation)
        sub_type = req.subType
        self.check_subscribe(topic, req)
        # subscribeRate: per client host, consumer name and id, as Pulsar counts it
        topic.limits.acquire_subscribe(cnx.peer.rsplit(":", 1)[0], req.consumer_name,
                                       req.consumer_id)
        sub = topic.subscriptions.get(req.subscription)
        if sub is None:
            sub = self.new_subscription(topic, req)
        view = self.compacted_view(topic, sub, req)
        consumer = Consumer(
            cnx, sub, req.consumer_id,
            req.consumer_name or f"consumer-{next(self.names)}",
            req.priority_level if req.HasField("priority_level") else 0,
            sub_type,
            {kv.key: kv.value for kv in req.metadata},
        )
        consumer.auto_consume_schema = (
            req.HasField("schema") and req.schema.type == pb.Schema.AutoConsume
        )
        try:
            sub.add_consumer(consumer, req.keySharedMeta if req.HasField("keySharedMeta") else None)
        except BrokerError:
            if not sub.consumers and not sub.durable:
                topic.subscriptions.pop(req.subscription, None)
            raise
        if (req.replicate_subscription_state and service.config.enableReplicatedSubscriptions
                and isinstance(sub, PersistentSubscription) and sub.durable and not sub.replicated):
            sub.set_replicated(True)  # its state follows it to the other clusters
        dispatcher = sub.dispatcher
        if view is not None and isinstance(dispatcher, Dispatcher):
            dispatcher.ledger = view  # read_compacted: the dispatcher reads the view too
        cnx.on_consumer_ready(consumer, req.request_id)
        if sub.dispatcher is not None:
            sub.dispatcher.schedule()
            sub.check_end_of_topic()

    def compacted_view(self, topic: Topic, sub: Any, req: pb.CommandSubscribe) -> CompactedView | None:
        """For a read_compacted subscriber of a compacted topic, the view its subscription
        reads (the cursor is switched to it while no other consumer is attached)."""
        if not req.read_compacted or not isinstance(sub, PersistentSubscription):
            return None
        view = self.service.compactor.view(topic)
        if view is None:
            return None
        if sub.cursor.ledger is not view and not sub.consumers:
            sub.cursor.ledger = view
        return view if sub.cursor.ledger is view else None

    def new_subscription(self, topic: Topic, req: pb.CommandSubscribe) -> Subscription:
        """Create the subscription a Subscribe names (durable: a cursor stored with the
        ledger; a Reader's: a `NonDurableCursor`) and register it on the topic."""
        sub: Subscription
        if isinstance(topic, NonPersistentTopic):
            sub = NonPersistentSubscription(topic, req.subscription, req.subType)
            topic.subscriptions[req.subscription] = sub
            return sub
        assert isinstance(topic, PersistentTopic)
        ledger = topic.ledger
        earliest = req.initialPosition == pb.CommandSubscribe.Earliest
        if req.durable:
            cursor = ledger.open_cursor(req.subscription, "earliest" if earliest else "latest")
            sub = PersistentSubscription(topic, req.subscription, cursor, durable=True)
        else:
            view = self.service.compactor.view(topic) if req.read_compacted else None
            source = view if view is not None else ledger
            start = reader_start(source, req, earliest)
            # the view offers the read API a cursor uses (storage types it for a ledger)
            cursor = NonDurableCursor(cast("ManagedLedger", source), req.subscription, start)
            sub = PersistentSubscription(topic, req.subscription, cursor, durable=False)
        topic.subscriptions[req.subscription] = sub
        return sub


def reader_start(ledger: ManagedLedger | CompactedView, req: pb.CommandSubscribe,
                 earliest: bool) -> Position:
    """The mark-delete position of a non-durable cursor (delivery starts after it)."""
    first = ledger.first_position()
    last = ledger.last_confirmed()
    before_first = Position(first[0], first[1] - 1) if first is not None else Position(-1, -1)
    if not req.HasField("start_message_id"):
        if earliest or last is None:
            return before_first
        return last
    start = position_of(req.start_message_id)
    if start[0] < 0:
        return before_first
    if last is None or start > last:
        return last if last is not None else before_first
    # Deliver the start entry itself: clients drop what precedes the exact start id
    # (inclusive or not), and a batch entry must be re-read whole.
    previous = Position(start[0], start[1] - 1)
    return max(previous, before_first)
