"""What each ``magnetar admin`` command does: one function per command, taking the parsed
arguments and an AdminClient and returning what to print (the parser is in ``admin.py``).
Topics may be given short (``my-topic`` = ``persistent://public/default/my-topic``);
durations (``10m``, ``1d``) and sizes (``512M``, ``10G``) are parsed here too.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from magnetar.broker.config.durations import parse_duration
from magnetar.cli.http import AdminClient, AdminError
from magnetar.protocol.naming import TopicName, check_named_entity, parse_namespace, url_segment

Command = Callable[[argparse.Namespace, AdminClient], Any]
_SIZES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def seconds(text: str) -> int:
    """``90``, ``30s``, ``10m``, ``2h``, ``1d``, ``1w`` as seconds (``-1`` stays -1): the
    broker's one duration parser (``durations.parse_duration``), as an argparse type."""
    try:
        return parse_duration(text, allow_negative=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_bytes(text: str) -> int:
    """``1024``, ``10K``, ``5M``, ``1G`` as bytes (``-1`` stays -1)."""
    m = re.fullmatch(r"(-?\d+)([kmgt]?)b?", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 10G)")
    return int(m.group(1)) * _SIZES.get(m.group(2), 1)


def topic_name(name: str) -> TopicName:
    """The parsed topic name, or AdminError saying what is wrong with it."""
    try:
        return TopicName.parse(name)
    except ValueError as exc:
        raise AdminError(0, str(exc)) from None


def topic_path(name: str) -> str:
    """``domain/tenant/namespace/topic`` of a (possibly short) topic name, the local name
    URL-encoded (a name with spaces, ``?`` or ``%`` reaches the broker whole)."""
    return topic_name(name).rest_path()


def schema_path(name: str) -> str:
    t = topic_name(name)
    return f"/admin/v2/schemas/{t.namespace}/{url_segment(t.local_name)}"


def namespace(name: str) -> str:
    """``tenant/namespace`` once checked by the broker's own rules (AdminError if not)."""
    try:
        _, local = parse_namespace(name)
    except ValueError as exc:
        raise AdminError(0, str(exc)) from None
    if "/" in local:
        raise AdminError(0, f"Invalid namespace name {name!r}: expected <tenant>/<namespace>")
    return name


def tenant(name: str) -> str:
    """A tenant name checked by the broker's own rules (AdminError if not)."""
    try:
        return check_named_entity("tenant", name)
    except ValueError as exc:
        raise AdminError(0, str(exc)) from None


def cluster(name: str) -> str:
    """A cluster name checked by the broker's own rules (AdminError if not)."""
    try:
        return check_named_entity("cluster", name)
    except ValueError as exc:
        raise AdminError(0, str(exc)) from None


def segment(what: str, text: str) -> str:
    """``text`` as one percent-encoded URL path segment or query value (AdminError naming
    ``what`` if it cannot be one)."""
    try:
        return url_segment(text)
    except ValueError as exc:
        raise AdminError(0, f"Invalid {what}: {exc}") from None


def subscription(name: str) -> str:
    """A subscription name as one URL path segment (empty: AdminError)."""
    if not name:
        raise AdminError(0, "Invalid subscription name '': it is empty")
    try:
        return url_segment(name)
    except ValueError as exc:
        raise AdminError(0, f"Invalid subscription name: {exc}") from None


def message_id(text: str) -> dict[str, int]:
    """``LEDGER:ENTRY`` as Pulsar's REST message id (AdminError if it is not one)."""
    ledger, sep, entry = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return {"ledgerId": int(ledger), "entryId": int(entry)}
    except ValueError:
        raise AdminError(0, f"not a message id: {text!r} (expected LEDGER:ENTRY, e.g. 12:0)") from None


def at_least(value: int, minimum: int, what: str) -> int:
    if value < minimum:
        raise AdminError(0, f"{what} must be at least {minimum}, not {value}")
    return value


# ---------------------------------------------------------------------- tenants

def tenants_list(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", "/admin/v2/tenants")


def tenants_get(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", f"/admin/v2/tenants/{tenant(a.tenant)}")


def tenants_create(a: argparse.Namespace, api: AdminClient) -> Any:
    body: dict[str, Any] = {"adminRoles": a.admin_roles.split(",") if a.admin_roles else []}
    if a.allowed_clusters:
        body["allowedClusters"] = a.allowed_clusters.split(",")
    return api.call("PUT", f"/admin/v2/tenants/{tenant(a.tenant)}", body)


def tenants_delete(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", f"/admin/v2/tenants/{tenant(a.tenant)}")


# ---------------------------------------------------------------------- namespaces

def _ns(a: argparse.Namespace) -> str:
    return f"/admin/v2/namespaces/{namespace(a.namespace)}"


def ns_list(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", f"/admin/v2/namespaces/{tenant(a.tenant)}")


def ns_create(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("PUT", _ns(a))


def ns_delete(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", _ns(a) + ("?force=true" if a.force else ""))


def ns_policies(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", _ns(a))


def ns_topics(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", _ns(a) + "/topics?mode=ALL")


def ns_unload(a: argparse.Namespace, api: AdminClient) -> Any:
    if getattr(a, "bundle", None):
        query = f"?destinationBroker={segment('broker', a.destination_broker)}" \
            if getattr(a, "destination_broker", None) else ""
        return api.call("PUT", _ns(a) + f"/{segment('bundle', a.bundle)}/unload{query}")
    return api.call("PUT", _ns(a) + "/unload")


def ns_bundles(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", _ns(a) + "/bundles")


def ns_split_bundle(a: argparse.Namespace, api: AdminClient) -> Any:
    query = f"?unload={'true' if a.unload else 'false'}"
    if a.split_algorithm_name:
        query += f"&splitAlgorithmName={segment('split algorithm', a.split_algorithm_name)}"
    return api.call("PUT", _ns(a) + f"/{segment('bundle', a.bundle)}/split{query}")


def brokers_list(a: argparse.Namespace, api: AdminClient) -> Any:
    if getattr(a, "cluster", None) is None:  # the brokers of the cluster this broker is in
        return api.call("GET", "/admin/v2/brokers")
    return api.call("GET", f"/admin/v2/brokers/{cluster(a.cluster)}")


def brokers_healthcheck(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", "/admin/v2/brokers/health")


def brokers_runtime_config(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", "/admin/v2/brokers/configuration/runtime")


# ---------------------------------------------------------------------- clusters

def clusters_list(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", "/admin/v2/clusters")


def clusters_get(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", f"/admin/v2/clusters/{cluster(a.cluster)}")


def _cluster_data(a: argparse.Namespace) -> dict[str, str | bool]:
    """Pulsar's ClusterData from pulsar-admin's flags (those given)."""
    fields: dict[str, str | bool | None] = {
        "serviceUrl": a.url, "serviceUrlTls": a.url_secure,
        "brokerServiceUrl": a.broker_url, "brokerServiceUrlTls": a.broker_url_secure,
        "authenticationPlugin": a.auth_plugin, "authenticationParameters": a.auth_parameters,
        "brokerClientTlsEnabled": a.tls_enable, "tlsAllowInsecureConnection": a.cluster_tls_allow_insecure,
        "brokerClientTrustCertsFilePath": a.tls_trust_certs_filepath,
        "brokerClientKeyFilePath": a.tls_key_filepath,
        "brokerClientCertificateFilePath": a.tls_certs_filepath}
    return {k: v for k, v in fields.items() if v is not None}


def clusters_create(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("PUT", f"/admin/v2/clusters/{cluster(a.cluster)}", _cluster_data(a))


def clusters_update(a: argparse.Namespace, api: AdminClient) -> Any:
    data = _cluster_data(a)
    if not data:
        raise AdminError(0, "give at least one of --url, --url-secure, --broker-url, "
                            "--broker-url-secure, --auth-plugin, --auth-parameters, --tls-*")
    return api.call("POST", f"/admin/v2/clusters/{cluster(a.cluster)}", data)


def clusters_delete(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", f"/admin/v2/clusters/{cluster(a.cluster)}")


def brokers_leader(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", "/admin/v2/brokers/leaderBroker")


def broker_stats_load_report(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", "/admin/v2/broker-stats/load-report")


def topics_lookup(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", f"/lookup/v2/topic/{topic_path(a.topic)}")


def retention_body(a: argparse.Namespace) -> dict[str, int]:
    """Pulsar's RetentionPolicies from ``--time`` (seconds) and ``--size`` (bytes); -1 stays
    -1 (unlimited)."""
    minutes = a.time if a.time < 0 else a.time // 60
    mb = a.size if a.size < 0 else a.size // (1 << 20)
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": mb}


def ns_set_retention(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _ns(a) + "/retention", retention_body(a))


def ns_get(path: str) -> Command:
    return lambda a, api: api.call("GET", _ns(a) + path)


def ns_remove(path: str) -> Command:
    return lambda a, api: api.call("DELETE", _ns(a) + path)


def ns_set_ttl(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _ns(a) + "/messageTTL", a.ttl)


def ns_set_dedup(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _ns(a) + "/deduplication", a.enable)


def ns_set_backlog_quota(a: argparse.Namespace, api: AdminClient) -> Any:
    if a.limit is not None:
        api.call("POST", _ns(a) + "/backlogQuota?backlogQuotaType=destination_storage",
                 {"limitSize": a.limit, "policy": a.policy})
    if a.limit_time is not None:
        api.call("POST", _ns(a) + "/backlogQuota?backlogQuotaType=message_age",
                 {"limitTime": a.limit_time, "policy": a.policy})
    if a.limit is None and a.limit_time is None:
        raise AdminError(0, "give --limit and/or --limitTime")


def ns_set_auto_topic_creation(a: argparse.Namespace, api: AdminClient) -> Any:
    body: dict[str, Any] = {"allowAutoTopicCreation": a.enable, "topicType": a.type}
    if a.type == "partitioned":
        body["defaultNumPartitions"] = a.num_partitions
    return api.call("POST", _ns(a) + "/autoTopicCreation", body)


def ns_set_strategy(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("PUT", _ns(a) + "/schemaCompatibilityStrategy", a.compatibility)


def ns_set_max_producers(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _ns(a) + "/maxProducersPerTopic", a.max)


def ns_set_clusters(a: argparse.Namespace, api: AdminClient) -> Any:
    names = [cluster(c.strip()) for c in a.clusters.split(",") if c.strip()]
    if not names:
        raise AdminError(0, "give --clusters, e.g. --clusters standalone")
    return api.call("POST", _ns(a) + "/replication", names)


def ns_set_max_consumers(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _ns(a) + "/maxConsumersPerTopic", a.max)


# ---------------------------------------------------------------------- topics

def _t(a: argparse.Namespace) -> str:
    return f"/admin/v2/{topic_path(a.topic)}"


def topics_list(a: argparse.Namespace, api: AdminClient) -> Any:
    """Both domains' topics; with --limit / --after one page of them (each domain's page
    asked with the same bounds, merged: the first names past --after of the two)."""
    ns = namespace(a.namespace)
    limit = getattr(a, "limit", None)
    after = getattr(a, "after", None)
    query = urllib.parse.urlencode({k: v for k, v in (("limit", limit), ("after", after))
                                    if v is not None})
    query = f"?{query}" if query else ""
    names = sorted(api.call("GET", f"/admin/v2/persistent/{ns}{query}")
                   + api.call("GET", f"/admin/v2/non-persistent/{ns}{query}"))
    return names if limit is None else names[:limit]


def topics_list_partitioned(a: argparse.Namespace, api: AdminClient) -> Any:
    ns = namespace(a.namespace)
    return sorted(api.call("GET", f"/admin/v2/persistent/{ns}/partitioned")
                  + api.call("GET", f"/admin/v2/non-persistent/{ns}/partitioned"))


def topics_create(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("PUT", _t(a))


def topics_create_partitioned(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("PUT", _t(a) + "/partitions", at_least(a.partitions, 1, "--partitions"))


def topics_update_partitioned(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _t(a) + "/partitions", at_least(a.partitions, 1, "--partitions"))


def topics_metadata(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", _t(a) + "/partitions")


def topics_delete(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", _t(a) + ("?force=true" if a.force else ""))


def topics_delete_partitioned(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", _t(a) + "/partitions" + ("?force=true" if a.force else ""))


def topics_get(path: str, method: str = "GET") -> Command:
    return lambda a, api: api.call(method, _t(a) + path)


def topics_partitioned_stats(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", _t(a) + "/partitioned-stats" + ("?perPartition=true" if a.per_partition else ""))


# ---------------------------------------------------------------------- subscriptions

def _s(a: argparse.Namespace) -> str:
    return f"{_t(a)}/subscription/{subscription(a.subscription)}"


def subs_create(a: argparse.Namespace, api: AdminClient) -> Any:
    body = {"ledgerId": -1, "entryId": -1} if a.message_id == "earliest" else None
    if a.message_id not in ("earliest", "latest"):
        body = message_id(a.message_id)
    return api.call("PUT", _s(a), body)


def subs_delete(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", _s(a) + ("?force=true" if a.force else ""))


def subs_skip(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _s(a) + f"/skip/{at_least(a.count, 0, '--count')}")


def subs_clear_backlog(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _s(a) + "/skip_all")


def subs_reset_cursor(a: argparse.Namespace, api: AdminClient) -> Any:
    if a.message_id:
        return api.call("POST", _s(a) + "/resetcursor", message_id(a.message_id))
    if a.time is None:
        raise AdminError(0, "give --time (how far back, e.g. 10m) or --messageId LEDGER:ENTRY")
    timestamp = int((time.time() - a.time) * 1000)
    return api.call("POST", _s(a) + f"/resetcursor/{timestamp}")


def subs_expire(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _s(a) + f"/expireMessages/{a.expire_time}")


def topics_examine_message(a: argparse.Namespace, api: AdminClient) -> Any:
    n = at_least(a.message_position, 1, "--messagePosition")
    return api.call("GET", _t(a) + f"/examinemessage?initialPosition={a.initial_position}"
                    f"&messagePosition={n}")


def topics_message_by_id(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", _t(a) + f"/ledger/{a.ledger_id}/entry/{a.entry_id}")


def subs_peek(a: argparse.Namespace, api: AdminClient) -> Any:
    out = []
    for i in range(1, at_least(a.count, 1, "--count") + 1):
        try:
            out.append(api.call("GET", _s(a) + f"/position/{i}"))
        except AdminError as exc:
            if exc.status == 404 and out:
                break
            raise
    return out


# ---------------------------------------------------------------------- schemas

def _schema_file(path: str) -> Any:
    """A schema file as pulsar-admin reads it: {"type": ..., "schema": ..., "properties": ...}."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise AdminError(0, f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise AdminError(0, f"{path} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise AdminError(0, f'{path}: expected a JSON object {{"type": ..., "schema": ...}}')
    if isinstance(doc.get("schema"), dict | list):
        doc["schema"] = json.dumps(doc["schema"])
    return doc


def schemas_get(a: argparse.Namespace, api: AdminClient) -> Any:
    suffix = f"/schema/{a.version}" if a.version is not None else "/schema"
    return api.call("GET", schema_path(a.topic) + suffix)


def schemas_upload(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", schema_path(a.topic) + "/schema", _schema_file(a.filename))


def schemas_delete(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", schema_path(a.topic) + "/schema")


def schemas_compatibility(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", schema_path(a.topic) + "/compatibility", _schema_file(a.filename))


# ---------------------------------------------------------------- permissions


def role_segment(role: str) -> str:
    """A role name as one URL path segment (empty: AdminError)."""
    if not role:
        raise AdminError(0, "Invalid role '': it is empty")
    try:
        return url_segment(role)
    except ValueError as exc:
        raise AdminError(0, f"Invalid role: {exc}") from None


def _action_list(text: str) -> list[str]:
    return [a.strip() for a in text.split(",") if a.strip()]


def ns_permissions(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", _ns(a) + "/permissions")


def ns_grant(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", f"{_ns(a)}/permissions/{role_segment(a.role)}", _action_list(a.actions))


def ns_revoke(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", f"{_ns(a)}/permissions/{role_segment(a.role)}")


def topics_permissions(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", _t(a) + "/permissions")


def topics_grant(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", f"{_t(a)}/permissions/{role_segment(a.role)}", _action_list(a.actions))


def topics_revoke(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", f"{_t(a)}/permissions/{role_segment(a.role)}")
