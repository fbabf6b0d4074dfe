"""Replicated subscriptions (``replicate_subscription_state``) between two `magnetar
standalone` processes as clusters A and B, driven with the official client: what a
subscription acknowledges in A, its namesake in B skips; marker entries reach no consumer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.broker.brokerproc import SILENT, BrokerProcess, wait_until
from tests.replication.test_geo_replication import (
    _admin,
    _client,
    _http_up,
    _topic,
    two_standalones,
)

pytestmark = pytest.mark.slow

CHUNK = 20


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    with two_standalones(tmp_path, {"replicatedSubscriptionsSnapshotFrequencyMillis": "100"}) as pair:
        yield pair


def _position(text: str) -> tuple[int, int]:
    ledger, _, entry = text.partition(":")
    return int(ledger), int(entry)


def _sub_stats(broker: BrokerProcess, topic: str, sub: str) -> dict[str, object] | None:
    stats = _admin(broker, "GET", f"/admin/v2/persistent/{topic.split('://')[1]}/stats")
    assert isinstance(stats, dict)
    found = stats["subscriptions"].get(sub)
    return found if isinstance(found, dict) else None


def _mark_delete_reached(broker: BrokerProcess, topic: str, sub: str, target: tuple[int, int]) -> bool:
    stats = _sub_stats(broker, topic, sub)
    return stats is not None and _position(str(stats["lastMarkDeletePosition"])) >= target


def test_subscription_in_b_starts_where_a_acknowledged(
        clusters: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = clusters
    topic = _topic()
    ca, cb = _client(a), _client(b)
    n, k = 200, 100
    try:
        consumer_a = ca.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest,
                                  replicate_subscription_state_enabled=True)
        # a plain subscription in B tells where each message is stored there (Shared:
        # that dispatcher skips markers too)
        probe = cb.subscribe(topic, "probe", initial_position=pulsar.InitialPosition.Earliest,
                             consumer_type=pulsar.ConsumerType.Shared)
        producer = ca.create_producer(topic)
        for start in range(0, k, CHUNK):
            for i in range(start, start + CHUNK):
                producer.send(f"m-{i}".encode())
            for i in range(start, start + CHUNK):
                msg = consumer_a.receive(timeout_millis=30000)
                assert msg.data() == f"m-{i}".encode()
                consumer_a.acknowledge(msg)
            for i in range(start, start + CHUNK):
                msg = probe.receive(timeout_millis=60000)
                assert msg.data() == f"m-{i}".encode()  # no marker among the messages
                probe.acknowledge(msg)
            in_b = (msg.message_id().ledger_id(), msg.message_id().entry_id())
            # a snapshot after this chunk, passed by A's acks, moves B's "s" past it
            wait_until(lambda target=in_b: _mark_delete_reached(b, topic, "s", target), 60,
                       f"B's subscription to follow A's acknowledgements to {start + CHUNK}")
        for i in range(k, n):  # sent, received in A, not acknowledged there
            producer.send(f"m-{i}".encode())
        for i in range(k, n):
            assert probe.receive(timeout_millis=60000).data() == f"m-{i}".encode()
        consumer_b = cb.subscribe(topic, "s", replicate_subscription_state_enabled=True,
                                  consumer_type=pulsar.ConsumerType.KeyShared)
        got = []
        while not got or got[-1] != f"m-{n - 1}".encode():
            msg = consumer_b.receive(timeout_millis=60000)
            got.append(msg.data())
            consumer_b.acknowledge(msg)
        # B starts exactly after what A acknowledged (a snapshot followed each chunk)
        assert got == [f"m-{i}".encode() for i in range(k, n)]
        for i in range(k, n):
            assert consumer_a.receive(timeout_millis=30000).data() == f"m-{i}".encode()
        with pytest.raises(pulsar.Timeout):  # markers went on being written: none came
            consumer_a.receive(timeout_millis=300)
        stats_a = _sub_stats(a, topic, "s")
        stats_b = _sub_stats(b, topic, "s")
        assert stats_a is not None and stats_b is not None
        assert stats_a["isReplicated"] is True and stats_b["isReplicated"] is True
        assert stats_a["msgOutCounter"] == n  # markers are not dispatched
        stats_probe = _sub_stats(b, topic, "probe")
        assert stats_probe is not None and stats_probe["isReplicated"] is False
        assert stats_probe["msgOutCounter"] == n
    finally:
        ca.close()
        cb.close()



def test_replicated_flag_is_stored_with_the_subscription(tmp_path: Path) -> None:
    """The flag a consumer set outlives a broker restart (its cursor's property)."""
    broker = BrokerProcess(tmp_path)
    topic = "persistent://public/default/flag"
    try:
        broker.start()
        client = pulsar.Client(broker.url, logger=SILENT)
        client.subscribe(topic, "replicated", replicate_subscription_state_enabled=True)
        client.subscribe(topic, "plain")
        client.close()
        broker.stop()
        broker.start()
        wait_until(lambda: _http_up(broker), 60, "the admin API")
        for name, replicated in (("replicated", True), ("plain", False)):
            stats = _sub_stats(broker, topic, name)
            assert stats is not None and stats["isReplicated"] is replicated
    finally:
        broker.stop()
