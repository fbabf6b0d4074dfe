"""``magnetar admin``: pulsar-admin's everyday commands over the admin REST API.

Groups and commands keep pulsar-admin's names (``topics create-partitioned-topic T -p 4``,
``namespaces set-retention NS --time 1h --size 1G``...); this module builds the parser
(every command's help carries an example) and runs the chosen command, whose work is in
``admin_ops.py``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from magnetar.broker.config.broker_client import token_from_params
from magnetar.cli import admin_ops as ops
from magnetar.cli import admin_policies, admin_transactions
from magnetar.cli.admin_ops import Command
from magnetar.cli.http import AdminClient, AdminError
from magnetar.cli.output import add_late_options, emit
from magnetar.cli.values import boolean, int32

log = logging.getLogger(__name__)

GROUPS = {
    "clusters": "list, show, register, update and remove clusters",
    "tenants": "create, list and delete tenants",
    "namespaces": "create, list and delete namespaces; read and set their policies",
    "topics": "create, list, delete, inspect and manage topics",
    "subscriptions": "create, delete, skip, reset and peek subscriptions",
    "schemas": "read, upload, delete and check topic schemas",
    "brokers": "a cluster's brokers, its leader, a broker's health and configuration",
    "broker-stats": "show a broker's load report",
    "transactions": "transaction coordinators, transactions, buffers and pending acks",
}

EXAMPLES = {
    "clusters": "magnetar admin clusters list\n"
                "  magnetar admin clusters get standalone\n"
                "  magnetar admin clusters update c1 --url http://b1:8080 "
                "--broker-url pulsar://b1:6650",
    "tenants": "magnetar admin tenants create acme\n  magnetar admin tenants list",
    "namespaces": "magnetar admin namespaces create acme/orders\n"
                  "  magnetar admin namespaces set-retention acme/orders --time 1d --size 10G\n"
                  "  magnetar admin namespaces set-message-ttl acme/orders --messageTTL 1h\n"
                  "  magnetar admin namespaces policies acme/orders\n"
                  "  magnetar admin namespaces grant-permission acme/orders --role app "
                  "--actions produce,consume",
    "topics": "magnetar admin topics create-partitioned-topic acme/orders/new -p 4\n"
              "  magnetar admin topics list public/default\n"
              "  magnetar admin topics stats my-topic --output json\n"
              "  magnetar admin topics peek-messages my-topic -s sub -n 3\n"
              "  magnetar admin topics examine-message my-topic -i earliest -m 1",
    "subscriptions": "magnetar admin subscriptions list my-topic\n"
                     "  magnetar admin subscriptions reset-cursor my-topic -s sub --time 10m\n"
                     "  magnetar admin subscriptions peek my-topic -s sub -n 3",
    "schemas": "magnetar admin schemas upload my-topic -f schema.json\n"
               "  magnetar admin schemas get my-topic",
    "brokers": "magnetar admin brokers list standalone\n"
               "  magnetar admin brokers healthcheck\n"
               "  magnetar admin brokers get-runtime-config\n"
               "  magnetar admin brokers leader-broker",
    "broker-stats": "magnetar admin broker-stats load-report --output json",
    "transactions": admin_transactions.EXAMPLE,
}


def _cmd(group: argparse._SubParsersAction[argparse.ArgumentParser], name: str, fn: Command,
         help_text: str, example: str, *args: tuple[tuple[str, ...], dict[str, Any]]) -> None:
    p = group.add_parser(name, help=help_text, description=f"{help_text}\n\nExample:\n  {example}",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    for flags, kwargs in args:
        p.add_argument(*flags, **kwargs)
    add_late_options(p, "--admin-url", "the broker's web service URL")
    own = {flag for flags, _ in args for flag in flags}
    add_security_options(p, late=True, skip=own)
    p.set_defaults(admin_fn=fn)


def A(*flags: str, **kwargs: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return flags, kwargs


TOPIC = A("topic", help="topic name (short names are persistent://public/default/NAME)")
NS = A("namespace", help="tenant/namespace")
SUBN = A("-s", "--subscription", required=True, help="subscription name")
FORCE = A("-f", "--force", action="store_true", help="even while clients are connected")


SECURITY_EXAMPLE = ("magnetar admin --admin-url https://localhost:8443 --token-file admin.jwt "
                    "--tls-trust-certs-file-path ca.pem tenants list")


def add_security_options(parser: argparse.ArgumentParser, late: bool = False,
                         skip: set[str] | frozenset[str] = frozenset()) -> None:
    """Credentials and TLS trust for a secured broker (pulsar-admin's names where it has them).
    ``late``: on a leaf command too, so they may follow its arguments (given earlier, they
    still count), but for the flags in ``skip``, which the leaf command has for itself (as
    pulsar-admin's ``clusters create --tls-allow-insecure``: the record's, not the call's)."""
    g = parser.add_argument_group(
        "security", f"for a broker with authentication or TLS, e.g.\n  {SECURITY_EXAMPLE}")
    if late:
        g.argument_default = argparse.SUPPRESS
    g.add_argument("--token", help="a JWT sent as 'Authorization: Bearer' "
                   "(e.g. --token $(cat admin.jwt)); also --auth-params token:JWT")
    g.add_argument("--token-file", help="a file holding the JWT (e.g. --token-file admin.jwt)")
    g.add_argument("--auth-params", help="pulsar-admin style: token:JWT or file:///path/to/jwt")
    g.add_argument("--tls-trust-certs-file-path", dest="tls_trust_certs",
                   help="PEM file of the CAs the broker's certificate must chain to "
                        "(e.g. --tls-trust-certs-file-path ca.pem)")
    g.add_argument("--tls-cert-file", help="client certificate for TLS authentication "
                   "(e.g. --tls-cert-file admin.cert.pem --tls-key-file admin.key.pem)")
    g.add_argument("--tls-key-file", help="the client certificate's private key")
    if "--tls-allow-insecure" not in skip:
        g.add_argument("--tls-allow-insecure", action="store_true",
                       help="do not verify the broker's certificate (testing only)")


def token_of(args: argparse.Namespace) -> str | None:
    """The token from --token, --token-file or --auth-params (token:JWT, file:///path)."""
    if getattr(args, "token", None):
        return str(args.token).strip()
    if getattr(args, "token_file", None):
        with open(args.token_file) as f:
            return f.read().strip()
    params = getattr(args, "auth_params", None)
    if params:
        return token_from_params(str(params))  # the broker's brokerClient parsing
    return None


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               common: list[argparse.ArgumentParser]) -> None:
    admin = sub.add_parser(
        "admin", parents=common, help="administer a broker over its REST API (like pulsar-admin)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Administer tenants, namespaces, topics, subscriptions and schemas over the "
                    "broker's admin REST API.\n\nExamples:\n  " + "\n  ".join(EXAMPLES.values())
                    + "\n\nA broker with a token and TLS:\n  " + SECURITY_EXAMPLE)
    admin.add_argument("--admin-url", default=os.environ.get("MAGNETAR_ADMIN_URL", "http://localhost:8080"),
                       help="the broker's web service URL (default $MAGNETAR_ADMIN_URL, else "
                            "http://localhost:8080; "
                            "https://host:8443 for webServicePortTls)")
    add_security_options(admin)
    groups = admin.add_subparsers(dest="group", metavar="GROUP")
    groups.required = True
    g: dict[str, argparse._SubParsersAction[argparse.ArgumentParser]] = {}
    for name, help_text in GROUPS.items():
        p = groups.add_parser(name, help=help_text, formatter_class=argparse.RawDescriptionHelpFormatter,
                              description=f"{help_text}.\n\nExamples:\n  {EXAMPLES[name]}")
        g[name] = p.add_subparsers(dest="admin_command", metavar="COMMAND")
        g[name].required = True
    admin_policies.add_commands(g, _cmd)  # rate limits and other multi-tenant policies
    admin_transactions.add_commands(g, _cmd)  # transactions (admin_transactions.py)

    t = g["tenants"]
    _cmd(t, "list", ops.tenants_list, "list the tenants", "magnetar admin tenants list")
    _cmd(t, "get", ops.tenants_get, "show a tenant", "magnetar admin tenants get public", A("tenant"))
    _cmd(t, "create", ops.tenants_create, "create a tenant", "magnetar admin tenants create acme",
         A("tenant"), A("-r", "--admin-roles", help="comma-separated admin roles"),
         A("-c", "--allowed-clusters", help="comma-separated clusters (default: this one)"))
    _cmd(t, "delete", ops.tenants_delete, "delete a tenant without namespaces",
         "magnetar admin tenants delete acme", A("tenant"))

    n = g["namespaces"]
    ex = "magnetar admin namespaces"
    _cmd(n, "list", ops.ns_list, "list a tenant's namespaces", f"{ex} list public", A("tenant"))
    _cmd(n, "create", ops.ns_create, "create a namespace", f"{ex} create acme/orders", NS)
    _cmd(n, "delete", ops.ns_delete, "delete a namespace", f"{ex} delete acme/orders", NS, FORCE)
    _cmd(n, "policies", ops.ns_policies, "show every policy", f"{ex} policies public/default", NS)
    _cmd(n, "topics", ops.ns_topics, "list the namespace's topics", f"{ex} topics public/default", NS)
    _cmd(n, "unload", ops.ns_unload, "unload the namespace's topics (or one bundle)",
         f"{ex} unload public/default --bundle 0x00000000_0x40000000", NS,
         A("-b", "--bundle", help="only this bundle (0xLLLLLLLL_0xUUUUUUUU)"),
         A("-d", "--destinationBroker", dest="destination_broker",
           help="the broker (host:port) to hand the bundle to"))
    _cmd(n, "bundles", ops.ns_bundles, "show the namespace's bundles", f"{ex} bundles public/default", NS)
    _cmd(n, "split-bundle", ops.ns_split_bundle, "split a bundle in two",
         f"{ex} split-bundle public/default --bundle 0x00000000_0x40000000", NS,
         A("-b", "--bundle", required=True, help="the bundle (0xLLLLLLLL_0xUUUUUUUU)"),
         A("-u", "--unload", action="store_true", help="unload the new bundles"),
         A("--split-algorithm-name", help="range_equally_divide or topic_count_equally_divide"))
    _cmd(n, "set-retention", ops.ns_set_retention, "set retention (time and size; -1 = unlimited)",
         f"{ex} set-retention public/default --time 1d --size 10G", NS,
         A("-t", "--time", type=ops.seconds, required=True, help="e.g. 60m, 1d, -1"),
         A("-s", "--size", type=ops.size_bytes, required=True, help="e.g. 512M, 10G, -1"))
    _cmd(n, "get-retention", ops.ns_get("/retention"), "show the namespace's own retention (null: it sets none)", f"{ex} get-retention public/default", NS)
    _cmd(n, "remove-retention", ops.ns_remove("/retention"), "back to the broker default",
         f"{ex} remove-retention public/default", NS)
    _cmd(n, "set-message-ttl", ops.ns_set_ttl, "set the message TTL", f"{ex} set-message-ttl public/default --messageTTL 1h",
         NS, A("-ttl", "--messageTTL", dest="ttl", type=ops.seconds, required=True, help="e.g. 3600, 1h"))
    _cmd(n, "get-message-ttl", ops.ns_get("/messageTTL"), "show the namespace's own message TTL (null: it sets none)",
         f"{ex} get-message-ttl public/default", NS)
    _cmd(n, "remove-message-ttl", ops.ns_remove("/messageTTL"), "back to the broker default",
         f"{ex} remove-message-ttl public/default", NS)
    _cmd(n, "set-deduplication", ops.ns_set_dedup, "turn deduplication on or off",
         f"{ex} set-deduplication public/default --enable", NS,
         A("--enable", "-e", dest="enable", action="store_true", default=True),
         A("--disable", "-d", dest="enable", action="store_false"))
    _cmd(n, "get-deduplication", ops.ns_get("/deduplication"), "show whether the namespace turns deduplication on (null: it sets nothing)",
         f"{ex} get-deduplication public/default", NS)
    _cmd(n, "set-backlog-quota", ops.ns_set_backlog_quota, "set the backlog quota (size and/or age)",
         f"{ex} set-backlog-quota public/default --limit 10G --policy producer_exception", NS,
         A("-l", "--limit", type=ops.size_bytes, help="size limit, e.g. 10G"),
         A("-lt", "--limitTime", dest="limit_time", type=ops.seconds, help="age limit, e.g. 1d"),
         A("-p", "--policy", default="producer_request_hold",
           choices=["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]))
    _cmd(n, "get-backlog-quotas", ops.ns_get("/backlogQuotaMap"), "show the namespace's own backlog quotas ({}: none)",
         f"{ex} get-backlog-quotas public/default", NS)
    _cmd(n, "set-auto-topic-creation", ops.ns_set_auto_topic_creation, "override topic auto-creation",
         f"{ex} set-auto-topic-creation public/default --enable --type partitioned --num-partitions 4", NS,
         A("--enable", "-e", dest="enable", action="store_true", default=True),
         A("--disable", "-d", dest="enable", action="store_false"),
         A("-t", "--type", default="non-partitioned", choices=["non-partitioned", "partitioned"]),
         A("-n", "--num-partitions", type=int32, default=1))
    _cmd(n, "get-auto-topic-creation", ops.ns_get("/autoTopicCreation"), "show the namespace's own topic auto-creation override (null: none)",
         f"{ex} get-auto-topic-creation public/default", NS)
    _cmd(n, "set-schema-compatibility-strategy", ops.ns_set_strategy, "set the schema compatibility strategy",
         f"{ex} set-schema-compatibility-strategy public/default --compatibility FULL", NS,
         A("-c", "--compatibility", required=True))
    _cmd(n, "get-schema-compatibility-strategy", ops.ns_get("/schemaCompatibilityStrategy"),
         "show the schema compatibility strategy",
         f"{ex} get-schema-compatibility-strategy public/default", NS)
    _cmd(n, "set-max-producers-per-topic", ops.ns_set_max_producers, "limit producers per topic (0: none)",
         f"{ex} set-max-producers-per-topic public/default --max-producers-per-topic 10", NS,
         A("-p", "--max-producers-per-topic", dest="max", type=int32, required=True))
    _cmd(n, "set-max-consumers-per-topic", ops.ns_set_max_consumers, "limit consumers per topic (0: none)",
         f"{ex} set-max-consumers-per-topic public/default --max-consumers-per-topic 10", NS,
         A("-c", "--max-consumers-per-topic", dest="max", type=int32, required=True))

    _cmd(n, "permissions", ops.ns_permissions, "show the roles granted actions on the namespace",
         f"{ex} permissions acme/orders", NS)
    _cmd(n, "grant-permission", ops.ns_grant, "grant a role actions on the namespace",
         f"{ex} grant-permission acme/orders --role app --actions produce,consume", NS,
         A("--role", required=True, help="the role (a token's subject, a certificate's CN)"),
         A("--actions", required=True, help="comma-separated: produce, consume (functions, "
           "sources, sinks, packages are stored only)"))
    _cmd(n, "revoke-permission", ops.ns_revoke, "revoke a role's actions on the namespace",
         f"{ex} revoke-permission acme/orders --role app", NS, A("--role", required=True))

    tp = g["topics"]
    ex = "magnetar admin topics"
    _cmd(tp, "permissions", ops.topics_permissions,
         "show the roles allowed actions on a topic (namespace grants included)",
         f"{ex} permissions acme/orders/new", TOPIC)
    _cmd(tp, "grant-permission", ops.topics_grant, "grant a role actions on a topic",
         f"{ex} grant-permission acme/orders/new --role app --actions consume", TOPIC,
         A("--role", required=True, help="the role (a token's subject, a certificate's CN)"),
         A("--actions", required=True, help="comma-separated: produce, consume"))
    _cmd(tp, "revoke-permission", ops.topics_revoke, "revoke a role's actions on a topic",
         f"{ex} revoke-permission acme/orders/new --role app", TOPIC, A("--role", required=True))
    _cmd(tp, "list", ops.topics_list, "list a namespace's topics (in name order; one page "
         "with --limit and --after)", f"{ex} list public/default --limit 1000 --after "
         "persistent://public/default/t999", NS,
         A("--limit", type=int32, help="at most this many names (a page)"),
         A("--after", help="only the names past this one (the last of the page before)"))
    _cmd(tp, "list-partitioned-topics", ops.topics_list_partitioned, "list a namespace's "
         "partitioned topics", f"{ex} list-partitioned-topics public/default", NS)
    _cmd(tp, "create", ops.topics_create, "create a non-partitioned topic", f"{ex} create my-topic", TOPIC)
    _cmd(tp, "create-partitioned-topic", ops.topics_create_partitioned, "create a partitioned topic",
         f"{ex} create-partitioned-topic my-topic -p 4", TOPIC,
         A("-p", "--partitions", type=int32, required=True))
    _cmd(tp, "update-partitioned-topic", ops.topics_update_partitioned, "add partitions",
         f"{ex} update-partitioned-topic my-topic -p 8", TOPIC,
         A("-p", "--partitions", type=int32, required=True))
    _cmd(tp, "get-partitioned-topic-metadata", ops.topics_metadata, "show the number of partitions",
         f"{ex} get-partitioned-topic-metadata my-topic", TOPIC)
    _cmd(tp, "delete", ops.topics_delete, "delete a topic", f"{ex} delete my-topic -f", TOPIC, FORCE)
    _cmd(tp, "delete-partitioned-topic", ops.topics_delete_partitioned, "delete a partitioned topic",
         f"{ex} delete-partitioned-topic my-topic", TOPIC, FORCE)
    _cmd(tp, "stats", ops.topics_get("/stats"), "show a topic's stats", f"{ex} stats my-topic", TOPIC)
    _cmd(tp, "stats-internal", ops.topics_get("/internalStats"), "show a topic's storage stats",
         f"{ex} stats-internal my-topic", TOPIC)
    _cmd(tp, "partitioned-stats", ops.topics_partitioned_stats, "stats summed over partitions",
         f"{ex} partitioned-stats my-topic --per-partition", TOPIC,
         A("--per-partition", action="store_true"))
    _cmd(tp, "terminate", ops.topics_get("/terminate", "POST"), "stop a topic taking messages",
         f"{ex} terminate my-topic", TOPIC)
    _cmd(tp, "unload", ops.topics_get("/unload", "PUT"), "unload a topic", f"{ex} unload my-topic", TOPIC)
    _cmd(tp, "lookup", ops.topics_lookup, "which broker serves a topic", f"{ex} lookup my-topic", TOPIC)

    b = g["brokers"]
    _cmd(b, "list", ops.brokers_list, "list the cluster's live brokers (GET /admin/v2/brokers"
         "[/CLUSTER])", "magnetar admin brokers list standalone",
         A("cluster", nargs="?", help="the cluster (default: the one the broker is in)"))
    _cmd(b, "leader-broker", ops.brokers_leader, "show the cluster's leader broker",
         "magnetar admin brokers leader-broker")
    _cmd(g["broker-stats"], "load-report", ops.broker_stats_load_report,
         "show this broker's load report (what the load manager reads)",
         "magnetar admin broker-stats load-report --output json")
    _cmd(tp, "compact", ops.topics_get("/compaction", "PUT"), "start compacting a topic",
         f"{ex} compact my-topic", TOPIC)
    _cmd(tp, "compaction-status", ops.topics_get("/compaction"), "show the compaction status",
         f"{ex} compaction-status my-topic", TOPIC)
    _cmd(tp, "last-message-id", ops.topics_get("/lastMessageId"), "show the last message id",
         f"{ex} last-message-id my-topic", TOPIC)

    add_operator_commands(g)

    s = g["subscriptions"]
    ex = "magnetar admin subscriptions"
    _cmd(s, "list", ops.topics_get("/subscriptions"), "list a topic's subscriptions", f"{ex} list my-topic", TOPIC)
    _cmd(s, "create", ops.subs_create, "create a subscription", f"{ex} create my-topic -s sub -m earliest",
         TOPIC, SUBN, A("-m", "--messageId", dest="message_id", default="latest",
                        help="latest, earliest or LEDGER:ENTRY"))
    _cmd(s, "delete", ops.subs_delete, "delete a subscription", f"{ex} delete my-topic -s sub", TOPIC, SUBN, FORCE)
    _cmd(s, "skip", ops.subs_skip, "skip N messages", f"{ex} skip my-topic -s sub -n 10", TOPIC, SUBN,
         A("-n", "--count", type=int32, required=True))
    _cmd(s, "clear-backlog", ops.subs_clear_backlog, "skip every message", f"{ex} clear-backlog my-topic -s sub",
         TOPIC, SUBN)
    _cmd(s, "reset-cursor", ops.subs_reset_cursor, "move a subscription back in time or to an id",
         f"{ex} reset-cursor my-topic -s sub --time 10m", TOPIC, SUBN,
         A("-t", "--time", type=ops.seconds, help="how far back, e.g. 10m"),
         A("-m", "--messageId", dest="message_id", help="LEDGER:ENTRY"))
    _cmd(s, "expire-messages", ops.subs_expire, "acknowledge messages older than a time",
         f"{ex} expire-messages my-topic -s sub -t 1h", TOPIC, SUBN,
         A("-t", "--expireTime", dest="expire_time", type=ops.seconds, required=True))
    _cmd(s, "peek", ops.subs_peek, "show the next N unacknowledged messages",
         f"{ex} peek my-topic -s sub -n 3", TOPIC, SUBN, A("-n", "--count", type=int32, default=1))

    sc = g["schemas"]
    ex = "magnetar admin schemas"
    _cmd(sc, "get", ops.schemas_get, "show a topic's schema", f"{ex} get my-topic", TOPIC,
         A("--version", type=int32))
    _cmd(sc, "upload", ops.schemas_upload, "upload a schema", f"{ex} upload my-topic -f schema.json",
         TOPIC, A("-f", "--filename", required=True,
                  help='JSON file: {"type": "AVRO", "schema": "...", "properties": {}}'))
    _cmd(sc, "delete", ops.schemas_delete, "delete a topic's schema", f"{ex} delete my-topic", TOPIC)
    _cmd(sc, "compatibility", ops.schemas_compatibility, "check a schema against the topic's",
         f"{ex} compatibility my-topic -f schema.json", TOPIC, A("-f", "--filename", required=True))


def add_operator_commands(g: dict[str, argparse._SubParsersAction[argparse.ArgumentParser]]) -> None:
    """The commands a Pulsar operator types first, under pulsar-admin's names: clusters,
    broker health and configuration, a topic's subscriptions and messages (the
    ``subscriptions`` group keeps its own names for the same operations)."""
    c = g["clusters"]
    ex = "magnetar admin clusters"
    cluster = A("cluster", help="the cluster's name")
    urls = (A("--url", help="the cluster's web service URL, every broker: "
                            "http://b1:8080,b2:8080,b3:8080"),
            A("--url-secure", help="its HTTPS URL, e.g. https://b1:8443,b2:8443"),
            A("--broker-url", help="its binary protocol URL, every broker: "
                                   "pulsar://b1:6650,b2:6650,b3:6650"),
            A("--broker-url-secure", help="its TLS binary protocol URL, e.g. "
                                          "pulsar+ssl://b1:6651,b2:6651"),
            # how other clusters' replicators reach it (pulsar-admin's flag names)
            A("--auth-plugin", help="authentication plugin to reach it, e.g. "
                                    "org.apache.pulsar.client.impl.auth.AuthenticationToken"),
            A("--auth-parameters", help="the plugin's parameters, e.g. token:... or "
                                        "file:///path/to/token"),
            A("--tls-enable", nargs="?", const=True, type=boolean, metavar="BOOL",
              help="reach it over TLS (brokerClientTlsEnabled; alone: true)"),
            A("--tls-allow-insecure", nargs="?", const=True, type=boolean, metavar="BOOL",
              dest="cluster_tls_allow_insecure",
              help="accept its certificate unchecked (tlsAllowInsecureConnection; alone: true; "
                   "before the command: this call's own)"),
            A("--tls-trust-certs-filepath", help="PEM file of the CAs its certificate must "
                                                 "chain to (brokerClientTrustCertsFilePath)"),
            A("--tls-key-filepath", help="client private key (brokerClientKeyFilePath)"),
            A("--tls-certs-filepath", help="client certificate "
                                           "(brokerClientCertificateFilePath)"))
    _cmd(c, "list", ops.clusters_list, "list the clusters (GET /admin/v2/clusters)", f"{ex} list")
    _cmd(c, "get", ops.clusters_get, "show a cluster's URLs (GET /admin/v2/clusters/CLUSTER)",
         f"{ex} get standalone", cluster)
    _cmd(c, "create", ops.clusters_create, "register a cluster (PUT /admin/v2/clusters/CLUSTER)",
         f"{ex} create c2 --url http://s1:8080,s2:8080,s3:8080 "
         "--broker-url pulsar://s1:6650,s2:6650,s3:6650",
         cluster, *urls)
    _cmd(c, "update", ops.clusters_update, "replace a cluster's URLs with those given, as "
         "pulsar-admin does (POST /admin/v2/clusters/CLUSTER)",
         f"{ex} update c1 --url http://b1:8080,b2:8080 --broker-url pulsar://b1:6650,b2:6650",
         cluster, *urls)
    _cmd(c, "delete", ops.clusters_delete, "remove a registered cluster "
         "(DELETE /admin/v2/clusters/CLUSTER)", f"{ex} delete c2", cluster)

    b = g["brokers"]
    ex = "magnetar admin brokers"
    _cmd(b, "healthcheck", ops.brokers_healthcheck, "check that the broker serves: prints ok "
         "(GET /admin/v2/brokers/health)", f"{ex} healthcheck")
    _cmd(b, "get-runtime-config", ops.brokers_runtime_config, "show every setting the broker "
         "runs with, credentials masked (GET /admin/v2/brokers/configuration/runtime)",
         f"{ex} get-runtime-config --output json")

    n = g["namespaces"]
    ex = "magnetar admin namespaces"
    _cmd(n, "get-clusters", ops.ns_get("/replication"), "show the namespace's replication "
         "clusters (GET /admin/v2/namespaces/NS/replication)", f"{ex} get-clusters public/default", NS)
    _cmd(n, "set-clusters", ops.ns_set_clusters, "set the namespace's replication clusters "
         "(its topics are replicated to them: docs/geo-replication.md) (POST "
         "/admin/v2/namespaces/NS/replication)",
         f"{ex} set-clusters public/default --clusters standalone", NS,
         A("-c", "--clusters", required=True, help="comma-separated cluster names"))

    tp = g["topics"]
    ex = "magnetar admin topics"
    rest = "/admin/v2/persistent/TENANT/NS/TOPIC"
    _cmd(tp, "subscriptions", ops.topics_get("/subscriptions"), "list a topic's subscriptions "
         f"(GET {rest}/subscriptions)", f"{ex} subscriptions my-topic", TOPIC)
    _cmd(tp, "create-subscription", ops.subs_create, "create a subscription "
         f"(PUT {rest}/subscription/SUB)", f"{ex} create-subscription my-topic -s sub -m earliest",
         TOPIC, SUBN, A("-m", "--messageId", dest="message_id", default="latest",
                        help="where it starts: latest (default), earliest or LEDGER:ENTRY"))
    _cmd(tp, "unsubscribe", ops.subs_delete, "delete a subscription "
         f"(DELETE {rest}/subscription/SUB)", f"{ex} unsubscribe my-topic -s sub", TOPIC, SUBN, FORCE)
    _cmd(tp, "skip", ops.subs_skip, "skip N messages of a subscription "
         f"(POST {rest}/subscription/SUB/skip/N)", f"{ex} skip my-topic -s sub -n 10", TOPIC, SUBN,
         A("-n", "--count", type=int32, required=True))
    _cmd(tp, "clear-backlog", ops.subs_clear_backlog, "skip every message of a subscription "
         f"(POST {rest}/subscription/SUB/skip_all)", f"{ex} clear-backlog my-topic -s sub", TOPIC, SUBN)
    _cmd(tp, "reset-cursor", ops.subs_reset_cursor, "move a subscription back in time or to an "
         f"id (POST {rest}/subscription/SUB/resetcursor/MS)",
         f"{ex} reset-cursor my-topic -s sub --time 10m", TOPIC, SUBN,
         A("-t", "--time", type=ops.seconds, help="how far back, e.g. 10m"),
         A("-m", "--messageId", dest="message_id", help="LEDGER:ENTRY"))
    _cmd(tp, "expire-messages", ops.subs_expire, "acknowledge a subscription's messages older "
         f"than a time (POST {rest}/subscription/SUB/expireMessages/S)",
         f"{ex} expire-messages my-topic -s sub -t 1h", TOPIC, SUBN,
         A("-t", "--expireTime", dest="expire_time", type=ops.seconds, required=True))
    _cmd(tp, "peek-messages", ops.subs_peek, "show a subscription's next N unacknowledged "
         f"messages (GET {rest}/subscription/SUB/position/I)",
         f"{ex} peek-messages my-topic -s sub -n 3", TOPIC, SUBN,
         A("-n", "--count", type=int32, default=1, help="how many (default 1)"))
    _cmd(tp, "examine-message", ops.topics_examine_message, "show the Nth stored message from "
         f"the earliest or the latest (GET {rest}/examinemessage)",
         f"{ex} examine-message my-topic --initialPosition earliest --messagePosition 1", TOPIC,
         A("-i", "--initialPosition", dest="initial_position", default="latest",
           choices=["earliest", "latest"], help="count from here (default latest)"),
         A("-m", "--messagePosition", dest="message_position", type=int32, default=1,
           help="which message, 1 the first (default 1)"))
    _cmd(tp, "get-message-by-id", ops.topics_message_by_id, "show one stored message by its id "
         f"(GET {rest}/ledger/L/entry/E)", f"{ex} get-message-by-id my-topic -l 12 -e 0", TOPIC,
         A("-l", "--ledgerId", dest="ledger_id", type=int, required=True, help="the ledger id"),
         A("-e", "--entryId", dest="entry_id", type=int, required=True, help="the entry id"))


def run(args: argparse.Namespace) -> int:
    """Run the chosen command: 0, or a one-line error on stderr and 1 (2: bad URL or
    credentials options). Never a traceback: an unexpected failure is reported in one line
    too (``--log-level DEBUG`` shows where it came from)."""
    try:
        api = AdminClient(args.admin_url, token=token_of(args),
                          trust_certs=args.tls_trust_certs, cert_file=args.tls_cert_file,
                          key_file=args.tls_key_file, allow_insecure=args.tls_allow_insecure)
    except (OSError, ValueError) as exc:
        print(f"magnetar admin: {_one_line(exc)}", file=sys.stderr)
        return 2
    try:
        result = args.admin_fn(args, api)
    except AdminError as exc:
        print(f"magnetar admin: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        log.debug("admin command failed", exc_info=True)
        print(f"magnetar admin: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    emit(result, args.output)
    return 0


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc)
