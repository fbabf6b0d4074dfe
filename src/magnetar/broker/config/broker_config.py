"""Broker configuration, read with Apache Pulsar's ``broker.conf`` key names.

A user's ``standalone.conf`` carries over: every key we implement has the name Pulsar gives
it, keys we do not implement are reported once (one log line listing them) and ignored, and a
value of the wrong type is an error that names the key and the line.
Settings of our own (no Pulsar equivalent) start with ``magnetar``.

The file syntax is that of Java properties as Pulsar writes them: ``key=value`` (or
``key: value``), ``#`` and ``!`` comments, a trailing backslash continuing the line. As in
Pulsar, a key with a blank value (``managedLedgerCacheSizeMB=``) keeps its default.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magnetar.broker.config.listeners import ListenerConfigError, Listeners
from magnetar.broker.config.security_config import SecurityConfig, SecurityConfigError
from magnetar.broker.schema.compat import validate_strategy
from magnetar.metadata import InvalidUrlError, parse_store_url

log = logging.getLogger(__name__)


#: the load shedding strategies implemented (loadBalancerLoadSheddingStrategy)
SHEDDING_STRATEGIES = ("org.apache.pulsar.broker.loadbalance.impl.OverloadShedder",
                       "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder")


class ConfigError(ValueError):
    """A configuration file or option that cannot be used as given."""


@dataclass
class BrokerConfig(SecurityConfig):
    """Every broker setting, named as in Pulsar's broker.conf (camelCase keys map 1:1);
    security and connection limits are inherited from ``SecurityConfig``."""

    # Network
    bindAddress: str = "0.0.0.0"
    advertisedAddress: str = ""
    # name:pulsar://host:port,... (lookups pick one by the client's listener name)
    advertisedListeners: str = ""
    internalListenerName: str = ""
    brokerServicePort: int = 6650
    webServicePort: int = 8080
    clusterName: str = "standalone"
    # the broker's Ping to its clients and to the remote brokers it replicates to
    keepAliveIntervalSeconds: int = 30
    # a producer name held by another connection: that one is pinged, and closed when it
    # does not answer within this (its client, e.g. a replicator, has silently gone); 0: off
    connectionLivenessCheckTimeoutMillis: int = 5000
    maxMessageSize: int = 5 * 1024 * 1024
    maxPendingPublishRequestsPerConnection: int = 1000  # 0: no limit
    # broker-wide; Pulsar's default is half the JVM's direct memory; 0 or less: no limit
    maxMessagePublishBufferSizeInMB: int = 256

    # Cluster (docs/cluster.md; metadataStoreUrl below makes a broker one of a cluster)
    defaultNumberOfNamespaceBundles: int = 4
    # how often this broker's load report under /loadbalance/brokers is rewritten
    loadBalancerReportUpdateMinIntervalMillis: int = 5000
    # load shedding by the leader (broker/cluster/shedding.py): bundles, busiest first, off
    # each broker whose most used resource (CPU, memory, bandwidth in/out, in percent of its
    # limit) is above the threshold, until it is back under it; a shed bundle stays put for
    # the grace period. Free bundles go to brokers below the threshold first.
    loadBalancerSheddingEnabled: bool = True
    loadBalancerSheddingIntervalMinutes: int = 1
    loadBalancerBrokerOverloadedThresholdPercentage: int = 85
    loadBalancerSheddingGracePeriodMinutes: int = 30
    loadBalancerLoadSheddingStrategy: str = \
        "org.apache.pulsar.broker.loadbalance.impl.OverloadShedder"
    # ThresholdShedder: a broker whose (weighted, smoothed) usage is this many points above
    # the cluster's average sheds load, if what it would shed is at least the minimum (MB/s)
    loadBalancerBrokerThresholdShedderPercentage: int = 10
    loadBalancerHistoryResourcePercentage: float = 0.9
    loadBalancerCPUResourceWeight: float = 1.0
    loadBalancerMemoryResourceWeight: float = 1.0
    loadBalancerBandwithInResourceWeight: float = 1.0
    loadBalancerBandwithOutResourceWeight: float = 1.0
    loadBalancerBundleUnloadMinThroughputThreshold: float = 10.0
    # the bandwidth limit in the load report, Gbit/s (0, Pulsar's blank: the speed of the
    # physical network interfaces, unknown on a machine without one: not counted)
    loadBalancerOverrideBrokerNicSpeedGbps: float = 0.0
    # > 0: the shedding interval in seconds instead (tests, small clusters)
    magnetarLoadBalancerSheddingIntervalSeconds: float = 0.0
    # the brokers of the cluster share magnetarDataDir (one host's directory, or a shared
    # file system mounted at the same path): a bundle's topics keep their messages when it
    # moves to another broker (docs/cluster.md)
    magnetarSharedStorage: bool = False
    # GlusterFS: the volume and FUSE options (storage/mounts.py GLUSTER_OPTIONS) stated as
    # set, comma-separated; a shared directory on GlusterFS is refused until they all are
    magnetarSharedStorageVolumeOptionsConfirmed: str = ""
    # shared storage: how often (seconds) a running broker reads its data directory's
    # storage identity again; gone or another one (the mount lost or replaced), it stops
    # serving and gives its bundles up (docs/deploy.md, "Storage identity"); 0: never
    magnetarStorageIdentityCheckSeconds: float = 2.0
    # a lookup whose bundle's owner refuses connections (killed; its session not expired
    # yet) waits this long for the bundle to be freed instead of redirecting the client to
    # the dead broker, and free bundles are not placed on a broker that refuses connections
    # (docs/cluster.md, "Failover time"); -1: metadataStoreSessionTimeoutMillis + 5000;
    # 0: never wait nor probe (as before)
    magnetarDeadOwnerLookupWaitMillis: int = -1

    # Transactions (docs/transactions.md): coordinators on the partitions of
    # persistent://pulsar/system/transaction_coordinator_assign, records in the metadata store
    transactionCoordinatorEnabled: bool = True  # Pulsar's default: false
    transactionMetadataStoreProviderClassName: str = ""  # accepted, ignored (one store)
    maxActiveTransactionsPerCoordinator: int = 0  # 0: no limit
    # Magnetar's own: the timeout of a transaction whose NewTxn gives none
    transactionTimeoutDefaultSeconds: int = 60

    # admin HTTP service: how often message rates (stats, metrics) are recomputed
    statsUpdateFrequencyInSecs: int = 60

    # Topics
    allowAutoTopicCreation: bool = True
    allowAutoTopicCreationType: str = "non-partitioned"
    defaultNumPartitions: int = 1
    # the most partitions an admin request may give a topic (0: no limit, Pulsar's default;
    # here a limit, so that a typo such as -p 40000000 cannot stall the broker)
    maxNumPartitionsPerPartitionedTopic: int = 1024
    brokerDeduplicationEnabled: bool = False
    brokerDeduplicationEntriesInterval: int = 1000
    brokerDeduplicationMaxNumberOfProducers: int = 10000
    brokerDeduplicationProducerInactivityTimeoutMinutes: int = 360
    brokerEntryMetadataInterceptors: str = ""
    # replicated subscriptions (geo-replication, `replicate_subscription_state`): snapshots
    # of positions across clusters, taken this often, dropped if not complete in time
    enableReplicatedSubscriptions: bool = True
    replicatedSubscriptionsSnapshotFrequencyMillis: int = 1000
    replicatedSubscriptionsSnapshotTimeoutSeconds: int = 30
    replicatedSubscriptionsSnapshotMaxCachedPerSubscription: int = 10
    exposingBrokerEntryMetadataToClientEnabled: bool = False
    delayedDeliveryEnabled: bool = True
    delayedDeliveryTickTimeMillis: int = 1000
    isAllowAutoUpdateSchemaEnabled: bool = True
    # namespace default; one of schema_compat.STRATEGIES (case-insensitive)
    schemaCompatibilityStrategy: str = "FULL"
    # true: a producer without a schema may not connect to a topic that has one
    isSchemaValidationEnforced: bool = False
    subscriptionKeySharedEnable: bool = True

    # Compaction: start one when a topic has more than this many bytes past its compacted
    # view (0: only when asked through the admin API)
    brokerServiceCompactionThresholdInBytes: int = 0

    # Dispatch
    dispatcherMaxReadBatchSize: int = 100
    dispatcherMaxReadSizeBytes: int = 5 * 1024 * 1024  # per read, at least one entry
    maxUnackedMessagesPerConsumer: int = 50000  # Shared and Key_Shared; 0: no limit
    # an entry that fails its checksum on read: skip it (acknowledged for every reader of
    # it, one error log, counted) rather than retry it with a back-off until an operator acts
    autoSkipNonRecoverableData: bool = False
    # transactions, the participant side (topics/transaction_buffer.py,
    # subscriptions/pending_acks.py): a topic's buffer snapshot is written after this many
    # transactions ended on it, or this long after the last (whichever comes first)
    transactionBufferSnapshotMaxTransactionCount: int = 1000
    transactionBufferSnapshotMinTimeInMillis: int = 5000
    # on a broker alone (no cluster), a transaction's commit or abort marker may wait this
    # long in its topic's write buffer for the next append, to be written and synced with
    # it (EndTxn does not wait for the marker's sync; its messages become visible once it
    # is synced: see docs/transactions.md); 0: each marker written and synced at once, alone
    magnetarTransactionMarkerLingerMillis: int = 10
    # accepted for compatibility: pending acks are stored with every change (no log)
    transactionPendingAckLogIndexMinLag: int = 500

    # Rate limits and consumer shares (namespace policies override them; docs in README,
    # "Multi-tenant limits"). 0 or less: no limit, as in Pulsar.
    maxPublishRatePerTopicInMessages: int = 0
    maxPublishRatePerTopicInBytes: int = 0
    dispatchThrottlingRatePerTopicInMsg: int = 0
    dispatchThrottlingRatePerTopicInByte: int = 0
    dispatchThrottlingRatePerSubscriptionInMsg: int = 0
    dispatchThrottlingRatePerSubscriptionInByte: int = 0
    # geo-replication: what each replicator (one topic to one remote cluster) may send
    dispatchThrottlingRatePerReplicatorInMsg: int = 0
    dispatchThrottlingRatePerReplicatorInByte: int = 0
    subscribeThrottlingRatePerConsumer: int = 0
    subscribeRatePeriodPerConsumerInSecond: int = 30
    # Shared and Key_Shared subscriptions: dispatch stops while a subscription's consumers
    # hold this many unacknowledged messages together, until acks halve it (0: no limit)
    maxUnackedMessagesPerSubscription: int = 200000
    maxSubscriptionsPerTopic: int = 0  # 0: no limit
    # durable subscriptions without consumers for this long are deleted (0: never)
    subscriptionExpirationTimeMinutes: int = 0
    subscriptionExpiryCheckIntervalInMinutes: int = 5
    # topics without producers and consumers for the max duration are deleted (Pulsar's
    # default is true; here false: topics stay until deleted unless a namespace or this
    # key asks, see inactive_topic_policies); the duration, -1: the check frequency
    brokerDeleteInactiveTopicsEnabled: bool = False
    brokerDeleteInactiveTopicsFrequencySeconds: int = 60
    brokerDeleteInactiveTopicsMode: str = "delete_when_no_subscriptions"
    brokerDeleteInactiveTopicsMaxInactiveDurationSeconds: int = -1

    # Retention, TTL and backlog quotas (namespace defaults)
    defaultRetentionTimeInMinutes: int = 0
    defaultRetentionSizeInMB: int = 0
    ttlDurationDefaultInSeconds: int = 0
    backlogQuotaDefaultLimitBytes: int = -1
    backlogQuotaDefaultLimitGB: float = -1.0  # deprecated in Pulsar; wins over Bytes when > 0
    backlogQuotaDefaultLimitSecond: int = -1
    backlogQuotaDefaultRetentionPolicy: str = "producer_request_hold"
    backlogQuotaCheckIntervalInSeconds: int = 60
    retentionCheckIntervalInSeconds: int = 120
    messageExpiryCheckIntervalInMinutes: int = 5

    # Managed ledger
    managedLedgerMaxEntriesPerLedger: int = 50000
    managedLedgerMaxSizePerLedgerMbytes: int = 2048
    managedLedgerMaxLedgerRolloverTimeMinutes: int = 240
    managedLedgerCacheSizeMB: int = 256
    managedLedgerCacheEvictionTimeThresholdMillis: int = 1000
    managedLedgerCursorPositionFlushSeconds: int = 1
    journalSyncData: bool = True

    # Metadata store (cluster mode). Empty metadataStoreUrl: standalone, the flat SQLite store
    # in the data directory; zk:host:2181,.../chroot (or sqlite:/path, memory:): cluster-wide
    # state (tenants, namespaces and their policies and permissions, partitioned topics,
    # schemas) in that store at Pulsar's paths. configurationMetadataStoreUrl: where the
    # /admin/... paths live, when not in metadataStoreUrl's store.
    metadataStoreUrl: str = ""
    configurationMetadataStoreUrl: str = ""
    # reconnect (Magnetar's default): a lost session is replaced, the broker's bundles taken
    # again through compare-and-set (docs/cluster.md); shutdown (Pulsar's default): stop
    zookeeperSessionExpiredPolicy: str = "reconnect"
    metadataStoreSessionTimeoutMillis: int = 30000
    metadataStoreOperationTimeoutSeconds: int = 30

    # Magnetar's own settings
    magnetarDataDir: str = "data/standalone"
    magnetarFsyncPolicy: str = "group"
    # auto: a new segment's name in its directory is made durable by the segment's own
    # first sync where the file system does that (ext4, XFS), else by an fsync of the
    # directory; always: the directory's fsync everywhere
    magnetarDirectoryFsync: str = "auto"
    magnetarMaxOpenFiles: int = 512
    # group policy: while the flusher thread idles, the event loop fdatasyncs a lone batch
    # itself (fewer thread hand-offs per unbatched send); false: always the thread
    magnetarSyncOnLoopWhenIdle: bool = True
    # ... except for this many seconds after an fdatasync (on the loop or the thread) took
    # longer than magnetarSyncOnLoopSlowMillis: a stalled disk then blocks the event loop
    # once, not on every send
    magnetarSyncOnLoopSlowMillis: float = 20.0
    magnetarSyncOnLoopBackoffSeconds: float = 10.0
    # A topic without producers or consumers for this long is unloaded (closed, dropped
    # from memory) and reloaded from storage on its next use; 0 keeps topics loaded.
    magnetarTopicUnloadIdleSeconds: int = 300
    # After this many topic loads, once loads pause (or at most every 10 s while they go
    # on), what they built is moved out of the cyclic garbage collector's reach
    # (gc.freeze, broker/heap.py): a full collection then walks only what is newer, so
    # 100,000 loaded topics do not stall the broker. With 10 x this many topics loaded,
    # each rate sample and /metrics build that made new caches is frozen too; 0 never freezes.
    magnetarGcFreezeAfterTopicLoads: int = 1000
    # While a broker runs, a thread of its own (the flusher, the readers) that wants the
    # interpreter from a busy event loop waits at most this long for each hand-back
    # (sys.setswitchinterval; Python's default is 5,000): broker/switching.py; 0 leaves it
    magnetarThreadSwitchIntervalMicros: int = 500
    # Retention, message TTL and backlog-quota eviction also apply to topics that are not
    # loaded: every this many seconds a sweep loads, in turn, the unloaded persistent
    # topics that may have work due, applies the same housekeeping as to loaded topics and
    # unloads them again; 0 turns the sweep off (unloaded topics then keep their data and
    # backlog until their next use, as in Pulsar).
    magnetarIdleTopicSweepIntervalSeconds: int = 60
    # At most this many topics are loaded per sweep (the rest wait for the next one, in
    # round-robin order); topics known to have nothing due are skipped without loading.
    magnetarIdleTopicSweepMaxTopics: int = 500
    # A full disk, as BookKeeper's read-only mode (diskUsageWarnThreshold,
    # diskUsageThreshold, diskUsageLwmThreshold, diskCheckInterval): the data directory's
    # file system is measured every magnetarDiskCheckIntervalMillis; past the warning
    # threshold (fraction used) one warning is logged; past the threshold, or with less
    # than magnetarDiskUsageMinFreeMB free (room for cursors and metadata), the broker is
    # read-only (new producers and sends on persistent topics are refused with the disk's
    # free space; reads and acks go on) until usage is below the low-water mark and the
    # floor is free again. A write refused for want of space (ENOSPC) also makes it read-only.
    magnetarDiskUsageWarnThreshold: float = 0.90
    magnetarDiskUsageThreshold: float = 0.95
    magnetarDiskUsageLwmThreshold: float = 0.90
    magnetarDiskUsageMinFreeMB: int = 100
    magnetarDiskCheckIntervalMillis: int = 500

    # Resources: descriptors, the web port, /metrics (issue 31; docs/operations.md).
    # At start the soft RLIMIT_NOFILE is raised to the hard limit and shared out: this
    # many apart, then at most half of the rest (and at most magnetarMaxOpenFiles) for
    # segment files, the remainder for connections (a quarter of it at most for HTTP).
    magnetarReservedFileDescriptors: int = 64
    # segment files unused for this long (between one and two periods) are closed; 0: never
    magnetarCloseIdleFilesSeconds: int = 60
    # the web port: its listen backlog, its open connections at most (past it a new one
    # waits in the backlog), and the largest request body (413 past it, every endpoint;
    # -1 as in Pulsar: no limit)
    httpServerAcceptQueueSize: int = 8192
    maxHttpServerConnections: int = 2048
    httpMaxRequestSize: int = 16 * 1024 * 1024
    # a request's headers must arrive within this many seconds, its body within the other
    # (from the end of the headers); the connection is closed otherwise (slowloris)
    magnetarHttpHeaderTimeoutSeconds: float = 10.0
    magnetarHttpBodyTimeoutSeconds: float = 30.0
    # /metrics: per-topic series (false: per-namespace sums, as Pulsar), per-consumer
    # series, and how long the per-topic part of a scrape is reused (0: built each scrape)
    exposeTopicLevelMetricsInPrometheus: bool = True
    exposeConsumerLevelMetricsInPrometheus: bool = False
    magnetarMetricsCacheSeconds: float = 5.0

    unknown_keys: list[str] = field(default_factory=list, repr=False)

    def inactive_topic_max_seconds(self) -> int:
        """brokerDeleteInactiveTopicsMaxInactiveDurationSeconds (unset: the frequency)."""
        duration = self.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds
        return duration if duration >= 0 else self.brokerDeleteInactiveTopicsFrequencySeconds

    def dead_owner_lookup_wait_s(self) -> float:
        """How long a lookup waits for a dead owner's bundle (0: never)."""
        wait = self.magnetarDeadOwnerLookupWaitMillis
        return (self.metadataStoreSessionTimeoutMillis + 5000 if wait < 0 else wait) / 1000

    @property
    def fsync_policy(self) -> str:
        """The effective fsync policy: ``journalSyncData=false`` turns syncing off."""
        return self.magnetarFsyncPolicy if self.journalSyncData else "never"

    @property
    def entry_metadata_enabled(self) -> bool:
        return bool(self.brokerEntryMetadataInterceptors.strip())

    def validate(self) -> None:
        for key in _CHOICES:
            _check_choice(key, getattr(self, key), "")
        if self.defaultNumberOfNamespaceBundles < 1:
            raise ConfigError("defaultNumberOfNamespaceBundles must be at least 1")
        if (self.replicatedSubscriptionsSnapshotFrequencyMillis < 1
                or self.replicatedSubscriptionsSnapshotTimeoutSeconds < 1):
            raise ConfigError("replicatedSubscriptionsSnapshotFrequencyMillis and "
                              "replicatedSubscriptionsSnapshotTimeoutSeconds must be at least 1")
        if self.replicatedSubscriptionsSnapshotMaxCachedPerSubscription < 3:
            raise ConfigError("replicatedSubscriptionsSnapshotMaxCachedPerSubscription must be at least 3")
        try:
            self.schemaCompatibilityStrategy = validate_strategy(self.schemaCompatibilityStrategy)
        except ValueError as exc:
            raise ConfigError(f"schemaCompatibilityStrategy: {exc}") from None
        if self.maxMessageSize <= 0:
            raise ConfigError("maxMessageSize must be positive")
        if self.dispatcherMaxReadSizeBytes <= 0:
            raise ConfigError("dispatcherMaxReadSizeBytes must be positive")
        if self.maxUnackedMessagesPerConsumer < 0:
            raise ConfigError("maxUnackedMessagesPerConsumer must be >= 0 (0: no limit)")
        if self.subscriptionExpiryCheckIntervalInMinutes < 1 or \
                self.brokerDeleteInactiveTopicsFrequencySeconds < 1:
            raise ConfigError("subscriptionExpiryCheckIntervalInMinutes and "
                              "brokerDeleteInactiveTopicsFrequencySeconds must be at least 1")
        for key in ("maxUnackedMessagesPerSubscription", "maxSubscriptionsPerTopic",
                    "subscriptionExpirationTimeMinutes"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key} must be >= 0 (0: no limit)")
        if self.subscribeRatePeriodPerConsumerInSecond < 1:
            raise ConfigError("subscribeRatePeriodPerConsumerInSecond must be at least 1")
        if self.defaultNumPartitions < 1:
            raise ConfigError("defaultNumPartitions must be at least 1")
        if self.maxNumPartitionsPerPartitionedTopic < 0:
            raise ConfigError("maxNumPartitionsPerPartitionedTopic must be >= 0 (0: no limit)")
        if self.magnetarTransactionMarkerLingerMillis < 0:
            raise ConfigError("magnetarTransactionMarkerLingerMillis must be >= 0 (0: no linger)")
        if self.magnetarThreadSwitchIntervalMicros < 0:
            raise ConfigError("magnetarThreadSwitchIntervalMicros must be >= 0 "
                              "(0: Python's own switch interval)")
        if self.magnetarGcFreezeAfterTopicLoads < 0:
            raise ConfigError("magnetarGcFreezeAfterTopicLoads must be >= 0 (0: never freeze)")
        if self.magnetarTopicUnloadIdleSeconds < 0:
            raise ConfigError("magnetarTopicUnloadIdleSeconds must be >= 0 (0: never unload)")
        if self.magnetarIdleTopicSweepIntervalSeconds < 0:
            raise ConfigError("magnetarIdleTopicSweepIntervalSeconds must be >= 0 (0: no sweep)")
        if self.magnetarIdleTopicSweepMaxTopics < 1:
            raise ConfigError("magnetarIdleTopicSweepMaxTopics must be at least 1")
        if not (0 < self.magnetarDiskUsageLwmThreshold <= self.magnetarDiskUsageThreshold <= 1
                and 0 < self.magnetarDiskUsageWarnThreshold <= 1):
            raise ConfigError("magnetarDiskUsageWarnThreshold, magnetarDiskUsageThreshold and "
                              "magnetarDiskUsageLwmThreshold must be fractions in (0, 1], the "
                              "low-water mark at most the threshold")
        if self.magnetarDiskUsageMinFreeMB < 0 or self.magnetarDiskCheckIntervalMillis <= 0:
            raise ConfigError("magnetarDiskUsageMinFreeMB must be >= 0 and "
                              "magnetarDiskCheckIntervalMillis positive")
        if self.magnetarSyncOnLoopSlowMillis < 0 or self.magnetarSyncOnLoopBackoffSeconds < 0:
            raise ConfigError("magnetarSyncOnLoopSlowMillis and magnetarSyncOnLoopBackoffSeconds must be >= 0")
        if self.magnetarReservedFileDescriptors < 0 or self.magnetarCloseIdleFilesSeconds < 0:
            raise ConfigError("magnetarReservedFileDescriptors and magnetarCloseIdleFilesSeconds "
                              "must be >= 0")
        if self.magnetarMaxOpenFiles < 1:
            raise ConfigError("magnetarMaxOpenFiles must be at least 1")
        if self.httpServerAcceptQueueSize < 1 or self.maxHttpServerConnections < 0:
            raise ConfigError("httpServerAcceptQueueSize must be positive, "
                              "maxHttpServerConnections >= 0 (0: no cap)")
        if not (self.magnetarHttpHeaderTimeoutSeconds > 0 and self.magnetarHttpBodyTimeoutSeconds > 0):
            raise ConfigError("magnetarHttpHeaderTimeoutSeconds and magnetarHttpBodyTimeoutSeconds "
                              "must be positive")
        if self.magnetarMetricsCacheSeconds < 0:
            raise ConfigError("magnetarMetricsCacheSeconds must be >= 0")
        if self.keepAliveIntervalSeconds <= 0:
            raise ConfigError("keepAliveIntervalSeconds must be positive")
        try:
            Listeners(self.advertisedListeners, self.internalListenerName)
        except ListenerConfigError as exc:
            raise ConfigError(str(exc)) from None
        for key in ("metadataStoreUrl", "configurationMetadataStoreUrl"):
            if getattr(self, key):
                try:
                    parse_store_url(getattr(self, key))
                except InvalidUrlError as exc:
                    raise ConfigError(str(exc).replace("metadataStoreUrl", key, 1)) from None
        if self.zookeeperSessionExpiredPolicy.strip().lower() not in ("shutdown", "reconnect"):
            raise ConfigError("zookeeperSessionExpiredPolicy must be shutdown or reconnect, not "
                              f"{self.zookeeperSessionExpiredPolicy!r}")
        if self.metadataStoreSessionTimeoutMillis <= 0 or self.metadataStoreOperationTimeoutSeconds <= 0:
            raise ConfigError("metadataStoreSessionTimeoutMillis and "
                              "metadataStoreOperationTimeoutSeconds must be positive")
        if self.magnetarDeadOwnerLookupWaitMillis < -1:
            raise ConfigError("magnetarDeadOwnerLookupWaitMillis must be -1 (the session "
                              "timeout + 5 s), 0 (never wait) or positive")
        if self.loadBalancerLoadSheddingStrategy.strip() not in SHEDDING_STRATEGIES:
            raise ConfigError(
                f"loadBalancerLoadSheddingStrategy {self.loadBalancerLoadSheddingStrategy!r} "
                f"is not implemented; use one of {', '.join(SHEDDING_STRATEGIES)}")
        if not 0 <= self.loadBalancerHistoryResourcePercentage < 1:
            raise ConfigError("loadBalancerHistoryResourcePercentage must be in [0, 1)")
        for key in ("loadBalancerCPUResourceWeight", "loadBalancerMemoryResourceWeight",
                    "loadBalancerBandwithInResourceWeight",
                    "loadBalancerBandwithOutResourceWeight",
                    "loadBalancerBundleUnloadMinThroughputThreshold"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key} must be >= 0")
        if self.loadBalancerOverrideBrokerNicSpeedGbps < 0:
            raise ConfigError("loadBalancerOverrideBrokerNicSpeedGbps must be >= 0 (0: the "
                              "network interfaces' speed)")
        if self.statsUpdateFrequencyInSecs <= 0:
            raise ConfigError("statsUpdateFrequencyInSecs must be positive")
        if not -1 <= self.webServicePort <= 65535:
            raise ConfigError(f"webServicePort must be a TCP port (or -1: none), not {self.webServicePort}")
        if not -1 <= self.brokerServicePort <= 65535:
            raise ConfigError(f"brokerServicePort must be a TCP port, not {self.brokerServicePort}")
        try:
            self.validate_security()
        except SecurityConfigError as exc:
            raise ConfigError(str(exc)) from None

    def set(self, key: str, raw: str, where: str = "") -> bool:
        """Set ``key`` from its text form; returns False for a key we do not implement."""
        fields = {f.name: f for f in dataclasses.fields(self) if f.name != "unknown_keys"}
        f = fields.get(key)
        if f is None:
            return False
        raw = raw.strip()
        if raw:  # blank: keep the default, as Pulsar does
            setattr(self, key, _check_choice(key, _convert(key, f.type, raw, where), where))
        return True

    def suggest(self, key: str) -> str | None:
        """The implemented key ``key`` is most likely a typo of, if any: one or two
        characters away (a longer difference is more likely another Pulsar key)."""
        names = [f.name for f in dataclasses.fields(self) if f.name != "unknown_keys"]
        close = [n for n in difflib.get_close_matches(key, names, n=3, cutoff=0.85)
                 if abs(len(n) - len(key)) <= 2]
        return close[0] if close else None

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: Any) -> BrokerConfig:
        """Read a Pulsar-style ``key=value`` file, then apply keyword overrides."""
        config = cls()
        if path is not None:
            config._read_file(Path(path))
        for key, value in overrides.items():
            if value is None:
                continue
            if not hasattr(config, key):
                raise ConfigError(f"unknown setting {key!r}")
            setattr(config, key, value)
        if config.backlogQuotaDefaultLimitGB > 0:
            config.backlogQuotaDefaultLimitBytes = int(config.backlogQuotaDefaultLimitGB * 1024**3)
        config.validate()
        return config

    def _read_file(self, path: Path) -> None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        for lineno, line in _logical_lines(text):
            key, value = _split_property(line)
            if not key:
                raise ConfigError(f"{path}:{lineno}: expected key=value, got {line!r}")
            if not self.set(key, value, f"{path}:{lineno}") and key not in self.unknown_keys:
                self.unknown_keys.append(key)
                guess = self.suggest(key)
                if guess is not None:
                    log.warning("%s:%d: unknown key %s, did you mean %s? (ignored)",
                                path, lineno, key, guess)
        if self.unknown_keys:
            log.warning(
                "config %s: %d keys not implemented by magnetar, ignored: %s",
                path,
                len(self.unknown_keys),
                ", ".join(self.unknown_keys),
            )


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each non-comment line, continuations joined."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for lineno, physical in enumerate(text.splitlines(), 1):
        line = physical.strip() if not pending else physical.lstrip()
        if not pending:
            if not line or line[0] in "#!":
                continue
            start = lineno
        # an odd number of trailing backslashes continues the line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending.append(line[:-1])
            continue
        pending.append(line)
        out.append((start, "".join(pending)))
        pending = []
    if pending:
        out.append((start, "".join(pending)))
    return out


def _split_property(line: str) -> tuple[str, str]:
    """Split at the first ``=`` or ``:`` (or, failing both, whitespace)."""
    cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
    if cut >= 0:
        return line[:cut].strip(), line[cut + 1 :]
    parts = line.split(None, 1)
    if len(parts) == 2:
        return parts[0], parts[1]
    return "", line


#: string settings with a fixed set of values
_CHOICES = {
    "allowAutoTopicCreationType": ("non-partitioned", "partitioned"),
    "magnetarFsyncPolicy": ("always", "group", "never"),
    "magnetarDirectoryFsync": ("auto", "always"),
    "brokerDeleteInactiveTopicsMode": (
        "delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"),
    "backlogQuotaDefaultRetentionPolicy": (
        "producer_request_hold", "producer_exception", "consumer_backlog_eviction"),
}


def _check_choice(key: str, value: Any, where: str) -> Any:
    """``value`` if ``key`` takes any value or this is one of its values, else ConfigError
    (naming the file and line when ``where`` says them)."""
    allowed = _CHOICES.get(key)
    if allowed is not None and value not in allowed:
        prefix = f"{where}: " if where else ""
        raise ConfigError(f"{prefix}{key} must be one of {', '.join(allowed)}, not {value!r}")
    return value


_TYPE_WORDS = {"bool": "true or false", "int": "an integer", "float": "a number"}


def _convert(key: str, type_name: Any, raw: str, where: str) -> Any:
    type_name = type_name if isinstance(type_name, str) else type_name.__name__
    try:
        if type_name == "bool":
            lowered = raw.lower()
            if lowered not in ("true", "false"):
                raise ValueError
            return lowered == "true"
        if type_name == "int":
            return int(raw)
        if type_name == "float":
            return float(raw)
        return raw
    except ValueError:
        prefix = f"{where}: " if where else ""
        expected = _TYPE_WORDS.get(type_name, type_name)
        raise ConfigError(f"{prefix}{key} expects {expected}, got {raw!r}") from None
