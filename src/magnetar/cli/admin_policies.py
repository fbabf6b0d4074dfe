"""``magnetar admin`` commands for the multi-tenant limits, with pulsar-admin's names and
flags: ``namespaces set-publish-rate / get-publish-rate / remove-publish-rate``, the same
for ``dispatch-rate``, ``subscription-dispatch-rate``, ``replicator-dispatch-rate`` and
``subscribe-rate``, the
consumer and subscription limits, and the topic-level policies (``topics set-retention /
set-message-ttl / set-backlog-quota / set-publish-rate / set-dispatch-rate /
set-max-unacked-messages-on-consumer / set-max-subscriptions-per-topic / set-subscribe-rate /
set-inactive-topic-policies`` ... with ``get-`` (``--applied``) and ``remove-``). Each
command is one call of the admin REST API (the path is in its help).

`add_commands` is handed ``admin.py``'s command builder and groups, so this module adds
commands without that one importing more than its name.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from magnetar.cli.admin_ops import Command, namespace, seconds, size_bytes, topic_path
from magnetar.cli.http import AdminClient, AdminError
from magnetar.cli.values import int32

Arg = tuple[tuple[str, ...], dict[str, Any]]
#: ``admin._cmd``: group, name, function, help, example, arguments
CommandMaker = Callable[..., None]
Groups = dict[str, "argparse._SubParsersAction[argparse.ArgumentParser]"]

NS: Arg = (("namespace",), {"help": "tenant/namespace"})


def _a(*flags: str, **kwargs: Any) -> Arg:
    return flags, kwargs


def _ns_path(a: argparse.Namespace, policy: str) -> str:
    return f"/admin/v2/namespaces/{namespace(a.namespace)}/{policy}"


def _get(policy: str) -> Command:
    return lambda a, api: api.call("GET", _ns_path(a, policy))


def _remove(policy: str) -> Command:
    return lambda a, api: api.call("DELETE", _ns_path(a, policy))


def ns_set_publish_rate(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _ns_path(a, "publishRate"),
                    {"publishThrottlingRateInMsg": a.msg_rate,
                     "publishThrottlingRateInByte": a.byte_rate})


def _set_dispatch_rate(policy: str) -> Command:
    return lambda a, api: api.call("POST", _ns_path(a, policy), {
        "dispatchThrottlingRateInMsg": a.msg_rate, "dispatchThrottlingRateInByte": a.byte_rate,
        "ratePeriodInSecond": a.period, "relativeToPublishRate": a.relative})


def ns_set_subscribe_rate(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _ns_path(a, "subscribeRate"),
                    {"subscribeThrottlingRatePerConsumer": a.rate, "ratePeriodInSecond": a.period})


def _set_int(policy: str) -> Command:
    return lambda a, api: api.call("POST", _ns_path(a, policy), a.value)


def _inactive_setter(method: str, path: Callable[[argparse.Namespace], str]) -> Command:
    """Set the inactive topic policies (of a namespace or a topic) from the flags."""

    def run(a: argparse.Namespace, api: AdminClient) -> Any:
        if a.enable is None:
            raise AdminError(0, "give --enable-delete-while-inactive (-e) or "
                                "--disable-delete-while-inactive (-d)")
        return api.call(method, path(a), {
            "deleteWhileInactive": a.enable, "maxInactiveDurationSeconds": a.duration,
            "inactiveTopicDeleteMode": a.mode})
    return run


ns_set_inactive_topic_policies = _inactive_setter(
    "POST", lambda a: _ns_path(a, "inactiveTopicPolicies"))


def _inactive_args() -> list[Arg]:
    return [
        _a("-e", "--enable-delete-while-inactive", dest="enable", action="store_true",
           default=None),
        _a("-d", "--disable-delete-while-inactive", dest="enable", action="store_false"),
        _a("-t", "--max-inactive-duration", dest="duration", type=seconds, required=True,
           help="e.g. 600, 10m, 1h"),
        _a("-m", "--delete-mode", dest="mode", required=True,
           choices=["delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"]),
    ]


def _dispatch_args() -> list[Arg]:
    return [
        _a("-md", "--msg-dispatch-rate", dest="msg_rate", type=int32, default=-1,
           help="messages per period (default -1: no limit)"),
        _a("-bd", "--byte-dispatch-rate", dest="byte_rate", type=int, default=-1,
           help="bytes per period (default -1: no limit)"),
        _a("-dt", "--dispatch-rate-period", dest="period", type=int32, default=1,
           help="the period in seconds (default 1)"),
        _a("-rp", "--relative-to-publish-rate", dest="relative", action="store_true",
           help="relative to the publish rate (refused: not implemented)"),
    ]


def _t_path(a: argparse.Namespace, policy: str, query: str = "") -> str:
    path = f"/admin/v2/{topic_path(a.topic)}/{policy}"
    if getattr(a, "applied", False):
        query = f"{query}&applied=true" if query else "applied=true"
    return f"{path}?{query}" if query else path


def _t_get(policy: str) -> Command:
    return lambda a, api: api.call("GET", _t_path(a, policy))


def _t_remove(policy: str) -> Command:
    return lambda a, api: api.call("DELETE", _t_path(a, policy))


def _t_post(policy: str, body: Callable[[argparse.Namespace], Any]) -> Command:
    return lambda a, api: api.call("POST", _t_path(a, policy), body(a))


def topics_set_retention(a: argparse.Namespace, api: AdminClient) -> Any:
    minutes = a.time if a.time < 0 else a.time // 60
    mb = a.size if a.size < 0 else a.size // (1 << 20)
    return api.call("POST", _t_path(a, "retention"),
                    {"retentionTimeInMinutes": minutes, "retentionSizeInMB": mb})


def topics_set_ttl(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", _t_path(a, "messageTTL", f"messageTTL={a.ttl}"))


def topics_set_backlog_quota(a: argparse.Namespace, api: AdminClient) -> Any:
    if a.type == "message_age":
        body: dict[str, Any] = {"limitTime": a.limit_time if a.limit_time is not None else -1}
    else:
        body = {"limitSize": a.limit if a.limit is not None else -1}
    body["policy"] = a.policy
    return api.call("POST", _t_path(a, "backlogQuota", f"backlogQuotaType={a.type}"), body)


def topics_remove_backlog_quota(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("DELETE", _t_path(a, "backlogQuota", f"backlogQuotaType={a.type}"))


def _dispatch_body(a: argparse.Namespace) -> dict[str, Any]:
    return {"dispatchThrottlingRateInMsg": a.msg_rate, "dispatchThrottlingRateInByte": a.byte_rate,
            "ratePeriodInSecond": a.period, "relativeToPublishRate": a.relative}


TOPIC: Arg = (("topic",), {"help": "topic name (short names are persistent://public/default/NAME)"})
APPLIED: Arg = (("-ap", "--applied"), {"action": "store_true",
                                       "help": "what applies (else the topic's own value)"})
QUOTA_TYPE: Arg = (("-t", "--type"), {"default": "destination_storage",
                                      "choices": ["destination_storage", "message_age"]})


def _topic_commands(groups: Groups, cmd: CommandMaker) -> None:
    """Topic-level policies (Pulsar 2.7+): set-/get-/remove- under ``topics``."""
    t = groups["topics"]
    ex = "magnetar admin topics"
    where = "/admin/v2/{persistent|non-persistent}/{tenant}/{ns}/{topic}"

    def trio(name: str, policy: str, setter: Command, what: str, example: str,
             *args: Arg, remove: Command | None = None, get_args: tuple[Arg, ...] = ()) -> None:
        cmd(t, f"set-{name}", setter, f"set the topic's {what} (over its namespace's); "
            f"POST {where}/{policy}", f"{ex} set-{name} my-topic {example}", TOPIC, *args)
        cmd(t, f"get-{name}", _t_get(policy), f"show the topic's {what} (null: it sets none); "
            f"GET {where}/{policy}", f"{ex} get-{name} my-topic --applied", TOPIC, APPLIED,
            *get_args)
        cmd(t, f"remove-{name}", remove or _t_remove(policy), f"remove the topic's {what}; "
            f"DELETE {where}/{policy}", f"{ex} remove-{name} my-topic", TOPIC)

    trio("retention", "retention", topics_set_retention, "retention", "--time 1d --size 10G",
         _a("-t", "--time", type=seconds, required=True, help="e.g. 60m, 1d, -1"),
         _a("-s", "--size", type=size_bytes, required=True, help="e.g. 512M, 10G, -1"))
    trio("message-ttl", "messageTTL", topics_set_ttl, "message TTL", "--ttl 1h",
         _a("-t", "--ttl", type=seconds, required=True, help="e.g. 3600, 1h"))
    cmd(t, "set-backlog-quota", topics_set_backlog_quota,
        f"set a backlog quota of the topic; POST {where}/backlogQuota",
        f"{ex} set-backlog-quota my-topic --limit-size 10G --policy producer_exception", TOPIC,
        _a("-l", "--limit-size", dest="limit", type=size_bytes, help="size limit, e.g. 10G"),
        _a("-lt", "--limitTime", dest="limit_time", type=seconds, help="age limit, e.g. 1d"),
        _a("-p", "--policy", default="producer_request_hold",
           choices=["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]),
        QUOTA_TYPE)
    cmd(t, "get-backlog-quotas", _t_get("backlogQuotaMap"),
        f"show the topic's backlog quotas; GET {where}/backlogQuotaMap",
        f"{ex} get-backlog-quotas my-topic", TOPIC, APPLIED)
    cmd(t, "remove-backlog-quota", topics_remove_backlog_quota,
        f"remove a backlog quota of the topic; DELETE {where}/backlogQuota",
        f"{ex} remove-backlog-quota my-topic -t destination_storage", TOPIC, QUOTA_TYPE)
    trio("publish-rate", "publishRate", _t_post("publishRate", lambda a: {
        "publishThrottlingRateInMsg": a.msg_rate, "publishThrottlingRateInByte": a.byte_rate}),
         "publish rate", "--msg-publish-rate 1000",
         _a("-m", "--msg-publish-rate", dest="msg_rate", type=int32, default=-1),
         _a("-b", "--byte-publish-rate", dest="byte_rate", type=int, default=-1))
    for name, policy in (("dispatch-rate", "dispatchRate"),
                         ("subscription-dispatch-rate", "subscriptionDispatchRate"),
                         ("replicator-dispatch-rate", "replicatorDispatchRate")):
        trio(name, policy, _t_post(policy, _dispatch_body), name.replace("-", " "),
             "--msg-dispatch-rate 1000", *_dispatch_args())
    for name, policy in (("max-unacked-messages-on-consumer", "maxUnackedMessagesOnConsumer"),
                         ("max-unacked-messages-on-subscription",
                          "maxUnackedMessagesOnSubscription")):
        trio(name, policy, _t_post(policy, lambda a: a.value),
             "limit of unacknowledged messages " + name.split("-on-")[1].replace("-", " "),
             "--maxNum 1000",
             _a("-m", "--maxNum", dest="value", type=int32, required=True, help="0: no limit"))
    trio("max-subscriptions-per-topic", "maxSubscriptionsPerTopic",
         _t_post("maxSubscriptionsPerTopic", lambda a: a.value), "limit of subscriptions",
         "--max-subscriptions-per-topic 10",
         _a("-m", "--max-subscriptions-per-topic", dest="value", type=int32, required=True,
            help="0: no limit"))
    trio("subscribe-rate", "subscribeRate", _t_post("subscribeRate", lambda a: {
        "subscribeThrottlingRatePerConsumer": a.rate, "ratePeriodInSecond": a.period}),
         "subscribe rate per consumer", "--subscribe-rate 10 --subscribe-rate-period 30",
         _a("-sr", "--subscribe-rate", dest="rate", type=int32, default=-1,
            help="subscribes per consumer and period (default -1: no limit)"),
         _a("-st", "--subscribe-rate-period", dest="period", type=int32, default=30,
            help="the period in seconds (default 30)"))
    trio("inactive-topic-policies", "inactiveTopicPolicies",
         _inactive_setter("POST", lambda a: _t_path(a, "inactiveTopicPolicies")),
         "inactive topic policies", "-e -t 1h -m delete_when_no_subscriptions",
         *_inactive_args())


def add_commands(groups: Groups, cmd: CommandMaker) -> None:
    """Add the commands to ``groups`` (admin.py's) through ``cmd`` (its ``_cmd``)."""
    _topic_commands(groups, cmd)
    n = groups["namespaces"]
    ex = "magnetar admin namespaces"
    cmd(n, "set-publish-rate", ns_set_publish_rate,
        "limit each topic's publish rate (messages and/or bytes per second; -1: none); "
        "POST .../publishRate",
        f"{ex} set-publish-rate acme/orders --msg-publish-rate 1000", NS,
        _a("-m", "--msg-publish-rate", dest="msg_rate", type=int32, default=-1,
           help="messages per second per topic (default -1: no limit)"),
        _a("-b", "--byte-publish-rate", dest="byte_rate", type=int, default=-1,
           help="payload bytes per second per topic (default -1: no limit)"))
    cmd(n, "get-publish-rate", _get("publishRate"),
        "show the publish rate that applies (null: none); GET .../publishRate",
        f"{ex} get-publish-rate acme/orders", NS)
    cmd(n, "remove-publish-rate", _remove("publishRate"),
        "back to the broker's publish rate; DELETE .../publishRate",
        f"{ex} remove-publish-rate acme/orders", NS)
    for name, policy, what in (
            ("dispatch-rate", "dispatchRate", "each topic's dispatch rate (all its subscriptions)"),
            ("subscription-dispatch-rate", "subscriptionDispatchRate",
             "each subscription's dispatch rate"),
            ("replicator-dispatch-rate", "replicatorDispatchRate",
             "each geo-replicator's dispatch rate (one topic to one remote cluster)")):
        cmd(n, f"set-{name}", _set_dispatch_rate(policy),
            f"limit {what}; POST .../{policy}",
            f"{ex} set-{name} acme/orders --msg-dispatch-rate 1000", NS, *_dispatch_args())
        cmd(n, f"get-{name}", _get(policy), f"show {what} (null: none); GET .../{policy}",
            f"{ex} get-{name} acme/orders", NS)
        cmd(n, f"remove-{name}", _remove(policy),
            f"back to the broker's default; DELETE .../{policy}",
            f"{ex} remove-{name} acme/orders", NS)
    cmd(n, "set-subscribe-rate", ns_set_subscribe_rate,
        "limit the subscribes of each consumer per period; POST .../subscribeRate",
        f"{ex} set-subscribe-rate acme/orders --subscribe-rate 10 --subscribe-rate-period 30",
        NS,
        _a("-sr", "--subscribe-rate", dest="rate", type=int32, default=-1,
           help="subscribes per consumer and period (default -1: no limit)"),
        _a("-st", "--subscribe-rate-period", dest="period", type=int32, default=30,
           help="the period in seconds (default 30)"))
    cmd(n, "get-subscribe-rate", _get("subscribeRate"),
        "show the subscribe rate (null: none); GET .../subscribeRate",
        f"{ex} get-subscribe-rate acme/orders", NS)
    cmd(n, "remove-subscribe-rate", _remove("subscribeRate"),
        "back to the broker's default; DELETE .../subscribeRate",
        f"{ex} remove-subscribe-rate acme/orders", NS)
    for name, policy, flags, what in (
            ("max-unacked-messages-per-consumer", "maxUnackedMessagesPerConsumer",
             ("-c", "--maxUnackedMessagesPerConsumer"),
             "unacknowledged messages a Shared/Key_Shared consumer may hold"),
            ("max-unacked-messages-per-subscription", "maxUnackedMessagesPerSubscription",
             ("-c", "--maxUnackedMessagesPerSubscription"),
             "unacknowledged messages a Shared/Key_Shared subscription may hold"),
            ("max-subscriptions-per-topic", "maxSubscriptionsPerTopic",
             ("-m", "--max-subscriptions-per-topic"), "subscriptions per topic")):
        cmd(n, f"set-{name}", _set_int(policy), f"limit {what} (0: none); POST .../{policy}",
            f"{ex} set-{name} acme/orders {flags[0]} 1000", NS,
            _a(*flags, dest="value", type=int32, required=True, help=f"{what} (0: no limit)"))
        cmd(n, f"get-{name}", _get(policy), f"show the limit of {what}; GET .../{policy}",
            f"{ex} get-{name} acme/orders", NS)
        cmd(n, f"remove-{name}", _remove(policy),
            f"back to the broker's default; DELETE .../{policy}",
            f"{ex} remove-{name} acme/orders", NS)
    cmd(n, "set-subscription-expiration-time", _set_int("subscriptionExpirationTime"),
        "delete durable subscriptions without consumers for this many minutes (0: never); "
        "POST .../subscriptionExpirationTime",
        f"{ex} set-subscription-expiration-time acme/orders -t 1440", NS,
        _a("-t", "--time", dest="value", type=int32, required=True, help="minutes"))
    cmd(n, "get-subscription-expiration-time", _get("subscriptionExpirationTime"),
        "show the subscription expiration time (minutes); GET .../subscriptionExpirationTime",
        f"{ex} get-subscription-expiration-time acme/orders", NS)
    cmd(n, "remove-subscription-expiration-time", _remove("subscriptionExpirationTime"),
        "back to the broker's default; DELETE .../subscriptionExpirationTime",
        f"{ex} remove-subscription-expiration-time acme/orders", NS)
    cmd(n, "set-inactive-topic-policies", ns_set_inactive_topic_policies,
        "delete topics without producers and consumers for a time; "
        "POST .../inactiveTopicPolicies",
        f"{ex} set-inactive-topic-policies acme/orders -e -t 1h -m delete_when_no_subscriptions",
        NS, *_inactive_args())
    cmd(n, "get-inactive-topic-policies", _get("inactiveTopicPolicies"),
        "show the inactive topic policies; GET .../inactiveTopicPolicies",
        f"{ex} get-inactive-topic-policies acme/orders", NS)
    cmd(n, "remove-inactive-topic-policies", _remove("inactiveTopicPolicies"),
        "back to the broker's default; DELETE .../inactiveTopicPolicies",
        f"{ex} remove-inactive-topic-policies acme/orders", NS)
