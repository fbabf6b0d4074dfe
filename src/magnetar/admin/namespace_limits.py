"""A namespace's policies that each have a path of their own, at Pulsar's paths and in
Pulsar's JSON shapes, under ``/admin/v2/namespaces/{tenant}/{namespace}``: ``retention``,
``messageTTL``, ``maxProducersPerTopic``, ``maxConsumersPerTopic``, and the multi-tenant
limits: ``publishRate`` (``PublishRate``: messages and bytes per second per topic),
``dispatchRate`` (``DispatchRate`` per topic, all its subscriptions together),
``subscriptionDispatchRate`` (per subscription), ``replicatorDispatchRate`` (per
geo-replicator), ``subscribeRate`` (``SubscribeRate``:
subscribes per consumer and period), ``maxUnackedMessagesPerConsumer``,
``maxUnackedMessagesPerSubscription``, ``maxSubscriptionsPerTopic``,
``subscriptionExpirationTime`` (integers), ``inactiveTopicPolicies``.

As Pulsar, a GET answers the namespace's own setting, ``204 No Content`` (Pulsar's null)
when it sets none (what applies then is the broker's default, ``maxPublishRatePerTopicInMessages``
...; a topic's ``?applied=true`` shows it); a POST sets the namespace's own value, applied at
once to its loaded topics; a DELETE goes back to the broker default. A limit of 0 or less
is no limit, as in Pulsar.

Each route is declared from its policy's spec (policy_specs.py), one row of `_POLICIES`.
"""

from __future__ import annotations

from aiohttp import web

from magnetar.admin import policy_specs as specs
from magnetar.admin.namespaces import NS, namespace_of, policies_set
from magnetar.admin.policy_specs import PolicySpec, answer
from magnetar.admin.routing import SERVICE, RouteTable, json_body

routes = RouteTable("namespaces")


def _routes(spec: PolicySpec, post: str, broker_keys: str) -> None:
    """GET, POST and DELETE of one policy: ``post`` says what setting it does,
    ``broker_keys`` which broker settings apply without it."""

    async def get(request: web.Request) -> web.Response:
        store, namespace = request.app[SERVICE].policies, namespace_of(request)
        return answer(spec.own(store.overrides(namespace), store.get(namespace)))

    async def set_(request: web.Request) -> web.Response:
        return await policies_set(request, **spec.read(await json_body(request)))

    async def remove(request: web.Request) -> web.Response:
        return await policies_set(request, **dict.fromkeys(spec.fields))

    routes.route("GET", NS + spec.path, f"The namespace's own {spec.what} (204: it sets "
                 "none, the broker's applies).")(get)
    routes.route("POST", NS + spec.path, post, body=spec.body)(set_)
    routes.route("DELETE", NS + spec.path, f"Back to the broker's {broker_keys}.")(remove)


_POLICIES: tuple[tuple[PolicySpec, str, str], ...] = (
    (specs.RETENTION, "Set retention.", "defaultRetentionTimeInMinutes, defaultRetentionSizeInMB"),
    (specs.int_policy("/messageTTL", "message_ttl_seconds", "message TTL (seconds)"),
     "Set the message TTL (seconds; 0: none).", "ttlDurationDefaultInSeconds"),
    (specs.int_policy("/maxProducersPerTopic", "max_producers_per_topic",
                      "limit of producers per topic"),
     "Limit the producers per topic (0: no limit).", "maxProducersPerTopic"),
    (specs.int_policy("/maxConsumersPerTopic", "max_consumers_per_topic",
                      "limit of consumers per topic"),
     "Limit the consumers per topic (0: no limit).", "maxConsumersPerTopic"),
    (specs.PUBLISH_RATE, "Limit the publish rate of each topic: producers' connections are "
     "read no faster (0 or -1: no limit).",
     "maxPublishRatePerTopicInMessages, maxPublishRatePerTopicInBytes"),
    (specs.DISPATCH_RATE, "Limit the dispatch rate per topic (all its subscriptions "
     "together; 0 or -1: no limit).", "dispatchThrottlingRatePerTopicInMsg, ...InByte"),
    (specs.SUBSCRIPTION_DISPATCH_RATE, "Limit the dispatch rate per subscription (0 or -1: "
     "no limit).", "dispatchThrottlingRatePerSubscriptionInMsg, ...InByte"),
    (specs.REPLICATOR_DISPATCH_RATE, "Limit the dispatch rate of each geo-replicator (one "
     "topic to one remote cluster; 0 or -1: no limit).",
     "dispatchThrottlingRatePerReplicatorInMsg, ...InByte"),
    (specs.SUBSCRIBE_RATE, "Limit the subscribes of each consumer (client host, name, id) "
     "per period; more are refused with NotAllowed.",
     "subscribeThrottlingRatePerConsumer, subscribeRatePeriodPerConsumerInSecond"),
    (specs.int_policy("/maxUnackedMessagesPerConsumer", "max_unacked_messages_per_consumer",
                      "limit of unacknowledged messages per consumer"),
     "Set the unacknowledged messages a Shared or Key_Shared consumer may hold before "
     "dispatch to it stops (0: no limit).", "maxUnackedMessagesPerConsumer"),
    (specs.int_policy("/maxUnackedMessagesPerSubscription",
                      "max_unacked_messages_per_subscription",
                      "limit of unacknowledged messages per subscription"),
     "Set the unacknowledged messages a Shared or Key_Shared subscription's consumers may "
     "hold together before dispatch stops (0: no limit).", "maxUnackedMessagesPerSubscription"),
    (specs.int_policy("/maxSubscriptionsPerTopic", "max_subscriptions_per_topic",
                      "limit of subscriptions per topic"),
     "Set the subscriptions a topic may have (0: no limit).", "maxSubscriptionsPerTopic"),
    (specs.int_policy("/subscriptionExpirationTime", "subscription_expiration_time_minutes",
                      "subscription expiration time (minutes)"),
     "Set the minutes a durable subscription may go without consumers before it is deleted "
     "(0: never).", "subscriptionExpirationTimeMinutes"),
    (specs.INACTIVE_TOPIC_POLICIES, "Delete the namespace's topics once they have had no "
     "producer and no consumer for maxInactiveDurationSeconds (deleteWhileInactive).",
     "brokerDeleteInactiveTopics* settings"),
)
for _spec, _post, _keys in _POLICIES:
    _routes(_spec, _post, _keys)
