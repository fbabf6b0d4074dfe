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
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from magnetar.broker.config.durations import parse_duration
from magnetar.broker.topic_name import TopicName
from magnetar.cli.http import AdminClient, AdminError

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


def topic_path(name: str) -> str:
    """``domain/tenant/namespace/topic`` of a (possibly short) topic name."""
    try:
        t = TopicName.parse(name)
    except ValueError as exc:
        raise AdminError(0, f"invalid topic name {name!r}: {exc}") from None
    return f"{t.domain}/{t.namespace}/{t.local_name}"


def schema_path(name: str) -> str:
    t = TopicName.parse(name)
    return f"/admin/v2/schemas/{t.namespace}/{t.local_name}"


def namespace(name: str) -> str:
    if name.count("/") != 1:
        raise AdminError(0, f"a namespace is tenant/namespace, not {name!r}")
    return name


# ---------------------------------------------------------------------- tenants

def tenants_list(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", "/admin/v2/tenants")


def tenants_get(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", f"/admin/v2/tenants/{a.tenant}")


def tenants_create(a: argparse.Namespace, api: AdminClient) -> Any:
    body: dict[str, Any] = {"adminRoles": a.admin_roles.split(",") if a.admin_roles else []}
    if a.allowed_clusters:
        body["allowedClusters"] = a.allowed_clusters.split(",")
    return api.call("PUT", f"/admin/v2/tenants/{a.tenant}", body)


def tenants_delete(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", f"/admin/v2/tenants/{a.tenant}")


# ---------------------------------------------------------------------- namespaces

def _ns(a: argparse.Namespace) -> str:
    return f"/admin/v2/namespaces/{namespace(a.namespace)}"


def ns_list(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", f"/admin/v2/namespaces/{a.tenant}")


def ns_create(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("PUT", _ns(a))


def ns_delete(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", _ns(a) + ("?force=true" if a.force else ""))


def ns_policies(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", _ns(a))


def ns_topics(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", _ns(a) + "/topics?mode=ALL")


def ns_unload(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("PUT", _ns(a) + "/unload")


def ns_set_retention(a: argparse.Namespace, api: AdminClient) -> Any:
    minutes = a.time if a.time < 0 else a.time // 60
    mb = a.size if a.size < 0 else a.size // (1 << 20)
    return api.call("POST", _ns(a) + "/retention",
                    {"retentionTimeInMinutes": minutes, "retentionSizeInMB": mb})


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


def ns_set_max_consumers(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _ns(a) + "/maxConsumersPerTopic", a.max)


# ---------------------------------------------------------------------- topics

def _t(a: argparse.Namespace) -> str:
    return f"/admin/v2/{topic_path(a.topic)}"


def topics_list(a: argparse.Namespace, api: AdminClient) -> Any:
    ns = namespace(a.namespace)
    return sorted(api.call("GET", f"/admin/v2/persistent/{ns}")
                  + api.call("GET", f"/admin/v2/non-persistent/{ns}"))


def topics_create(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("PUT", _t(a))


def topics_create_partitioned(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("PUT", _t(a) + "/partitions", a.partitions)


def topics_update_partitioned(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _t(a) + "/partitions", a.partitions)


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
    return f"{_t(a)}/subscription/{a.subscription}"


def subs_create(a: argparse.Namespace, api: AdminClient) -> Any:
    body = {"ledgerId": -1, "entryId": -1} if a.message_id == "earliest" else None
    if a.message_id not in ("earliest", "latest"):
        ledger, _, entry = a.message_id.partition(":")
        body = {"ledgerId": int(ledger), "entryId": int(entry)}
    return api.call("PUT", _s(a), body)


def subs_delete(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", _s(a) + ("?force=true" if a.force else ""))


def subs_skip(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _s(a) + f"/skip/{a.count}")


def subs_clear_backlog(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _s(a) + "/skip_all")


def subs_reset_cursor(a: argparse.Namespace, api: AdminClient) -> Any:
    if a.message_id:
        ledger, _, entry = a.message_id.partition(":")
        return api.call("POST", _s(a) + "/resetcursor",
                        {"ledgerId": int(ledger), "entryId": int(entry)})
    if a.time is None:
        raise AdminError(0, "give --time (how far back, e.g. 10m) or --messageId LEDGER:ENTRY")
    timestamp = int((time.time() - a.time) * 1000)
    return api.call("POST", _s(a) + f"/resetcursor/{timestamp}")


def subs_expire(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _s(a) + f"/expireMessages/{a.expire_time}")


def subs_peek(a: argparse.Namespace, api: AdminClient) -> Any:
    out = []
    for i in range(1, a.count + 1):
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
    doc = json.loads(Path(path).read_text())
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


def _action_list(text: str) -> list[str]:
    return [a.strip() for a in text.split(",") if a.strip()]


def ns_permissions(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", _ns(a) + "/permissions")


def ns_grant(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", f"{_ns(a)}/permissions/{quote(a.role, safe='')}", _action_list(a.actions))


def ns_revoke(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", f"{_ns(a)}/permissions/{quote(a.role, safe='')}")


def topics_permissions(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", _t(a) + "/permissions")


def topics_grant(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", f"{_t(a)}/permissions/{quote(a.role, safe='')}", _action_list(a.actions))


def topics_revoke(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", f"{_t(a)}/permissions/{quote(a.role, safe='')}")
