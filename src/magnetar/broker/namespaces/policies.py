"""Namespace policies over broker defaults: retention, message TTL, backlog quota,
deduplication, auto topic creation, producer and consumer limits, schema compatibility.

A namespace may set any of these (the admin layer calls ``set``); whatever it leaves
unset falls back to the broker's ``broker.conf`` defaults, as in Pulsar. Policies live in the
metadata store under ``policies/{tenant}/{namespace}`` so they survive restarts.

A topic may set some of them too (topic-level policies, ``topic-policies/{topic}``,
`set_topic_async`), over its namespace's: `for_topic` is what applies to one topic.

They are read from the store once, at start, and kept in memory: `get` never touches the
store (in cluster mode, changes made through other brokers arrive through the store's
``watch``). A change applies in memory at once (to loaded topics too: they read ``get``) and is
stored off the loop, in order (`KeyWriter`); `set_async` / `clear` return after it is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from magnetar.broker.config.broker_config import BrokerConfig, ConfigError
from magnetar.broker.namespaces.key_writes import KeyWriter, Write, written
from magnetar.broker.topic_name import TopicName

BACKLOG_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
TOPIC_TYPES = ("non-partitioned", "partitioned")
INACTIVE_TOPIC_DELETE_MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")
SCHEMA_COMPATIBILITY_STRATEGIES = (
    "UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
    "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE",
)


@dataclass(frozen=True)
class Policies:
    """The effective policies of one namespace (-1 means unlimited, as in Pulsar)."""

    retention_time_minutes: int
    retention_size_mb: int
    message_ttl_seconds: int
    backlog_quota_limit_bytes: int
    backlog_quota_limit_seconds: int
    backlog_quota_policy: str
    deduplication_enabled: bool = False
    allow_auto_topic_creation: bool = True
    auto_topic_creation_type: str = "non-partitioned"
    default_num_partitions: int = 1
    max_producers_per_topic: int = 0  # 0: no limit
    max_consumers_per_topic: int = 0  # 0: no limit
    # None: the broker's default strategy (read by the schema compatibility check)
    schema_compatibility_strategy: str | None = None
    # the clusters the namespace is replicated to, as set (None: this broker's cluster);
    # (the replication manager runs a replicator per other cluster listed)
    replication_clusters: list[str] | None = None
    # publishMaxMessageRate: messages and payload bytes per second per topic (0 or less:
    # no limit); the broker stops reading from producers' connections while over
    publish_rate_msgs: int = 0
    publish_rate_bytes: int = 0
    # dispatchRate (per topic, all its subscriptions together) and subscriptionDispatchRate
    # (per subscription): messages and bytes per period of seconds (0 or less: no limit)
    dispatch_rate_msgs: int = 0
    dispatch_rate_bytes: int = 0
    dispatch_rate_period: int = 1
    subscription_dispatch_rate_msgs: int = 0
    subscription_dispatch_rate_bytes: int = 0
    subscription_dispatch_rate_period: int = 1
    # replicatorDispatchRate: what each geo-replicator of a topic may send to its remote
    # cluster (messages and bytes per period; 0 or less: no limit)
    replicator_dispatch_rate_msgs: int = 0
    replicator_dispatch_rate_bytes: int = 0
    replicator_dispatch_rate_period: int = 1
    # subscribeRate: subscribes per consumer (client host, consumer name, id) and period
    subscribe_rate: int = 0
    subscribe_rate_period: int = 30
    # unacknowledged messages a Shared / Key_Shared consumer, and a subscription's
    # consumers together, may hold before dispatch to them stops (0: no limit)
    max_unacked_messages_per_consumer: int = 50000
    max_unacked_messages_per_subscription: int = 200000
    # subscriptions a topic may have (0: no limit)
    max_subscriptions_per_topic: int = 0
    # durable subscriptions without consumers this long are deleted (0: never)
    subscription_expiration_time_minutes: int = 0
    # inactive_topic_policies: topics without clients this long are deleted (inactivity.py)
    inactive_topic_delete_while_inactive: bool = False
    inactive_topic_delete_mode: str = "delete_when_no_subscriptions"
    inactive_topic_max_inactive_seconds: int = 60

    @property
    def retention_time_seconds(self) -> int:
        return self.retention_time_minutes * 60 if self.retention_time_minutes >= 0 else -1

    @property
    def retention_size_bytes(self) -> int:
        return self.retention_size_mb * 1024 * 1024 if self.retention_size_mb >= 0 else -1


def broker_defaults(config: BrokerConfig) -> Policies:
    return Policies(
        retention_time_minutes=config.defaultRetentionTimeInMinutes,
        retention_size_mb=config.defaultRetentionSizeInMB,
        message_ttl_seconds=config.ttlDurationDefaultInSeconds,
        backlog_quota_limit_bytes=config.backlogQuotaDefaultLimitBytes,
        backlog_quota_limit_seconds=config.backlogQuotaDefaultLimitSecond,
        backlog_quota_policy=config.backlogQuotaDefaultRetentionPolicy,
        deduplication_enabled=config.brokerDeduplicationEnabled,
        allow_auto_topic_creation=config.allowAutoTopicCreation,
        auto_topic_creation_type=config.allowAutoTopicCreationType,
        default_num_partitions=config.defaultNumPartitions,
        publish_rate_msgs=config.maxPublishRatePerTopicInMessages,
        publish_rate_bytes=config.maxPublishRatePerTopicInBytes,
        dispatch_rate_msgs=config.dispatchThrottlingRatePerTopicInMsg,
        dispatch_rate_bytes=config.dispatchThrottlingRatePerTopicInByte,
        subscription_dispatch_rate_msgs=config.dispatchThrottlingRatePerSubscriptionInMsg,
        subscription_dispatch_rate_bytes=config.dispatchThrottlingRatePerSubscriptionInByte,
        replicator_dispatch_rate_msgs=config.dispatchThrottlingRatePerReplicatorInMsg,
        replicator_dispatch_rate_bytes=config.dispatchThrottlingRatePerReplicatorInByte,
        subscribe_rate=config.subscribeThrottlingRatePerConsumer,
        subscribe_rate_period=config.subscribeRatePeriodPerConsumerInSecond,
        max_unacked_messages_per_consumer=config.maxUnackedMessagesPerConsumer,
        max_unacked_messages_per_subscription=config.maxUnackedMessagesPerSubscription,
        max_subscriptions_per_topic=config.maxSubscriptionsPerTopic,
        subscription_expiration_time_minutes=config.subscriptionExpirationTimeMinutes,
        inactive_topic_delete_while_inactive=config.brokerDeleteInactiveTopicsEnabled,
        inactive_topic_delete_mode=config.brokerDeleteInactiveTopicsMode,
        inactive_topic_max_inactive_seconds=config.inactive_topic_max_seconds(),
    )


_FIELDS = {f.name for f in fields(Policies)}
#: where a topic's own policies are kept (flat key prefix; the full topic name follows)
TOPIC_PREFIX = "topic-policies/"


class PolicyStore:
    """Reads and writes namespace policies; caches the effective values per namespace."""

    def __init__(self, metadata: Any, config: BrokerConfig, write: Write | None = None) -> None:
        self.metadata = metadata
        self.config = config
        self._writes = KeyWriter(metadata, write)
        self._cache: dict[str, Policies] = {}
        # moves on every change (here or, in a cluster, through another broker): a loaded
        # topic compares it with the one it applied (`TopicLimits.refresh`)
        self.generation = 0
        # told the namespace whose policies (or one of whose topics') changed, so that
        # loaded topics apply them now rather than at their next send or dispatch
        self.on_change: Callable[[str], None] | None = None
        # what each namespace sets itself, as stored (read once: this is the only writer)
        self._overrides: dict[str, dict[str, Any]] = {
            key[len("policies/"):]: dict(value) for key, value in metadata.list("policies/").items()
        }
        # topic-level policies (Pulsar 2.7+): what a topic (a partitioned topic for all its
        # partitions) sets over its namespace's, by full topic name
        self._topic_overrides: dict[str, dict[str, Any]] = {
            key[len(TOPIC_PREFIX):]: dict(value)
            for key, value in metadata.list(TOPIC_PREFIX).items() if value}
        self._topic_cache: dict[str, Policies] = {}
        if hasattr(metadata, "watch"):  # cluster mode: changes made through other brokers
            metadata.watch("policies/", self._changed)
            metadata.watch(TOPIC_PREFIX, self._topic_changed)

    def _changed(self, key: str, value: Any) -> None:
        namespace = key[len("policies/"):]
        if value:
            self._overrides[namespace] = dict(value)
        else:
            self._overrides.pop(namespace, None)
        self._cache.pop(namespace, None)
        self._topic_cache.clear()
        self._changed_in(namespace)

    def _topic_changed(self, key: str, value: Any) -> None:
        topic = key[len(TOPIC_PREFIX):]
        if value:
            self._topic_overrides[topic] = dict(value)
        else:
            self._topic_overrides.pop(topic, None)
        self._topic_cache.clear()
        self._changed_in(TopicName.parse(topic).namespace)

    def _changed_in(self, namespace: str) -> None:
        self.generation += 1
        if self.on_change is not None:
            self.on_change(namespace)

    def overrides(self, namespace: str) -> dict[str, Any]:
        """What the namespace itself sets (empty when it follows the broker defaults)."""
        return dict(self._overrides.get(namespace) or {})

    def get(self, namespace: str) -> Policies:
        cached = self._cache.get(namespace)
        if cached is None:
            values = asdict(broker_defaults(self.config))
            values.update(self.overrides(namespace))
            cached = self._cache[namespace] = Policies(**values)
        return cached

    def for_topic(self, topic: TopicName) -> Policies:
        """The policies that apply to one topic: its own (those of its partitioned topic,
        for a partition) over its namespace's."""
        if not self._topic_overrides:
            return self.get(topic.namespace)
        key = str(topic)
        cached = self._topic_cache.get(key)
        if cached is None:
            own = self._topic_overrides.get(str(topic.partitioned_base))
            cached = self.get(topic.namespace)
            if own:
                cached = replace(cached, **own)
            self._topic_cache[key] = cached
        return cached

    def topic_overrides(self, topic: TopicName) -> dict[str, Any]:
        """What a topic (or partitioned topic) sets itself."""
        return dict(self._topic_overrides.get(str(topic.partitioned_base)) or {})

    async def set_topic_async(self, topic: TopicName, **changes: Any) -> Policies:
        """Set (value None: remove) topic-level policies of ``topic`` (of its partitioned
        topic, for a partition): in effect at once, returns once stored."""
        name = str(topic.partitioned_base)
        stored = self._update(self._topic_overrides, name, TOPIC_PREFIX + name, changes)
        self._topic_cache.clear()
        self._changed_in(topic.namespace)
        await written(stored)
        return self.for_topic(topic)

    async def clear_topic(self, topic: TopicName) -> None:
        """Forget a deleted topic's own policies."""
        name = str(topic.partitioned_base)
        if self._topic_overrides.pop(name, None) is not None:
            self._topic_cache.clear()
            self._changed_in(topic.namespace)
            await written(self._writes.delete(TOPIC_PREFIX + name))

    def set(self, namespace: str, **changes: Any) -> Policies:
        """Set (or, with value None, clear) namespace-level policies: in effect at once,
        stored off the loop (`set_async` waits for that)."""
        return self._set(namespace, changes)[0]

    async def set_async(self, namespace: str, **changes: Any) -> Policies:
        """`set`, returning once the change is stored."""
        policies, stored = self._set(namespace, changes)
        await written(stored)
        return policies

    def _set(self, namespace: str, changes: dict[str, Any]) -> tuple[Policies, Any]:
        stored = self._update(self._overrides, namespace, f"policies/{namespace}", changes)
        self._cache.pop(namespace, None)
        self._topic_cache.clear()
        self._changed_in(namespace)
        return self.get(namespace), stored

    def _update(self, table: dict[str, dict[str, Any]], name: str, key: str,
                changes: dict[str, Any]) -> Any:
        """Merge ``changes`` (value None: remove) into ``table[name]`` (a namespace's or a
        topic's own settings), stored at ``key`` (deleted there once nothing is left);
        returns the pending write."""
        self._check(changes)
        current = dict(table.get(name) or {})
        for field, value in changes.items():
            if value is None:
                current.pop(field, None)
            else:
                current[field] = value
        if current:
            table[name] = current
            return self._writes.put(key, dict(current))
        table.pop(name, None)
        return self._writes.delete(key)

    @staticmethod
    def _check(changes: dict[str, Any]) -> None:
        """ConfigError for an unknown policy or a value outside its choices."""
        unknown = set(changes) - _FIELDS
        if unknown:
            raise ConfigError(f"unknown namespace policies: {', '.join(sorted(unknown))}")
        policy = changes.get("backlog_quota_policy")
        if policy is not None and policy not in BACKLOG_POLICIES:
            raise ConfigError(f"backlog_quota_policy must be one of {', '.join(BACKLOG_POLICIES)}")
        mode = changes.get("inactive_topic_delete_mode")
        if mode is not None and mode not in INACTIVE_TOPIC_DELETE_MODES:
            raise ConfigError("inactiveTopicDeleteMode must be one of "
                              + ", ".join(INACTIVE_TOPIC_DELETE_MODES))
        kind = changes.get("auto_topic_creation_type")
        if kind is not None and kind not in TOPIC_TYPES:
            raise ConfigError(f"auto_topic_creation_type must be one of {', '.join(TOPIC_TYPES)}")
        strategy = changes.get("schema_compatibility_strategy")
        if strategy is not None and strategy not in SCHEMA_COMPATIBILITY_STRATEGIES:
            raise ConfigError(
                "schema_compatibility_strategy must be one of "
                + ", ".join(SCHEMA_COMPATIBILITY_STRATEGIES)
            )

    async def clear(self, namespace: str) -> None:
        """Forget every namespace-level policy (the namespace was deleted or created anew);
        returns once that is stored."""
        self._overrides.pop(namespace, None)
        self._cache.pop(namespace, None)
        self._topic_cache.clear()
        self._changed_in(namespace)
        await written(self._writes.delete(f"policies/{namespace}"))
