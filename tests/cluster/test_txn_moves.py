"""A topic moving between the two brokers of a cluster (its bundle unloaded) while
transactions that sent to it and acknowledged on it are open: the one committed after the
move shows each of its messages once (those sent before the move and after) and its
acknowledgements hold; the one aborted after the move shows nothing and its acknowledged
messages are delivered again."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import magnetar
from magnetar.broker.cluster.bundles import NamespaceBundles
from magnetar.client.errors import Timeout
from tests.client.conftest import run
from tests.cluster.brokers import Cluster, http_call, owner_port

ABSENT_MS = 1_000  # how long to wait to see that a message does NOT come


@pytest.mark.slow
def test_open_transactions_survive_their_topic_moving(cluster: Cluster) -> None:
    a, b = cluster.brokers
    topic = f"persistent://public/default/txn-move-{uuid.uuid4().hex[:8]}-partition-0"
    bundle = NamespaceBundles.evenly(4).bundle_of(topic)

    async def go() -> None:
        async with magnetar.Client(cluster.service_url, enable_transaction=True,
                                   operation_timeout_seconds=60) as client:
            consumer = await client.subscribe(
                topic, "s", consumer_type=magnetar.ConsumerType.Shared,
                initial_position=magnetar.InitialPosition.Earliest)
            producer = await client.create_producer(topic)
            for i in range(4):
                await producer.send(f"m{i}".encode())
            msgs = {}
            for _ in range(4):
                msg = await consumer.receive(30_000)
                msgs[msg.data()] = msg
            committed = await client.new_transaction(timeout_ms=300_000)
            aborted = await client.new_transaction(timeout_ms=300_000)
            await producer.send(b"c0", txn=committed)
            await producer.send(b"x0", txn=aborted)
            await producer.send(b"c1", txn=committed)
            for name, txn in ((b"m0", committed), (b"m1", committed),
                              (b"m2", aborted), (b"m3", aborted)):
                await consumer.acknowledge(msgs[name], txn=txn)

            before = await asyncio.to_thread(owner_port, cluster, topic)
            owner = a if before == a.port else b
            status, body, _ = await asyncio.to_thread(
                http_call, "PUT",
                f"{owner.web_url}/admin/v2/namespaces/public/default/{bundle}/unload")
            assert status == 204, body
            after = await asyncio.to_thread(owner_port, cluster, topic)
            assert after != before  # the other broker serves the topic now

            await producer.send(b"c2", txn=committed)  # sent to the new owner
            with pytest.raises(Timeout):  # both still open: nothing comes
                await consumer.receive(ABSENT_MS)
            await committed.commit()
            # c0 comes; c1 and c2 were stored after x0 of the transaction still open: they
            # wait for its end (maxReadPosition)
            first = await consumer.receive(30_000)
            assert first.data() == b"c0"
            await consumer.acknowledge(first)
            with pytest.raises(Timeout):
                await consumer.receive(ABSENT_MS)
            await aborted.abort()
            await producer.send(b"last")
            rest = []
            while b"last" not in rest:
                msg = await consumer.receive(30_000)
                rest.append(msg.data())
                await consumer.acknowledge(msg)
            with pytest.raises(Timeout):
                await consumer.receive(ABSENT_MS)
            # m2 and m3 again (the aborted acks dropped), c1 before c2; m0 and m1 stay
            # acknowledged (the commit's acks), x0 never comes, nothing twice
            assert sorted(rest) == [b"c1", b"c2", b"last", b"m2", b"m3"], rest
            assert rest.index(b"c1") < rest.index(b"c2") < rest.index(b"last")

    run(go, timeout=180)
