"""What a policy GET answers, as Pulsar answers it: at a namespace's level its own setting
(204 No Content, Pulsar's null, or ``{}`` for the backlog quota map, when it sets none:
never the broker default filled in); at a topic's level its own setting, or with
``?applied=true`` what applies (the topic's, else the namespace's, else the broker's).
Checked over real HTTP against a broker whose defaults differ from Pulsar's, so that a
broker default shown in place of "unset" cannot pass."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from magnetar.cli.main import main
from magnetar.testing import StandaloneBroker, standalone
from tests.admin.conftest import NULL, Api

#: broker defaults unlike Pulsar's own (which are 0, 50000, ... )
BROKER = {"dispatchThrottlingRatePerTopicInMsg": 700, "maxUnackedMessagesPerConsumer": 321,
          "maxSubscriptionsPerTopic": 6, "defaultRetentionTimeInMinutes": 15,
          "ttlDurationDefaultInSeconds": 600, "subscriptionExpirationTimeMinutes": 90,
          "brokerDeduplicationEnabled": True}


@pytest.fixture(scope="module")
def broker() -> Iterator[StandaloneBroker]:
    with standalone(BROKER) as b:
        yield b


def _namespace(api: Api) -> str:
    ns = f"public/get-{uuid.uuid4().hex[:8]}"
    api.ok("PUT", f"/admin/v2/namespaces/{ns}")
    return f"/admin/v2/namespaces/{ns}"


_INACTIVE = {"inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
             "maxInactiveDurationSeconds": 120, "deleteWhileInactive": True}
#: every namespace policy GET with a path of its own: what to POST, what the GET answers
NAMESPACE_POLICIES: list[tuple[str, Any, Any]] = [
    ("/retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 20}, None),
    ("/messageTTL", 90, None),
    ("/maxProducersPerTopic", 3, None),
    ("/maxConsumersPerTopic", 4, None),
    ("/publishRate", {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": 2000},
     None),
    ("/dispatchRate", {"dispatchThrottlingRateInMsg": 50, "dispatchThrottlingRateInByte": 500,
                       "ratePeriodInSecond": 2},
     {"dispatchThrottlingRateInMsg": 50, "dispatchThrottlingRateInByte": 500,
      "relativeToPublishRate": False, "ratePeriodInSecond": 2}),
    ("/subscriptionDispatchRate", {"dispatchThrottlingRateInMsg": 5},
     {"dispatchThrottlingRateInMsg": 5, "dispatchThrottlingRateInByte": -1,
      "relativeToPublishRate": False, "ratePeriodInSecond": 1}),
    ("/subscribeRate", {"subscribeThrottlingRatePerConsumer": 5, "ratePeriodInSecond": 60}, None),
    ("/maxUnackedMessagesPerConsumer", 321, None),  # equal to the broker's: still its own
    ("/maxUnackedMessagesPerSubscription", 8, None),
    ("/maxSubscriptionsPerTopic", 9, None),
    ("/subscriptionExpirationTime", 11, None),
    ("/inactiveTopicPolicies", _INACTIVE, None),
    ("/deduplication", False, None),  # the broker's is true: an own false shows as false
    ("/autoTopicCreation", {"allowAutoTopicCreation": False, "topicType": "non-partitioned"},
     None),
]


@pytest.mark.parametrize(("path", "body", "shown"), NAMESPACE_POLICIES,
                         ids=[p for p, _, _ in NAMESPACE_POLICIES])
def test_namespace_get_answers_its_own_setting(api: Api, path: str, body: Any,
                                               shown: Any) -> None:
    base = _namespace(api)
    assert api.get(base + path) == NULL  # unset: Pulsar's null, not the broker default
    api.ok("POST", base + path, body)
    assert api.get(base + path) == (200, body if shown is None else shown)
    assert api.delete(base + path)[0] == 204
    assert api.get(base + path) == NULL
    assert api.get(base.replace("/get-", "/nowhere-") + path)[0] == 404


def test_namespace_backlog_quotas_and_policies_document(api: Api) -> None:
    base = _namespace(api)
    assert api.get(base + "/backlogQuotaMap") == (200, {})
    doc = api.ok("GET", base)  # a fresh namespace's Policies: nothing of its own
    for key in ("message_ttl_in_seconds", "retention_policies", "deduplicationEnabled",
                "autoTopicCreationOverride", "max_producers_per_topic",
                "max_unacked_messages_per_consumer", "max_subscriptions_per_topic",
                "subscription_expiration_time_minutes", "inactive_topic_policies"):
        assert doc[key] is None, key
    for key in ("backlog_quota_map", "publishMaxMessageRate", "topicDispatchRate",
                "subscriptionDispatchRate", "clusterSubscribeRate"):
        assert doc[key] == {}, key
    api.ok("POST", base + "/backlogQuota?backlogQuotaType=message_age",
           {"limitTime": 60, "policy": "producer_exception"})
    assert api.get(base + "/backlogQuotaMap") == (200, {"message_age": {
        "limitSize": -1, "limitTime": 60, "policy": "producer_exception"}})
    api.ok("POST", base + "/subscriptionExpirationTime", 30)
    doc = api.ok("GET", base)
    assert doc["subscription_expiration_time_minutes"] == 30
    assert doc["message_ttl_in_seconds"] is None
    assert list(doc["backlog_quota_map"]) == ["message_age"]
    # the document goes back in as a body: the copy sets what the original sets, no more
    copy = base + "-copy"
    assert api.put(copy, doc)[0] == 204
    copied = api.ok("GET", copy)
    assert copied["subscription_expiration_time_minutes"] == 30
    assert copied["retention_policies"] is None and copied["deduplicationEnabled"] is None
    api.ok("DELETE", base + "/backlogQuota?backlogQuotaType=message_age")
    assert api.get(base + "/backlogQuotaMap") == (200, {})


#: topic path, namespace path, the broker's, the namespace's and the topic's setting
#: (each also the document a GET answers)
TOPIC_POLICIES: list[tuple[str, str, Any, Any, Any]] = [
    ("/dispatchRate", "/dispatchRate",
     {"dispatchThrottlingRateInMsg": 700, "dispatchThrottlingRateInByte": 0,
      "relativeToPublishRate": False, "ratePeriodInSecond": 1},
     {"dispatchThrottlingRateInMsg": 70, "dispatchThrottlingRateInByte": -1,
      "relativeToPublishRate": False, "ratePeriodInSecond": 1},
     {"dispatchThrottlingRateInMsg": 7, "dispatchThrottlingRateInByte": 1024,
      "relativeToPublishRate": False, "ratePeriodInSecond": 3}),
    ("/maxUnackedMessagesOnConsumer", "/maxUnackedMessagesPerConsumer", 321, 40, 5),
    ("/maxSubscriptionsPerTopic", "/maxSubscriptionsPerTopic", 6, 7, 8),
    ("/retention", "/retention", {"retentionTimeInMinutes": 15, "retentionSizeInMB": 0},
     {"retentionTimeInMinutes": 30, "retentionSizeInMB": -1},
     {"retentionTimeInMinutes": -1, "retentionSizeInMB": 100}),
    ("/messageTTL", "/messageTTL", 600, 60, 6),
    ("/inactiveTopicPolicies", "/inactiveTopicPolicies",
     {"inactiveTopicDeleteMode": "delete_when_no_subscriptions",
      "maxInactiveDurationSeconds": 60, "deleteWhileInactive": False},
     _INACTIVE, {**_INACTIVE, "maxInactiveDurationSeconds": 7}),
]


def _set_topic(api: Api, url: str, value: Any) -> None:
    if url.endswith("/messageTTL"):  # Pulsar's query parameter
        api.ok("POST", f"{url}?messageTTL={value}")
    else:
        api.ok("POST", url, value)


@pytest.mark.parametrize(("path", "ns_path", "broker_value", "ns_value", "own"),
                         TOPIC_POLICIES, ids=[p for p, *_ in TOPIC_POLICIES])
def test_topic_applied_falls_back_to_namespace_then_broker(
        api: Api, path: str, ns_path: str, broker_value: Any, ns_value: Any,
        own: Any) -> None:
    base = _namespace(api)
    topic = "/admin/v2/persistent/" + base.removeprefix("/admin/v2/namespaces/") + "/t"
    api.ok("PUT", topic)
    applied = topic + path + "?applied=true"
    assert api.get(topic + path) == NULL
    assert api.get(applied) == (200, broker_value)  # neither sets it: the broker's
    api.ok("POST", base + ns_path, ns_value)
    assert api.get(topic + path) == NULL  # the topic still sets none itself
    assert api.get(applied) == (200, ns_value)  # the namespace's
    _set_topic(api, topic + path, own)
    assert api.get(topic + path) == (200, own)
    assert api.get(applied) == (200, own)  # the topic's own first
    assert api.get(base + ns_path) == (200, ns_value)  # the namespace's untouched
    api.ok("DELETE", topic + path)
    assert api.get(applied) == (200, ns_value)
    api.ok("DELETE", base + ns_path)
    assert api.get(applied) == (200, broker_value)
    assert api.get(base + ns_path) == NULL


def test_cli_get_prints_what_the_rest_answers(broker: StandaloneBroker,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    def admin(*argv: str) -> Any:
        code = main(["admin", "--admin-url", broker.web_service_url, "--output", "json",
                     *argv])
        out = capsys.readouterr().out
        assert code == 0, argv
        return json.loads(out)

    ns = f"public/get-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://{ns}/t"
    admin("namespaces", "create", ns)
    admin("topics", "create", topic)
    for get in ("get-dispatch-rate", "get-retention", "get-message-ttl",
                "get-max-unacked-messages-per-consumer", "get-deduplication"):
        assert admin("namespaces", get, ns) is None, get
    assert admin("namespaces", "get-backlog-quotas", ns) == {}
    assert admin("topics", "get-dispatch-rate", topic) is None
    assert admin("topics", "get-dispatch-rate", topic, "--applied")[
        "dispatchThrottlingRateInMsg"] == 700
    admin("namespaces", "set-dispatch-rate", ns, "-md", "70")
    assert admin("namespaces", "get-dispatch-rate", ns)["dispatchThrottlingRateInMsg"] == 70
    assert admin("topics", "get-dispatch-rate", topic, "-ap")[
        "dispatchThrottlingRateInMsg"] == 70
    assert admin("topics", "get-max-unacked-messages-on-consumer", topic, "-ap") == 321
    assert admin("topics", "get-message-ttl", topic, "--applied") == 600
