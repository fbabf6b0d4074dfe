"""``magnetar admin`` commands for the multi-tenant limits (cli/admin_policies.py) against
a real broker: pulsar-admin's names and flags, JSON output, errors in one line."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest

from magnetar.cli.main import main
from magnetar.testing import StandaloneBroker


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


Admin = Callable[..., tuple[int, str, str]]


@pytest.fixture
def admin(broker: StandaloneBroker, capsys: pytest.CaptureFixture[str]) -> Admin:
    def call(*argv: str) -> tuple[int, str, str]:
        return run(capsys, "admin", "--admin-url", broker.web_service_url, "--output", "json",
                   *argv)
    return call


def test_namespace_publish_rate_commands(admin: Admin) -> None:
    ns = f"public/cli-{uuid.uuid4().hex[:6]}"
    assert admin("namespaces", "create", ns)[0] == 0
    assert json.loads(admin("namespaces", "get-publish-rate", ns)[1]) is None
    assert admin("namespaces", "set-publish-rate", ns, "-m", "100", "-b", "2048")[0] == 0
    assert json.loads(admin("namespaces", "get-publish-rate", ns)[1]) == {
        "publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": 2048}
    assert admin("namespaces", "set-publish-rate", ns, "--msg-publish-rate", "5")[0] == 0
    policies = json.loads(admin("namespaces", "policies", ns)[1])
    assert policies["publishMaxMessageRate"] == {
        "standalone": {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": -1}}
    assert admin("namespaces", "remove-publish-rate", ns)[0] == 0
    assert json.loads(admin("namespaces", "get-publish-rate", ns)[1]) is None
    code, _, err = admin("namespaces", "get-publish-rate", "public/nowhere-" + ns[-6:])
    assert code == 1 and "404" in err, err


def test_namespace_dispatch_and_subscribe_rate_commands(admin: Admin) -> None:
    ns = f"public/cli-{uuid.uuid4().hex[:6]}"
    assert admin("namespaces", "create", ns)[0] == 0
    assert admin("namespaces", "set-dispatch-rate", ns, "-md", "100", "-dt", "2")[0] == 0
    assert json.loads(admin("namespaces", "get-dispatch-rate", ns)[1]) == {
        "dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": -1,
        "relativeToPublishRate": False, "ratePeriodInSecond": 2}
    assert admin("namespaces", "set-subscription-dispatch-rate", ns,
                 "--byte-dispatch-rate", "1048576")[0] == 0
    assert json.loads(admin("namespaces", "get-subscription-dispatch-rate", ns)[1])[
        "dispatchThrottlingRateInByte"] == 1048576
    assert admin("namespaces", "set-subscribe-rate", ns, "-sr", "5")[0] == 0
    assert json.loads(admin("namespaces", "get-subscribe-rate", ns)[1]) == {
        "subscribeThrottlingRatePerConsumer": 5, "ratePeriodInSecond": 30}
    code, _, err = admin("namespaces", "set-dispatch-rate", ns, "-md", "1", "-rp")
    assert code == 1 and "412" in err and "relativeToPublishRate" in err, err
    for name in ("dispatch-rate", "subscription-dispatch-rate", "subscribe-rate"):
        assert admin("namespaces", f"remove-{name}", ns)[0] == 0
        assert json.loads(admin("namespaces", f"get-{name}", ns)[1]) is None


def test_namespace_consumer_limit_commands(admin: Admin) -> None:
    ns = f"public/cli-{uuid.uuid4().hex[:6]}"
    assert admin("namespaces", "create", ns)[0] == 0
    for name, flag in (("max-unacked-messages-per-consumer", "-c"),
                       ("max-unacked-messages-per-subscription", "-c"),
                       ("max-subscriptions-per-topic", "-m")):
        assert json.loads(admin("namespaces", f"get-{name}", ns)[1]) is None  # sets none
        assert admin("namespaces", f"set-{name}", ns, flag, "17")[0] == 0
        assert json.loads(admin("namespaces", f"get-{name}", ns)[1]) == 17
        assert admin("namespaces", f"remove-{name}", ns)[0] == 0
        assert json.loads(admin("namespaces", f"get-{name}", ns)[1]) is None
    code, out, _ = admin("namespaces", "get-max-subscriptions-per-topic", ns, "--output", "table")
    assert code == 0 and out == ""  # null: nothing to show in a table
    code, _, err = admin("namespaces", "set-max-subscriptions-per-topic", ns, "-m", "-1")
    assert code == 1 and "412" in err, err


def test_namespace_expiry_and_inactive_topic_commands(admin: Admin) -> None:
    ns = f"public/cli-{uuid.uuid4().hex[:6]}"
    assert admin("namespaces", "create", ns)[0] == 0
    assert admin("namespaces", "set-subscription-expiration-time", ns, "-t", "60")[0] == 0
    assert json.loads(admin("namespaces", "get-subscription-expiration-time", ns)[1]) == 60
    assert admin("namespaces", "set-inactive-topic-policies", ns, "-e", "-t", "1h",
                 "-m", "delete_when_no_subscriptions")[0] == 0
    assert json.loads(admin("namespaces", "get-inactive-topic-policies", ns)[1]) == {
        "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
        "maxInactiveDurationSeconds": 3600, "deleteWhileInactive": True}
    code, _, err = admin("namespaces", "set-inactive-topic-policies", ns, "-t", "1h",
                         "-m", "delete_when_no_subscriptions")
    assert code == 1 and "enable-delete-while-inactive" in err, err
    assert admin("namespaces", "remove-inactive-topic-policies", ns)[0] == 0
    assert admin("namespaces", "remove-subscription-expiration-time", ns)[0] == 0
    assert json.loads(admin("namespaces", "get-subscription-expiration-time", ns)[1]) is None
    assert json.loads(admin("namespaces", "get-inactive-topic-policies", ns)[1]) is None


def test_topic_policy_commands(admin: Admin) -> None:
    ns = f"public/cli-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://{ns}/t"
    assert admin("namespaces", "create", ns)[0] == 0
    assert admin("topics", "create", topic)[0] == 0
    assert json.loads(admin("topics", "get-retention", topic)[1]) is None
    assert admin("topics", "set-retention", topic, "-t", "2h", "-s", "1G")[0] == 0
    assert json.loads(admin("topics", "get-retention", topic)[1]) == {
        "retentionTimeInMinutes": 120, "retentionSizeInMB": 1024}
    assert admin("topics", "set-message-ttl", topic, "-t", "1h")[0] == 0
    assert json.loads(admin("topics", "get-message-ttl", topic)[1]) == 3600
    assert admin("topics", "set-backlog-quota", topic, "-l", "1M", "-p", "producer_exception")[0] == 0
    assert json.loads(admin("topics", "get-backlog-quotas", topic)[1])["destination_storage"][
        "limitSize"] == 1 << 20
    assert admin("topics", "set-publish-rate", topic, "-m", "10")[0] == 0
    assert admin("topics", "set-dispatch-rate", topic, "-md", "20")[0] == 0
    assert admin("topics", "set-subscription-dispatch-rate", topic, "-bd", "4096")[0] == 0
    assert admin("topics", "set-max-unacked-messages-on-consumer", topic, "-m", "3")[0] == 0
    assert json.loads(admin("topics", "get-max-unacked-messages-on-consumer", topic)[1]) == 3
    assert json.loads(admin("topics", "get-max-unacked-messages-on-subscription", topic,
                            "--applied")[1]) == 200000
    for name in ("retention", "message-ttl", "publish-rate", "dispatch-rate",
                 "subscription-dispatch-rate", "max-unacked-messages-on-consumer"):
        assert admin("topics", f"remove-{name}", topic)[0] == 0
        assert json.loads(admin("topics", f"get-{name}", topic)[1]) is None, name
    assert admin("topics", "remove-backlog-quota", topic)[0] == 0
    code, _, err = admin("topics", "get-retention", f"persistent://{ns}/missing")
    assert code == 1 and "404" in err, err


def test_topic_subscription_limit_commands(admin: Admin) -> None:
    ns = f"public/cli-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://{ns}/t"
    assert admin("namespaces", "create", ns)[0] == 0
    assert admin("topics", "create", topic)[0] == 0
    assert admin("topics", "set-max-subscriptions-per-topic", topic, "-m", "4")[0] == 0
    assert json.loads(admin("topics", "get-max-subscriptions-per-topic", topic)[1]) == 4
    assert admin("topics", "set-subscribe-rate", topic, "-sr", "5", "-st", "60")[0] == 0
    assert json.loads(admin("topics", "get-subscribe-rate", topic)[1]) == {
        "subscribeThrottlingRatePerConsumer": 5, "ratePeriodInSecond": 60}
    assert admin("topics", "set-inactive-topic-policies", topic, "-e", "-t", "10m",
                 "-m", "delete_when_no_subscriptions")[0] == 0
    assert json.loads(admin("topics", "get-inactive-topic-policies", topic)[1]) == {
        "deleteWhileInactive": True, "maxInactiveDurationSeconds": 600,
        "inactiveTopicDeleteMode": "delete_when_no_subscriptions"}
    code, _, err = admin("topics", "set-inactive-topic-policies", topic, "-t", "1m",
                         "-m", "delete_when_no_subscriptions")
    assert code == 1 and "--enable-delete-while-inactive" in err, err
    assert json.loads(admin("namespaces", "get-inactive-topic-policies", ns)[1]) is None
    for name in ("max-subscriptions-per-topic", "subscribe-rate", "inactive-topic-policies"):
        assert admin("topics", f"remove-{name}", topic)[0] == 0
        assert json.loads(admin("topics", f"get-{name}", topic)[1]) is None, name
    assert json.loads(admin("topics", "get-max-subscriptions-per-topic", topic,
                            "--applied")[1]) == 0


def test_replicator_dispatch_rate_commands(admin: Admin) -> None:
    """``replicatorDispatchRate`` at the namespace (keyed by this cluster in the Policies
    body, as Pulsar keeps it) and topic levels; the topic's own value over the namespace's."""
    ns = f"public/cli-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://{ns}/t"
    assert admin("namespaces", "create", ns)[0] == 0
    assert json.loads(admin("namespaces", "get-replicator-dispatch-rate", ns)[1]) is None
    assert admin("namespaces", "set-replicator-dispatch-rate", ns, "-md", "300", "-bd",
                 "65536", "-dt", "2")[0] == 0
    rate = {"dispatchThrottlingRateInMsg": 300, "dispatchThrottlingRateInByte": 65536,
            "relativeToPublishRate": False, "ratePeriodInSecond": 2}
    assert json.loads(admin("namespaces", "get-replicator-dispatch-rate", ns)[1]) == rate
    policies = json.loads(admin("namespaces", "policies", ns)[1])
    assert policies["replicatorDispatchRate"] == {"standalone": rate}
    assert admin("topics", "create", topic)[0] == 0
    assert json.loads(admin("topics", "get-replicator-dispatch-rate", topic)[1]) is None
    assert json.loads(admin("topics", "get-replicator-dispatch-rate", topic, "--applied")[1]) == rate
    assert admin("topics", "set-replicator-dispatch-rate", topic, "-md", "10")[0] == 0
    assert json.loads(admin("topics", "get-replicator-dispatch-rate", topic)[1])[
        "dispatchThrottlingRateInMsg"] == 10
    code, _, err = admin("topics", "set-replicator-dispatch-rate", topic, "-md", "1", "-dt", "0")
    assert code == 1 and "412" in err, err
    assert admin("topics", "remove-replicator-dispatch-rate", topic)[0] == 0
    assert json.loads(admin("topics", "get-replicator-dispatch-rate", topic)[1]) is None
    assert admin("namespaces", "remove-replicator-dispatch-rate", ns)[0] == 0
    assert json.loads(admin("namespaces", "get-replicator-dispatch-rate", ns)[1]) is None
