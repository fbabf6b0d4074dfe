"""Policies in a cluster: a topic-level policy set at the topic's owner is kept in the
cluster's metadata store, so after a bundle move the new owner applies it (and shows it)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pulsar
import pytest

from magnetar.broker.cluster.bundles import NamespaceBundles
from tests.admin.receiving import take
from tests.cluster.brokers import Cluster, http_call, owner_port, topic_owned_by
from tests.zkserver import ZooKeeperServer

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@pytest.fixture
def two(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("policies"), zookeeper, 2, shared=True)
    c.start()
    yield c
    c.stop()


def _held_consumer_gets(client: pulsar.Client, topic: str, subscription: str) -> None:
    """A new Shared consumer that acknowledges nothing gets 5 of 20 messages."""
    consumer = client.subscribe(topic, subscription, consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(b"%d" % i)
    producer.close()
    take([consumer], 5)
    consumer.close()


def test_topic_policy_follows_a_bundle_move(two: Cluster) -> None:
    a, b = two.brokers
    topic = topic_owned_by(two, a.port, "policy")
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    client = pulsar.Client(two.service_url, operation_timeout_seconds=30, logger=QUIET)
    try:
        client.create_producer(topic).close()  # the topic exists (at its owner, a)
        status, _, _ = http_call("POST", f"{a.web_url}{path}/maxUnackedMessagesOnConsumer", 5,
                                 follow_redirects=False)
        assert status == 204
        _held_consumer_gets(client, topic, "before")
        bundle = NamespaceBundles.evenly(4).bundle_of(topic)
        status, _, _ = http_call(
            "PUT", f"{a.web_url}/admin/v2/namespaces/public/default/{bundle}/unload",
            follow_redirects=False)
        assert status == 204
        deadline = time.monotonic() + 60
        while owner_port(two, topic) != b.port:  # the next lookup places it at b
            assert time.monotonic() < deadline, "the bundle did not move to the other broker"
            time.sleep(0.2)
        status, value, _ = http_call("GET", f"{b.web_url}{path}/maxUnackedMessagesOnConsumer",
                                     follow_redirects=False)
        assert (status, value) == (200, 5)
        _held_consumer_gets(client, topic, "after")
    finally:
        client.close()
