"""BrokerService: owns storage, topics and connections; the entry point of the broker layer.

It listens for Pulsar binary-protocol connections, creates topics on demand (auto-creation
as configured), attaches producers and consumers, keeps metadata (partitioned topics,
schemas, dedup state) in the storage layer's MetadataStore, and runs the periodic work:
keep-alive pings, cursor flushes, retention, message TTL. Everything here runs on one
asyncio event loop (uvloop when installed). Methods named like admin operations
(``topic_stats``, ``terminate_topic``, ``delete_topic``...) are what the admin layer calls.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
import secrets
import struct
import time
from typing import TYPE_CHECKING, Any

import re2

from magnetar.broker.compaction import CompactedView, Compactor
from magnetar.broker.config import BrokerConfig
from magnetar.broker.consumer import Consumer
from magnetar.broker.dedup import MessageDeduplication
from magnetar.broker.errors import BrokerError
from magnetar.broker.listeners import Listeners
from magnetar.broker.namespaces import NamespaceRegistry
from magnetar.broker.policies import PolicyStore
from magnetar.broker.producer import Producer
from magnetar.broker.schema_registry import SchemaRecord, SchemaRegistry
from magnetar.broker.security import BrokerSecurity
from magnetar.broker.server_cnx import PublishBuffer, ServerCnx
from magnetar.broker.subscription import (
    NonPersistentSubscription,
    PersistentSubscription,
    position_of,
)
from magnetar.broker.sweep import IdleTopicSweeper
from magnetar.broker.topic import NonPersistentTopic, PersistentTopic, Topic
from magnetar.broker.topic_name import TopicName
from magnetar.protocol import pb
from magnetar.storage import EARLIEST, ManagedLedgerFactory, Position, StorageConfig, StorageError
from magnetar.storage.cursor import ManagedCursor

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

_VERSION = struct.Struct(">q")


def install_event_loop_policy() -> None:
    """Use uvloop when it is installed (it is a dependency on Linux and macOS)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - optional on other platforms
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


class NonDurableCursor(ManagedCursor):
    """A Reader's cursor: same acknowledgement logic, kept in memory only."""

    def _changed(self) -> None:
        self.dirty = False

    def persist(self) -> None:
        """Nothing to persist."""


class BrokerService:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.storage = ManagedLedgerFactory(
            StorageConfig(
                data_dir=config.magnetarDataDir,
                fsync=config.fsync_policy,
                segment_max_bytes=config.managedLedgerMaxSizePerLedgerMbytes * 1024 * 1024,
                segment_max_entries=config.managedLedgerMaxEntriesPerLedger,
                segment_max_age_s=config.managedLedgerMaxLedgerRolloverTimeMinutes * 60.0,
                read_cache_bytes=config.managedLedgerCacheSizeMB * 1024 * 1024,
                read_cache_max_age_s=config.managedLedgerCacheEvictionTimeThresholdMillis / 1000,
                max_open_files=config.magnetarMaxOpenFiles,
                cursor_persist_interval_s=float(config.managedLedgerCursorPositionFlushSeconds),
                inline_sync_when_idle=config.magnetarSyncOnLoopWhenIdle,
            )
        )
        self.metadata = self.storage.metadata
        self.schemas = SchemaRegistry(
            self.metadata,
            allow_auto_update=config.isAllowAutoUpdateSchemaEnabled,
            strategy=config.schemaCompatibilityStrategy,
        )
        # payload bytes of sends not yet answered, broker-wide (maxMessagePublishBufferSizeInMB)
        self.publish_buffer = PublishBuffer(config.maxMessagePublishBufferSizeInMB)
        self.policies = PolicyStore(self.metadata, config)
        # authentication, authorization, the TLS listener, connection limits
        self.security = BrokerSecurity(self)
        # tenants and namespaces: a topic of a namespace that does not exist is not found
        self.namespaces = NamespaceRegistry(self.metadata, config.clusterName)
        # topic compaction and the compacted views read_compacted subscriptions read
        self.compactor = Compactor(self)
        # advertisedListeners: which URL a lookup answers with, by listener name
        self.listeners = Listeners(config.advertisedListeners, config.internalListenerName)
        self.namespaces.adopt(
            [key.split("/", 1)[1] for key in self.metadata.list("topics/")]
            + [key.split("/", 1)[1] for key in self.metadata.list("partitioned/")]
        )
        self.topics: dict[str, Topic] = {}
        # monotonic time each loaded topic was last looked up or seen in use (idle unloading)
        self._topic_used: dict[str, float] = {}
        # housekeeping of the persistent topics that are not loaded (retention, TTL)
        self.sweeper = IdleTopicSweeper(self)
        self.connections: set[ServerCnx] = set()
        self.port = config.brokerServicePort
        self.instance = secrets.token_hex(3)
        self._names = itertools.count()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.config.brokerServicePort >= 0:  # -1: TLS only (brokerServicePortTls)
            self._server = await loop.create_server(
                lambda: ServerCnx(self),
                host=self.config.bindAddress,
                port=self.config.brokerServicePort,
                reuse_address=True,
                backlog=1024,
            )
            sock = self._server.sockets[0]
            self.port = sock.getsockname()[1]
        await self.security.start()
        self._tasks.append(asyncio.create_task(self._keepalive_loop()))
        self._tasks.append(asyncio.create_task(self._housekeeping_loop()))
        if self.config.managedLedgerCacheEvictionTimeThresholdMillis > 0:
            self._tasks.append(asyncio.create_task(self._cache_eviction_loop()))
        if self.config.magnetarTopicUnloadIdleSeconds > 0:
            self._tasks.append(asyncio.create_task(self._unload_loop()))
        if self.config.magnetarIdleTopicSweepIntervalSeconds > 0:
            self._tasks.append(asyncio.create_task(self._sweep_loop()))
        log.info("broker listening on %s:%d", self.config.bindAddress, self.port)

    def serving(self) -> bool:
        """Whether the binary-protocol listener accepts connections (health checks)."""
        return self._server is not None and self._server.is_serving()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for topic in list(self.topics.values()):
            if isinstance(topic, PersistentTopic):
                self.save_dedup_snapshot(topic)
        if self._server is not None:
            self._server.close()
        self.security.stop()
        for cnx in list(self.connections):
            cnx.close()
        if self._server is not None:
            await self._server.wait_closed()
        await self.storage.close_async() if hasattr(self.storage, "close_async") else self.storage.close()

    async def _keepalive_loop(self) -> None:
        interval = max(1, self.config.keepAliveIntervalSeconds)
        while True:
            await asyncio.sleep(interval)
            for cnx in list(self.connections):
                cnx.keepalive_tick()

    async def _cache_eviction_loop(self) -> None:
        """Entries past managedLedgerCacheEvictionTimeThresholdMillis leave the read cache
        even when no append comes to push them out."""
        age = self.config.managedLedgerCacheEvictionTimeThresholdMillis / 1000
        while True:
            await asyncio.sleep(age)
            self.storage.evict_expired_cache()

    async def _housekeeping_loop(self) -> None:
        cfg = self.config
        interval = max(1, min(cfg.retentionCheckIntervalInSeconds,
                              cfg.messageExpiryCheckIntervalInMinutes * 60,
                              cfg.backlogQuotaCheckIntervalInSeconds))
        while True:
            await asyncio.sleep(interval)
            try:
                self.run_housekeeping()
            except Exception:
                log.exception("housekeeping failed")

    async def _unload_loop(self) -> None:
        idle = self.config.magnetarTopicUnloadIdleSeconds
        interval = max(1.0, min(60.0, idle / 2))
        while True:
            await asyncio.sleep(interval)
            names = list(self.topics)
            # unloading costs ~0.1 ms a topic, plus its housekeeping: yield often
            for i in range(0, len(names), 64):
                try:
                    self.unload_idle_topics(names=names[i : i + 64])
                except Exception:
                    log.exception("unloading idle topics failed")
                await asyncio.sleep(0)

    async def _sweep_loop(self) -> None:
        interval = self.config.magnetarIdleTopicSweepIntervalSeconds
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweeper.run_pass()
            except Exception:
                log.exception("sweeping unloaded topics failed")

    def unload_idle_topics(self, now: float | None = None, names: list[str] | None = None) -> int:
        """Unload every topic (of ``names``, default all loaded ones) that has had no
        producer and no consumer for magnetarTopicUnloadIdleSeconds (``now``:
        time.monotonic(), for tests); returns how many. An idle loaded topic costs memory
        (ledger index, cursors, dispatchers) and, until its segments are evicted, file
        descriptors; unloaded, it costs nothing and its next use reloads it from storage,
        as after a restart. Each is housekept (TTL, quotas, retention) just before, which
        also tells the idle-topic sweep when it next needs a look."""
        idle = self.config.magnetarTopicUnloadIdleSeconds
        if idle <= 0:
            return 0
        now = time.monotonic() if now is None else now
        used = self._topic_used
        unloaded = 0
        for name in list(self.topics) if names is None else names:
            topic = self.topics.get(name)
            if topic is None:
                continue
            if topic.producers or topic.waiting_exclusive or any(
                sub.consumers for sub in topic.subscriptions.values()
            ):
                used[name] = now
            elif now - used.setdefault(name, now) >= idle:
                try:
                    self.unload_topic(topic, housekeep=True)
                except Exception:
                    log.exception("unloading topic %s failed", name)
                unloaded += 1
        if unloaded:
            log.debug("unloaded %d idle topics (%d still loaded)", unloaded, len(self.topics))
        return unloaded

    def unload_topic(self, topic: Topic, housekeep: bool = False, now: float | None = None) -> None:
        """Close a loaded topic and forget it (clients still attached are disconnected and
        reconnect, as after Pulsar's topic unload); its next use loads it again. With
        ``housekeep``, a persistent topic is housekept first (``now``: epoch seconds) and the
        idle-topic sweep learns when it next needs a look; otherwise the sweep will look."""
        if self.topics.get(topic.name) is not topic:
            return
        if housekeep and isinstance(topic, PersistentTopic):
            now = time.time() if now is None else now
            self.housekeep_topic(topic, now)
            try:
                self.sweeper.record(topic, now)
            except Exception:
                log.exception("topic %s: computing its next housekeeping time failed", topic.name)
                self.sweeper.forget(topic.name)
        else:
            self.sweeper.forget(topic.name)
        del self.topics[topic.name]
        self._topic_used.pop(topic.name, None)
        self.compactor.forget(topic.name)
        topic.close_all()
        for sub in topic.subscriptions.values():
            if isinstance(sub, PersistentSubscription):
                sub._close_dispatcher()
        if isinstance(topic, PersistentTopic):
            self.save_dedup_snapshot(topic)
            topic.ledger.close()

    def run_housekeeping(self, now: float | None = None) -> None:
        """The periodic work on every loaded persistent topic (see `housekeep_topic`;
        unloaded ones are the idle-topic sweep's). ``now`` (epoch seconds) is for tests."""
        now = time.time() if now is None else now
        for topic in list(self.topics.values()):
            if isinstance(topic, PersistentTopic) and self.topics.get(topic.name) is topic:
                self.housekeep_topic(topic, now)

    def housekeep_topic(self, topic: PersistentTopic, now: float | None = None) -> None:
        """One topic's periodic work, in this order: message TTL, backlog quotas, dedup
        snapshot (and forgetting long-gone producers), retention (deleting consumed
        segments). Errors are logged, never raised."""
        now = time.time() if now is None else now
        inactive_ms = self.config.brokerDeduplicationProducerInactivityTimeoutMinutes * 60_000
        try:
            policies = self.policies.get(topic.topic_name.namespace)
            if policies.message_ttl_seconds > 0:
                self.expire_messages(topic, policies.message_ttl_seconds, now)
            self.check_backlog_quota(topic, now)
            if topic.dedup is not None:
                if topic.dedup.purge_inactive(inactive_ms):
                    topic.dedup_unsaved += 1
                self.save_dedup_snapshot(topic)  # before trim drops what replay would need
            topic.ledger.trim(policies.retention_time_seconds, policies.retention_size_bytes)
            self.compactor.maybe_trigger(topic, self.config.brokerServiceCompactionThresholdInBytes)
        except Exception:
            log.exception("housekeeping of topic %s failed", topic.name)

    def expire_messages(self, topic: PersistentTopic, ttl_seconds: float, now: float | None = None,
                        subscription: str | None = None) -> None:
        """Message TTL: acknowledge, on every subscription (or only ``subscription``), the
        entries published more than ``ttl_seconds`` ago (found by binary search on publish
        time, not by a scan)."""
        from magnetar.broker.dispatcher import entry_metadata

        now = time.time() if now is None else now
        cutoff = int((now - ttl_seconds) * 1000)
        ledger = topic.ledger
        last = ledger.last_confirmed()
        if last is None:
            return

        def fresh(data: bytes) -> bool:
            metadata = entry_metadata(data)
            return metadata is None or metadata.publish_time >= cutoff

        first_fresh = ledger.find_position(fresh)
        if first_fresh is None:
            expire_to = last
        else:
            expire_to = Position(first_fresh.ledger_id, first_fresh.entry_id - 1)
        for sub in list(topic.subscriptions.values()):
            if subscription is not None and sub.name != subscription:
                continue
            if isinstance(sub, PersistentSubscription) and sub.cursor.mark_delete_position < expire_to:
                self._skip_to(sub, expire_to)

    @staticmethod
    def _skip_to(sub: PersistentSubscription, position: Position) -> None:
        """Acknowledge everything up to ``position`` on behalf of the subscription."""
        sub.cursor.mark_delete(position)
        if sub.dispatcher is not None:
            sub.dispatcher.schedule()
        sub.check_end_of_topic()

    # ------------------------------------------------------------------ authentication

    def authenticate(self, connect: pb.CommandConnect) -> str | None:
        """The principal of a new connection; authentication providers plug in here."""
        return None

    # ------------------------------------------------------------------ topics

    def check_topic_name(self, name: str) -> TopicName:
        """The parsed name of a topic whose namespace exists (InvalidTopicName, TopicNotFound)."""
        try:
            topic_name = TopicName.parse(name)
        except ValueError as exc:
            raise BrokerError(pb.InvalidTopicName, str(exc)) from exc
        if not self.namespaces.exists(topic_name.namespace):
            raise BrokerError(
                pb.TopicNotFound, f"namespace {topic_name.namespace} of topic {name} does not exist"
            )
        return topic_name

    def partitioned_metadata(self, name: str) -> int:
        topic_name = self.check_topic_name(name)
        if topic_name.is_partition:
            return 0
        key = f"partitioned/{topic_name}"
        meta = self.metadata.get(key)
        if meta is not None:
            return int(meta["partitions"])
        policies = self.policies.get(topic_name.namespace)
        if (
            policies.allow_auto_topic_creation
            and policies.auto_topic_creation_type == "partitioned"
            and self.metadata.get(f"topics/{topic_name}") is None
        ):
            return self.create_partitioned_topic(str(topic_name), policies.default_num_partitions)
        return 0

    def create_partitioned_topic(self, name: str, partitions: int) -> int:
        topic_name = self.check_topic_name(name)
        if partitions < 1:
            raise BrokerError(pb.MetadataError, "a partitioned topic needs at least one partition")
        self.metadata.put(f"partitioned/{topic_name}", {"partitions": partitions})
        return partitions

    def create_topic(self, name: str) -> Topic:
        """Create a non-partitioned topic on request (admin API), whatever auto-creation says."""
        topic_name = self.check_topic_name(name)
        if topic_name.is_persistent and self.metadata.get(f"topics/{topic_name}") is None:
            self.metadata.put(f"topics/{topic_name}", {"created": time.time()})
        return self.get_topic(str(topic_name), create=True)

    def get_topic(self, name: str, create: bool = True) -> Topic:
        topic_name = self.check_topic_name(name)
        key = str(topic_name)
        topic = self.topics.get(key)
        if topic is not None:
            self._topic_used[key] = time.monotonic()
            return topic
        auto_create = self.policies.get(topic_name.namespace).allow_auto_topic_creation
        if not topic_name.is_persistent:
            if not create and not auto_create:
                raise BrokerError(pb.TopicNotFound, f"topic {key} does not exist")
            topic = NonPersistentTopic(self, topic_name)
            self.topics[key] = topic
            self._topic_used[key] = time.monotonic()
            return topic
        known = self.metadata.get(f"topics/{key}") is not None
        if not known:
            if not (create and auto_create):
                raise BrokerError(
                    pb.TopicNotFound,
                    f"topic {key} does not exist; create it or set allowAutoTopicCreation=true",
                )
            base = topic_name.partitioned_base if topic_name.is_partition else None
            if base is None and self.metadata.get(f"partitioned/{key}") is not None:
                raise BrokerError(
                    pb.TopicNotFound, f"{key} is a partitioned topic: use its -partition-N topics"
                )
            self.metadata.put(f"topics/{key}", {"created": time.time()})
        ledger = self.storage.open(_ledger_name(topic_name))
        topic = PersistentTopic(self, topic_name, ledger)
        self.topics[key] = topic
        self._topic_used[key] = time.monotonic()
        self._load_subscriptions(topic)
        return topic

    def _load_subscriptions(self, topic: PersistentTopic) -> None:
        for name, cursor in topic.ledger.cursors().items():
            topic.subscriptions[name] = PersistentSubscription(topic, name, cursor, durable=True)

    def topics_of_namespace(
        self, namespace: str, mode: int, pattern: str | None
    ) -> tuple[list[str], bool]:
        names: set[str] = set()
        if mode in (pb.CommandGetTopicsOfNamespace.PERSISTENT, pb.CommandGetTopicsOfNamespace.ALL):
            for key in self.metadata.list("topics/persistent://"):
                names.add(key[len("topics/"):])
            for key, meta in self.metadata.list("partitioned/persistent://").items():
                base = key[len("partitioned/"):]
                names.update(f"{base}-partition-{i}" for i in range(int(meta["partitions"])))
        if mode in (pb.CommandGetTopicsOfNamespace.NON_PERSISTENT, pb.CommandGetTopicsOfNamespace.ALL):
            names.update(n for n in self.topics if n.startswith("non-persistent://"))
        wanted = [n for n in names if TopicName.parse(n).namespace == namespace]
        if pattern:
            # The pattern comes from the client: RE2 runs it in linear time, so no pattern
            # can stall the event loop (Python's re backtracks: "(a+)+b" took minutes). A
            # pattern RE2 cannot run (back-references, look-arounds) filters nothing, and
            # the client filters the list itself, as when a broker ignores the pattern.
            try:
                regex = re2.compile(pattern, _RE2_QUIET)
            except re2.error:
                return sorted(wanted), False
            # Pulsar matches the pattern against the name without the domain prefix too.
            wanted = [n for n in wanted if regex.fullmatch(n) or regex.fullmatch(n.split("://", 1)[1])]
            return sorted(wanted), True
        return sorted(wanted), False

    def terminate_topic(self, name: str) -> Position | None:
        topic = self.get_topic(name, create=False)
        if not isinstance(topic, PersistentTopic):
            raise BrokerError(pb.NotAllowedError, "only persistent topics can be terminated")
        return topic.terminate()

    def delete_topic(self, name: str) -> None:
        """Delete a topic with its data, subscriptions and dedup state (clients still
        attached are disconnected). A partitioned topic's name deletes every partition
        and the partitioned metadata. TopicNotFound if there is no such topic."""
        topic_name = self.check_topic_name(name)
        key = str(topic_name)
        partitioned = self.metadata.get(f"partitioned/{key}")
        if partitioned is not None:
            for i in range(int(partitioned["partitions"])):
                partition = f"{key}-partition-{i}"
                if partition in self.topics or self.metadata.get(f"topics/{partition}") is not None:
                    self.delete_topic(partition)
            self.metadata.delete(f"partitioned/{key}")
            return
        topic = self.topics.pop(key, None)
        self._topic_used.pop(key, None)
        self.sweeper.forget(key)
        self.compactor.forget(key, delete=True)
        if topic is not None:
            topic.close_all()
            for sub in topic.subscriptions.values():
                if isinstance(sub, PersistentSubscription):
                    sub._close_dispatcher()
        if not topic_name.is_persistent:
            if topic is None:
                raise BrokerError(pb.TopicNotFound, f"topic {key} does not exist")
            return
        ledger = _ledger_name(topic_name)
        known = self.metadata.delete(f"topics/{key}")
        if topic is None and not known and not self.storage.exists(ledger):
            raise BrokerError(pb.TopicNotFound, f"topic {key} does not exist")
        self.storage.delete(ledger)
        self.metadata.delete(f"dedup/{key}")

    def topic_stats(self, name: str) -> dict[str, Any]:
        return self.get_topic(name, create=False).stats()

    # ------------------------------------------------------------------ cursor operations
    # (what the admin API's subscription endpoints call)

    def _durable_subscription(self, topic_name: str, subscription: str) -> PersistentSubscription:
        topic = self.get_topic(topic_name, create=False)
        sub = topic.subscriptions.get(subscription)
        if not isinstance(sub, PersistentSubscription):
            raise BrokerError(
                pb.SubscriptionNotFound, f"subscription {subscription} not found on {topic_name}"
            )
        return sub

    def create_subscription(self, topic_name: str, subscription: str, earliest: bool = False) -> None:
        topic = self.get_topic(topic_name, create=False)
        if not isinstance(topic, PersistentTopic):
            raise BrokerError(pb.NotAllowedError, "only persistent topics keep subscriptions")
        if subscription not in topic.subscriptions:
            cursor = topic.ledger.open_cursor(subscription, "earliest" if earliest else "latest")
            topic.subscriptions[subscription] = PersistentSubscription(topic, subscription, cursor, durable=True)

    def reset_cursor(self, topic_name: str, subscription: str, ledger_id: int, entry_id: int) -> None:
        """Move a subscription to a message id (its consumers reconnect, as on Seek)."""
        sub = self._durable_subscription(topic_name, subscription)
        sub.seek_to_id(Position(ledger_id, entry_id))
        sub.disconnect_consumers()

    def reset_cursor_by_time(self, topic_name: str, subscription: str, publish_time_ms: int) -> None:
        sub = self._durable_subscription(topic_name, subscription)
        sub.seek_to_time(publish_time_ms)
        sub.disconnect_consumers()

    def skip_messages(self, topic_name: str, subscription: str, count: int) -> int:
        """Acknowledge the next ``count`` unacknowledged entries; returns how many were skipped."""
        sub = self._durable_subscription(topic_name, subscription)
        skipped = []
        for position in sub.cursor.unacked_positions():
            if len(skipped) >= count:
                break
            skipped.append(position)
        if skipped:
            sub.cursor.delete(skipped)
            if sub.dispatcher is not None:
                sub.dispatcher.rewind()
        return len(skipped)

    def clear_backlog(self, topic_name: str, subscription: str) -> None:
        sub = self._durable_subscription(topic_name, subscription)
        last = sub.topic.ledger.last_confirmed()
        if last is not None:
            sub.cursor.mark_delete(last)
            if sub.dispatcher is not None:
                sub.dispatcher.rewind()

    def delete_subscription(self, topic_name: str, subscription: str, force: bool = False) -> None:
        """Delete a durable subscription; with ``force``, its consumers are disconnected first."""
        sub = self._durable_subscription(topic_name, subscription)
        if sub.consumers and not force:
            raise BrokerError(pb.ConsumerBusy, f"subscription {subscription} has active consumers")
        if sub.consumers:
            sub.disconnect_consumers()
            sub._close_dispatcher()
        sub.topic.delete_subscription(subscription)

    # ------------------------------------------------------------------ producers

    def create_producer(self, cnx: ServerCnx, req: pb.CommandProducer) -> None:
        topic = self.get_topic(req.topic)
        limit = self.policies.get(topic.topic_name.namespace).max_producers_per_topic
        if limit > 0 and len(topic.producers) >= limit:
            raise BrokerError(pb.ProducerBusy, f"Topic {topic.name} reached max producers limit")
        user_named = req.HasField("producer_name") and bool(req.producer_name)
        name = req.producer_name if user_named else f"{self.config.clusterName}-{self.instance}-{next(self._names)}"
        schema_version = None
        if _has_schema(req):
            schema_version = self.get_or_create_schema(req.topic, req.schema)
        elif (self.config.isSchemaValidationEnforced
              and self.schemas.get(topic.topic_name.schema_name) is not None):
            raise BrokerError(pb.IncompatibleSchema, "Producers cannot connect or send message "
                              "without a schema to topics with a schema if SchemaValidationEnforced "
                              "is enabled")
        producer = Producer(
            cnx, topic, req.producer_id, name,
            req.producer_access_mode if req.HasField("producer_access_mode") else pb.Shared,
            user_named, schema_version,
        )
        ready = topic.add_producer(producer, req.request_id)
        if ready:
            cnx.on_producer_ready(producer, req.request_id)
        else:
            cnx.producers[producer.producer_id] = producer
            producer.ready = False
            cnx.send(producer.success_command(req.request_id, ready=False))

    # ------------------------------------------------------------------ deduplication
    #
    # A topic's dedup state is stored as one snapshot, ``dedup/<topic>`` = {"position": the
    # last entry it reflects, "producers": {name: highest persisted sequence id}}, written
    # every brokerDeduplicationEntriesInterval entries, at housekeeping, and on shutdown
    # (never per message). Loading a topic restores the snapshot and replays the producer
    # name and sequence ids of the entries after its position (at most one interval's
    # worth), so a kill -9 loses nothing that was persisted.

    def make_dedup(self, topic: PersistentTopic) -> MessageDeduplication:
        dedup = MessageDeduplication(max_producers=self.config.brokerDeduplicationMaxNumberOfProducers)
        ledger = topic.ledger
        stored = self.metadata.get(f"dedup/{topic.name}")
        if stored is None:
            # dedup starts now: earlier entries (if dedup was off) are not replayed
            topic.dedup_position = ledger.last_confirmed() or EARLIEST
            self._put_dedup_snapshot(topic, {})
            return dedup
        dedup.restore({name: int(seq) for name, seq in stored["producers"].items()})
        position = Position(*stored["position"])
        replayed = 0
        start = ledger.next_position(position)
        last = ledger.last_confirmed()
        if start is not None and last is not None:
            for entry_position, data in ledger.read_range(start, last):
                _replay_entry(dedup, data)
                replayed += 1
                position = entry_position
        topic.dedup_position = position
        topic.dedup_unsaved = replayed
        if replayed:
            log.info("topic %s: dedup state restored, %d entries replayed", topic.name, replayed)
        return dedup

    def save_dedup_snapshot(self, topic: PersistentTopic) -> None:
        """Store the topic's dedup state if it changed since the last snapshot."""
        if topic.dedup is None or topic.dedup_unsaved == 0:
            return
        self._put_dedup_snapshot(topic, topic.dedup.snapshot())

    def _put_dedup_snapshot(self, topic: PersistentTopic, producers: dict[str, int]) -> None:
        position = topic.dedup_position or EARLIEST
        try:
            self.metadata.put(
                f"dedup/{topic.name}", {"position": list(position), "producers": producers}
            )
        except StorageError as exc:  # the ledger tail still holds the state: retry later
            log.error("topic %s: saving the dedup snapshot failed: %s", topic.name, exc)
            return
        topic.dedup_unsaved = 0

    def load_entry_index(self, topic: PersistentTopic) -> int:
        """The next broker entry index of a topic (entries carry the index of their last message)."""
        from magnetar.broker.topic import split_entry

        last = topic.ledger.last_confirmed()
        if last is None:
            return 0
        bem_raw, _ = split_entry(topic.ledger.read(last))
        if bem_raw is None:
            return 0
        bem = pb.BrokerEntryMetadata.FromString(bem_raw)
        return bem.index + 1 if bem.HasField("index") else 0

    # ------------------------------------------------------------------ backlog quotas
    #
    # As in Pulsar: the size quota (backlogQuotaDefaultLimitBytes) bounds the estimated
    # backlog of the slowest durable subscription, the time quota
    # (backlogQuotaDefaultLimitSecond) the age of the oldest unacknowledged message; the
    # namespace policies can override both. They are checked when a producer connects
    # (refused with ProducerBlockedQuotaExceededError for producer_request_hold: the client
    # keeps retrying and its sends wait; ProducerBlockedQuotaExceededException for
    # producer_exception: the client fails its pending sends) and by housekeeping every
    # backlogQuotaCheckIntervalInSeconds, which disconnects the producers of a topic over
    # quota (they reconnect and meet the check above) or, for consumer_backlog_eviction,
    # moves the slowest cursors forward until the backlog is back under 90% of the limit
    # (size) or expires the messages older than 90% of it (time).

    def backlog_bytes(self, topic: PersistentTopic) -> tuple[int, PersistentSubscription | None]:
        """Estimated backlog bytes of the slowest durable subscription, and that subscription."""
        slowest: PersistentSubscription | None = None
        entries = 0
        for sub in topic.subscriptions.values():
            if isinstance(sub, PersistentSubscription) and sub.durable:
                backlog = sub.backlog()
                if slowest is None or backlog > entries:
                    slowest, entries = sub, backlog
        if slowest is None or entries == 0:
            return 0, slowest
        ledger = topic.ledger
        count = ledger.entry_count()
        average = ledger.size_bytes() / count if count else 0.0
        return int(entries * average), slowest

    def backlog_age(self, topic: PersistentTopic, now: float) -> float:
        """Seconds since the oldest message some durable subscription has not acknowledged
        was published (0 without backlog)."""
        published = topic.oldest_backlog_publish_time()
        return 0.0 if published is None else max(0.0, now - published)

    def _over_quota(self, topic: PersistentTopic, now: float) -> tuple[bool, bool, str]:
        """(size quota exceeded, time quota exceeded, why)."""
        policies = self.policies.get(topic.topic_name.namespace)
        limit = policies.backlog_quota_limit_bytes
        size = self.backlog_bytes(topic)[0] if limit >= 0 else 0
        over_size = limit >= 0 and size > limit
        seconds = policies.backlog_quota_limit_seconds
        age = self.backlog_age(topic, now) if seconds > 0 else 0.0
        over_time = seconds > 0 and age > seconds
        why = (f"backlog of {size} bytes over the {limit}-byte quota" if over_size else
               f"unacknowledged messages {age:.0f} s old, over the {seconds}-second quota")
        return over_size, over_time, why

    def backlog_quota_error(self, topic: PersistentTopic, now: float | None = None) -> tuple[int, str] | None:
        """The error for a new producer on a topic over its backlog quota, else None."""
        policies = self.policies.get(topic.topic_name.namespace)
        policy = policies.backlog_quota_policy
        if policy == "consumer_backlog_eviction" or not topic.subscriptions:
            return None
        if policies.backlog_quota_limit_bytes < 0 and policies.backlog_quota_limit_seconds <= 0:
            return None
        over_size, over_time, why = self._over_quota(topic, time.time() if now is None else now)
        if not (over_size or over_time):
            return None
        why = f"{topic.name}: {why}"
        if policy == "producer_exception":
            return pb.ProducerBlockedQuotaExceededException, why
        return pb.ProducerBlockedQuotaExceededError, why + "; producers are on hold"

    def check_backlog_quota(self, topic: PersistentTopic, now: float | None = None) -> None:
        """Enforce the size and time quotas on a topic now (see above)."""
        policies = self.policies.get(topic.topic_name.namespace)
        limit = policies.backlog_quota_limit_bytes
        seconds = policies.backlog_quota_limit_seconds
        if limit < 0 and seconds <= 0:
            return
        now = time.time() if now is None else now
        over_size, over_time, why = self._over_quota(topic, now)
        if not (over_size or over_time):
            return
        if policies.backlog_quota_policy != "consumer_backlog_eviction":
            log.info("topic %s: %s: disconnecting producers", topic.name, why)
            for producer in list(topic.producers.values()):
                producer.close_by_broker()
                topic.remove_producer(producer)
            return
        if over_time:  # as Pulsar: expire what is older than 90% of the time quota
            log.info("topic %s: %s: expiring older messages", topic.name, why)
            self.expire_messages(topic, seconds * 0.9, now)
        if over_size:
            self._evict_to_size(topic, limit)

    def _evict_to_size(self, topic: PersistentTopic, limit: int) -> None:
        """Move the slowest cursors forward until the backlog is under 90% of ``limit``."""
        size, slowest = self.backlog_bytes(topic)
        target = int(limit * 0.9)
        previous = None
        while size > target and slowest is not None and slowest is not previous:
            ledger = topic.ledger
            average = ledger.size_bytes() / max(1, ledger.entry_count())
            skip = max(1, int((size - target + average - 1) // average))
            position = _position_after(ledger, slowest.cursor.mark_delete_position, skip)
            log.info("topic %s: backlog quota exceeded (%d > %d bytes): subscription %s skips "
                     "%d entries", topic.name, size, limit, slowest.name, skip)
            self._skip_to(slowest, position)
            previous = slowest
            size, slowest = self.backlog_bytes(topic)

    # ------------------------------------------------------------------ consumers

    def subscribe(self, cnx: ServerCnx, req: pb.CommandSubscribe) -> None:
        topic = self.get_topic(req.topic, create=req.force_topic_creation)
        sub_type = req.subType
        if sub_type == pb.CommandSubscribe.Key_Shared and not self.config.subscriptionKeySharedEnable:
            raise BrokerError(pb.NotAllowedError, "Key_Shared subscriptions are disabled on this broker")
        if _has_schema(req):
            self.consumer_schema(topic, req.schema)
        limit = self.policies.get(topic.topic_name.namespace).max_consumers_per_topic
        if limit > 0 and sum(len(s.consumers) for s in topic.subscriptions.values()) >= limit:
            raise BrokerError(pb.ConsumerBusy, f"Topic {topic.name} reached max consumers limit")
        sub = topic.subscriptions.get(req.subscription)
        if sub is None:
            sub = self._new_subscription(topic, req)
        view = self._compacted_view(topic, sub, req)
        consumer = Consumer(
            cnx, sub, req.consumer_id,
            req.consumer_name or f"consumer-{next(self._names)}",
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
        if view is not None and sub.dispatcher is not None:
            sub.dispatcher.ledger = view  # read_compacted: the dispatcher reads the view too
        cnx.on_consumer_ready(consumer, req.request_id)
        if sub.dispatcher is not None:
            sub.dispatcher.schedule()
            sub.check_end_of_topic()

    def _compacted_view(self, topic: Topic, sub: Any, req: pb.CommandSubscribe) -> CompactedView | None:
        """For a read_compacted subscriber of a compacted topic, the view its subscription
        reads (the cursor is switched to it while no other consumer is attached)."""
        if not req.read_compacted or not isinstance(sub, PersistentSubscription):
            return None
        view = self.compactor.view(topic)
        if view is None:
            return None
        if sub.cursor.ledger is not view and not sub.consumers:
            sub.cursor.ledger = view
        return view if sub.cursor.ledger is view else None

    def _new_subscription(self, topic: Topic, req: pb.CommandSubscribe) -> Any:
        if isinstance(topic, NonPersistentTopic):
            sub = NonPersistentSubscription(topic, req.subscription)
            topic.subscriptions[req.subscription] = sub
            return sub
        assert isinstance(topic, PersistentTopic)
        ledger = topic.ledger
        earliest = req.initialPosition == pb.CommandSubscribe.Earliest
        if req.durable:
            cursor = ledger.open_cursor(req.subscription, "earliest" if earliest else "latest")
            sub = PersistentSubscription(topic, req.subscription, cursor, durable=True)
        else:
            view = self.compactor.view(topic) if req.read_compacted else None
            source = view if view is not None else ledger
            start = self._reader_start(source, req, earliest)
            cursor = NonDurableCursor(source, req.subscription, start)
            sub = PersistentSubscription(topic, req.subscription, cursor, durable=False)
        topic.subscriptions[req.subscription] = sub
        return sub

    @staticmethod
    def _reader_start(ledger: Any, req: pb.CommandSubscribe, earliest: bool) -> Position:
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

    # ------------------------------------------------------------------ schemas

    def get_schema(self, topic: str, version: bytes | None) -> tuple[pb.Schema, bytes] | None:
        base = self.check_topic_name(topic).schema_name
        number = _VERSION.unpack(version)[0] if version and len(version) == 8 else None
        record = self.schemas.get(base, number)
        if record is None:
            return None
        schema = pb.Schema(
            name=record.name, schema_data=record.data, type=record.type,
            properties=[pb.KeyValue(key=k, value=v) for k, v in record.properties.items()],
        )
        return schema, _VERSION.pack(record.version or 0)

    def schema_strategy(self, topic: str | TopicName) -> str:
        """The schema compatibility strategy of the topic's namespace: its policy when one
        is set (``schema_compatibility_strategy``), else ``schemaCompatibilityStrategy``."""
        name = topic if isinstance(topic, TopicName) else self.check_topic_name(topic)
        policies = self.policies.get(name.namespace)
        value = getattr(policies, "schema_compatibility_strategy", None)
        return str(value) if value else self.config.schemaCompatibilityStrategy

    def consumer_schema(self, topic: Topic, schema: pb.Schema) -> None:
        """The schema a consumer brings, as Pulsar's ``addSchemaIfIdleOrCheckCompatible``:
        on a topic that has a schema, or has producers, consumers or data, the consumer's
        schema is checked with the namespace's strategy (PIP-44: it must read the latest
        version, or every version for the ``BACKWARD``/``FULL`` transitive strategies) and
        not stored; a topic in use without a schema refuses it, as in Pulsar. On an idle
        topic without a schema it is stored like a producer's (unless auto-update is off)."""
        base = topic.topic_name.schema_name
        in_use = (
            bool(topic.producers)
            or any(not c.auto_consume_schema
                   for sub in topic.subscriptions.values() for c in sub.consumers)
            or (isinstance(topic, PersistentTopic) and topic.ledger.size_bytes() > 0)
        )
        if in_use or self.schemas.get(base) is not None:
            try:
                self.schemas.check_consumer(base, _record_of(schema), self.schema_strategy(topic.topic_name))
            except ValueError as exc:
                raise BrokerError(pb.IncompatibleSchema, str(exc)) from exc
            return
        self.get_or_create_schema(topic.name, schema)

    def get_or_create_schema(self, topic: str, schema: pb.Schema) -> bytes:
        """Version of a producer's schema, stored if new and compatible with the namespace's
        strategy (IncompatibleSchema otherwise)."""
        name = self.check_topic_name(topic)
        try:
            version = self.schemas.get_or_create(
                name.schema_name, _record_of(schema), self.schema_strategy(name)
            )
        except ValueError as exc:
            raise BrokerError(pb.IncompatibleSchema, str(exc)) from exc
        return _VERSION.pack(version)


_RE2_QUIET = re2.Options()
_RE2_QUIET.log_errors = False  # a client's bad pattern is its own business, not the log's


def _has_schema(req: pb.CommandProducer | pb.CommandSubscribe) -> bool:
    """Whether a producer or consumer declares a schema to check. Type ``None`` (0) stands
    for bytes (Pulsar's Java and C++ clients omit the field then); an ``AutoConsume``
    client adapts to the topic's schema (AUTO_PRODUCE producers send the topic's own schema
    or none). Neither is checked or stored, as in Pulsar."""
    if not req.HasField("schema"):
        return False
    return req.schema.type not in (0, pb.Schema.AutoConsume)


def _record_of(schema: pb.Schema) -> SchemaRecord:
    return SchemaRecord(
        name=schema.name, type=schema.type, data=bytes(schema.schema_data),
        properties={kv.key: kv.value for kv in schema.properties},
    )


def _position_after(ledger: Any, start: Position, n: int) -> Position:
    """The position ``n`` entries after ``start`` (or the last one), without reading data."""
    last = ledger.last_confirmed()
    for lid in ledger.segment_ids():
        if lid < start.ledger_id:
            continue
        first_eid = start.entry_id + 1 if lid == start.ledger_id else 0
        available = ledger.count_between(Position(lid, first_eid), Position(lid, 2**62))
        if n <= available:
            return Position(lid, first_eid + n - 1)
        n -= available
    return last if last is not None else start


def _replay_entry(dedup: MessageDeduplication, data: bytes) -> None:
    """Apply one stored entry's producer and sequence ids to the dedup state."""
    from magnetar.broker.dispatcher import entry_metadata

    metadata = entry_metadata(data)
    if metadata is None or not metadata.producer_name:
        return
    if metadata.HasField("chunk_id") and metadata.chunk_id != metadata.num_chunks_from_msg - 1:
        return
    seq = metadata.sequence_id
    if metadata.HasField("highest_sequence_id"):
        highest = metadata.highest_sequence_id
    else:  # clients number the messages of a batch consecutively
        highest = seq + max(1, metadata.num_messages_in_batch) - 1
    dedup.replay(metadata.producer_name, seq, max(seq, highest))


def _ledger_name(topic_name: TopicName) -> str:
    """A filesystem-safe, unique storage name for a persistent topic."""
    text = str(topic_name).split("://", 1)[1]
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
