"""Topic-level policies (Pulsar 2.7+) at Pulsar's paths: a topic's own value over its
namespace's, applied at once (official client), kept across a restart, Pulsar's codes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest

from magnetar.testing import StandaloneBroker, standalone
from tests.admin.conftest import NULL, QUIET, Api
from tests.admin.receiving import take


def _topic(api: Api, client: pulsar.Client) -> tuple[str, str]:
    """A new namespace's topic (created): its full name and its REST path."""
    ns = f"public/tp-{uuid.uuid4().hex[:8]}"
    api.ok("PUT", f"/admin/v2/namespaces/{ns}")
    topic = f"persistent://{ns}/t"
    client.create_producer(topic).close()
    return topic, f"/admin/v2/persistent/{ns}/t"


def test_topic_policies_round_trip_and_codes(api: Api, client: pulsar.Client) -> None:
    topic, base = _topic(api, client)
    ns_base = "/admin/v2/namespaces/" + topic.split("://")[1].rsplit("/", 1)[0]
    api.ok("POST", ns_base + "/retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 5})
    assert api.get(base + "/retention") == NULL  # the topic sets none itself
    assert api.get(base + "/retention?applied=true")[1] == {
        "retentionTimeInMinutes": 10, "retentionSizeInMB": 5}
    api.ok("POST", base + "/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1})
    own = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    assert api.get(base + "/retention") == (200, own)
    assert api.get(base + "/retention?applied=true") == (200, own)
    assert api.get(ns_base + "/retention")[1]["retentionTimeInMinutes"] == 10  # untouched
    # message TTL: Pulsar's query parameter
    api.ok("POST", base + "/messageTTL?messageTTL=120")
    assert api.get(base + "/messageTTL") == (200, 120)
    assert api.post(base + "/messageTTL?messageTTL=-1")[0] == 412
    assert api.post(base + "/messageTTL?messageTTL=soon")[0] == 400
    # backlog quotas
    assert api.get(base + "/backlogQuotaMap") == (200, {})
    api.ok("POST", base + "/backlogQuota?backlogQuotaType=destination_storage",
           {"limitSize": 1 << 20, "policy": "producer_exception"})
    assert api.get(base + "/backlogQuotaMap")[1]["destination_storage"] == {
        "limitSize": 1 << 20, "limitTime": -1, "policy": "producer_exception"}
    assert api.post(base + "/backlogQuota", {"limitSize": 1, "policy": "drop"})[0] == 412
    # rates and unacked limits
    rate = {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1}
    api.ok("POST", base + "/publishRate", rate)
    assert api.get(base + "/publishRate") == (200, rate)
    api.ok("POST", base + "/dispatchRate", {"dispatchThrottlingRateInMsg": 50})
    assert api.get(base + "/dispatchRate")[1]["dispatchThrottlingRateInMsg"] == 50
    assert api.get(base + "/subscriptionDispatchRate") == NULL
    api.ok("POST", base + "/maxUnackedMessagesOnConsumer", 7)
    assert api.get(base + "/maxUnackedMessagesOnConsumer") == (200, 7)
    assert api.get(base + "/maxUnackedMessagesOnSubscription?applied=true") == (200, 200000)
    assert api.post(base + "/maxUnackedMessagesOnConsumer", -3)[0] == 412
    assert api.post(base + "/maxUnackedMessagesOnConsumer", "seven")[0] == 400
    assert api.post(base + "/dispatchRate", {"ratePeriodInSecond": 0})[0] == 412
    # an unknown topic: 404
    missing = base.rsplit("/", 1)[0] + "/nowhere"
    assert api.get(missing + "/retention")[0] == 404
    assert api.post(missing + "/publishRate", rate)[0] == 404
    # removing goes back to the namespace's
    for path in ("/retention", "/messageTTL", "/publishRate", "/dispatchRate",
                 "/maxUnackedMessagesOnConsumer"):
        assert api.delete(base + path)[0] == 204
        assert api.get(base + path) == NULL, path
    assert api.delete(base + "/backlogQuota")[0] == 204
    assert api.get(base + "/backlogQuotaMap") == (200, {})
    assert api.get(base + "/retention?applied=true")[1]["retentionTimeInMinutes"] == 10
    # deleting the topic forgets its policies
    api.ok("POST", base + "/messageTTL?messageTTL=30")
    assert api.delete(base)[0] == 204
    client.create_producer(topic).close()
    assert api.get(base + "/messageTTL") == NULL


def test_topic_level_overrides_namespace_at_once(api: Api, client: pulsar.Client) -> None:
    """maxUnackedMessagesOnConsumer set on one topic holds its consumer, not a consumer of
    another topic of the namespace; removing it frees the consumer at once."""
    topic, base = _topic(api, client)
    other = topic + "-other"
    api.ok("POST", base + "/maxUnackedMessagesOnConsumer", 5)
    consumers = [client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Shared)
                 for t in (topic, other)]
    for t in (topic, other):
        producer = client.create_producer(t, batching_enabled=False)
        for i in range(20):
            producer.send(b"%d" % i)
        producer.close()
    take(consumers[:1], 5)
    take(consumers[1:], 20)
    api.ok("DELETE", base + "/maxUnackedMessagesOnConsumer")
    take(consumers[:1], 15)
    for c in consumers:
        c.close()


def test_topic_policies_survive_a_restart(tmp_path: Path) -> None:
    with standalone(data_dir=tmp_path) as b:
        api = Api(b.web_service_url)
        client = pulsar.Client(b.service_url, logger=QUIET)
        try:
            _, base = _topic(api, client)
        finally:
            client.close()
        api.ok("POST", base + "/messageTTL?messageTTL=90")
        api.ok("POST", base + "/publishRate", {"publishThrottlingRateInMsg": 10})
    with standalone(data_dir=tmp_path) as b:
        api = Api(b.web_service_url)
        assert api.get(base + "/messageTTL") == (200, 90)
        assert api.get(base + "/publishRate")[1]["publishThrottlingRateInMsg"] == 10


def test_partitioned_topic_policies_apply_to_partitions(broker: StandaloneBroker, api: Api,
                                                         client: pulsar.Client) -> None:
    ns = f"public/tp-{uuid.uuid4().hex[:8]}"
    api.ok("PUT", f"/admin/v2/namespaces/{ns}")
    base = f"/admin/v2/persistent/{ns}/parts"
    api.ok("PUT", base + "/partitions", 2)
    api.ok("POST", base + "/maxUnackedMessagesOnConsumer", 3)
    assert api.get(base + "-partition-1/maxUnackedMessagesOnConsumer?applied=true") == (200, 3)
    consumer = client.subscribe(f"persistent://{ns}/parts-partition-0", "s",
                                consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(f"persistent://{ns}/parts-partition-0",
                                      batching_enabled=False)
    for i in range(10):
        producer.send(b"%d" % i)
    take([consumer], 3)
    producer.close()
    consumer.close()


def test_topic_max_subscriptions_and_subscribe_rate(api: Api, client: pulsar.Client,
                                                    broker: StandaloneBroker) -> None:
    """maxSubscriptionsPerTopic and subscribeRate set on one topic hold that topic only;
    removing them frees it at once."""
    topic, base = _topic(api, client)
    other = topic + "-other"
    api.ok("POST", base + "/maxSubscriptionsPerTopic", 1)
    assert api.get(base + "/maxSubscriptionsPerTopic") == (200, 1)
    assert api.get(base.rsplit("/", 1)[0] + "/t-x/maxSubscriptionsPerTopic")[0] == 404
    kept = client.subscribe(topic, "s0")
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, "s1")
    client.subscribe(other, "s0").close()
    client.subscribe(other, "s1").close()  # the namespace sets no limit
    api.ok("DELETE", base + "/maxSubscriptionsPerTopic")
    assert api.get(base + "/maxSubscriptionsPerTopic") == NULL
    client.subscribe(topic, "s1").close()
    kept.close()
    # subscribeRate: counted per consumer (host, name, id); a new client's first consumer
    # has id 0, so a fresh client each time is the same consumer subscribing again
    api.ok("POST", base + "/subscribeRate",
           {"subscribeThrottlingRatePerConsumer": 2, "ratePeriodInSecond": 300})
    assert api.get(base + "/subscribeRate") == (
        200, {"subscribeThrottlingRatePerConsumer": 2, "ratePeriodInSecond": 300})

    def subscribe_once(name: str) -> None:
        fresh = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=QUIET)
        try:
            fresh.subscribe(name, "r", consumer_name="again").close()
        finally:
            fresh.close()

    for name in (topic, other):
        subscribe_once(name)
        subscribe_once(name)
    with pytest.raises(pulsar.NotAllowedError):
        subscribe_once(topic)
    subscribe_once(other)  # the other topic follows its namespace: no subscribe rate
    api.ok("DELETE", base + "/subscribeRate")
    subscribe_once(topic)


def test_topic_subscribe_rate_and_inactive_policies_admin(api: Api,
                                                          client: pulsar.Client) -> None:
    topic, base = _topic(api, client)
    assert api.get(base + "/subscribeRate") == NULL
    assert api.get(base + "/maxSubscriptionsPerTopic?applied=true") == (200, 0)
    assert api.post(base + "/maxSubscriptionsPerTopic", -1)[0] == 412
    assert api.post(base + "/maxSubscriptionsPerTopic", "one")[0] == 400
    assert api.post(base + "/subscribeRate", {"ratePeriodInSecond": 0})[0] == 412
    assert api.post(base + "/subscribeRate", [])[0] == 400
    ns_base = "/admin/v2/namespaces/" + topic.split("://")[1].rsplit("/", 1)[0]
    api.ok("POST", ns_base + "/inactiveTopicPolicies",
           {"deleteWhileInactive": True, "maxInactiveDurationSeconds": 600,
            "inactiveTopicDeleteMode": "delete_when_no_subscriptions"})
    assert api.get(base + "/inactiveTopicPolicies") == NULL
    assert api.get(base + "/inactiveTopicPolicies?applied=true")[1][
        "maxInactiveDurationSeconds"] == 600
    own = {"deleteWhileInactive": False, "maxInactiveDurationSeconds": 30,
           "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up"}
    api.ok("POST", base + "/inactiveTopicPolicies", own)
    assert api.get(base + "/inactiveTopicPolicies") == (200, own)
    assert api.get(base + "/inactiveTopicPolicies?applied=true") == (200, own)
    assert api.get(ns_base + "/inactiveTopicPolicies")[1]["maxInactiveDurationSeconds"] == 600
    assert api.post(base + "/inactiveTopicPolicies",
                    {"maxInactiveDurationSeconds": -5})[0] == 412
    assert api.post(base + "/inactiveTopicPolicies",
                    {"inactiveTopicDeleteMode": "never"})[0] == 400
    assert api.delete(base + "/inactiveTopicPolicies")[0] == 204
    assert api.get(base + "/inactiveTopicPolicies") == NULL
    missing = base.rsplit("/", 1)[0] + "/nowhere"
    assert api.post(missing + "/inactiveTopicPolicies", own)[0] == 404
    assert api.delete(missing + "/subscribeRate")[0] == 404
