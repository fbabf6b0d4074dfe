"""Pulsar's ``Policies`` JSON (the body of ``PUT /admin/v2/namespaces/{tenant}/{namespace}``)
read into what Magnetar applies: namespace policy changes, permissions, replication clusters.

``pulsar-admin namespaces create`` sends a whole ``Policies`` document, every field at its
default unless set; a script may send only some fields. Each field Magnetar implements is
type-checked (400 with the field's name) and applied: ``auth_policies`` (``namespace_auth``
and ``destination_auth`` grants), ``replication_clusters``, ``retention_policies``,
``message_ttl_in_seconds``, ``backlog_quota_map``, ``deduplicationEnabled``,
``autoTopicCreationOverride``, ``schema_compatibility_strategy``,
``max_producers_per_topic``, ``max_consumers_per_topic``,
``max_unacked_messages_per_consumer``, ``max_unacked_messages_per_subscription``,
``max_subscriptions_per_topic``, ``subscription_expiration_time_minutes``,
``inactive_topic_policies``, and this cluster's entry of
``publishMaxMessageRate``, ``topicDispatchRate`` (or ``clusterDispatchRate``),
``subscriptionDispatchRate``, ``replicatorDispatchRate`` and ``clusterSubscribeRate``
(entries for other clusters do
not apply here). A Pulsar field Magnetar does not
implement is accepted at its default (empty, null, false) and refused with 412 naming the
field otherwise, rather than silently dropped. Fields Pulsar does not know are ignored, as
Pulsar's JSON reader ignores them. ``bundles`` is accepted as given (Magnetar serves a
namespace as one bundle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from magnetar.admin.routing import RestError, expect
from magnetar.broker.namespaces.policies import (
    BACKLOG_POLICIES,
    INACTIVE_TOPIC_DELETE_MODES,
    SCHEMA_COMPATIBILITY_STRATEGIES,
    TOPIC_TYPES,
    Policies,
)
from magnetar.broker.security.authorization import ACTIONS

#: Pulsar Policies fields Magnetar does not implement, with the value that means "unset"
_UNSUPPORTED_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "latency_stats_sample_rate": ({}, None), "persistence": (None,),
    "autoSubscriptionCreationOverride": (None,),
    "encryption_required": (False, None), "delayed_delivery_policies": (None,),
    "subscription_auth_mode": ("None", None),
    "max_consumers_per_subscription": (None, 0),
    "compaction_threshold": (None, 0), "offload_threshold": (-1, None),
    "offload_deletion_lag_ms": (None,), "max_topics_per_namespace": (None, 0),
    "is_allow_auto_update_schema": (None, True), "schema_validation_enforced": (False, None),
    "offload_policies": (None,), "deduplicationSnapshotIntervalSeconds": (None,),
    "subscription_types_enabled": ([], None), "properties": ({}, None),
    "resource_group_name": (None, ""), "allowed_clusters": ([], None), "entryFilters": (None,),
    "migrated": (False, None), "dispatcherPauseOnAckStatePersistentEnabled": (False, None),
    "deleted": (False, None),
}
#: accepted whatever they say (deprecated, or not a policy of a namespace served as one bundle)
_IGNORED = ("bundles", "schema_auto_update_compatibility_strategy")


@dataclass
class NamespaceBody:
    """What a Policies body asks for."""

    changes: dict[str, Any] = field(default_factory=dict)
    namespace_grants: dict[str, list[str]] = field(default_factory=dict)
    topic_grants: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    replication_clusters: list[str] | None = None


def _int(value: Any, what: str) -> int:
    return int(expect(value, int, what))


_JAVA_INT_MAX = 2**31 - 1
_JAVA_LONG_MAX = 2**63 - 1


def number(body: dict[str, Any], key: str, default: int, limit: int = _JAVA_INT_MAX,
           where: str = "") -> int:
    """``body[key]`` (``default`` when absent), an integer within the Java type Pulsar
    gives the field (``int`` unless ``limit`` says ``long``): 400 otherwise."""
    what = f"{where}.{key}" if where else key
    value = int(expect(body.get(key, default), int, what))
    if not -limit - 1 <= value <= limit:
        raise RestError(400, f"{what}: {value} is out of range")
    return value


def publish_rate_doc(p: Policies) -> dict[str, int]:
    """Pulsar's ``PublishRate`` of ``p`` (0 or less: no limit)."""
    return {"publishThrottlingRateInMsg": p.publish_rate_msgs,
            "publishThrottlingRateInByte": p.publish_rate_bytes}


def read_publish_rate(value: Any, where: str = "PublishRate") -> dict[str, int]:
    """A ``PublishRate`` body as policy changes."""
    body = expect(value, dict, where)
    return {"publish_rate_msgs": number(body, "publishThrottlingRateInMsg", -1, where=where),
            "publish_rate_bytes": number(body, "publishThrottlingRateInByte", -1,
                                         _JAVA_LONG_MAX, where)}


def dispatch_rate_doc(p: Policies, prefix: str) -> dict[str, Any]:
    """Pulsar's ``DispatchRate`` of ``p``: ``prefix`` ``dispatch_rate`` (the topic's) or
    ``subscription_dispatch_rate`` or
    ``replicator_dispatch_rate`` (0 or less: no limit)."""
    return {"dispatchThrottlingRateInMsg": getattr(p, f"{prefix}_msgs"),
            "dispatchThrottlingRateInByte": getattr(p, f"{prefix}_bytes"),
            "relativeToPublishRate": False,
            "ratePeriodInSecond": getattr(p, f"{prefix}_period")}


def read_dispatch_rate(value: Any, prefix: str, where: str = "DispatchRate") -> dict[str, Any]:
    """A ``DispatchRate`` body as policy changes of ``prefix`` (see `dispatch_rate_doc`):
    400 for a wrong type, 412 for a period under a second or a rate relative to the
    publish rate (not implemented)."""
    body = expect(value, dict, where)
    period = number(body, "ratePeriodInSecond", 1, where=where)
    if period < 1:
        raise RestError(412, f"{where}.ratePeriodInSecond must be at least 1")
    if expect(body.get("relativeToPublishRate", False), bool, f"{where}.relativeToPublishRate"):
        raise RestError(412, f"{where}.relativeToPublishRate is not supported by Magnetar")
    return {f"{prefix}_msgs": number(body, "dispatchThrottlingRateInMsg", -1, where=where),
            f"{prefix}_bytes": number(body, "dispatchThrottlingRateInByte", -1,
                                      _JAVA_LONG_MAX, where),
            f"{prefix}_period": period}


def subscribe_rate_doc(p: Policies) -> dict[str, int]:
    """Pulsar's ``SubscribeRate`` of ``p`` (0 or less: no limit)."""
    return {"subscribeThrottlingRatePerConsumer": p.subscribe_rate,
            "ratePeriodInSecond": p.subscribe_rate_period}


def read_subscribe_rate(value: Any, where: str = "SubscribeRate") -> dict[str, int]:
    """A ``SubscribeRate`` body as policy changes (412 for a period under a second)."""
    body = expect(value, dict, where)
    period = number(body, "ratePeriodInSecond", 30, where=where)
    if period < 1:
        raise RestError(412, f"{where}.ratePeriodInSecond must be at least 1")
    return {"subscribe_rate": number(body, "subscribeThrottlingRatePerConsumer", -1, where=where),
            "subscribe_rate_period": period}


def inactive_topic_policies_doc(p: Policies) -> dict[str, Any]:
    """Pulsar's ``InactiveTopicPolicies`` of ``p``."""
    return {"inactiveTopicDeleteMode": p.inactive_topic_delete_mode,
            "maxInactiveDurationSeconds": p.inactive_topic_max_inactive_seconds,
            "deleteWhileInactive": p.inactive_topic_delete_while_inactive}


def retention_doc(p: Policies) -> dict[str, int]:
    """Pulsar's ``RetentionPolicies`` of ``p`` (-1: unlimited)."""
    return {"retentionTimeInMinutes": p.retention_time_minutes,
            "retentionSizeInMB": p.retention_size_mb}


#: the Policies fields of topic auto-creation
AUTO_TOPIC_CREATION_FIELDS = ("allow_auto_topic_creation", "auto_topic_creation_type",
                              "default_num_partitions")


def backlog_quota_doc(p: Policies, own: dict[str, Any] | None = None) -> dict[str, Any]:
    """Pulsar's backlog quota map of ``p`` by type: with ``own`` (what a namespace or topic
    sets itself), the quotas it sets; else those that apply (a size limit of 0 or more, an
    age limit over 0)."""
    quotas: dict[str, Any] = {}
    if (p.backlog_quota_limit_bytes >= 0 if own is None
            else "backlog_quota_limit_bytes" in own):
        quotas["destination_storage"] = {"limitSize": p.backlog_quota_limit_bytes,
                                         "limitTime": -1, "policy": p.backlog_quota_policy}
    if (p.backlog_quota_limit_seconds > 0 if own is None
            else "backlog_quota_limit_seconds" in own):
        quotas["message_age"] = {"limitSize": -1, "limitTime": p.backlog_quota_limit_seconds,
                                 "policy": p.backlog_quota_policy}
    return quotas


def auto_topic_creation_doc(p: Policies) -> dict[str, Any]:
    """Pulsar's ``AutoTopicCreationOverride`` of ``p``."""
    doc: dict[str, Any] = {"allowAutoTopicCreation": p.allow_auto_topic_creation,
                           "topicType": p.auto_topic_creation_type}
    if p.auto_topic_creation_type == "partitioned":
        doc["defaultNumPartitions"] = p.default_num_partitions
    return doc


def read_inactive_topic_policies(value: Any, where: str = "InactiveTopicPolicies"
                                 ) -> dict[str, Any]:
    """An ``InactiveTopicPolicies`` body as policy changes (400: a wrong type or an
    unknown mode; the duration's sign is `check_values`' 412)."""
    body = expect(value, dict, where)
    mode = body.get("inactiveTopicDeleteMode", "delete_when_no_subscriptions")
    if mode not in INACTIVE_TOPIC_DELETE_MODES:
        raise RestError(400, f"{where}.inactiveTopicDeleteMode must be one of "
                             + ", ".join(INACTIVE_TOPIC_DELETE_MODES))
    return {"inactive_topic_delete_mode": mode,
            "inactive_topic_max_inactive_seconds": number(body, "maxInactiveDurationSeconds",
                                                          0, where=where),
            "inactive_topic_delete_while_inactive": expect(
                body.get("deleteWhileInactive", False), bool, f"{where}.deleteWhileInactive")}


def _this_cluster(value: Any, cluster: str, what: str) -> Any:
    """The entry of a per-cluster map (Pulsar keys rate policies by cluster) for this
    broker's cluster; None when it has none (other clusters' entries do not apply here)."""
    return expect(value, dict, what).get(cluster)


def check_values(changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` if their values are ones Pulsar accepts, else ``RestError(412)`` as
    Pulsar answers: the same rule for a namespace's ``PUT`` body and for each policy's own
    endpoint (a negative message TTL, a negative producer or consumer limit)."""
    ttl = changes.get("message_ttl_seconds")
    if ttl is not None and not 0 <= ttl <= _JAVA_INT_MAX:
        raise RestError(412, f"Invalid value for message TTL: {ttl} (seconds, 0 or more)")
    for key, what in (("max_producers_per_topic", "maxProducersPerTopic"),
                      ("max_consumers_per_topic", "maxConsumersPerTopic"),
                      ("max_unacked_messages_per_consumer", "maxUnackedMessagesPerConsumer"),
                      ("max_unacked_messages_per_subscription",
                       "maxUnackedMessagesPerSubscription"),
                      ("max_subscriptions_per_topic", "maxSubscriptionsPerTopic"),
                      ("subscription_expiration_time_minutes", "subscriptionExpirationTime"),
                      ("inactive_topic_max_inactive_seconds",
                       "inactive_topic_policies.maxInactiveDurationSeconds")):
        if changes.get(key) is not None and changes[key] < 0:
            raise RestError(412, f"{what} must be 0 or more")
    return changes


def _strings(value: Any, what: str) -> list[str]:
    return [expect(v, str, what) for v in expect(value, list, what)]


def _grants(value: Any, what: str) -> dict[str, list[str]]:
    grants = expect(value, dict, what)
    out = {expect(role, str, what): _strings(actions, f"{what}.{role}")
           for role, actions in grants.items()}
    for role, actions in out.items():
        unknown = sorted({a.lower() for a in actions} - ACTIONS)
        if unknown:
            raise RestError(400, f"{what}.{role}: unknown actions {unknown}; known: "
                                 f"{', '.join(sorted(ACTIONS))}")
    return out


def _auth_policies(body: dict[str, Any], out: NamespaceBody) -> None:
    auth = body.get("auth_policies")
    if auth is None:
        return
    expect(auth, dict, "auth_policies")
    if auth.get("namespace_auth") is not None:
        out.namespace_grants = _grants(auth["namespace_auth"], "auth_policies.namespace_auth")
    if auth.get("destination_auth") is not None:
        topics = expect(auth["destination_auth"], dict, "auth_policies.destination_auth")
        out.topic_grants = {expect(topic, str, "auth_policies.destination_auth"):
                            _grants(roles, f"auth_policies.destination_auth.{topic}")
                            for topic, roles in topics.items()}
    subscriptions = auth.get("subscription_auth_roles")
    if subscriptions:
        raise RestError(412, "auth_policies.subscription_auth_roles is not supported by Magnetar")


def _backlog_quotas(value: Any, changes: dict[str, Any]) -> None:
    quotas = expect(value, dict, "backlog_quota_map")
    for kind, quota in quotas.items():
        where = f"backlog_quota_map.{kind}"
        expect(quota, dict, where)
        policy = quota.get("policy")
        if policy is not None:
            if policy not in BACKLOG_POLICIES:
                raise RestError(400, f"{where}.policy must be one of {', '.join(BACKLOG_POLICIES)}")
            changes["backlog_quota_policy"] = policy
        if kind == "destination_storage":
            limit = quota.get("limitSize", quota.get("limit", -1))
            changes["backlog_quota_limit_bytes"] = _int(limit, f"{where}.limitSize")
        elif kind == "message_age":
            changes["backlog_quota_limit_seconds"] = _int(quota.get("limitTime", -1),
                                                          f"{where}.limitTime")
        else:
            raise RestError(400, f"backlog_quota_map: unknown quota type {kind!r} "
                                 "(destination_storage or message_age)")


def _auto_topic_creation(value: Any, changes: dict[str, Any]) -> None:
    override = expect(value, dict, "autoTopicCreationOverride")
    allow = override.get("allowAutoTopicCreation")
    if allow is None:
        raise RestError(400, "autoTopicCreationOverride.allowAutoTopicCreation is required")
    changes["allow_auto_topic_creation"] = expect(allow, bool, "allowAutoTopicCreation")
    kind = override.get("topicType", "non-partitioned")
    if kind not in TOPIC_TYPES:
        raise RestError(400, f"autoTopicCreationOverride.topicType must be one of {', '.join(TOPIC_TYPES)}")
    changes["auto_topic_creation_type"] = kind
    if kind == "partitioned":
        partitions = _int(override.get("defaultNumPartitions", 1), "defaultNumPartitions")
        if partitions < 1:
            raise RestError(400, "autoTopicCreationOverride.defaultNumPartitions must be at least 1")
        changes["default_num_partitions"] = partitions


def read_policies_body(body: Any, cluster: str = "standalone") -> NamespaceBody:
    """Read a Policies body (see the module docstring); ``cluster``: this broker's, whose
    entries of the per-cluster rate maps apply. Raises ``RestError``."""
    body = expect(body, dict, "policies")
    out = NamespaceBody()
    changes = out.changes
    _auth_policies(body, out)
    if body.get("replication_clusters") is not None:
        out.replication_clusters = _strings(body["replication_clusters"], "replication_clusters")
    retention = body.get("retention_policies")
    if retention is not None:
        expect(retention, dict, "retention_policies")
        changes["retention_time_minutes"] = _int(retention.get("retentionTimeInMinutes", 0),
                                                 "retention_policies.retentionTimeInMinutes")
        changes["retention_size_mb"] = _int(retention.get("retentionSizeInMB", 0),
                                            "retention_policies.retentionSizeInMB")
    for key, name in (("message_ttl_in_seconds", "message_ttl_seconds"),
                      ("max_producers_per_topic", "max_producers_per_topic"),
                      ("max_consumers_per_topic", "max_consumers_per_topic"),
                      ("max_unacked_messages_per_consumer", "max_unacked_messages_per_consumer"),
                      ("max_unacked_messages_per_subscription",
                       "max_unacked_messages_per_subscription"),
                      ("max_subscriptions_per_topic", "max_subscriptions_per_topic"),
                      ("subscription_expiration_time_minutes",
                       "subscription_expiration_time_minutes")):
        if body.get(key) is not None:
            changes[name] = _int(body[key], key)
    if body.get("deduplicationEnabled") is not None:
        changes["deduplication_enabled"] = expect(body["deduplicationEnabled"], bool,
                                                  "deduplicationEnabled")
    if body.get("backlog_quota_map"):
        _backlog_quotas(body["backlog_quota_map"], changes)
    if body.get("autoTopicCreationOverride") is not None:
        _auto_topic_creation(body["autoTopicCreationOverride"], changes)
    strategy = body.get("schema_compatibility_strategy")
    if strategy is not None and strategy != "UNDEFINED":
        if strategy not in SCHEMA_COMPATIBILITY_STRATEGIES:
            raise RestError(400, "schema_compatibility_strategy must be one of "
                                 + ", ".join(SCHEMA_COMPATIBILITY_STRATEGIES))
        changes["schema_compatibility_strategy"] = strategy
    if body.get("publishMaxMessageRate") is not None:
        rate = _this_cluster(body["publishMaxMessageRate"], cluster, "publishMaxMessageRate")
        if rate is not None:
            changes.update(read_publish_rate(rate, f"publishMaxMessageRate.{cluster}"))
    for key, prefix in (("clusterDispatchRate", "dispatch_rate"),
                        ("topicDispatchRate", "dispatch_rate"),
                        ("subscriptionDispatchRate", "subscription_dispatch_rate"),
                        ("replicatorDispatchRate", "replicator_dispatch_rate")):
        if body.get(key) is not None:
            rate = _this_cluster(body[key], cluster, key)
            if rate is not None:
                changes.update(read_dispatch_rate(rate, prefix, f"{key}.{cluster}"))
    if body.get("inactive_topic_policies") is not None:
        changes.update(read_inactive_topic_policies(body["inactive_topic_policies"],
                                                    "inactive_topic_policies"))
    if body.get("clusterSubscribeRate") is not None:
        rate = _this_cluster(body["clusterSubscribeRate"], cluster, "clusterSubscribeRate")
        if rate is not None:
            changes.update(read_subscribe_rate(rate, f"clusterSubscribeRate.{cluster}"))
    for key, defaults in _UNSUPPORTED_DEFAULTS.items():
        if key in body and body[key] not in defaults:
            raise RestError(412, f"{key} is not supported by Magnetar (only its default "
                                 f"{defaults[0]!r} is accepted)")
    check_values(changes)
    return out
