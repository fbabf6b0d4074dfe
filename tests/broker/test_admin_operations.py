"""Broker operations the admin API will expose, exercised with the official client."""

from __future__ import annotations

import pulsar
import pytest

from .conftest import ThreadedBroker


def _fill(client: pulsar.Client, topic: str, n: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(f"m-{i}".encode())
    producer.close()


def test_create_skip_clear_and_stats(client: pulsar.Client, broker: ThreadedBroker, topic: str) -> None:
    client.create_producer(topic).close()
    svc = broker.service
    broker.call(svc.create_subscription, topic, "admin-sub", False)
    _fill(client, topic, 10)
    assert broker.call(svc.topic_stats, topic)["subscriptions"]["admin-sub"]["msgBacklog"] == 10
    assert broker.call(svc.skip_messages, topic, "admin-sub", 3) == 3
    consumer = client.subscribe(topic, "admin-sub")
    assert consumer.receive(5000).data() == b"m-3"
    consumer.close()
    broker.call(svc.clear_backlog, topic, "admin-sub")
    assert broker.call(svc.topic_stats, topic)["subscriptions"]["admin-sub"]["msgBacklog"] == 0
    broker.call(svc.delete_subscription, topic, "admin-sub")
    assert "admin-sub" not in broker.call(svc.topic_stats, topic)["subscriptions"]


def test_reset_cursor_moves_connected_consumer(client: pulsar.Client, broker: ThreadedBroker, topic: str) -> None:
    _fill(client, topic, 1)
    consumer = client.subscribe(topic, "rs", initial_position=pulsar.InitialPosition.Earliest)
    first = consumer.receive(5000)
    consumer.acknowledge(first)
    _fill(client, topic, 3)
    for _ in range(3):
        consumer.acknowledge(consumer.receive(5000))
    mid = first.message_id()
    broker.call(broker.service.reset_cursor, topic, "rs", mid.ledger_id(), mid.entry_id())
    assert consumer.receive(5000).data() == b"m-0"


def test_unknown_subscription_is_an_error(broker: ThreadedBroker, client: pulsar.Client, topic: str) -> None:
    from magnetar.broker.errors import BrokerError

    client.create_producer(topic).close()
    with pytest.raises(BrokerError):
        broker.call(broker.service.skip_messages, topic, "nope", 1)
