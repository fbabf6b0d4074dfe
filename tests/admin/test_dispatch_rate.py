"""Dispatch rates (``dispatchRate`` per topic, ``subscriptionDispatchRate`` per
subscription) measured with the official client, the subscribe rate with a raw peer (the
official client gives each subscribe its own consumer id), and their admin API."""

from __future__ import annotations

import threading
import time
import uuid

import pulsar
import pytest

from magnetar.protocol import pb
from magnetar.testing import StandaloneBroker
from tests.admin.conftest import NULL, QUIET, Api
from tests.broker.rawclient import RawClient

BACKLOG = 6000
#: counted once each bucket's first period (its burst) is spent, for this long
WINDOW = (1.5, 5.5)


def _namespace(api: Api) -> str:
    ns = f"public/rate-{uuid.uuid4().hex[:8]}"
    api.ok("PUT", f"/admin/v2/namespaces/{ns}")
    return ns


def _backlog(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    failed: list[pulsar.Result] = []
    for i in range(BACKLOG):
        producer.send_async(b"m%d" % i, lambda r, _m: failed.append(r) if r != pulsar.Result.Ok else None)
    producer.flush()
    producer.close()
    assert not failed


class Counter:
    """A message listener recording when each message arrived (and acknowledging it)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, consumer: pulsar.Consumer, message: pulsar.Message) -> None:
        with self.lock:
            self.times.append(time.monotonic())
        consumer.acknowledge(message)

    def between(self, start: float, end: float) -> int:
        with self.lock:
            return sum(1 for t in self.times if start <= t < end)


@pytest.mark.slow
def test_dispatch_rates_per_subscription_and_per_topic(broker: StandaloneBroker, api: Api) -> None:
    per_sub, per_topic, free = _namespace(api), _namespace(api), _namespace(api)
    api.ok("POST", f"/admin/v2/namespaces/{per_sub}/subscriptionDispatchRate",
           {"dispatchThrottlingRateInMsg": 500, "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1})
    api.ok("POST", f"/admin/v2/namespaces/{per_topic}/dispatchRate",
           {"dispatchThrottlingRateInMsg": 600})
    topics = {ns: f"persistent://{ns}/t" for ns in (per_sub, per_topic, free)}
    # a client per namespace: each its own listener thread, so that one namespace's
    # messages never wait behind another's in a listener queue (their arrival is counted)
    clients = {ns: pulsar.Client(broker.service_url, operation_timeout_seconds=30, logger=QUIET)
               for ns in topics}
    try:
        for ns, topic in topics.items():
            _backlog(clients[ns], topic)
        counters: dict[tuple[str, str], Counter] = {}

        def subscribe(ns: str) -> None:
            for sub, kind in (("a", pulsar.ConsumerType.Shared),
                              ("b", pulsar.ConsumerType.Exclusive)):
                counter = counters[ns, sub] = Counter()
                clients[ns].subscribe(topics[ns], sub, consumer_type=kind,
                                      message_listener=counter,
                                      initial_position=pulsar.InitialPosition.Earliest)

        start = time.monotonic()
        subscribe(per_sub)
        subscribe(per_topic)
        while time.monotonic() < start + WINDOW[1]:
            time.sleep(0.1)
        window = (start + WINDOW[0], start + WINDOW[1])
        seconds = WINDOW[1] - WINDOW[0]
        # 500 msg/s per subscription: each of the two gets 2,000 +- 10 % in 4 s
        for sub in ("a", "b"):
            got = counters[per_sub, sub].between(*window)
            assert 0.9 * 500 * seconds <= got <= 1.1 * 500 * seconds, (sub, got)
        # 600 msg/s for the topic, its two subscriptions together
        together = sum(counters[per_topic, sub].between(*window) for sub in ("a", "b"))
        assert 0.9 * 600 * seconds <= together <= 1.1 * 600 * seconds, together
        # no rate: the whole backlog, to each subscription
        subscribe(free)
        deadline = time.monotonic() + 30
        while (min(len(counters[free, s].times) for s in "ab") < BACKLOG
               and time.monotonic() < deadline):
            time.sleep(0.05)
        assert [len(counters[free, sub].times) for sub in ("a", "b")] == [BACKLOG, BACKLOG]
    finally:
        for c in clients.values():
            c.close()


def test_subscribe_rate(broker: StandaloneBroker, api: Api) -> None:
    ns = _namespace(api)
    api.ok("POST", f"/admin/v2/namespaces/{ns}/subscribeRate",
           {"subscribeThrottlingRatePerConsumer": 2, "ratePeriodInSecond": 300})
    topic = f"persistent://{ns}/t"
    with RawClient.for_url(broker.service_url) as raw:
        raw.connect()
        answers = []
        for _ in range(3):  # the same consumer subscribing again and again
            request_id = raw.next_request_id()
            raw.send("SUBSCRIBE", topic=topic, subscription="s", subType=pb.CommandSubscribe.Shared,
                     consumer_id=7, request_id=request_id, consumer_name="again")
            reply = raw.read_reply()
            answers.append(reply)
            if reply.type == pb.BaseCommand.SUCCESS:
                raw.send("CLOSE_CONSUMER", consumer_id=7, request_id=raw.next_request_id())
                raw.read_reply()
        assert [a.type for a in answers[:2]] == [pb.BaseCommand.SUCCESS] * 2
        assert answers[2].type == pb.BaseCommand.ERROR
        assert answers[2].error.error == pb.NotAllowedError
        assert "subscribe rate" in answers[2].error.message
    # another consumer (another id) is not held by that one's subscribes
    client = pulsar.Client(broker.service_url, logger=QUIET)
    try:
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared).close()
    finally:
        client.close()


def test_dispatch_and_subscribe_rate_admin(api: Api) -> None:
    ns = _namespace(api)
    base = f"/admin/v2/namespaces/{ns}"
    for path in ("/dispatchRate", "/subscriptionDispatchRate", "/subscribeRate"):
        assert api.get(base + path) == NULL
    rate = {"dispatchThrottlingRateInMsg": 10, "dispatchThrottlingRateInByte": -1,
            "relativeToPublishRate": False, "ratePeriodInSecond": 5}
    api.ok("POST", base + "/dispatchRate", rate)
    api.ok("POST", base + "/subscriptionDispatchRate", {"dispatchThrottlingRateInByte": 4096})
    api.ok("POST", base + "/subscribeRate", {"subscribeThrottlingRatePerConsumer": 3})
    assert api.get(base + "/dispatchRate") == (200, rate)
    assert api.get(base + "/subscriptionDispatchRate")[1] == {
        "dispatchThrottlingRateInMsg": -1, "dispatchThrottlingRateInByte": 4096,
        "relativeToPublishRate": False, "ratePeriodInSecond": 1}
    assert api.get(base + "/subscribeRate") == (
        200, {"subscribeThrottlingRatePerConsumer": 3, "ratePeriodInSecond": 30})
    doc = api.get(base)[1]
    assert doc["topicDispatchRate"] == doc["clusterDispatchRate"] == {"standalone": rate}
    assert doc["subscriptionDispatchRate"]["standalone"]["dispatchThrottlingRateInByte"] == 4096
    assert doc["clusterSubscribeRate"] == {"standalone": {"subscribeThrottlingRatePerConsumer": 3,
                                                          "ratePeriodInSecond": 30}}
    # the Policies document is accepted back as a body
    copy = f"{ns}-copy"
    assert api.put(f"/admin/v2/namespaces/{copy}", doc)[0] == 204
    copied = api.get(f"/admin/v2/namespaces/{copy}")[1]
    for key in ("topicDispatchRate", "subscriptionDispatchRate", "clusterSubscribeRate"):
        assert copied[key] == doc[key], key
    # Pulsar's codes: wrong types 400; a period under a second, a relative rate: 412
    assert api.post(base + "/dispatchRate", {"dispatchThrottlingRateInMsg": "x"})[0] == 400
    assert api.post(base + "/dispatchRate", {"ratePeriodInSecond": 0})[0] == 412
    assert api.post(base + "/dispatchRate", {"relativeToPublishRate": True})[0] == 412
    assert api.post(base + "/subscribeRate", {"ratePeriodInSecond": -1})[0] == 412
    for path in ("/dispatchRate", "/subscriptionDispatchRate", "/subscribeRate"):
        assert api.delete(base + path)[0] == 204
        assert api.get(base + path) == NULL
    assert api.delete(f"/admin/v2/namespaces/{copy}")[0] == 204
