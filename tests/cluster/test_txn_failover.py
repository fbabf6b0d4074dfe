"""Transaction coordinators in a two-broker cluster: a coordinator is served by the owner of
its partition of the assign topic; when that broker is killed (-9), the broker that takes
the bundle serves the coordinator from its records in ZooKeeper, and a transaction opened
before the kill commits through it (its message then visible)."""

from __future__ import annotations

from pathlib import Path

import pytest

import magnetar
from tests.client.conftest import run
from tests.cluster.brokers import Cluster, owner_port, topic_owned_by
from tests.zkserver import ZooKeeperServer

ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign"


@pytest.mark.slow
def test_a_coordinator_moves_with_its_bundle_when_its_broker_is_lost(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, zookeeper, 2, {"metadataStoreSessionTimeoutMillis": "8000"},
                      shared=True)
    cluster.start()
    try:
        holder_port = owner_port(cluster, f"{ASSIGN}-partition-0")
        holder = next(b for b in cluster.brokers if b.port == holder_port)
        survivor = next(b for b in cluster.brokers if b is not holder)
        topic = topic_owned_by(cluster, survivor.port, "txn-failover")

        async def before() -> tuple[int, int]:
            async with magnetar.Client(survivor.url, enable_transaction=True,
                                       operation_timeout_seconds=60) as client:
                txn = await client.new_transaction(timeout_ms=600_000)  # coordinator 0
                assert txn.id[0] == 0
                producer = await client.create_producer(topic)
                await producer.send(b"in-txn", txn=txn)
                return txn.id

        txn_id = run(before, timeout=120)
        holder.kill()

        async def after() -> None:
            async with magnetar.Client(survivor.url, enable_transaction=True,
                                       operation_timeout_seconds=60) as client:
                consumer = await client.subscribe(
                    topic, "s", initial_position=magnetar.InitialPosition.Earliest)
                txn = client.transaction(*txn_id)
                await txn.commit()  # looked up again: the survivor serves coordinator 0 now
                assert txn.state == "COMMITTED"
                assert (await consumer.receive(30_000)).data() == b"in-txn"

        run(after, timeout=180)
    finally:
        cluster.stop()
