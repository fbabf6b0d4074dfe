"""A transaction's first send on a partition written right behind its AddPartitionToTxn
(Magnetar's client does so on a connection to a Magnetar broker) in a cluster, where the
coordinator's records are in ZooKeeper and an add finishes in a task: the broker holds the
sends read after the add on that connection until the add is done (`CnxBase.txn_adds`),
so they are stored in their transaction, transaction after transaction on one topic."""

from __future__ import annotations

import asyncio
import uuid

import magnetar
from magnetar.client.transaction import ASSIGN_TOPIC
from tests.client.conftest import run
from tests.cluster.brokers import Cluster, owner_port, topic_owned_by

TXNS = 12


def test_sends_behind_their_add_wait_for_it_on_a_cluster_broker(cluster: Cluster) -> None:
    async def coordinators() -> int:
        async with magnetar.Client(cluster.service_url, enable_transaction=True) as client:
            return await client._transactions().count()

    count = asyncio.run(coordinators())
    owners = {tc: owner_port(cluster, f"{ASSIGN_TOPIC}-partition-{tc}") for tc in range(count)}
    prefix = f"txn-behind-add-{uuid.uuid4().hex[:6]}"
    topics = {b.port: topic_owned_by(cluster, b.port, prefix) for b in cluster.brokers}

    async def go() -> None:
        async with magnetar.Client(cluster.service_url, enable_transaction=True,
                                   operation_timeout_seconds=60) as client:
            producers = {port: await client.create_producer(topic)
                         for port, topic in topics.items()}
            consumers = {port: await client.subscribe(
                topic, "s", initial_position=magnetar.InitialPosition.Earliest)
                for port, topic in topics.items()}
            sent: dict[int, list[bytes]] = {port: [] for port in topics}
            behind = 0
            for i in range(TXNS):
                txn = await client.new_transaction(timeout_ms=120_000)
                port = owners[txn.id[0]]  # the topic on the coordinator's broker
                topic = topics[port]
                futures = [await producers[port].send_async(f"{i}-{j}".encode(), txn=txn)
                           for j in range(2)]
                behind += topic in txn._joining  # written right behind the add
                await asyncio.gather(*futures)  # each stored: none refused
                await txn.commit()
                sent[port] += [f"{i}-{j}".encode() for j in range(2)]
            assert behind == TXNS  # coordinator and topic shared a connection each time
            for port, consumer in consumers.items():
                got = [(await consumer.receive(30_000)).data() for _ in sent[port]]
                assert got == sent[port]

    run(go)
