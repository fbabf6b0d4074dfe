"""A namespace's multi-tenant limits at Pulsar's paths and in Pulsar's JSON shapes, under
``/admin/v2/namespaces/{tenant}/{namespace}``: ``publishRate`` (``PublishRate``: messages
and bytes per second per topic), ``dispatchRate`` (``DispatchRate`` per topic, all its
subscriptions together), ``subscriptionDispatchRate`` (per subscription),
``replicatorDispatchRate`` (per geo-replicator: one topic to one remote cluster), ``subscribeRate``
(``SubscribeRate``: subscribes per consumer and period), ``maxUnackedMessagesPerConsumer``,
``maxUnackedMessagesPerSubscription``, ``maxSubscriptionsPerTopic``,
``subscriptionExpirationTime`` (integers), ``inactiveTopicPolicies``.

As for the other policies (namespaces.py), a GET answers what applies to the namespace's
topics (its own value, else the broker default: ``maxPublishRatePerTopicInMessages`` ...),
JSON ``null`` when no limit applies; a POST sets the namespace's own value, applied at once
to its loaded topics; a DELETE goes back to the broker default. A limit of 0 or less is no
limit, as in Pulsar.
"""

from __future__ import annotations

from aiohttp import web

from magnetar.admin.namespaces import NS, namespace_of, policies_set
from magnetar.admin.policies_body import (
    check_values,
    dispatch_rate_doc,
    inactive_topic_policies_doc,
    publish_rate_doc,
    read_dispatch_rate,
    read_inactive_topic_policies,
    read_publish_rate,
    read_subscribe_rate,
    subscribe_rate_doc,
)
from magnetar.admin.routing import SERVICE, RestError, RouteTable, expect, json_body
from magnetar.broker.namespaces.policies import Policies

routes = RouteTable("namespaces")

def _policies(request: web.Request) -> Policies:
    return request.app[SERVICE].policies.get(namespace_of(request))


@routes.route("GET", NS + "/publishRate",
              "The publish rate per topic (PublishRate; null: no limit).")
async def get_publish_rate(request: web.Request) -> web.Response:
    return web.json_response(publish_rate_doc(_policies(request)))


@routes.route("POST", NS + "/publishRate",
              "Limit the publish rate of each topic: producers' connections are read no "
              "faster (0 or -1: no limit).",
              body='{"publishThrottlingRateInMsg": int, "publishThrottlingRateInByte": long}')
async def set_publish_rate(request: web.Request) -> web.Response:
    changes = read_publish_rate(await json_body(request))
    return await policies_set(request, **changes)


@routes.route("DELETE", NS + "/publishRate", "Back to the broker's publish rate "
              "(maxPublishRatePerTopicInMessages, maxPublishRatePerTopicInBytes).")
async def remove_publish_rate(request: web.Request) -> web.Response:
    return await policies_set(request, publish_rate_msgs=None, publish_rate_bytes=None)


def _dispatch_routes(path: str, prefix: str, what: str, broker_keys: str) -> None:
    """GET, POST and DELETE of one dispatch rate."""

    async def get(request: web.Request) -> web.Response:
        return web.json_response(dispatch_rate_doc(_policies(request), prefix))

    async def post(request: web.Request) -> web.Response:
        return await policies_set(request, **read_dispatch_rate(await json_body(request), prefix))

    async def delete(request: web.Request) -> web.Response:
        return await policies_set(request, **{f"{prefix}_msgs": None, f"{prefix}_bytes": None,
                                              f"{prefix}_period": None})

    routes.route("GET", NS + path, f"The dispatch rate {what} (DispatchRate; null: no limit).")(get)
    routes.route("POST", NS + path, f"Limit the dispatch rate {what} (0 or -1: no limit).",
                 body='{"dispatchThrottlingRateInMsg": int, "dispatchThrottlingRateInByte": '
                      'long, "ratePeriodInSecond": int}')(post)
    routes.route("DELETE", NS + path, f"Back to the broker's dispatch rate {what} "
                 f"({broker_keys}).")(delete)


_dispatch_routes("/dispatchRate", "dispatch_rate", "per topic (all its subscriptions together)",
                 "dispatchThrottlingRatePerTopicInMsg, ...InByte")
_dispatch_routes("/subscriptionDispatchRate", "subscription_dispatch_rate", "per subscription",
                 "dispatchThrottlingRatePerSubscriptionInMsg, ...InByte")
_dispatch_routes("/replicatorDispatchRate", "replicator_dispatch_rate",
                 "per geo-replicator (one topic to one remote cluster)",
                 "dispatchThrottlingRatePerReplicatorInMsg, ...InByte")


@routes.route("GET", NS + "/subscribeRate",
              "The subscribe rate per consumer (SubscribeRate; null: no limit).")
async def get_subscribe_rate(request: web.Request) -> web.Response:
    return web.json_response(subscribe_rate_doc(_policies(request)))


@routes.route("POST", NS + "/subscribeRate",
              "Limit the subscribes of each consumer (client host, name, id) per period; "
              "more are refused with NotAllowed.",
              body='{"subscribeThrottlingRatePerConsumer": int, "ratePeriodInSecond": int (30)}')
async def set_subscribe_rate(request: web.Request) -> web.Response:
    return await policies_set(request, **read_subscribe_rate(await json_body(request)))


@routes.route("DELETE", NS + "/subscribeRate", "Back to the broker's subscribe rate "
              "(subscribeThrottlingRatePerConsumer, subscribeRatePeriodPerConsumerInSecond).")
async def remove_subscribe_rate(request: web.Request) -> web.Response:
    return await policies_set(request, subscribe_rate=None, subscribe_rate_period=None)


_JAVA_INT_MAX = 2**31 - 1


def _int_routes(path: str, field: str, what: str, broker_key: str) -> None:
    """GET, POST and DELETE of one integer policy (0: no limit; negative: 412)."""

    async def get(request: web.Request) -> web.Response:
        return web.json_response(getattr(_policies(request), field))

    async def post(request: web.Request) -> web.Response:
        value = expect(await json_body(request), int, path.strip("/"))
        if not -_JAVA_INT_MAX - 1 <= value <= _JAVA_INT_MAX:
            raise RestError(400, f"{path.strip('/')}: {value} is out of range")
        return await policies_set(request, **check_values({field: value}))

    async def delete(request: web.Request) -> web.Response:
        return await policies_set(request, **{field: None})

    routes.route("GET", NS + path, f"{what} (0: no limit).")(get)
    routes.route("POST", NS + path, f"Set {what} (0: no limit).", body="int")(post)
    routes.route("DELETE", NS + path, f"Back to the broker's {broker_key}.")(delete)


_int_routes("/maxUnackedMessagesPerConsumer", "max_unacked_messages_per_consumer",
            "Unacknowledged messages a Shared or Key_Shared consumer may hold before "
            "dispatch to it stops", "maxUnackedMessagesPerConsumer")
_int_routes("/maxUnackedMessagesPerSubscription", "max_unacked_messages_per_subscription",
            "Unacknowledged messages a Shared or Key_Shared subscription's consumers may "
            "hold together before dispatch stops", "maxUnackedMessagesPerSubscription")
_int_routes("/maxSubscriptionsPerTopic", "max_subscriptions_per_topic",
            "Subscriptions a topic may have", "maxSubscriptionsPerTopic")
_int_routes("/subscriptionExpirationTime", "subscription_expiration_time_minutes",
            "Minutes a durable subscription may go without consumers before it is deleted",
            "subscriptionExpirationTimeMinutes")


@routes.route("GET", NS + "/inactiveTopicPolicies",
              "When topics without producers and consumers are deleted (InactiveTopicPolicies).")
async def get_inactive_topic_policies(request: web.Request) -> web.Response:
    return web.json_response(inactive_topic_policies_doc(_policies(request)))


@routes.route("POST", NS + "/inactiveTopicPolicies",
              "Delete the namespace's topics once they have had no producer and no consumer "
              "for maxInactiveDurationSeconds (deleteWhileInactive).",
              body='{"inactiveTopicDeleteMode": "delete_when_no_subscriptions"|'
                   '"delete_when_subscriptions_caught_up", "maxInactiveDurationSeconds": int, '
                   '"deleteWhileInactive": bool}')
async def set_inactive_topic_policies(request: web.Request) -> web.Response:
    changes = read_inactive_topic_policies(await json_body(request))
    return await policies_set(request, **check_values(changes))


@routes.route("DELETE", NS + "/inactiveTopicPolicies", "Back to the broker's "
              "brokerDeleteInactiveTopics* settings.")
async def remove_inactive_topic_policies(request: web.Request) -> web.Response:
    return await policies_set(request, inactive_topic_delete_mode=None,
                              inactive_topic_max_inactive_seconds=None,
                              inactive_topic_delete_while_inactive=None)
