"""End to end with Magnetar's client: consume-transform-produce in transactions (acks and
sends in one transaction), read by the official client. A committed transaction's outputs
all appear and its inputs are acknowledged; an aborted one's outputs never appear and its
inputs come again. A broker alone tells its own topics and subscriptions in-process, never
over a connection to itself."""

from __future__ import annotations

import asyncio
import uuid

import pulsar

import magnetar

from .conftest import QUIET, ThreadedBroker


def test_consume_transform_produce_commit_and_abort(broker: ThreadedBroker) -> None:
    tag = uuid.uuid4().hex[:8]
    source = f"persistent://public/default/e2e-in-{tag}"
    sink = f"persistent://public/default/e2e-out-{tag}"
    official = pulsar.Client(broker.url, operation_timeout_seconds=15, logger=QUIET)
    try:
        out = official.subscribe(sink, "check", initial_position=pulsar.InitialPosition.Earliest)
        feed = official.create_producer(source, batching_enabled=False)
        for i in range(6):
            feed.send(f"in-{i}".encode())

        async def run() -> list[bytes]:
            async with magnetar.Client(broker.url, enable_transaction=True) as client:
                consumer = await client.subscribe(
                    source, "work", initial_position=magnetar.InitialPosition.Earliest)
                producer = await client.create_producer(sink)
                # first transaction: 3 inputs -> 3 outputs, committed
                txn = await client.new_transaction(timeout_ms=60_000)
                for _ in range(3):
                    msg = await consumer.receive(timeout_millis=15_000)
                    await producer.send(msg.data().upper(), txn=txn)
                    await consumer.acknowledge(msg, txn=txn)
                await txn.commit()
                # second transaction: the next 3, aborted; then they come again
                aborted = await client.new_transaction(timeout_ms=60_000)
                seen = []
                for _ in range(3):
                    msg = await consumer.receive(timeout_millis=15_000)
                    seen.append(msg.data())
                    await producer.send(b"never-" + msg.data(), txn=aborted)
                    await consumer.acknowledge(msg, txn=aborted)
                await aborted.abort()
                again = []
                for _ in range(3):
                    msg = await consumer.receive(timeout_millis=15_000)
                    again.append(msg.data())
                    await consumer.acknowledge(msg)
                assert sorted(again) == sorted(seen)
                return seen

        asyncio.run(asyncio.wait_for(run(), 90))
        got = [out.receive(timeout_millis=15_000).data() for _ in range(3)]
        assert got == [b"IN-0", b"IN-1", b"IN-2"]
        try:
            extra = out.receive(timeout_millis=700)
        except pulsar.Timeout:
            extra = None
        assert extra is None, extra.data()

        def input_backlog() -> int:
            return int(broker.service.topics[source].subscriptions["work"].backlog())

        assert broker.call(input_backlog) == 0
        # the partition and the subscription were told in-process (they are served here)
        assert broker.call(broker.service.transactions.participants.connected_brokers) == []
    finally:
        official.close()
