"""Subscription expiry and inactive-topic deletion (namespaces/inactivity.py) with the
official client; the monitor's round is run on demand with a clock moved forward
(``InactivityMonitor.run(now)``) instead of waiting minutes for it."""

from __future__ import annotations

import time
from typing import Any

import pulsar

from magnetar.broker.topic_name import TopicName
from magnetar.protocol import pb

from .brokerproc import new_topic
from .conftest import QUIET, ThreadedBroker


def run_round(broker: ThreadedBroker, ahead_s: float) -> tuple[int, int]:
    service = broker.service
    assert service is not None
    result: tuple[int, int] = broker.call(service.housekeeping.inactivity.run,
                                          time.monotonic() + ahead_s)
    return result


def set_policies(broker: ThreadedBroker, **changes: Any) -> None:
    service = broker.service
    assert service is not None
    broker.call(lambda: service.policies.set_async("public/default", **changes))


def subscriptions(broker: ThreadedBroker, topic: str) -> list[str]:
    service = broker.service
    assert service is not None
    return broker.call(lambda: sorted(service.topics[topic].subscriptions))  # type: ignore[no-any-return]


def test_subscriptions_without_consumers_expire(make_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_broker()
    set_policies(broker, subscription_expiration_time_minutes=2)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        topic = new_topic()
        client.subscribe(topic, "left").close()
        attached = client.subscribe(topic, "attached")
        client.create_reader(topic, pulsar.MessageId.earliest)  # a Reader: not durable
        assert run_round(broker, 60) == (0, 0)  # not 2 minutes yet
        assert run_round(broker, 180) == (1, 0)
        names = subscriptions(broker, topic)
        assert "left" not in names and "attached" in names
        attached.close()
        # the expired subscription is gone for good: a new one starts at the end
        producer = client.create_producer(topic)
        producer.send(b"before")
        again = client.subscribe(topic, "left")
        producer.send(b"after")
        assert again.receive(timeout_millis=10_000).data() == b"after"
    finally:
        client.close()


def test_inactive_topics_deleted_by_mode(make_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_broker()
    set_policies(broker, inactive_topic_delete_while_inactive=True,
                 inactive_topic_max_inactive_seconds=60)
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        bare, subscribed, busy = new_topic(), new_topic(), new_topic()
        consumer = client.subscribe(subscribed, "s")
        for name in (bare, subscribed):
            producer = client.create_producer(name)
            producer.send(b"x")
            producer.close()
        consumer.close()
        kept = client.create_producer(busy)  # a producer attached: in use
        # a round before the duration: nothing
        assert run_round(broker, 30)[1] == 0
        # a producer that came and went between two rounds keeps its topic
        visitor = new_topic()
        producer = client.create_producer(visitor)
        assert run_round(broker, 30)[1] == 0  # seen (in use) by a round
        producer.send(b"v")
        producer.close()
        assert run_round(broker, 120)[1] == 1  # only `bare`: `visitor` published since
        assert visitor in broker.call(lambda: set(service.topics))
        loaded = broker.call(lambda: set(service.topics))
        assert bare not in loaded and subscribed in loaded and busy in loaded
        listed = broker.call(service.topics_of_namespace_async, "public/default",
                             pb.CommandGetTopicsOfNamespace.ALL, None)[0]
        assert bare not in listed and subscribed in listed
        # delete_when_subscriptions_caught_up: the subscription's backlog keeps it ...
        set_policies(broker, inactive_topic_delete_mode="delete_when_subscriptions_caught_up")
        assert run_round(broker, 120)[1] == 0
        consumer = client.subscribe(subscribed, "s")
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        consumer.close()
        # ... until it has read everything (and the duration passed since it left)
        assert run_round(broker, 30)[1] == 0
        assert run_round(broker, 120)[1] == 1
        assert subscribed not in broker.call(lambda: set(service.topics))
        kept.close()
    finally:
        client.close()


def test_topic_level_inactive_topic_policies(make_broker) -> None:  # type: ignore[no-untyped-def]
    """A topic's own inactiveTopicPolicies over its namespace's, either way."""
    broker = make_broker()
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        own, plain = new_topic(), new_topic()
        for name in (own, plain):
            client.create_producer(name).close()
        broker.call(lambda: service.policies.set_topic_async(
            TopicName.parse(own), inactive_topic_delete_while_inactive=True,
            inactive_topic_max_inactive_seconds=60))
        assert run_round(broker, 30)[1] == 0  # seen idle from now on
        assert run_round(broker, 120)[1] == 1  # the namespace deletes none: only `own`
        loaded = broker.call(lambda: set(service.topics))
        assert own not in loaded and plain in loaded
        # the namespace deletes inactive topics; a topic that says no is kept
        kept = new_topic()
        client.create_producer(kept).close()
        broker.call(lambda: service.policies.set_topic_async(
            TopicName.parse(kept), inactive_topic_delete_while_inactive=False))
        set_policies(broker, inactive_topic_delete_while_inactive=True,
                     inactive_topic_max_inactive_seconds=60)
        run_round(broker, 30)
        run_round(broker, 120)
        loaded = broker.call(lambda: set(service.topics))
        assert kept in loaded and plain not in loaded
    finally:
        client.close()


def test_a_round_forgets_unloaded_topics_a_slice_at_a_time(make_broker, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The round forgets what it saw of topics no longer loaded, a few names per turn of
    the loop (`FORGET_SLICE`: one set difference of 100,000 names held the loop 50-90 ms),
    and keeps what it saw of the loaded ones."""
    from magnetar.broker.namespaces import inactivity

    monkeypatch.setattr(inactivity, "FORGET_SLICE", 2)
    broker = make_broker(magnetarTopicUnloadIdleSeconds=0)
    service = broker.service
    assert service is not None
    names = [new_topic() for _ in range(3)]
    for name in names:
        broker.call(service.create_topic, name)
        broker.call(service.load_topic, name)
    monitor = service.housekeeping.inactivity
    gone = [f"persistent://public/default/gone-{i}" for i in range(5)]
    broker.call(lambda: monitor._seen.update({name: (0, 0.0) for name in gone}))
    run_round(broker, 0)
    seen = broker.call(lambda: set(monitor._seen))
    assert seen.isdisjoint(gone) and set(names) <= seen
