"""``magnetar admin``: pulsar-admin's everyday commands over the admin REST API.

Groups and commands keep pulsar-admin's names (``topics create-partitioned-topic T -p 4``,
``namespaces set-retention NS --time 1h --size 1G``...); topics may be given short
(``my-topic`` = ``persistent://public/default/my-topic``). Each command is one function
taking the parsed arguments and an AdminClient and returning what to print.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from magnetar.broker.topic_name import TopicName
from magnetar.cli.http import AdminClient, AdminError
from magnetar.cli.output import add_late_options, emit

Command = Callable[[argparse.Namespace, AdminClient], Any]
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SIZES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def seconds(text: str) -> int:
    """``90``, ``30s``, ``10m``, ``2h``, ``1d``, ``1w`` as seconds (``-1`` stays -1)."""
    m = re.fullmatch(r"(-?\d+)([smhdw]?)", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30s, 10m, 2h, 1d)")
    return int(m.group(1)) * _UNITS.get(m.group(2) or "s", 1)


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


# ---------------------------------------------------------------------- the parser

GROUPS = {
    "tenants": "create, list and delete tenants",
    "namespaces": "create, list and delete namespaces; read and set their policies",
    "topics": "create, list, delete, inspect and manage topics",
    "subscriptions": "create, delete, skip, reset and peek subscriptions",
    "schemas": "read, upload, delete and check topic schemas",
}

EXAMPLES = {
    "tenants": "magnetar admin tenants create acme\n  magnetar admin tenants list",
    "namespaces": "magnetar admin namespaces create acme/orders\n"
                  "  magnetar admin namespaces set-retention acme/orders --time 1d --size 10G\n"
                  "  magnetar admin namespaces set-message-ttl acme/orders --messageTTL 1h\n"
                  "  magnetar admin namespaces policies acme/orders",
    "topics": "magnetar admin topics create-partitioned-topic acme/orders/new -p 4\n"
              "  magnetar admin topics list public/default\n"
              "  magnetar admin topics stats my-topic --output json",
    "subscriptions": "magnetar admin subscriptions list my-topic\n"
                     "  magnetar admin subscriptions reset-cursor my-topic -s sub --time 10m\n"
                     "  magnetar admin subscriptions peek my-topic -s sub -n 3",
    "schemas": "magnetar admin schemas upload my-topic -f schema.json\n"
               "  magnetar admin schemas get my-topic",
}


def _cmd(group: argparse._SubParsersAction, name: str, fn: Command, help_text: str,
         example: str, *args: tuple[tuple[str, ...], dict[str, Any]]) -> None:
    p = group.add_parser(name, help=help_text, description=f"{help_text}\n\nExample:\n  {example}",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    for flags, kwargs in args:
        p.add_argument(*flags, **kwargs)
    add_late_options(p, "--admin-url", "the broker's web service URL")
    p.set_defaults(admin_fn=fn)


def A(*flags: str, **kwargs: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return flags, kwargs


TOPIC = A("topic", help="topic name (short names are persistent://public/default/NAME)")
NS = A("namespace", help="tenant/namespace")
SUBN = A("-s", "--subscription", required=True, help="subscription name")
FORCE = A("-f", "--force", action="store_true", help="even while clients are connected")


def add_parser(sub: argparse._SubParsersAction, common: list[argparse.ArgumentParser]) -> None:
    admin = sub.add_parser(
        "admin", parents=common, help="administer a broker over its REST API (like pulsar-admin)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Administer tenants, namespaces, topics, subscriptions and schemas over the "
                    "broker's admin REST API.\n\nExamples:\n  " + "\n  ".join(EXAMPLES.values()))
    admin.add_argument("--admin-url", default="http://localhost:8080",
                       help="the broker's web service URL (default http://localhost:8080)")
    groups = admin.add_subparsers(dest="group", metavar="GROUP")
    groups.required = True
    g: dict[str, argparse._SubParsersAction] = {}
    for name, help_text in GROUPS.items():
        p = groups.add_parser(name, help=help_text, formatter_class=argparse.RawDescriptionHelpFormatter,
                              description=f"{help_text}.\n\nExamples:\n  {EXAMPLES[name]}")
        g[name] = p.add_subparsers(dest="admin_command", metavar="COMMAND")
        g[name].required = True

    t = g["tenants"]
    _cmd(t, "list", tenants_list, "list the tenants", "magnetar admin tenants list")
    _cmd(t, "get", tenants_get, "show a tenant", "magnetar admin tenants get public", A("tenant"))
    _cmd(t, "create", tenants_create, "create a tenant", "magnetar admin tenants create acme",
         A("tenant"), A("-r", "--admin-roles", help="comma-separated admin roles"),
         A("-c", "--allowed-clusters", help="comma-separated clusters (default: this one)"))
    _cmd(t, "delete", tenants_delete, "delete a tenant without namespaces",
         "magnetar admin tenants delete acme", A("tenant"))

    n = g["namespaces"]
    ex = "magnetar admin namespaces"
    _cmd(n, "list", ns_list, "list a tenant's namespaces", f"{ex} list public", A("tenant"))
    _cmd(n, "create", ns_create, "create a namespace", f"{ex} create acme/orders", NS)
    _cmd(n, "delete", ns_delete, "delete a namespace", f"{ex} delete acme/orders", NS, FORCE)
    _cmd(n, "policies", ns_policies, "show every policy", f"{ex} policies public/default", NS)
    _cmd(n, "topics", ns_topics, "list the namespace's topics", f"{ex} topics public/default", NS)
    _cmd(n, "unload", ns_unload, "unload the namespace's topics", f"{ex} unload public/default", NS)
    _cmd(n, "set-retention", ns_set_retention, "set retention (time and size; -1 = unlimited)",
         f"{ex} set-retention public/default --time 1d --size 10G", NS,
         A("-t", "--time", type=seconds, required=True, help="e.g. 60m, 1d, -1"),
         A("-s", "--size", type=size_bytes, required=True, help="e.g. 512M, 10G, -1"))
    _cmd(n, "get-retention", ns_get("/retention"), "show retention", f"{ex} get-retention public/default", NS)
    _cmd(n, "remove-retention", ns_remove("/retention"), "back to the broker default",
         f"{ex} remove-retention public/default", NS)
    _cmd(n, "set-message-ttl", ns_set_ttl, "set the message TTL", f"{ex} set-message-ttl public/default --messageTTL 1h",
         NS, A("-ttl", "--messageTTL", dest="ttl", type=seconds, required=True, help="e.g. 3600, 1h"))
    _cmd(n, "get-message-ttl", ns_get("/messageTTL"), "show the message TTL",
         f"{ex} get-message-ttl public/default", NS)
    _cmd(n, "remove-message-ttl", ns_remove("/messageTTL"), "back to the broker default",
         f"{ex} remove-message-ttl public/default", NS)
    _cmd(n, "set-deduplication", ns_set_dedup, "turn deduplication on or off",
         f"{ex} set-deduplication public/default --enable", NS,
         A("--enable", "-e", dest="enable", action="store_true", default=True),
         A("--disable", "-d", dest="enable", action="store_false"))
    _cmd(n, "get-deduplication", ns_get("/deduplication"), "show deduplication",
         f"{ex} get-deduplication public/default", NS)
    _cmd(n, "set-backlog-quota", ns_set_backlog_quota, "set the backlog quota (size and/or age)",
         f"{ex} set-backlog-quota public/default --limit 10G --policy producer_exception", NS,
         A("-l", "--limit", type=size_bytes, help="size limit, e.g. 10G"),
         A("-lt", "--limitTime", dest="limit_time", type=seconds, help="age limit, e.g. 1d"),
         A("-p", "--policy", default="producer_request_hold",
           choices=["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]))
    _cmd(n, "get-backlog-quotas", ns_get("/backlogQuotaMap"), "show the backlog quotas",
         f"{ex} get-backlog-quotas public/default", NS)
    _cmd(n, "set-auto-topic-creation", ns_set_auto_topic_creation, "override topic auto-creation",
         f"{ex} set-auto-topic-creation public/default --enable --type partitioned --num-partitions 4", NS,
         A("--enable", "-e", dest="enable", action="store_true", default=True),
         A("--disable", "-d", dest="enable", action="store_false"),
         A("-t", "--type", default="non-partitioned", choices=["non-partitioned", "partitioned"]),
         A("-n", "--num-partitions", type=int, default=1))
    _cmd(n, "get-auto-topic-creation", ns_get("/autoTopicCreation"), "show topic auto-creation",
         f"{ex} get-auto-topic-creation public/default", NS)
    _cmd(n, "set-schema-compatibility-strategy", ns_set_strategy, "set the schema compatibility strategy",
         f"{ex} set-schema-compatibility-strategy public/default --compatibility FULL", NS,
         A("-c", "--compatibility", required=True))
    _cmd(n, "get-schema-compatibility-strategy", ns_get("/schemaCompatibilityStrategy"),
         "show the schema compatibility strategy",
         f"{ex} get-schema-compatibility-strategy public/default", NS)
    _cmd(n, "set-max-producers-per-topic", ns_set_max_producers, "limit producers per topic (0: none)",
         f"{ex} set-max-producers-per-topic public/default --max-producers-per-topic 10", NS,
         A("-p", "--max-producers-per-topic", dest="max", type=int, required=True))
    _cmd(n, "set-max-consumers-per-topic", ns_set_max_consumers, "limit consumers per topic (0: none)",
         f"{ex} set-max-consumers-per-topic public/default --max-consumers-per-topic 10", NS,
         A("-c", "--max-consumers-per-topic", dest="max", type=int, required=True))

    tp = g["topics"]
    ex = "magnetar admin topics"
    _cmd(tp, "list", topics_list, "list a namespace's topics", f"{ex} list public/default", NS)
    _cmd(tp, "create", topics_create, "create a non-partitioned topic", f"{ex} create my-topic", TOPIC)
    _cmd(tp, "create-partitioned-topic", topics_create_partitioned, "create a partitioned topic",
         f"{ex} create-partitioned-topic my-topic -p 4", TOPIC,
         A("-p", "--partitions", type=int, required=True))
    _cmd(tp, "update-partitioned-topic", topics_update_partitioned, "add partitions",
         f"{ex} update-partitioned-topic my-topic -p 8", TOPIC,
         A("-p", "--partitions", type=int, required=True))
    _cmd(tp, "get-partitioned-topic-metadata", topics_metadata, "show the number of partitions",
         f"{ex} get-partitioned-topic-metadata my-topic", TOPIC)
    _cmd(tp, "delete", topics_delete, "delete a topic", f"{ex} delete my-topic -f", TOPIC, FORCE)
    _cmd(tp, "delete-partitioned-topic", topics_delete_partitioned, "delete a partitioned topic",
         f"{ex} delete-partitioned-topic my-topic", TOPIC, FORCE)
    _cmd(tp, "stats", topics_get("/stats"), "show a topic's stats", f"{ex} stats my-topic", TOPIC)
    _cmd(tp, "stats-internal", topics_get("/internalStats"), "show a topic's storage stats",
         f"{ex} stats-internal my-topic", TOPIC)
    _cmd(tp, "partitioned-stats", topics_partitioned_stats, "stats summed over partitions",
         f"{ex} partitioned-stats my-topic --per-partition", TOPIC,
         A("--per-partition", action="store_true"))
    _cmd(tp, "terminate", topics_get("/terminate", "POST"), "stop a topic taking messages",
         f"{ex} terminate my-topic", TOPIC)
    _cmd(tp, "unload", topics_get("/unload", "PUT"), "unload a topic", f"{ex} unload my-topic", TOPIC)
    _cmd(tp, "last-message-id", topics_get("/lastMessageId"), "show the last message id",
         f"{ex} last-message-id my-topic", TOPIC)

    s = g["subscriptions"]
    ex = "magnetar admin subscriptions"
    _cmd(s, "list", topics_get("/subscriptions"), "list a topic's subscriptions", f"{ex} list my-topic", TOPIC)
    _cmd(s, "create", subs_create, "create a subscription", f"{ex} create my-topic -s sub -m earliest",
         TOPIC, SUBN, A("-m", "--messageId", dest="message_id", default="latest",
                        help="latest, earliest or LEDGER:ENTRY"))
    _cmd(s, "delete", subs_delete, "delete a subscription", f"{ex} delete my-topic -s sub", TOPIC, SUBN, FORCE)
    _cmd(s, "skip", subs_skip, "skip N messages", f"{ex} skip my-topic -s sub -n 10", TOPIC, SUBN,
         A("-n", "--count", type=int, required=True))
    _cmd(s, "clear-backlog", subs_clear_backlog, "skip every message", f"{ex} clear-backlog my-topic -s sub",
         TOPIC, SUBN)
    _cmd(s, "reset-cursor", subs_reset_cursor, "move a subscription back in time or to an id",
         f"{ex} reset-cursor my-topic -s sub --time 10m", TOPIC, SUBN,
         A("-t", "--time", type=seconds, help="how far back, e.g. 10m"),
         A("-m", "--messageId", dest="message_id", help="LEDGER:ENTRY"))
    _cmd(s, "expire-messages", subs_expire, "acknowledge messages older than a time",
         f"{ex} expire-messages my-topic -s sub -t 1h", TOPIC, SUBN,
         A("-t", "--expireTime", dest="expire_time", type=seconds, required=True))
    _cmd(s, "peek", subs_peek, "show the next N unacknowledged messages",
         f"{ex} peek my-topic -s sub -n 3", TOPIC, SUBN, A("-n", "--count", type=int, default=1))

    sc = g["schemas"]
    ex = "magnetar admin schemas"
    _cmd(sc, "get", schemas_get, "show a topic's schema", f"{ex} get my-topic", TOPIC,
         A("--version", type=int))
    _cmd(sc, "upload", schemas_upload, "upload a schema", f"{ex} upload my-topic -f schema.json",
         TOPIC, A("-f", "--filename", required=True,
                  help='JSON file: {"type": "AVRO", "schema": "...", "properties": {}}'))
    _cmd(sc, "delete", schemas_delete, "delete a topic's schema", f"{ex} delete my-topic", TOPIC)
    _cmd(sc, "compatibility", schemas_compatibility, "check a schema against the topic's",
         f"{ex} compatibility my-topic -f schema.json", TOPIC, A("-f", "--filename", required=True))


def run(args: argparse.Namespace) -> int:
    api = AdminClient(args.admin_url)
    try:
        result = args.admin_fn(args, api)
    except AdminError as exc:
        print(f"magnetar admin: {exc}", file=sys.stderr)
        return 1
    emit(result, args.output)
    return 0
