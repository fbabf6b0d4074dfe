"""Geo-replication of a topic written in transactions, between two ``magnetar standalone``
clusters A and B replicating a namespace: B gets a committed transaction's messages, in
their order among the plain ones, never an open or aborted transaction's, and no
transaction marker (B's topic stores exactly the messages replicated)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest

from magnetar import sync
from tests.broker.brokerproc import SILENT, wait_until
from tests.replication.test_geo_replication import NS, _admin, two_standalones

pytestmark = pytest.mark.slow


def test_only_committed_transactions_are_replicated(tmp_path: Path) -> None:
    topic = f"persistent://{NS}/txn-{uuid.uuid4().hex[:8]}"
    path = topic.removeprefix("persistent://")
    with two_standalones(tmp_path) as (a, b):
        remote = pulsar.Client(b.url, logger=SILENT, operation_timeout_seconds=30)
        try:
            consumer = remote.subscribe(topic, "s",
                                        initial_position=pulsar.InitialPosition.Earliest)
            with sync.Client(a.url, enable_transaction=True) as client:
                producer = client.create_producer(topic)
                producer.send(b"p0")
                committed = client.new_transaction(timeout_ms=120_000)
                for i in range(3):
                    producer.send(f"c{i}".encode(), txn=committed)
                aborted = client.new_transaction(timeout_ms=120_000)
                producer.send(b"x0", txn=aborted)
                producer.send(b"p1")  # behind both transactions
                producer.send(b"x1", txn=aborted)
                assert consumer.receive(timeout_millis=60_000).data() == b"p0"
                with pytest.raises(pulsar.Timeout):  # both open: nothing more is replicated
                    consumer.receive(timeout_millis=1_000)
                committed.commit()
                got = [consumer.receive(timeout_millis=60_000).data() for _ in range(3)]
                assert got == [b"c0", b"c1", b"c2"]
                with pytest.raises(pulsar.Timeout):  # p1 waits for the aborted one's end
                    consumer.receive(timeout_millis=1_000)
                aborted.abort()
                producer.send(b"p2")
                got = [consumer.receive(timeout_millis=60_000).data() for _ in range(2)]
                assert got == [b"p1", b"p2"]
                with pytest.raises(pulsar.Timeout):
                    consumer.receive(timeout_millis=1_000)
            # B stored the six messages and nothing else: no marker, no aborted message
            stats = _admin(b, "GET", f"/admin/v2/persistent/{path}/internalStats")
            assert isinstance(stats, dict)
            assert stats["numberOfEntries"] == 6, stats
            wait_until(lambda: _admin(a, "GET", f"/admin/v2/persistent/{path}/stats")
                       ["replication"]["B"]["replicationBacklog"] == 0,  # type: ignore[index]
                       30, "A's replicator to have nothing left")
        finally:
            remote.close()
