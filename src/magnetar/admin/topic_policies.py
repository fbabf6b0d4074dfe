"""Topic-level policies (Pulsar 2.7+) at Pulsar's paths, under
``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}``: ``retention``,
``messageTTL`` (``?messageTTL=`` seconds), ``backlogQuota`` / ``backlogQuotaMap``,
``publishRate``, ``dispatchRate``, ``subscriptionDispatchRate``, ``replicatorDispatchRate``,
``subscribeRate``,
``maxUnackedMessagesOnConsumer``, ``maxUnackedMessagesOnSubscription``,
``maxSubscriptionsPerTopic``, ``inactiveTopicPolicies`` (Pulsar's ``TopicPolicies`` has
no subscription expiration time: that one stays a namespace policy).

A topic's own value overrides its namespace's for that topic (a partitioned topic's, for
all its partitions); it is kept in the metadata store (the cluster's, in a cluster, where
every broker follows it), so it applies at once on the topic's owner and survives restarts
and bundle moves. A GET answers the topic's own value (``204 No Content``, Pulsar's null, when it sets
none; ``{}`` for the backlog quota map), or
with ``?applied=true`` what applies (its own, else the namespace's, else the broker's), as
Pulsar answers. The topic must exist (404); bad values get Pulsar's codes (400 for a wrong
type, 412 for a negative limit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from magnetar.admin import policy_specs as specs
from magnetar.admin.policies_body import backlog_quota_doc, check_values, number
from magnetar.admin.policy_specs import PolicySpec, answer
from magnetar.admin.routing import (
    SERVICE,
    RestError,
    RouteTable,
    expect,
    json_body,
    no_content,
    query_flag,
)
from magnetar.admin.topics import T, exists, partitions_of, topic_of
from magnetar.broker.namespaces.policies import BACKLOG_POLICIES, Policies
from magnetar.broker.topic_name import TopicName

routes = RouteTable("topics")

_JAVA_LONG_MAX = 2**63 - 1


async def _topic(request: web.Request) -> TopicName:
    """The request's topic, which must exist (a topic, a partition or a partitioned topic)."""
    name = topic_of(request)
    service = request.app[SERVICE]
    if not await partitions_of(service, name) and not await exists(service, name):
        raise RestError(404, f"Topic {name} not found")
    return service.check_topic_name(name)


def _doc(request: web.Request, topic: TopicName, fields: tuple[str, ...],
         make: Callable[[Policies], Any]) -> web.Response:
    """The policy ``make`` shows: with ``?applied=true``, what applies (the topic's own,
    else its namespace's, else the broker's); else the topic's own value (204, Pulsar's
    null, when the topic sets none of ``fields``)."""
    store = request.app[SERVICE].policies
    if query_flag(request, "applied"):
        return web.json_response(make(store.for_topic(topic)))
    own = store.topic_overrides(topic)
    if not any(f in own for f in fields):
        return answer(None)
    return web.json_response(make(store.for_topic(topic)))


async def _set(request: web.Request, topic: TopicName, **changes: Any) -> web.Response:
    await request.app[SERVICE].policies.set_topic_async(topic, **changes)
    return no_content()


def _policy_routes(spec: PolicySpec) -> None:
    """GET (own or ``?applied=true``), POST (a JSON body) and DELETE of one policy."""

    async def get(request: web.Request) -> web.Response:
        return _doc(request, await _topic(request), spec.fields, spec.doc)

    async def post(request: web.Request) -> web.Response:
        topic = await _topic(request)
        return await _set(request, topic, **spec.read(await json_body(request)))

    async def delete(request: web.Request) -> web.Response:
        return await _set(request, await _topic(request), **dict.fromkeys(spec.fields))

    what = spec.what
    routes.route("GET", T + spec.path, f"The topic's {what} (?applied=true: what applies).")(get)
    routes.route("POST", T + spec.path, f"Set the topic's {what} (over its namespace's).",
                 body=spec.body)(post)
    routes.route("DELETE", T + spec.path,
                 f"Remove the topic's {what} (the namespace's applies).")(delete)


def _int_policy(path: str, field: str, what: str) -> PolicySpec:
    return specs.int_policy(path, field, f"{what} ({path.strip('/')}; 0: none)")


for _spec in (
        specs.RETENTION, specs.PUBLISH_RATE, specs.DISPATCH_RATE,
        specs.SUBSCRIPTION_DISPATCH_RATE, specs.REPLICATOR_DISPATCH_RATE,
        _int_policy("/maxUnackedMessagesOnConsumer", "max_unacked_messages_per_consumer",
                    "limit of unacknowledged messages"),
        _int_policy("/maxUnackedMessagesOnSubscription", "max_unacked_messages_per_subscription",
                    "limit of unacknowledged messages"),
        _int_policy("/maxSubscriptionsPerTopic", "max_subscriptions_per_topic",
                    "limit of subscriptions"),
        specs.SUBSCRIBE_RATE, specs.INACTIVE_TOPIC_POLICIES):
    _policy_routes(_spec)


@routes.route("GET", T + "/messageTTL", "The topic's message TTL in seconds "
              "(?applied=true: what applies).")
async def get_ttl(request: web.Request) -> web.Response:
    return _doc(request, await _topic(request), ("message_ttl_seconds",),
                lambda p: p.message_ttl_seconds)


@routes.route("POST", T + "/messageTTL", "Set the topic's message TTL (?messageTTL=seconds).")
async def set_ttl(request: web.Request) -> web.Response:
    topic = await _topic(request)
    raw = request.query.get("messageTTL")
    if raw is None:  # Pulsar takes it as a query parameter; a JSON body is accepted too
        value = expect(await json_body(request), int, "messageTTL")
    else:
        try:
            value = int(raw)
        except ValueError:
            raise RestError(400, f"messageTTL must be an integer, not {raw!r}") from None
    return await _set(request, topic, **check_values({"message_ttl_seconds": value}))


@routes.route("DELETE", T + "/messageTTL", "Remove the topic's message TTL.")
async def remove_ttl(request: web.Request) -> web.Response:
    return await _set(request, await _topic(request), message_ttl_seconds=None)


@routes.route("GET", T + "/backlogQuotaMap", "The topic's backlog quotas by type "
              "(?applied=true: what applies).")
async def get_backlog_quotas(request: web.Request) -> web.Response:
    topic = await _topic(request)
    store = request.app[SERVICE].policies
    if query_flag(request, "applied"):
        return web.json_response(backlog_quota_doc(store.for_topic(topic)))
    return web.json_response(backlog_quota_doc(store.for_topic(topic),
                                               store.topic_overrides(topic)))


@routes.route("POST", T + "/backlogQuota",
              "Set a backlog quota of the topic (?backlogQuotaType=destination_storage|"
              "message_age).",
              body='{"limitSize": bytes, "limitTime": seconds, "policy": '
                   '"producer_request_hold"|"producer_exception"|"consumer_backlog_eviction"}')
async def set_backlog_quota(request: web.Request) -> web.Response:
    topic = await _topic(request)
    body = expect(await json_body(request), dict, "backlog quota")
    kind = request.query.get("backlogQuotaType", "destination_storage")
    changes: dict[str, Any] = {}
    if "policy" in body:
        policy = expect(body["policy"], str, "policy")
        if policy not in BACKLOG_POLICIES:
            raise RestError(412, f"policy must be one of {', '.join(BACKLOG_POLICIES)}")
        changes["backlog_quota_policy"] = policy
    if kind == "destination_storage":
        changes["backlog_quota_limit_bytes"] = number(
            body, "limitSize", body.get("limit", -1), _JAVA_LONG_MAX)
    elif kind == "message_age":
        changes["backlog_quota_limit_seconds"] = number(body, "limitTime", -1)
    else:
        raise RestError(400, "backlogQuotaType must be destination_storage or message_age")
    return await _set(request, topic, **changes)


@routes.route("DELETE", T + "/backlogQuota", "Remove a backlog quota of the topic "
              "(?backlogQuotaType=...).")
async def remove_backlog_quota(request: web.Request) -> web.Response:
    topic = await _topic(request)
    if request.query.get("backlogQuotaType", "destination_storage") == "message_age":
        return await _set(request, topic, backlog_quota_limit_seconds=None)
    return await _set(request, topic, backlog_quota_limit_bytes=None, backlog_quota_policy=None)
