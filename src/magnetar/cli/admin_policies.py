"""``magnetar admin`` commands for the multi-tenant limits, with pulsar-admin's names and
flags: ``namespaces set-publish-rate / get-publish-rate / remove-publish-rate``, the same
for ``dispatch-rate``, ``subscription-dispatch-rate``, ``replicator-dispatch-rate`` and
``subscribe-rate``, the
consumer and subscription limits, and the topic-level policies (``topics set-retention /
set-message-ttl / set-backlog-quota / set-publish-rate / set-dispatch-rate /
set-max-unacked-messages-on-consumer / set-max-subscriptions-per-topic / set-subscribe-rate /
set-inactive-topic-policies`` ... with ``get-`` (``--applied``) and ``remove-``). Each
command is one call of the admin REST API (the path is in its help).

Most policies come as a trio (``set-X``, ``get-X``, ``remove-X``) at a namespace's or a
topic's level: `_Level` says how a level names its target and its REST path, and each trio
is one row of `_SHARED` (both levels), `_NAMESPACE_ONLY` or `_TOPIC_ONLY`.

`add_commands` is handed ``admin.py``'s command builder and groups, so this module adds
commands without that one importing more than its name.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.cli.admin_ops import (
    Command,
    namespace,
    retention_body,
    seconds,
    size_bytes,
    topic_path,
)
from magnetar.cli.http import AdminClient, AdminError
from magnetar.cli.values import int32

Arg = tuple[tuple[str, ...], dict[str, Any]]
#: ``admin._cmd``: group, name, function, help, example, arguments
CommandMaker = Callable[..., None]
Groups = dict[str, "argparse._SubParsersAction[argparse.ArgumentParser]"]
#: a request body from the parsed arguments
Body = Callable[[argparse.Namespace], Any]


def _a(*flags: str, **kwargs: Any) -> Arg:
    return flags, kwargs


NS: Arg = _a("namespace", help="tenant/namespace")
TOPIC: Arg = _a("topic", help="topic name (short names are persistent://public/default/NAME)")
APPLIED: Arg = _a("-ap", "--applied", action="store_true",
                  help="what applies (else the topic's own value)")
QUOTA_TYPE: Arg = _a("-t", "--type", default="destination_storage",
                     choices=["destination_storage", "message_age"])


def _ns_path(a: argparse.Namespace, policy: str, query: str = "") -> str:
    path = f"/admin/v2/namespaces/{namespace(a.namespace)}/{policy}"
    return f"{path}?{query}" if query else path


def _t_path(a: argparse.Namespace, policy: str, query: str = "") -> str:
    path = f"/admin/v2/{topic_path(a.topic)}/{policy}"
    if getattr(a, "applied", False):
        query = f"{query}&applied=true" if query else "applied=true"
    return f"{path}?{query}" if query else path


@dataclass(frozen=True)
class _Level:
    """Where a trio of commands goes: its group, its target argument and REST path."""

    group: str
    target: Arg
    path: Callable[[argparse.Namespace, str, str], str]  # (arguments, policy, query)
    example: str  # the target in examples
    where: str  # the REST path's prefix, in help texts
    owner: str  # "namespace" or "topic", in help texts
    fallback: str  # what applies once its own value is removed
    get_args: tuple[Arg, ...] = ()

    def call(self, method: str, policy: str, body: Body | None = None) -> Command:
        """The command that makes one REST call (POST with ``body``'s document)."""
        if body is None:
            return lambda a, api: api.call(method, self.path(a, policy, ""))
        return lambda a, api: api.call(method, self.path(a, policy, ""), body(a))


NAMESPACE = _Level("namespaces", NS, _ns_path, "acme/orders", "/admin/v2/namespaces/{tenant}/{ns}",
                   "namespace", "the broker's default applies")
TOPICS = _Level("topics", TOPIC, _t_path, "my-topic",
                "/admin/v2/{persistent|non-persistent}/{tenant}/{ns}/{topic}", "topic",
                "its namespace's applies", (APPLIED,))


@dataclass(frozen=True)
class _Trio:
    """``set-{name}``, ``get-{name}``, ``remove-{name}`` of the policy at ``/{policy}``."""

    name: str
    policy: str
    what: str  # in help texts: "publish rate"
    body: Body  # the POST body from the set command's arguments
    args: tuple[Arg, ...]  # the set command's arguments
    example: str  # the set command's example arguments


def _trio(cmd: CommandMaker, groups: Groups, level: _Level, trio: _Trio,
          setter: Command | None = None) -> None:
    group, name, policy = groups[level.group], trio.name, trio.policy
    ex = f"magnetar admin {level.group}"
    owner = f"the {level.owner}'s {trio.what}"
    get_example = " --applied" if level.get_args else ""
    cmd(group, f"set-{name}", setter or level.call("POST", policy, trio.body),
        f"set {owner}; POST {level.where}/{policy}",
        f"{ex} set-{name} {level.example} {trio.example}", level.target, *trio.args)
    applied = ", --applied: what applies" if level.get_args else ""
    cmd(group, f"get-{name}", level.call("GET", policy),
        f"show {owner} (null: it sets none{applied}); GET {level.where}/{policy}",
        f"{ex} get-{name} {level.example}{get_example}", level.target, *level.get_args)
    cmd(group, f"remove-{name}", level.call("DELETE", policy),
        f"remove {owner} ({level.fallback}); DELETE {level.where}/{policy}",
        f"{ex} remove-{name} {level.example}", level.target)


def _inactive_body(a: argparse.Namespace) -> dict[str, Any]:
    if a.enable is None:
        raise AdminError(0, "give --enable-delete-while-inactive (-e) or "
                            "--disable-delete-while-inactive (-d)")
    return {"deleteWhileInactive": a.enable, "maxInactiveDurationSeconds": a.duration,
            "inactiveTopicDeleteMode": a.mode}


def _value(a: argparse.Namespace) -> Any:
    return a.value


def _limit(*flags: str, what: str) -> Arg:
    """An integer limit's flag (0: no limit)."""
    return _a(*flags, dest="value", type=int32, required=True, help=f"{what} (0: no limit)")


_SHARED: tuple[_Trio, ...] = (
    _Trio("publish-rate", "publishRate", "publish rate (messages, bytes per second per topic)",
          lambda a: {"publishThrottlingRateInMsg": a.msg_rate,
                     "publishThrottlingRateInByte": a.byte_rate},
          (_a("-m", "--msg-publish-rate", dest="msg_rate", type=int32, default=-1,
              help="messages per second per topic (default -1: no limit)"),
           _a("-b", "--byte-publish-rate", dest="byte_rate", type=int, default=-1,
              help="payload bytes per second per topic (default -1: no limit)")),
          "--msg-publish-rate 1000"),
    *(_Trio(name, policy, what,
            lambda a: {"dispatchThrottlingRateInMsg": a.msg_rate,
                       "dispatchThrottlingRateInByte": a.byte_rate,
                       "ratePeriodInSecond": a.period, "relativeToPublishRate": a.relative},
            (_a("-md", "--msg-dispatch-rate", dest="msg_rate", type=int32, default=-1,
                help="messages per period (default -1: no limit)"),
             _a("-bd", "--byte-dispatch-rate", dest="byte_rate", type=int, default=-1,
                help="bytes per period (default -1: no limit)"),
             _a("-dt", "--dispatch-rate-period", dest="period", type=int32, default=1,
                help="the period in seconds (default 1)"),
             _a("-rp", "--relative-to-publish-rate", dest="relative", action="store_true",
                help="relative to the publish rate (refused: not implemented)")),
            "--msg-dispatch-rate 1000")
      for name, policy, what in (
          ("dispatch-rate", "dispatchRate", "dispatch rate per topic"),
          ("subscription-dispatch-rate", "subscriptionDispatchRate",
           "dispatch rate per subscription"),
          ("replicator-dispatch-rate", "replicatorDispatchRate",
           "dispatch rate per geo-replicator (one topic to one remote cluster)"))),
    _Trio("subscribe-rate", "subscribeRate", "subscribe rate per consumer",
          lambda a: {"subscribeThrottlingRatePerConsumer": a.rate,
                     "ratePeriodInSecond": a.period},
          (_a("-sr", "--subscribe-rate", dest="rate", type=int32, default=-1,
              help="subscribes per consumer and period (default -1: no limit)"),
           _a("-st", "--subscribe-rate-period", dest="period", type=int32, default=30,
              help="the period in seconds (default 30)")),
          "--subscribe-rate 10 --subscribe-rate-period 30"),
    _Trio("max-subscriptions-per-topic", "maxSubscriptionsPerTopic",
          "limit of subscriptions per topic", _value,
          (_limit("-m", "--max-subscriptions-per-topic", what="subscriptions per topic"),),
          "--max-subscriptions-per-topic 10"),
    _Trio("inactive-topic-policies", "inactiveTopicPolicies",
          "inactive topic policies",
          _inactive_body,
          (_a("-e", "--enable-delete-while-inactive", dest="enable", action="store_true",
              default=None),
           _a("-d", "--disable-delete-while-inactive", dest="enable", action="store_false"),
           _a("-t", "--max-inactive-duration", dest="duration", type=seconds, required=True,
              help="e.g. 600, 10m, 1h"),
           _a("-m", "--delete-mode", dest="mode", required=True,
              choices=["delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"])),
          "-e -t 1h -m delete_when_no_subscriptions"),
)
_NAMESPACE_ONLY: tuple[_Trio, ...] = (
    *(_Trio(f"max-unacked-messages-per-{kind}", policy, f"limit of {what}", _value,
            (_limit("-c", f"--{policy}", what=what),), "-c 1000")
      for kind, policy, what in (
          ("consumer", "maxUnackedMessagesPerConsumer",
           "unacknowledged messages a Shared/Key_Shared consumer may hold"),
          ("subscription", "maxUnackedMessagesPerSubscription",
           "unacknowledged messages a Shared/Key_Shared subscription may hold"))),
    _Trio("subscription-expiration-time", "subscriptionExpirationTime",
          "subscription expiration time (minutes; 0: never)", _value,
          (_a("-t", "--time", dest="value", type=int32, required=True, help="minutes"),),
          "-t 1440"),
)
_TOPIC_ONLY: tuple[_Trio, ...] = tuple(
    _Trio(f"max-unacked-messages-on-{kind}", policy,
          f"limit of unacknowledged messages on a {kind}", _value,
          (_limit("-m", "--maxNum", what="messages"),), "--maxNum 1000")
    for kind, policy in (("consumer", "maxUnackedMessagesOnConsumer"),
                         ("subscription", "maxUnackedMessagesOnSubscription")))


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


def _topic_commands(groups: Groups, cmd: CommandMaker) -> None:
    """Topic-level policies (Pulsar 2.7+) with their own setters: retention, message TTL
    and backlog quotas."""
    t = groups["topics"]
    ex = "magnetar admin topics"
    where = TOPICS.where
    _trio(cmd, groups, TOPICS, _Trio(
        "retention", "retention", "retention", retention_body,
        (_a("-t", "--time", type=seconds, required=True, help="e.g. 60m, 1d, -1"),
         _a("-s", "--size", type=size_bytes, required=True, help="e.g. 512M, 10G, -1")),
        "--time 1d --size 10G"))
    _trio(cmd, groups, TOPICS, _Trio(
        "message-ttl", "messageTTL", "message TTL", _value,
        (_a("-t", "--ttl", type=seconds, required=True, help="e.g. 3600, 1h"),), "--ttl 1h"),
        setter=topics_set_ttl)
    cmd(t, "set-backlog-quota", topics_set_backlog_quota,
        f"set a backlog quota of the topic; POST {where}/backlogQuota",
        f"{ex} set-backlog-quota my-topic --limit-size 10G --policy producer_exception", TOPIC,
        _a("-l", "--limit-size", dest="limit", type=size_bytes, help="size limit, e.g. 10G"),
        _a("-lt", "--limitTime", dest="limit_time", type=seconds, help="age limit, e.g. 1d"),
        _a("-p", "--policy", default="producer_request_hold",
           choices=["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]),
        QUOTA_TYPE)
    cmd(t, "get-backlog-quotas", TOPICS.call("GET", "backlogQuotaMap"),
        f"show the topic's backlog quotas; GET {where}/backlogQuotaMap",
        f"{ex} get-backlog-quotas my-topic", TOPIC, APPLIED)
    cmd(t, "remove-backlog-quota", topics_remove_backlog_quota,
        f"remove a backlog quota of the topic; DELETE {where}/backlogQuota",
        f"{ex} remove-backlog-quota my-topic -t destination_storage", TOPIC, QUOTA_TYPE)


def add_commands(groups: Groups, cmd: CommandMaker) -> None:
    """Add the commands to ``groups`` (admin.py's) through ``cmd`` (its ``_cmd``)."""
    _topic_commands(groups, cmd)
    for level, trios in ((TOPICS, _SHARED + _TOPIC_ONLY), (NAMESPACE, _SHARED + _NAMESPACE_ONLY)):
        for trio in trios:
            _trio(cmd, groups, level, trio)
