"""Namespaces and their policies: ``/admin/v2/namespaces/{tenant}[/{namespace}[/...]]``.

Reading a policy answers the namespace's own setting, as Pulsar does (null, sent as
``204 No Content``, or an empty map, where it sets none and the broker default applies);
setting one stores it in the broker's PolicyStore, where housekeeping, producers, consumers
and topic auto-creation read it. The policies with a path of their own at both a
namespace's and a topic's level are declared in namespace_limits.py. A change of deduplication unloads the
namespace's loaded topics so that they reload with it (their clients reconnect).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from magnetar.admin import policy_specs as specs
from magnetar.admin.policies_body import (
    AUTO_TOPIC_CREATION_FIELDS,
    NamespaceBody,
    auto_topic_creation_doc,
    backlog_quota_doc,
    read_policies_body,
)
from magnetar.admin.policy_specs import answer
from magnetar.admin.routing import (
    SERVICE,
    RestError,
    RouteTable,
    expect,
    json_body,
    json_list_response,
    no_content,
    query_flag,
)
from magnetar.broker.namespaces.key_writes import written
from magnetar.broker.namespaces.policies import Policies
from magnetar.broker.service import BrokerService
from magnetar.broker.topic_name import TopicName
from magnetar.protocol import pb

routes = RouteTable("namespaces")

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
_MODES = {"PERSISTENT": pb.CommandGetTopicsOfNamespace.PERSISTENT,
          "NON_PERSISTENT": pb.CommandGetTopicsOfNamespace.NON_PERSISTENT,
          "ALL": pb.CommandGetTopicsOfNamespace.ALL}


def namespace_of(request: web.Request) -> str:
    """``tenant/namespace`` of the request, which must exist (404 otherwise)."""
    namespace = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
    request.app[SERVICE].namespaces.require(namespace)
    return namespace


async def all_topics(service: BrokerService, namespace: str) -> list[str]:
    """Every topic of a namespace, persistent and not, partitions included (the metadata
    store is listed off the loop)."""
    listed = await service.topics_of_namespace_async(
        namespace, pb.CommandGetTopicsOfNamespace.ALL, None)
    return listed[0]


async def unload_namespace(service: BrokerService, namespace: str) -> int:
    """Unload the namespace's loaded topics (their clients reconnect) and wait for their
    ledgers' closes (off the loop); returns how many."""
    prefix_ok = [t for t in list(service.topics.values()) if t.topic_name.namespace == namespace]
    closing = [service.unload_topic(topic, housekeep=True) for topic in prefix_ok]
    await asyncio.gather(*closing)
    return len(prefix_ok)


# ---------------------------------------------------------------------- policy documents

def policies_doc(service: BrokerService, namespace: str) -> dict[str, Any]:
    """Pulsar's Policies document of a namespace: what it sets itself (null, or an empty
    map, where it sets nothing and the broker's default applies), as Pulsar answers."""
    store = service.policies
    own, p = store.overrides(namespace), store.get(namespace)
    authz = service.security.authorization
    return {
        "auth_policies": {"namespace_auth": authz.namespace_permissions(namespace),
                          "destination_auth": authz.topic_grants(namespace), "subscription_auth_roles": {}},
        "replication_clusters": p.replication_clusters or [service.config.clusterName],
        "bundles": {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1},
        "backlog_quota_map": backlog_quota_doc(p, own),
        "message_ttl_in_seconds": own.get("message_ttl_seconds"),
        "retention_policies": specs.RETENTION.own(own, p),
        "deduplicationEnabled": own.get("deduplication_enabled"),
        "autoTopicCreationOverride": _own_auto_topic_creation(own, p),
        "schema_compatibility_strategy": p.schema_compatibility_strategy or "UNDEFINED",
        **{key: own.get(key) for key in _OWN_INTS},
        "inactive_topic_policies": specs.INACTIVE_TOPIC_POLICIES.own(own, p),
        "publishMaxMessageRate": _per_cluster(service, specs.PUBLISH_RATE.own(own, p)),
        "topicDispatchRate": _per_cluster(service, specs.DISPATCH_RATE.own(own, p)),
        "clusterDispatchRate": _per_cluster(service, specs.DISPATCH_RATE.own(own, p)),
        "subscriptionDispatchRate": _per_cluster(
            service, specs.SUBSCRIPTION_DISPATCH_RATE.own(own, p)),
        "replicatorDispatchRate": _per_cluster(
            service, specs.REPLICATOR_DISPATCH_RATE.own(own, p)),
        "clusterSubscribeRate": _per_cluster(service, specs.SUBSCRIBE_RATE.own(own, p)),
        "deleted": False,
    }


#: integer policies kept under the same name in Pulsar's Policies and Magnetar's
_OWN_INTS = ("max_producers_per_topic", "max_consumers_per_topic",
             "max_unacked_messages_per_consumer", "max_unacked_messages_per_subscription",
             "max_subscriptions_per_topic", "subscription_expiration_time_minutes")


def _own_auto_topic_creation(own: dict[str, Any], p: Policies) -> dict[str, Any] | None:
    """The namespace's own AutoTopicCreationOverride (None: it sets none)."""
    if not any(f in own for f in AUTO_TOPIC_CREATION_FIELDS):
        return None
    return auto_topic_creation_doc(p)


def _per_cluster(service: BrokerService, doc: Any) -> dict[str, Any]:
    """A rate policy as Pulsar's Policies keep it: by cluster name ({}: none)."""
    return {} if doc is None else {service.config.clusterName: doc}


async def policies_set(request: web.Request, **changes: Any) -> web.Response:
    """Apply a policy change (at once) and answer once it is stored (off the loop)."""
    service = request.app[SERVICE]
    namespace = namespace_of(request)
    await service.policies.set_async(namespace, **changes)
    if "deduplication_enabled" in changes:
        await unload_namespace(service, namespace)
    return no_content()


_set = policies_set
_JAVA_INT_MAX = 2**31 - 1
_JAVA_LONG_MAX = 2**63 - 1


def _int(value: Any, what: str, limit: int = _JAVA_INT_MAX) -> int:
    """A JSON integer that fits the Java type Pulsar gives the field (``int`` unless
    ``limit`` says ``long``): 400 otherwise, as Pulsar's JSON parsing answers."""
    number = int(expect(value, int, what))
    if not -limit - 1 <= number <= limit:
        raise RestError(400, f"{what}: {number} is out of range")
    return number


# ---------------------------------------------------------------------- namespaces

@routes.route("GET", "/admin/v2/namespaces/{tenant}", "List a tenant's namespaces.")
async def list_namespaces(request: web.Request) -> web.Response:
    return web.json_response(request.app[SERVICE].namespaces.namespaces(request.match_info["tenant"]))


def _replication_clusters(service: BrokerService, tenant: str, clusters: list[str],
                          unknown_status: int = 412) -> list[str]:
    """The clusters, checked as Pulsar checks them: known (``unknown_status``: 412 in a new
    namespace's policies, 403 when the replication clusters are set: Pulsar's "Invalid
    cluster id"), allowed to the tenant (403)."""
    known = set(service.namespaces.clusters())
    unknown = [c for c in clusters if c not in known]
    if unknown and unknown_status == 403:
        raise RestError(403, f"Invalid cluster id: {', '.join(unknown)}")
    if unknown:
        raise RestError(unknown_status, f"Clusters do not exist: {', '.join(unknown)}")
    allowed = service.namespaces.tenant(tenant).get("allowedClusters", [])
    refused = [c for c in clusters if c not in allowed]
    if refused:
        raise RestError(403, f"Clusters {', '.join(refused)} are not allowed to tenant {tenant}")
    return sorted(set(clusters))


@routes.route("PUT", NS, "Create a namespace (409 if it exists, 404 for an unknown tenant).",
              body="Pulsar's Policies (optional): auth_policies, replication_clusters, "
                   "retention_policies, message_ttl_in_seconds, backlog_quota_map, "
                   "deduplicationEnabled, autoTopicCreationOverride, "
                   "schema_compatibility_strategy, max_producers_per_topic, "
                   "max_consumers_per_topic (see policies_body.py)")
async def create_namespace(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = await json_body(request, required=False)
    tenant = request.match_info["tenant"]
    namespace = f"{tenant}/{request.match_info['namespace']}"
    wanted = (read_policies_body(body, service.config.clusterName) if body is not None
              else NamespaceBody())
    changes = dict(wanted.changes)
    if wanted.replication_clusters:
        changes["replication_clusters"] = _replication_clusters(
            service, tenant, wanted.replication_clusters)
    for topic in wanted.topic_grants:
        try:
            in_namespace = TopicName.parse(topic).namespace == namespace
        except ValueError as exc:
            raise RestError(400, f"auth_policies.destination_auth: {exc}") from None
        if not in_namespace:
            raise RestError(400, f"auth_policies.destination_auth: {topic} is not a topic of {namespace}")
    await written(service.namespaces.create_namespace(namespace))
    await service.policies.clear(namespace)
    if changes:
        await service.policies.set_async(namespace, **changes)
    try:
        stored = service.security.authorization.replace_namespace(
            namespace, wanted.namespace_grants, wanted.topic_grants)
    except ValueError as exc:
        raise RestError(400, str(exc)) from None
    await written(stored)
    return no_content()


@routes.route("GET", NS, "The namespace's policies (what applies to its topics).")
async def get_namespace(request: web.Request) -> web.Response:
    return web.json_response(policies_doc(request.app[SERVICE], namespace_of(request)))


@routes.route("DELETE", NS, "Delete an empty namespace (409 if it has topics; ?force=true "
              "deletes its topics first).")
async def delete_namespace(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    namespace = namespace_of(request)
    if query_flag(request, "force"):
        for topic in await all_topics(service, namespace):
            name = topic
            base = service.check_topic_name(topic).partitioned_base
            key = f"partitioned/{base}"
            if await service.storage.read_metadata(service.metadata.get, key) is not None:
                name = base
            try:
                await service.delete_topic(name)
            except Exception:  # a partition already gone with its partitioned topic
                continue
    held = await all_topics(service, namespace)
    await written(service.namespaces.delete_namespace(namespace, lambda n: held))
    await service.policies.clear(namespace)
    return no_content()


@routes.route("GET", NS + "/topics", "The namespace's topics (?mode=PERSISTENT|NON_PERSISTENT|ALL).")
async def namespace_topics(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    mode = _MODES.get(request.query.get("mode", "PERSISTENT").upper())
    if mode is None:
        raise RestError(400, "mode must be PERSISTENT, NON_PERSISTENT or ALL")
    listed = await request.app[SERVICE].topics_of_namespace_async(namespace, mode, None)
    return await json_list_response(listed[0])


# ---------------------------------------------------------------------- policies

def _policies(request: web.Request) -> Policies:
    return request.app[SERVICE].policies.get(namespace_of(request))


def _own(request: web.Request) -> dict[str, Any]:
    """What the request's namespace sets itself."""
    return request.app[SERVICE].policies.overrides(namespace_of(request))


@routes.route("GET", NS + "/replication", "The clusters the namespace is replicated to.")
async def get_replication(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    return web.json_response(_policies(request).replication_clusters or [service.config.clusterName])


@routes.route("POST", NS + "/replication",
              "Set the namespace's replication clusters: its topics are replicated to the others.",
              body='a JSON list of cluster names: ["standalone"]')
async def set_replication(request: web.Request) -> web.Response:
    body = expect(await json_body(request), list, "clusters")
    clusters = [expect(c, str, "cluster") for c in body]
    if not clusters:
        raise RestError(412, "the replication clusters must not be empty")
    tenant = request.match_info["tenant"]
    return await _set(request, replication_clusters=_replication_clusters(
        request.app[SERVICE], tenant, clusters, unknown_status=403))


@routes.route("GET", NS + "/deduplication", "Whether the namespace turns message "
              "deduplication on (204: it does not say, brokerDeduplicationEnabled applies).")
async def get_dedup(request: web.Request) -> web.Response:
    return answer(_own(request).get("deduplication_enabled"))


@routes.route("POST", NS + "/deduplication", "Turn deduplication on or off (topics reload).",
              body="bool")
async def set_dedup(request: web.Request) -> web.Response:
    enabled = expect(await json_body(request), bool, "deduplication")
    return await _set(request, deduplication_enabled=enabled)


@routes.route("DELETE", NS + "/deduplication", "Back to brokerDeduplicationEnabled.")
async def remove_dedup(request: web.Request) -> web.Response:
    return await _set(request, deduplication_enabled=None)


@routes.route("GET", NS + "/backlogQuotaMap", "The namespace's own backlog quotas by type "
              "(destination_storage, message_age; {}: none, the broker's apply).")
async def get_backlog_quota(request: web.Request) -> web.Response:
    return web.json_response(backlog_quota_doc(_policies(request), _own(request)))


@routes.route("POST", NS + "/backlogQuota",
              "Set a backlog quota (?backlogQuotaType=destination_storage|message_age).",
              body='{"limitSize": bytes, "limitTime": seconds, "policy": '
                   '"producer_request_hold"|"producer_exception"|"consumer_backlog_eviction"}')
async def set_backlog_quota(request: web.Request) -> web.Response:
    body = expect(await json_body(request), dict, "backlog quota")
    kind = request.query.get("backlogQuotaType", "destination_storage")
    changes: dict[str, Any] = {}
    if "policy" in body:
        changes["backlog_quota_policy"] = expect(body["policy"], str, "policy")
    if kind == "destination_storage":
        limit = body.get("limitSize", body.get("limit", -1))
        changes["backlog_quota_limit_bytes"] = _int(limit, "limitSize", _JAVA_LONG_MAX)
    elif kind == "message_age":
        changes["backlog_quota_limit_seconds"] = _int(body.get("limitTime", -1), "limitTime")
    else:
        raise RestError(400, "backlogQuotaType must be destination_storage or message_age")
    return await _set(request, **changes)


@routes.route("DELETE", NS + "/backlogQuota", "Remove a backlog quota (?backlogQuotaType=...).")
async def remove_backlog_quota(request: web.Request) -> web.Response:
    kind = request.query.get("backlogQuotaType", "destination_storage")
    if kind == "message_age":
        return await _set(request, backlog_quota_limit_seconds=None)
    return await _set(request, backlog_quota_limit_bytes=None, backlog_quota_policy=None)


@routes.route("GET", NS + "/autoTopicCreation", "The namespace's own topic auto-creation "
              "override (204: none, the broker's allowAutoTopicCreation* apply).")
async def get_auto_creation(request: web.Request) -> web.Response:
    return answer(_own_auto_topic_creation(_own(request), _policies(request)))


@routes.route("POST", NS + "/autoTopicCreation", "Override topic auto-creation.",
              body='{"allowAutoTopicCreation": bool, "topicType": "non-partitioned"|"partitioned", '
                   '"defaultNumPartitions": int}')
async def set_auto_creation(request: web.Request) -> web.Response:
    body = expect(await json_body(request), dict, "autoTopicCreation")
    changes: dict[str, Any] = {
        "allow_auto_topic_creation": expect(body.get("allowAutoTopicCreation"), bool, "allowAutoTopicCreation"),
        "auto_topic_creation_type": body.get("topicType", "non-partitioned"),
    }
    if changes["auto_topic_creation_type"] == "partitioned":
        partitions = _int(body.get("defaultNumPartitions", 1), "defaultNumPartitions")
        if partitions < 1:
            raise RestError(412, "defaultNumPartitions must be at least 1")
        limit = request.app[SERVICE].config.maxNumPartitionsPerPartitionedTopic
        if limit > 0 and partitions > limit:
            raise RestError(412, f"defaultNumPartitions must be at most {limit} "
                                 "(maxNumPartitionsPerPartitionedTopic)")
        changes["default_num_partitions"] = partitions
    return await _set(request, **changes)


@routes.route("DELETE", NS + "/autoTopicCreation", "Back to the broker's auto-creation settings.")
async def remove_auto_creation(request: web.Request) -> web.Response:
    return await _set(request, allow_auto_topic_creation=None, auto_topic_creation_type=None,
                default_num_partitions=None)


@routes.route("GET", NS + "/schemaCompatibilityStrategy", "The schema compatibility strategy.")
async def get_schema_strategy(request: web.Request) -> web.Response:
    return web.json_response(_policies(request).schema_compatibility_strategy or "UNDEFINED")


@routes.route("PUT", NS + "/schemaCompatibilityStrategy", "Set the schema compatibility strategy.",
              body='string: "FULL", "BACKWARD", "FORWARD", "ALWAYS_COMPATIBLE", ...')
async def set_schema_strategy(request: web.Request) -> web.Response:
    strategy = expect(await json_body(request), str, "strategy")
    return await _set(request, schema_compatibility_strategy=None if strategy == "UNDEFINED" else strategy)
