"""Where the broker's cluster-wide keys live in a cluster's metadata store: Pulsar's paths
and JSON shapes, translated both ways; pure.

The broker's components keep flat keys (``tenants/acme``, ``policies/acme/orders``...; see
each component's docstring). In cluster mode those that are cluster-wide are stored where
Pulsar stores them:

=====================================  ===================================================
flat key                               path (value)
=====================================  ===================================================
``tenants/{t}``                        ``/admin/policies/{t}`` (TenantInfo: ``adminRoles``,
                                       ``allowedClusters``)
``namespaces/{t}/{ns}``                ``/admin/policies/{t}/{ns}`` exists (Policies JSON)
``policies/{t}/{ns}``                  fields of that Policies JSON: ``retention_policies``,
                                       ``message_ttl_in_seconds``, ``backlog_quota_map``,
                                       ``deduplicationEnabled``, ``autoTopicCreationOverride``,
                                       ``max_producers_per_topic``,
                                       ``max_consumers_per_topic``,
                                       ``schema_compatibility_strategy``,
                                       ``replication_clusters`` (others Magnetar
                                       has and Pulsar names differently: ``magnetar_policies``)
``permissions/{t}/{ns}``               its ``auth_policies``: ``namespace_auth``,
                                       ``destination_auth``
``partitioned/{d}://{t}/{ns}/{x}``     ``/admin/partitioned-topics/{t}/{ns}/{d}/{x}``
                                       (``{"partitions": n}``; ``x`` URL-encoded)
``schemas/{t}/{ns}/{x}/{version}``     ``/schemas/{t}/{ns}/{x}/{version}`` (one key per
                                       version, the registry's JSON)
``topic-policies/{d}://{t}/{ns}/{x}``  ``/admin/topic-policies/{t}/{ns}/{d}/{x}`` (a topic's own
                                       policies, Magnetar's names; Pulsar keeps them in a
                                       system topic)
``clusters/{c}``                       ``/admin/clusters/{c}`` (ClusterData: ``serviceUrl``...)
``cluster/bootstrapped``               ``/admin/clusters/{cluster}`` (this broker's) exists
=====================================  ===================================================

Everything else (topics, cursors, dedup state, compaction) is per-broker state and stays in
the broker's own store.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, unquote

POLICIES_ROOT = "/admin/policies"
PARTITIONED_ROOT = "/admin/partitioned-topics"
TOPIC_POLICIES_ROOT = "/admin/topic-policies"
SCHEMAS_ROOT = "/schemas"
CLUSTERS_ROOT = "/admin/clusters"
BOOTSTRAPPED = "cluster/bootstrapped"

#: flat prefixes kept in the cluster's store
CLUSTER_PREFIXES = ("tenants/", "namespaces/", "policies/", "permissions/", "partitioned/",
                    "schemas/", "clusters/", "topic-policies/", BOOTSTRAPPED)
#: the flat kinds that are parts of one namespace's Policies node
NAMESPACE_PARTS = ("namespaces", "policies", "permissions")

# Magnetar's policy names -> Pulsar's Policies fields (top level)
_SIMPLE = {
    "message_ttl_seconds": "message_ttl_in_seconds",
    "deduplication_enabled": "deduplicationEnabled",
    "max_producers_per_topic": "max_producers_per_topic",
    "max_consumers_per_topic": "max_consumers_per_topic",
    "schema_compatibility_strategy": "schema_compatibility_strategy",
    "replication_clusters": "replication_clusters",
    "max_unacked_messages_per_consumer": "max_unacked_messages_per_consumer",
    "max_unacked_messages_per_subscription": "max_unacked_messages_per_subscription",
    "max_subscriptions_per_topic": "max_subscriptions_per_topic",
    "subscription_expiration_time_minutes": "subscription_expiration_time_minutes",
}
# nested: (Pulsar field, sub-field)
_NESTED = {
    "retention_time_minutes": ("retention_policies", "retentionTimeInMinutes"),
    "retention_size_mb": ("retention_policies", "retentionSizeInMB"),
    "allow_auto_topic_creation": ("autoTopicCreationOverride", "allowAutoTopicCreation"),
    "auto_topic_creation_type": ("autoTopicCreationOverride", "topicType"),
    "default_num_partitions": ("autoTopicCreationOverride", "defaultNumPartitions"),
}
_EXTRA = "magnetar_policies"
#: the Policies fields `policies_to_node` owns (replaced as a whole on every write)
POLICY_FIELDS = frozenset(
    set(_SIMPLE.values()) | {f for f, _ in _NESTED.values()} | {"backlog_quota_map", _EXTRA})


def is_cluster_key(key: str) -> bool:
    return key.startswith(CLUSTER_PREFIXES)


def node_path(key: str, cluster: str) -> str:
    """The metadata path holding flat ``key`` (ValueError for a key that is not
    cluster-wide)."""
    kind, _, rest = key.partition("/")
    if key == BOOTSTRAPPED:
        return f"{CLUSTERS_ROOT}/{cluster}"
    if kind == "clusters":
        return f"{CLUSTERS_ROOT}/{rest}"
    if kind == "tenants":
        return f"{POLICIES_ROOT}/{rest}"
    if kind in NAMESPACE_PARTS:
        return f"{POLICIES_ROOT}/{rest}"
    if kind in ("partitioned", "topic-policies"):
        root = PARTITIONED_ROOT if kind == "partitioned" else TOPIC_POLICIES_ROOT
        domain, _, name = rest.partition("://")
        tenant, ns, local = name.split("/", 2)
        return f"{root}/{tenant}/{ns}/{domain}/{quote(local, safe='')}"
    if kind == "schemas":
        base, _, version = rest.rpartition("/")
        tenant, ns, local = base.split("/", 2)
        return f"{SCHEMAS_ROOT}/{tenant}/{ns}/{quote(local, safe='')}/{version}"
    raise ValueError(f"{key!r} is not a cluster-wide key")


def flat_keys(path: str, cluster: str) -> list[str]:
    """The flat keys a metadata path holds ([] for structural paths)."""
    parts = path.strip("/").split("/")
    if path.startswith(POLICIES_ROOT + "/"):
        rest = parts[2:]
        if len(rest) == 1:
            return [f"tenants/{rest[0]}"]
        if len(rest) == 2:
            ns = "/".join(rest)
            return [f"{kind}/{ns}" for kind in NAMESPACE_PARTS]
    elif path.startswith(PARTITIONED_ROOT + "/") and len(parts) == 6:
        tenant, ns, domain, local = parts[2:]
        return [f"partitioned/{domain}://{tenant}/{ns}/{unquote(local)}"]
    elif path.startswith(TOPIC_POLICIES_ROOT + "/") and len(parts) == 6:
        tenant, ns, domain, local = parts[2:]
        return [f"topic-policies/{domain}://{tenant}/{ns}/{unquote(local)}"]
    elif path.startswith(SCHEMAS_ROOT + "/") and len(parts) == 5:
        tenant, ns, local, version = parts[1:]
        return [f"schemas/{tenant}/{ns}/{unquote(local)}/{version}"]
    elif path.startswith(CLUSTERS_ROOT + "/") and len(parts) == 3:
        return [f"clusters/{parts[2]}"] + ([BOOTSTRAPPED] if parts[2] == cluster else [])
    return []


def decode(raw: bytes | None) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


# -- one namespace's Policies node ----------------------------------------------------------

def policies_to_node(overrides: dict[str, Any] | None) -> dict[str, Any]:
    """Magnetar's namespace overrides as Pulsar Policies fields."""
    node: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, value in (overrides or {}).items():
        if name in _SIMPLE:
            node[_SIMPLE[name]] = value
        elif name in _NESTED:
            outer, inner = _NESTED[name]
            node.setdefault(outer, {})[inner] = value
        elif name == "backlog_quota_limit_bytes":
            node.setdefault("backlog_quota_map", {}).setdefault(
                "destination_storage", {})["limitSize"] = value
        elif name == "backlog_quota_limit_seconds":
            node.setdefault("backlog_quota_map", {}).setdefault(
                "message_age", {})["limitTime"] = value
        elif name == "backlog_quota_policy":
            quotas = node.setdefault("backlog_quota_map", {})
            quotas.setdefault("destination_storage", {})["policy"] = value
            quotas.setdefault("message_age", {})["policy"] = value
        else:
            extra[name] = value
    if extra:
        node[_EXTRA] = extra
    return node


def node_to_policies(node: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `policies_to_node` (fields it does not know are ignored)."""
    out: dict[str, Any] = {}
    for name, field in _SIMPLE.items():
        if node.get(field) is not None:
            out[name] = node[field]
    for name, (outer, inner) in _NESTED.items():
        value = (node.get(outer) or {}).get(inner)
        if value is not None:
            out[name] = value
    quotas = node.get("backlog_quota_map") or {}
    size = quotas.get("destination_storage") or {}
    age = quotas.get("message_age") or {}
    if size.get("limitSize") is not None:
        out["backlog_quota_limit_bytes"] = size["limitSize"]
    if age.get("limitTime") is not None:
        out["backlog_quota_limit_seconds"] = age["limitTime"]
    policy = size.get("policy") or age.get("policy")
    if policy is not None:
        out["backlog_quota_policy"] = policy
    out.update(node.get(_EXTRA) or {})
    return out


def permissions_to_node(record: dict[str, Any] | None, node: dict[str, Any]) -> dict[str, Any]:
    """``auth_policies`` for a permissions record (keeping fields Magnetar does not use)."""
    auth = dict(node.get("auth_policies") or {})
    record = record or {}
    auth["namespace_auth"] = dict(record.get("namespace") or {})
    auth["destination_auth"] = dict(record.get("topics") or {})
    auth.setdefault("subscription_auth_roles", {})
    return auth


def node_to_permissions(node: dict[str, Any]) -> dict[str, Any] | None:
    auth = node.get("auth_policies")
    if not isinstance(auth, dict):
        return None
    if not auth.get("namespace_auth") and not auth.get("destination_auth"):
        return None
    return {"namespace": dict(auth.get("namespace_auth") or {}),
            "topics": dict(auth.get("destination_auth") or {})}


def new_namespace_node(cluster: str) -> dict[str, Any]:
    """A new namespace's Policies JSON (as Pulsar writes one: empty grants, this cluster)."""
    return {
        "auth_policies": {"namespace_auth": {}, "destination_auth": {},
                          "subscription_auth_roles": {}},
        "replication_clusters": [cluster],
        "bundles": {"boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000",
                                   "0xffffffff"], "numBundles": 4},
    }


def namespace_parts(node: dict[str, Any] | None) -> dict[str, Any]:
    """The flat values a Policies node stands for (None: absent), by kind."""
    if node is None:
        return dict.fromkeys(NAMESPACE_PARTS)
    policies = node_to_policies(node)
    return {"namespaces": {"created": 0}, "policies": policies or None,
            "permissions": node_to_permissions(node)}


def with_part(node: dict[str, Any], kind: str, value: Any) -> dict[str, Any]:
    """``node`` with the part of ``kind`` replaced by flat ``value`` (None: cleared)."""
    out = dict(node)
    if kind == "policies":
        # a namespace always has replication clusters (Pulsar's too): kept unless set anew
        for field in POLICY_FIELDS - {"replication_clusters"}:
            out.pop(field, None)
        out.update(policies_to_node(value))
    elif kind == "permissions":
        out["auth_policies"] = permissions_to_node(value, node)
    return out


def cluster_data(web_service_url: str = "", broker_service_url: str = "",
                 web_service_url_tls: str = "", broker_service_url_tls: str = "") -> dict[str, Any]:
    """Pulsar's ClusterData JSON."""
    return {"serviceUrl": web_service_url, "serviceUrlTls": web_service_url_tls,
            "brokerServiceUrl": broker_service_url,
            "brokerServiceUrlTls": broker_service_url_tls}
