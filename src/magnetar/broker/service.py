"""BrokerService: the broker's entry point, its lifecycle and its registry of topics.

It listens for Pulsar binary-protocol connections (`ServerCnx`), owns storage (the
`ManagedLedgerFactory` and its metadata store) and the components that each do one job:

- `attacher` (attach.py): producers and consumers joining topics;
- `topic_schemas` (topic_schemas.py) over `schemas` (schema_registry.py);
- `dedup_snapshots` (dedup_snapshot.py): dedup state persisted across loads;
- `expirer` (message_expiry.py) and `backlog_quota` (backlog_quota.py);
- `housekeeping` (housekeeping.py): the periodic tasks, idle-topic unloading;
- `sweeper` (sweep.py): housekeeping of unloaded topics; `compactor` (compaction.py);
- `policies`, `namespaces`, `security`, `listeners`.

What stays here is the topic registry (`topics`: loading, auto-creation, partitioned
metadata, listing, unloading); the topic and subscription operations of the admin API
(terminating, deleting, cursor resets...) are `AdminOperations` (operations.py). Everything runs on one asyncio event loop (uvloop when installed). Methods named
like admin operations (``topic_stats``, ``terminate_topic``, ``delete_topic``...) are what
the admin layer calls.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.broker.cluster.records import LEDGER_IDS_PATH
from magnetar.broker.config.broker_config import BrokerConfig
from magnetar.broker.config.listeners import Listeners
from magnetar.broker.connection import handshake
from magnetar.broker.connection.attach import TopicAttacher
from magnetar.broker.connection.base import PublishBuffer
from magnetar.broker.connection.server_cnx import ServerCnx
from magnetar.broker.errors import BrokerError
from magnetar.broker.heap import HeapFreezer
from magnetar.broker.namespaces.backlog_quota import BacklogQuotaManager
from magnetar.broker.namespaces.housekeeping import Housekeeping, in_use
from magnetar.broker.namespaces.message_expiry import MessageExpirer
from magnetar.broker.namespaces.policies import Policies, PolicyStore
from magnetar.broker.namespaces.registry import NamespaceRegistry
from magnetar.broker.namespaces.sweep import IdleTopicSweeper
from magnetar.broker.operations import AdminOperations
from magnetar.broker.replication.manager import ReplicationManager, is_replicator_cursor
from magnetar.broker.schema.registry import SchemaRegistry
from magnetar.broker.security.broker_security import BrokerSecurity
from magnetar.broker.subscriptions.subscription import PersistentSubscription
from magnetar.broker.switching import ThreadSwitching
from magnetar.broker.topic_name import TopicName, ledger_name
from magnetar.broker.topics.changes import TopicChanges, TopicRegistry
from magnetar.broker.topics.compaction import Compactor
from magnetar.broker.topics.dedup_snapshot import DedupSnapshots, Restored
from magnetar.broker.topics.entry_index import load_entry_index_async
from magnetar.broker.topics.release import release_topic
from magnetar.broker.topics.topic import (
    NonPersistentTopic,
    PersistentTopic,
    Topic,
)
from magnetar.broker.topics.topic_schemas import TopicSchemas
from magnetar.broker.topics.transaction_buffer import TxnChecker
from magnetar.broker.transactions.manager import TransactionCoordinators
from magnetar.broker.turns import TurnShare
from magnetar.metadata import IdBlocks, KeyValueStore, MetadataStore
from magnetar.protocol import pb
from magnetar.storage import (
    LedgerClosedError,
    ManagedLedger,
    ManagedLedgerFactory,
    StorageConfig,
    StorageError,
)
from magnetar.storage.descriptors import open_files_limit, plan_descriptors
from magnetar.storage.disk_usage import DiskUsage

if TYPE_CHECKING:
    from magnetar.broker.cluster.coordinator import ClusterCoordinator

log = logging.getLogger(__name__)

# GetTopicsOfNamespace modes that list the persistent topics


def _done() -> asyncio.Future[None]:
    """A future that is already done (nothing was left to wait for)."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


def _nothing() -> None:
    """A no-op job: awaited on the metadata writer, it waits for the writes before it."""


def install_event_loop_policy() -> None:
    """Use uvloop when it is installed (it is a dependency on Linux and macOS)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - optional on other platforms
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


class BrokerService(AdminOperations):
    """The broker: lifecycle, topic registry, and the components listed above."""

    def __init__(self, config: BrokerConfig, metadata: KeyValueStore | None = None) -> None:
        """``metadata``: the key store for the broker's metadata (cluster mode: a started
        `ClusterKeyValueStore`; default: ``metadata.db`` in the data directory)."""
        self.config = config
        # cluster mode: the cluster's metadata store (versions, ephemeral keys, notifications:
        # magnetar.metadata) under the flat keys, for ownership and lookups; None standalone
        self.metadata_store: MetadataStore | None = getattr(metadata, "store", None)
        # brokers sharing storage (possibly across hosts) write no shared SQLite file: each
        # ledger's state lives in its directory, ledger ids come from the metadata store
        sharing = config.magnetarSharedStorage and self.metadata_store is not None
        # the descriptor limit shared out: segment files, connections, HTTP connections
        self.descriptors = plan_descriptors(
            open_files_limit()[0], config.magnetarMaxOpenFiles, config.maxHttpServerConnections,
            config.magnetarReservedFileDescriptors)
        self.storage = ManagedLedgerFactory(
            StorageConfig(
                data_dir=config.magnetarDataDir,
                fsync=config.fsync_policy,
                segment_max_bytes=config.managedLedgerMaxSizePerLedgerMbytes * 1024 * 1024,
                segment_max_entries=config.managedLedgerMaxEntriesPerLedger,
                segment_max_age_s=config.managedLedgerMaxLedgerRolloverTimeMinutes * 60.0,
                read_cache_bytes=config.managedLedgerCacheSizeMB * 1024 * 1024,
                read_cache_max_age_s=config.managedLedgerCacheEvictionTimeThresholdMillis / 1000,
                max_open_files=self.descriptors.open_files,
                cursor_persist_interval_s=float(config.managedLedgerCursorPositionFlushSeconds),
                inline_sync_when_idle=config.magnetarSyncOnLoopWhenIdle,
                inline_sync_slow_s=config.magnetarSyncOnLoopSlowMillis / 1000,
                inline_sync_backoff_s=config.magnetarSyncOnLoopBackoffSeconds,
                dir_fsync=config.magnetarDirectoryFsync,
                shared=config.magnetarSharedStorage,
                state_files=sharing,
            ),
            metadata,
        )
        self.metadata = self.storage.metadata
        if sharing:
            assert self.metadata_store is not None
            self.storage.use_ledger_id_source(
                IdBlocks(self.metadata_store, LEDGER_IDS_PATH).reserve_blocking)
        self.schemas = SchemaRegistry(
            self.metadata,
            allow_auto_update=config.isAllowAutoUpdateSchemaEnabled,
            strategy=config.schemaCompatibilityStrategy,
            read=self.storage.read_metadata,
            write=self.storage.write_metadata,
        )
        # payload bytes of sends not yet answered, broker-wide (maxMessagePublishBufferSizeInMB)
        self.publish_buffer = PublishBuffer(config.maxMessagePublishBufferSizeInMB)
        self.policies = PolicyStore(self.metadata, config, write=self.storage.write_metadata)
        self.policies.on_change = self.policies_changed
        # authentication, authorization, the TLS listener, connection limits
        self.security = BrokerSecurity(self)
        # tenants and namespaces: a topic of a namespace that does not exist is not found
        self.namespaces = NamespaceRegistry(
            self.metadata, config.clusterName, write=self.storage.write_metadata)
        # topic compaction and the compacted views read_compacted subscriptions read
        self.compactor = Compactor(self)
        self.replication = ReplicationManager(self)  # geo-replication (replication_clusters)
        # advertisedListeners: which URL a lookup answers with, by listener name
        self.listeners = Listeners(config.advertisedListeners, config.internalListenerName)
        self.namespaces.adopt(
            [key.split("/", 1)[1] for key in self.metadata.list("topics/")]
            + [key.split("/", 1)[1] for key in self.metadata.list("partitioned/")]
        )
        self.namespaces.start_writing_off_loop()
        # names of topics whose metrics figures may have changed (topics/changes.py): the
        # registry notes loads and unloads, topics the rest; /metrics reads only those
        self.topic_changes = TopicChanges()
        self.topics: dict[str, Topic] = TopicRegistry(self.topic_changes)
        self.heap = HeapFreezer(config.magnetarGcFreezeAfterTopicLoads)  # gc.freeze after loads
        # the interpreter's switch interval while this broker runs (its threads' hand-backs)
        self.switching = ThreadSwitching(config.magnetarThreadSwitchIntervalMicros)
        # topics a load_topic is loading (their ledger's scan on a storage thread): how many
        self.loading: dict[str, int] = {}
        # topics a delete_topic is deleting (its storage work off the loop): not loadable
        self.deleting: set[str] = set()
        # maxConcurrentTopicLoadRequest: loads past it wait for a slot (as Pulsar queues them)
        self.topic_load_slots = asyncio.Semaphore(config.maxConcurrentTopicLoadRequest)
        # schema rules for producers and consumers; producers and consumers joining topics
        self.topic_schemas = TopicSchemas(self)
        self.attacher = TopicAttacher(self)
        # per-topic dedup state, persisted; message TTL; backlog quotas
        self.dedup_snapshots = DedupSnapshots(self.storage, config)
        self.expirer = MessageExpirer()
        self.backlog_quota = BacklogQuotaManager(self.policies, self.expirer)
        # the periodic rounds over every topic share one budget per turn of the loop
        self.turns = TurnShare(busy=lambda: bool(self.loading))  # (they give way to loads)
        # the periodic work, and housekeeping of the persistent topics that are not loaded
        self.housekeeping = Housekeeping(self)
        # the data directory's disk usage: read-only past magnetarDiskUsageThreshold
        self.disk = DiskUsage(
            config.magnetarDataDir, warn=config.magnetarDiskUsageWarnThreshold,
            full=config.magnetarDiskUsageThreshold, lwm=config.magnetarDiskUsageLwmThreshold,
            min_free_bytes=config.magnetarDiskUsageMinFreeMB * 1024 * 1024,
            interval_s=config.magnetarDiskCheckIntervalMillis / 1000)
        self.sweeper = IdleTopicSweeper(self)
        self.connections: set[ServerCnx] = set()
        # ledgers being closed off the loop (close_ledger): stop lets them finish
        self.closing_ledgers: set[asyncio.Future[None]] = set()
        self.port = config.brokerServicePort
        self.instance = secrets.token_hex(3)
        # metadataStoreUrl=zk:...: this broker's part in a cluster (docs/cluster.md);
        # None for a broker alone, which serves every topic as it always did
        self.cluster: ClusterCoordinator | None = None
        self._server: asyncio.AbstractServer | None = None
        self.transactions = TransactionCoordinators(self)  # coordinators (broker/transactions/)
        # the participants (topics/transaction_buffer.py) ask the coordinators whether a
        # transaction is open
        self.txn_checker: TxnChecker = self.transactions

    # ------------------------------------------------------------------ lifecycle

    async def start(self, accept: bool = True) -> None:
        """Listen (unless brokerServicePort is -1), start security and the periodic tasks;
        ``accept=False``: ports bound, no connection accepted before `accept_connections`."""
        loop = asyncio.get_running_loop()
        try:
            await self.storage.ledger_ids_ready()  # cluster: the first block of ledger ids
        except StorageError as exc:  # asked for again when a segment needs one
            log.warning("no ledger ids from the metadata store yet: %s", exc)
        self.switching.start()
        await self.transactions.start()  # (alone: pulsar/system made) before clients come
        if self.config.brokerServicePort >= 0:  # -1: TLS only (brokerServicePortTls)
            self._server = await loop.create_server(
                lambda: ServerCnx(self),
                host=self.config.bindAddress,
                port=self.config.brokerServicePort,
                reuse_address=True, backlog=1024, start_serving=accept,
            )
            self.port = self._server.sockets[0].getsockname()[1]
        await self.security.start(lambda: ServerCnx(self), self.check_credentials, accept)
        self.disk.start()
        self.housekeeping.start()
        self.replication.start()
        if accept:
            await self.accept_connections()

    async def accept_connections(self) -> None:
        """Start accepting (after ``start(accept=False)``: a cluster broker once joined)."""
        if self._server is not None:
            await self._server.start_serving()
        await self.security.accept_connections()
        log.info("broker listening on %s:%d", self.config.bindAddress, self.port)

    async def join_cluster(self, urls: dict[str, str | None],
                           on_shutdown: Callable[[], None] | None = None) -> None:
        """Join the cluster of ``metadataStoreUrl`` (once listening: ``urls`` are this
        broker's service and web URLs); ``on_shutdown`` is called if the broker must stop
        (its metadata session expired, with zookeeperSessionExpiredPolicy=shutdown)."""
        from magnetar.broker.cluster.membership import join_cluster

        self.cluster = await join_cluster(self, urls, on_shutdown)

    async def leave_cluster(self) -> None:
        """Release this broker's bundles and registry entry (before `stop`)."""
        if self.cluster is not None:
            from magnetar.broker.cluster.membership import leave_cluster

            cluster, self.cluster = self.cluster, None
            await leave_cluster(cluster)

    def check_credentials(self) -> None:
        """Challenge each connection whose credentials expire before the next check
        (every ``authenticationRefreshCheckSeconds``, from ``BrokerSecurity``)."""
        for cnx in list(self.connections):
            try:
                handshake.refresh_tick(cnx)
            except Exception:
                log.exception("%s: checking credentials expiry failed", cnx.peer)

    def serving(self) -> bool:
        """Whether the binary-protocol listener accepts connections (health checks)."""
        return self._server is not None and self._server.is_serving()

    async def stop(self) -> None:
        """Stop the periodic work, save dedup state, close connections and storage."""
        self.housekeeping.stop()
        self.heap.stop()
        await self.transactions.stop()
        await self.replication.stop()
        self.disk.stop()
        for topic in list(self.topics.values()):
            if isinstance(topic, PersistentTopic):
                self.dedup_snapshots.save(topic)
        if self._server is not None:
            self._server.close()
        self.security.stop()
        for cnx in list(self.connections):
            cnx.close()
        if self._server is not None:
            await self._server.wait_closed()
        await self.dedup_snapshots.flush()  # the snapshots just taken land before the store closes
        # metadata writes already handed to the writer thread finish while the loop runs (in
        # cluster mode they wait for the loop to store them in the metadata store)
        await self.storage.write_metadata(_nothing)
        if self.closing_ledgers:  # unloads under way finish their disk work off the loop
            await asyncio.gather(*list(self.closing_ledgers), return_exceptions=True)
        self.storage.close()
        self.switching.stop()

    # ------------------------------------------------------------------ housekeeping
    # (the work is the components'; these are the names the admin layer and tests use)

    def run_housekeeping(self, now: float | None = None) -> asyncio.Future[Any]:
        """Housekeep every loaded persistent topic now (`Housekeeping.run`); the future is
        done once that work is."""
        return self.housekeeping.run(now)

    def housekeep_topic(self, topic: PersistentTopic, now: float | None = None) -> asyncio.Future[None]:
        """One topic's periodic work now (`Housekeeping.housekeep_topic`)."""
        return self.housekeeping.housekeep_topic(topic, now)

    def unload_idle_topics(self, now: float | None = None,
                           names: list[str] | None = None) -> asyncio.Future[int]:
        """Unload the topics idle for magnetarTopicUnloadIdleSeconds
        (`Housekeeping.unload_idle_topics`); the future gives how many."""
        return self.housekeeping.unload_idle_topics(now, names)

    async def expire_messages(self, topic: PersistentTopic, ttl_seconds: float,
                              now: float | None = None, subscription: str | None = None) -> None:
        """Expire what is older than ``ttl_seconds`` (`MessageExpirer.expire_messages`)."""
        await self.expirer.expire_messages(topic, ttl_seconds, now, subscription)

    def unload_topic(self, topic: Topic, housekeep: bool = False,
                     now: float | None = None) -> asyncio.Future[Any]:
        """Close a loaded topic and forget it (clients still attached are disconnected and
        reconnect, as after Pulsar's topic unload); its next use loads it again. With
        ``housekeep``, a persistent topic is housekept first (``now``: epoch seconds; the
        disk work off the loop, the topic still loaded meanwhile) and the idle-topic sweep
        learns when it next needs a look; otherwise the sweep will look.

        Without housekeeping the topic leaves memory in this call. Its ledger's close (the
        last appends' commit, sealing the segments, the cursors' last states) runs off the
        loop (`close_ledger`). The future is done once it is; awaiting it is optional (a
        reload of the topic waits for the close anyway)."""
        if self.topics.get(topic.name) is not topic:
            return _done()
        if housekeep and isinstance(topic, PersistentTopic):
            return self.housekeeping.keep(
                asyncio.ensure_future(self._housekeep_and_unload(topic, now, if_idle=False)))
        self.sweeper.forget(topic.name)
        return self._unload_now(topic)

    def unload_if_idle(self, topic: Topic, now: float | None = None) -> asyncio.Future[bool]:
        """`unload_topic` with housekeeping, for idle unloading and the sweep: the topic
        stays loaded if a client attached while it was housekept. The future gives whether
        it was unloaded, once its ledger is closed. A non-persistent topic has nothing to
        housekeep (nor to sweep later): it leaves memory at once."""
        if not isinstance(topic, PersistentTopic):
            unloaded: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            loaded = self.topics.get(topic.name) is topic
            if loaded:
                self._unload_now(topic)
            unloaded.set_result(loaded)
            return unloaded
        return self.housekeeping.keep(
            asyncio.ensure_future(self._housekeep_and_unload(topic, now, if_idle=True)))

    async def _housekeep_and_unload(self, topic: PersistentTopic, now: float | None,
                                    if_idle: bool) -> bool:
        """Housekeep ``topic``, note its next due time for the sweep, then unload it if it is
        still the loaded one (and, ``if_idle``, unused). True if it was unloaded."""
        now = time.time() if now is None else now
        name = topic.name

        def stays() -> bool:
            if self.topics.get(name) is not topic:
                return True
            if if_idle and in_use(topic):
                self.housekeeping.touch(name)
                return True
            return False

        await self.housekeeping.housekeep_topic(topic, now)
        if stays():
            return False
        try:
            await self.sweeper.record(topic, now)
        except Exception:
            log.exception("topic %s: computing its next housekeeping time failed", name)
            self.sweeper.forget(name)
        if stays():
            return False
        await self._unload_now(topic)
        return True

    def _unload_now(self, topic: Topic) -> asyncio.Future[None]:
        """`unload_topic`'s part on the loop: the topic leaves memory, its clients are
        disconnected, its ledger's close starts (the future)."""
        del self.topics[topic.name]
        self.heap.topic_unloaded(len(self.topics))
        self.housekeeping.forget(topic.name)
        self.compactor.forget(topic.name)
        if isinstance(topic, PersistentTopic):
            self.replication.topic_unloaded(topic)
        topic.close_all()
        for sub in topic.subscriptions.values():
            if isinstance(sub, PersistentSubscription):
                sub.close_dispatcher()
        if isinstance(topic, PersistentTopic):
            self.dedup_snapshots.save(topic)
            closed = self.close_ledger(topic.ledger)
            closed.add_done_callback(lambda _: release_topic(topic))
            return closed
        release_topic(topic)
        return _done()

    def close_ledger(self, ledger: ManagedLedger) -> asyncio.Future[None]:
        """Close a ledger the broker stops using (an unloaded topic's, a compacted view's)
        with its disk work off the loop (`ManagedLedger.close_async`: appends refused and
        the ledger out of storage's registry at once, a reopen waits for the rest). `stop`
        waits for the closes under way."""
        future = ledger.close_async()
        self.closing_ledgers.add(future)
        future.add_done_callback(self.closing_ledgers.discard)
        return future

    # ------------------------------------------------------------------ authentication

    def authenticate(self, connect: pb.CommandConnect) -> str | None:
        """The principal of a new connection; authentication providers plug in here."""
        return None

    # ------------------------------------------------------------------ topics

    def check_topic_name(self, name: str) -> TopicName:
        """The parsed name of a topic whose namespace exists (InvalidTopicName, TopicNotFound).
        A loaded topic's full name is not parsed again: the parse cache holds 4,096 names,
        so with 100,000 topics loaded nearly every lookup or attach re-parsed its name."""
        topic = self.topics.get(name)
        if topic is not None:
            topic_name = topic.topic_name
        else:
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
        """The number of partitions of a topic (0: not partitioned), auto-creating a
        partitioned topic when the namespace says so."""
        topic_name = self.check_topic_name(name)
        if topic_name.is_partition:
            return 0
        return self.stored_partitions(topic_name, self.policies.get(topic_name.namespace))

    async def known_topic_name(self, name: str) -> TopicName:
        """`check_topic_name`; in a cluster a namespace not known here (created at another
        broker a moment ago) is read from the metadata store first."""
        try:
            return self.check_topic_name(name)
        except BrokerError as exc:
            if exc.code != pb.TopicNotFound or self.cluster is None or await \
                    self.metadata.read_through(
                        f"namespaces/{TopicName.parse(name).namespace}") is None:
                raise
        return self.check_topic_name(name)

    async def partitioned_metadata_async(self, name: str) -> int:
        """`partitioned_metadata` with its metadata store calls on the storage's threads (in
        a cluster, one created at another broker is read from the store on a miss)."""
        topic_name = await self.known_topic_name(name)
        if topic_name.is_partition:
            return 0
        if self.cluster is not None:
            await self.metadata.read_through(f"partitioned/{topic_name}")
        policies = self.policies.get(topic_name.namespace)
        return await self.storage.read_metadata(self.stored_partitions, topic_name, policies)

    def stored_partitions(self, topic_name: TopicName, policies: Policies) -> int:
        """The stored partition count of a topic (or the one auto-creation gives it now).
        Only metadata store calls: safe in a worker thread."""
        meta = self.metadata.get(f"partitioned/{topic_name}")
        if meta is not None:
            return int(meta["partitions"])
        if (
            policies.allow_auto_topic_creation
            and policies.auto_topic_creation_type == "partitioned"
            and self.metadata.get(f"topics/{topic_name}") is None
        ):
            return self.create_partitioned_topic(str(topic_name), policies.default_num_partitions)
        return 0

    def create_partitioned_topic(self, name: str, partitions: int) -> int:
        """Store a partitioned topic's partition count. Only metadata store calls: safe in
        a worker thread (auto-creation runs it there); the admin API uses the async form."""
        topic_name = self.check_topic_name(name)
        if partitions < 1:
            raise BrokerError(pb.MetadataError, "a partitioned topic needs at least one partition")
        self.metadata.put(f"partitioned/{topic_name}", {"partitions": partitions})
        return partitions

    async def create_partitioned_topic_async(self, name: str, partitions: int) -> int:
        """`create_partitioned_topic` with its write on the metadata writer thread."""
        self.check_topic_name(name)
        return await self.storage.write_metadata(self.create_partitioned_topic, name, partitions)

    async def create_topic(self, name: str) -> None:
        """Create a non-partitioned topic on request (admin API), whatever auto-creation
        says; its metadata and ledger work runs off the loop (`load_topic`). In a cluster,
        a topic whose bundle this broker does not own is only recorded: its ledger is made
        by the broker that comes to own it, when a client first uses it (opening it here
        would fence that owner out of the shared storage)."""
        topic_name = self.check_topic_name(name)
        if topic_name.is_persistent:
            await self.storage.write_metadata(self.record_topic, topic_name)
            if self.cluster is not None and not self.cluster.owns(str(topic_name)):
                return
        await self.load_topic(str(topic_name), create=True)

    def record_topic(self, topic_name: TopicName) -> None:
        """Record a persistent topic in the metadata store unless it is there already.
        Only metadata store calls: safe in a worker thread."""
        if self.metadata.get(f"topics/{topic_name}") is None:
            self.metadata.put(f"topics/{topic_name}", {"created": time.time()})

    def get_topic(self, name: str, create: bool = True) -> Topic:
        """The loaded topic ``name``, loaded (or, with ``create`` and auto-creation,
        created) if need be; TopicNotFound otherwise. A persistent topic's load runs on the
        event loop here: client requests, the admin operations and the idle-topic sweep go
        through `load_topic` instead."""
        topic_name, topic, auto_create = self.loaded_topic(name, create)
        if topic is not None:
            return topic
        self.check_served_here(topic_name)
        self.admit_persistent(topic_name, create, auto_create)
        return self.attach_ledger(topic_name, self.storage.open(ledger_name(topic_name)))

    def check_served_here(self, topic_name: TopicName) -> None:
        """In a cluster, a persistent topic is loaded only by the owner of its bundle
        (``ServiceNotReady`` elsewhere): its ledger lives in the shared storage, and
        opening it fences it, which would stop its owner's appends."""
        if self.cluster is not None and topic_name.is_persistent:
            self.cluster.check_owned(str(topic_name))

    async def load_topic(self, name: str, create: bool = True) -> Topic:
        """`get_topic`, with a persistent topic's SQLite and disk work (its ``topics/``
        key, the ledger's directory, recovery scan and stored cursors, the dedup snapshot
        and the entries replayed after it, the last entry's broker entry index) on the
        storage's ``readers`` threads, so a topic whose disk stalls holds up only its own
        clients. Only building the topic from what was read runs on the loop."""
        topic_name, topic, auto_create = self.loaded_topic(name, create)
        if topic is not None:
            return topic
        self.check_served_here(topic_name)
        key = str(topic_name)
        self.loading[key] = self.loading.get(key, 0) + 1
        try:
            async with self.topic_load_slots:
                await self.storage.read_metadata(self.admit_persistent, topic_name, create, auto_create)
                ledger = await self.storage.open_async(ledger_name(topic_name))
                restored = entry_index = None
                if key not in self.topics:
                    if self.policies.get(topic_name.namespace).deduplication_enabled:
                        restored = await self.dedup_snapshots.restore_async(key, ledger)
                    if self.config.entry_metadata_enabled:
                        entry_index = await load_entry_index_async(ledger)
        finally:
            if self.loading[key] == 1:
                del self.loading[key]
            else:
                self.loading[key] -= 1
            self.turns.busy_now()  # (its producer or consumer is attached next)
        topic = self.topics.get(key)  # loaded by someone else meanwhile?
        if topic is not None:
            return topic
        if not ledger.is_open:
            raise LedgerClosedError(f"the ledger of {key} was closed while the topic was loading")
        if self.cluster is not None and topic_name.is_persistent and not self.cluster.serves(
                key, ledger.fence.epoch if ledger.fence is not None else None):
            # unloaded (and perhaps owned again, under a new epoch) while this load ran:
            # what it read may be stale, and nothing else would ever unload it
            await ledger.close_async()
            raise BrokerError(pb.ServiceNotReady, f"topic {key} moved while it was loading; "
                              "look it up again")
        return self.attach_ledger(topic_name, ledger, restored, entry_index)

    def loaded_topic(self, name: str, create: bool) -> tuple[TopicName, Topic | None, bool]:
        """(parsed name, the loaded topic or None, whether the namespace auto-creates
        topics). A non-persistent topic is created here (it has nothing to load);
        TopicNotFound when it may not be."""
        topic_name = self.check_topic_name(name)
        key = str(topic_name)
        topic = self.topics.get(key)
        if topic is not None:
            self.housekeeping.touch(key)
            return topic_name, topic, True
        if key in self.deleting:
            raise BrokerError(pb.ServiceNotReady, f"topic {key} is being deleted")
        auto_create = self.policies.get(topic_name.namespace).allow_auto_topic_creation
        if not topic_name.is_persistent:
            if not create and not auto_create:
                raise BrokerError(pb.TopicNotFound, f"topic {key} does not exist")
            topic = NonPersistentTopic(self, topic_name)
            self.topics[key] = topic
            self.housekeeping.touch(key)
            self.heap.topic_loaded(len(self.topics))
        return topic_name, topic, auto_create

    def admit_persistent(self, topic_name: TopicName, create: bool, auto_create: bool) -> None:
        """Check that a persistent topic exists, or record it when it may be created
        (TopicNotFound otherwise). Only metadata store calls: safe in a worker thread."""
        key = str(topic_name)
        if self.metadata.get(f"topics/{key}") is not None:
            return
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

    def attach_ledger(self, topic_name: TopicName, ledger: ManagedLedger,
                      restored: Restored | None = None,
                      entry_index: int | None = None) -> PersistentTopic:
        """Build and register a persistent topic over its opened ledger, with a subscription
        per stored cursor (``restored``, ``entry_index``: see `PersistentTopic`)."""
        key = str(topic_name)
        topic = PersistentTopic(self, topic_name, ledger, restored, entry_index)
        self.topics[key] = topic
        self.housekeeping.touch(key)
        for sub_name, cursor in ledger.cursors().items():
            if is_replicator_cursor(sub_name):  # a geo-replicator's, not a subscription
                continue
            topic.subscriptions[sub_name] = PersistentSubscription(topic, sub_name, cursor, durable=True)
        self.replication.topic_loaded(topic)
        self.heap.topic_loaded(len(self.topics))
        return topic
