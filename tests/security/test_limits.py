"""Connection and per-topic limits, refused with Pulsar's error codes."""

from __future__ import annotations

import socket
import time
from typing import Any

import pulsar
import pytest

from tests.broker.brokerproc import SILENT, wait_until
from tests.broker.rawclient import RawClient

from .test_authentication import new_topic, round_trip


def test_connections_per_ip_and_total(make_broker: Any) -> None:
    broker = make_broker(brokerMaxConnectionsPerIp=3, brokerMaxConnections=5)
    limits = broker.service.security.limits
    held = [RawClient.for_url(broker.url) for _ in range(3)]
    try:
        for raw in held:
            raw.connect()
        with RawClient.for_url(broker.url) as extra:  # the fourth from this address
            assert extra.wait_closed(10)
        assert limits.refused >= 1
        held.pop().close()
        wait_until(lambda: limits.total == 2, 10, "the closed connection to be released")
        round_trip(broker.url, None)  # a normal client gets in again
    finally:
        for raw in held:
            raw.close()


def test_handshake_timeout(make_broker: Any) -> None:
    broker = make_broker(magnetarHandshakeTimeoutSeconds=1)
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", broker.service.port), timeout=20) as silent:
        assert silent.recv(1) == b""  # closed by the broker
    assert time.monotonic() - start < 15
    with RawClient.for_url(broker.url) as raw:
        raw.connect()
        raw.send("PING")
        raw.expect(pulsar_pong())
        wait_until(lambda: broker.service.security.limits.total == 1, 10, "one connection")
        assert raw.is_alive()


def pulsar_pong() -> int:
    from magnetar.protocol import pb

    return pb.BaseCommand.PONG


def test_producers_per_topic(make_broker: Any) -> None:
    broker = make_broker(maxProducersPerTopic=2)
    client = pulsar.Client(broker.url, operation_timeout_seconds=5, logger=SILENT)
    try:
        topic = new_topic()
        first = client.create_producer(topic)
        client.create_producer(topic)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        first.close()
        client.create_producer(topic).send(b"room again")
    finally:
        client.close()


def test_consumers_and_subscriptions_per_topic(make_broker: Any) -> None:
    broker = make_broker(maxConsumersPerSubscription=1, maxConsumersPerTopic=2,
                         maxSubscriptionsPerTopic=2)
    client = pulsar.Client(broker.url, operation_timeout_seconds=5, logger=SILENT)
    shared = pulsar.ConsumerType.Shared
    try:
        topic = new_topic()
        client.subscribe(topic, "a", consumer_type=shared)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "a", consumer_type=shared)
        client.subscribe(topic, "b", consumer_type=shared)
        with pytest.raises((pulsar.ConsumerBusy, pulsar.NotAllowedError)):
            client.subscribe(topic, "c", consumer_type=shared)
    finally:
        client.close()
    broker2 = make_broker(maxSubscriptionsPerTopic=1)
    client = pulsar.Client(broker2.url, operation_timeout_seconds=5, logger=SILENT)
    try:
        topic = new_topic()
        client.subscribe(topic, "a")
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(topic, "b")
    finally:
        client.close()


def test_producers_per_connection(make_broker: Any) -> None:
    broker = make_broker(magnetarMaxProducersPerConnection=2)
    client = pulsar.Client(broker.url, operation_timeout_seconds=5, logger=SILENT)
    try:
        client.create_producer(new_topic())
        client.create_producer(new_topic())
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(new_topic())
    finally:
        client.close()
