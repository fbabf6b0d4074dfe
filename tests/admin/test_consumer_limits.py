"""Consumers and subscriptions held to their share, with the official client:
``maxUnackedMessagesPerConsumer`` and ``...PerSubscription`` (dispatch stops at the limit,
acknowledgements resume it, a policy change applies at once), ``maxSubscriptionsPerTopic``."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from magnetar.testing import StandaloneBroker
from tests.admin.conftest import NULL, Api, wait_until
from tests.admin.receiving import take


def _namespace(api: Api, **policies: int) -> str:
    ns = f"public/share-{uuid.uuid4().hex[:8]}"
    api.ok("PUT", f"/admin/v2/namespaces/{ns}")
    for path, value in policies.items():
        api.ok("POST", f"/admin/v2/namespaces/{ns}/{path}", value)
    return ns


def _produce(client: pulsar.Client, topic: str, count: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(count):
        producer.send(b"%d" % i)
    producer.close()


def _consumer_stats(api: Api, topic: str, sub: str) -> dict[str, object]:
    stats = api.get(f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")[1]
    return stats["subscriptions"][sub]


def test_max_unacked_per_consumer_blocks_then_acks_resume(
        broker: StandaloneBroker, api: Api, client: pulsar.Client) -> None:
    ns = _namespace(api, maxUnackedMessagesPerConsumer=10)
    topic = f"persistent://{ns}/t"
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    _produce(client, topic, 50)
    first = take([consumer], 10)[0]
    wait_until(lambda: _consumer_stats(api, topic, "s")["consumers"][0]
               ["blockedConsumerOnUnackedMsgs"] is True, 10, "the consumer blocked")
    for m in first[:4]:  # 6 left unacknowledged: above half the limit, still blocked
        consumer.acknowledge(m)
    take([consumer], 0)
    consumer.acknowledge(first[4])  # 5 left: half, dispatch resumes up to the limit again
    second = take([consumer], 5)[0]
    # the namespace's limit removed: applied at once, the consumer gets the rest
    for m in first[5:] + second:
        consumer.acknowledge(m)
    api.ok("POST", f"/admin/v2/namespaces/{ns}/maxUnackedMessagesPerConsumer", 0)
    take([consumer], 50 - len(first) - len(second))
    consumer.close()


def test_max_unacked_per_subscription(broker: StandaloneBroker, api: Api,
                                      client: pulsar.Client) -> None:
    ns = _namespace(api, maxUnackedMessagesPerConsumer=0, maxUnackedMessagesPerSubscription=20)
    topic = f"persistent://{ns}/t"
    consumers = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                  consumer_name=f"c{i}") for i in range(2)]
    _produce(client, topic, 60)
    got = take(consumers, 20)
    wait_until(lambda: _consumer_stats(api, topic, "s")["blockedSubscriptionOnUnackedMsgs"] is True,
               10, "the subscription blocked")
    for g in got:  # all acknowledged: the subscription's consumers get 20 more
        for m in g:
            consumers[got.index(g)].acknowledge(m)
    take(consumers, 20)
    for c in consumers:
        c.close()


def test_max_subscriptions_per_topic(broker: StandaloneBroker, api: Api,
                                     client: pulsar.Client) -> None:
    ns = _namespace(api, maxSubscriptionsPerTopic=2)
    topic = f"persistent://{ns}/t"
    kept = [client.subscribe(topic, f"s{i}") for i in range(2)]
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, "s2")
    kept[0].close()
    client.subscribe(topic, "s0").close()  # an existing subscription is not a new one
    api.ok("DELETE", f"/admin/v2/namespaces/{ns}/maxSubscriptionsPerTopic")
    client.subscribe(topic, "s2").close()
    kept[1].close()


def test_consumer_limits_admin(api: Api) -> None:
    ns = _namespace(api)
    base = f"/admin/v2/namespaces/{ns}"
    # the namespace sets none: Pulsar's null (the broker's defaults apply)
    for path in ("/maxUnackedMessagesPerConsumer", "/maxUnackedMessagesPerSubscription",
                 "/maxSubscriptionsPerTopic"):
        assert api.get(base + path) == NULL, path
    api.ok("POST", base + "/maxSubscriptionsPerTopic", 7)
    doc = api.get(base)[1]
    assert doc["max_subscriptions_per_topic"] == 7
    assert doc["max_unacked_messages_per_consumer"] is None
    for path in ("/maxUnackedMessagesPerConsumer", "/maxUnackedMessagesPerSubscription",
                 "/maxSubscriptionsPerTopic"):
        assert api.post(base + path, -1)[0] == 412
        assert api.post(base + path, "many")[0] == 400
    assert api.delete(base + "/maxSubscriptionsPerTopic")[0] == 204
    assert api.get(base + "/maxSubscriptionsPerTopic") == NULL
    body = {"max_unacked_messages_per_consumer": 5, "max_subscriptions_per_topic": 3}
    assert api.put(f"{base}-b", body)[0] == 204
    doc = api.get(f"{base}-b")[1]
    assert (doc["max_unacked_messages_per_consumer"], doc["max_subscriptions_per_topic"]) == (5, 3)
    assert api.put(f"{base}-c", {"max_subscriptions_per_topic": -2})[0] == 412


def test_expiry_and_inactive_topic_policies_admin(api: Api) -> None:
    ns = _namespace(api)
    base = f"/admin/v2/namespaces/{ns}"
    assert api.get(base + "/subscriptionExpirationTime") == NULL
    assert api.get(base + "/inactiveTopicPolicies") == NULL
    api.ok("POST", base + "/subscriptionExpirationTime", 1440)
    policies = {"inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
                "maxInactiveDurationSeconds": 3600, "deleteWhileInactive": True}
    api.ok("POST", base + "/inactiveTopicPolicies", policies)
    doc = api.get(base)[1]
    assert doc["subscription_expiration_time_minutes"] == 1440
    assert doc["inactive_topic_policies"] == policies
    assert api.get(base + "/inactiveTopicPolicies") == (200, policies)
    assert api.post(base + "/subscriptionExpirationTime", -5)[0] == 412
    assert api.post(base + "/inactiveTopicPolicies", {"maxInactiveDurationSeconds": -1})[0] == 412
    assert api.post(base + "/inactiveTopicPolicies",
                    {"inactiveTopicDeleteMode": "delete_sometimes"})[0] == 400
    assert api.post(base + "/inactiveTopicPolicies", {"deleteWhileInactive": "yes"})[0] == 400
    # the Policies document goes back in as a body
    assert api.put(f"{base}-copy", doc)[0] == 204
    copied = api.get(f"{base}-copy")[1]
    assert copied["inactive_topic_policies"] == policies
    assert copied["subscription_expiration_time_minutes"] == 1440
    for path in ("/subscriptionExpirationTime", "/inactiveTopicPolicies"):
        assert api.delete(base + path)[0] == 204
    assert api.get(base + "/subscriptionExpirationTime") == NULL
    assert api.get(base + "/inactiveTopicPolicies") == NULL
