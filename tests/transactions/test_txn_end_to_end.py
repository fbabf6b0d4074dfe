"""End to end with Magnetar's client: messages produced in a transaction are seen by no
consumer until it commits, then all of them, in order; an abort leaves nothing visible;
acknowledgements in a transaction take effect at commit, and an abort delivers the
messages again; a transaction that consumes from one topic and produces to another
commits both."""

from __future__ import annotations

import uuid

import pytest

import magnetar
from magnetar.client.errors import InvalidTxnStatus, Timeout
from tests.client.conftest import BrokerProcess, run
from tests.transactions.conftest import TxnBroker

ABSENT_MS = 700  # how long to wait to see that a message does NOT come (it would at once)


def topic_name() -> str:
    return f"persistent://public/default/txn-e2e-{uuid.uuid4().hex[:8]}"


async def nothing(consumer: magnetar.Consumer) -> None:
    with pytest.raises(Timeout):
        await consumer.receive(ABSENT_MS)


def test_produce_commit_and_abort(txn_broker: BrokerProcess) -> None:
    topic = topic_name()

    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            consumer = await client.subscribe(
                topic, "s", initial_position=magnetar.InitialPosition.Earliest)
            producer = await client.create_producer(topic)
            txn = await client.new_transaction()
            for i in range(5):
                await producer.send(f"c{i}".encode(), txn=txn)
            aborted = await client.new_transaction()
            await producer.send(b"aborted", txn=aborted)
            await nothing(consumer)
            await txn.commit()
            assert txn.state == "COMMITTED"
            got = [(await consumer.receive(15_000)).data() for _ in range(5)]
            assert got == [f"c{i}".encode() for i in range(5)]
            await aborted.abort()
            await producer.send(b"plain")
            assert (await consumer.receive(15_000)).data() == b"plain"
            await nothing(consumer)
            with pytest.raises(InvalidTxnStatus):
                await producer.send(b"late", txn=txn)

    run(go)


def test_acks_in_a_transaction(txn_broker: BrokerProcess) -> None:
    topic = topic_name()

    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            producer = await client.create_producer(topic)
            consumer = await client.subscribe(
                topic, "s", consumer_type=magnetar.ConsumerType.Shared,
                initial_position=magnetar.InitialPosition.Earliest)
            for i in range(4):
                await producer.send(f"m{i}".encode())
            msgs = [await consumer.receive(15_000) for _ in range(4)]
            aborted = await client.new_transaction()
            await consumer.acknowledge(msgs[0], txn=aborted)
            await consumer.acknowledge(msgs[1], txn=aborted)
            committed = await client.new_transaction()
            await consumer.acknowledge(msgs[2], txn=committed)
            await consumer.acknowledge(msgs[3], txn=committed)
            await committed.commit()
            await aborted.abort()
            # the aborted transaction's acks are dropped: those messages come again
            await consumer.redeliver_unacknowledged_messages()
            again = sorted([(await consumer.receive(15_000)).data() for _ in range(2)])
            assert again == [b"m0", b"m1"]
            await nothing(consumer)

    run(go)


def test_consume_transform_produce_across_partitions(txn_broker: BrokerProcess) -> None:
    source, sink = topic_name(), topic_name()

    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            admin_producer = await client.create_producer(source)
            await admin_producer.send(b"in")
            consumer = await client.subscribe(
                source, "s", initial_position=magnetar.InitialPosition.Earliest)
            reader = await client.subscribe(
                sink, "r", initial_position=magnetar.InitialPosition.Earliest)
            producer = await client.create_producer(sink)
            msg = await consumer.receive(15_000)
            txn = await client.new_transaction()
            await producer.send(msg.data() + b"-out", txn=txn)
            await consumer.acknowledge_cumulative(msg, txn=txn)
            await nothing(reader)
            await txn.commit()
            assert (await reader.receive(15_000)).data() == b"in-out"

    run(go)


def test_a_transaction_over_the_partitions_of_a_topic(txn_broker: TxnBroker) -> None:
    short = f"txn-parts-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{short}"
    status, _ = txn_broker.rest("PUT", f"/admin/v2/persistent/public/default/{short}/partitions", 3)
    assert status == 204

    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            consumer = await client.subscribe(
                topic, "s", initial_position=magnetar.InitialPosition.Earliest)
            producer = await client.create_producer(topic)
            txn = await client.new_transaction()
            for i in range(6):  # round-robin: every partition gets some
                await producer.send(f"p{i}".encode(), txn=txn)
            await nothing(consumer)
            await txn.commit()
            got = sorted([(await consumer.receive(15_000)).data() for _ in range(6)])
            assert got == sorted(f"p{i}".encode() for i in range(6))

    run(go)
