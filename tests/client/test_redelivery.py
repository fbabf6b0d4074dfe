"""Negative acks, ack timeout, dead-letter policy and batch receive."""

from __future__ import annotations

import asyncio
import time

import pulsar

from magnetar.client import (
    Client,
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerType,
    InitialPosition,
)
from tests.client.conftest import QUIET, BrokerProcess, needs_magnetar, run


def test_negative_ack_redelivers_after_delay(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared,
                                              negative_ack_redelivery_delay_ms=200)
            p = await client.create_producer(topic)
            await p.send(b"again")
            msg = await consumer.receive(5000)
            assert msg.redelivery_count() == 0
            t0 = time.monotonic()
            await consumer.negative_acknowledge(msg)
            again = await consumer.receive(5000)
            assert time.monotonic() - t0 >= 0.19
            assert again.data() == b"again" and again.redelivery_count() == 1
            await consumer.acknowledge(again)

    run(main)


def test_negative_ack_exclusive(broker: BrokerProcess, topic: str) -> None:
    needs_magnetar(broker, "redelivery on Exclusive subscriptions never comes back "
                   "(the official client times out as well)")
    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "s", negative_ack_redelivery_delay_ms=50)
            p = await client.create_producer(topic)
            for i in range(3):
                await p.send(b"e%d" % i)
            first = await consumer.receive(5000)
            await consumer.acknowledge(first)
            second = await consumer.receive(5000)
            await consumer.negative_acknowledge(second)
            got = [(await consumer.receive(5000)).data() for _ in range(2)]
            assert b"e1" in got

    run(main)


def test_ack_timeout_redelivers(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared,
                                              unacked_messages_timeout_ms=200)
            p = await client.create_producer(topic)
            await p.send(b"a")
            await p.send(b"b")
            m1 = await consumer.receive(5000)
            m2 = await consumer.receive(5000)
            await consumer.acknowledge(m2)
            again = await consumer.receive(5000)  # only the unacknowledged one returns
            assert again.data() == m1.data() and again.redelivery_count() >= 1
            await consumer.acknowledge(again)

    run(main)


def test_dead_letter_topic(broker: BrokerProcess, topic: str) -> None:
    dlq_topic = f"{topic}-sub-DLQ"

    async def main() -> None:
        async with Client(broker.url) as client:
            dlq = await client.subscribe(dlq_topic, "dlq-reader",
                                         initial_position=InitialPosition.Earliest)
            consumer = await client.subscribe(
                topic, "sub", consumer_type=ConsumerType.Shared,
                negative_ack_redelivery_delay_ms=20,
                dead_letter_policy=ConsumerDeadLetterPolicy(max_redeliver_count=2))
            p = await client.create_producer(topic)
            await p.send(b"poison", properties={"p": "1"}, partition_key="pk")
            await p.send(b"fine")
            counts = []
            while True:
                msg = await consumer.receive(5000)
                if msg.data() == b"fine":
                    await consumer.acknowledge(msg)
                    continue
                counts.append(msg.redelivery_count())
                await consumer.negative_acknowledge(msg)
                if len(counts) == 3:
                    break
            assert counts == [0, 1, 2]
            dead = await dlq.receive(5000)
            assert dead.data() == b"poison"
            assert dead.partition_key() == "pk"
            props = dead.properties()
            assert props["p"] == "1" and props["REAL_TOPIC"] == topic
            assert "ORIGIN_MESSAGE_ID" in props
            # acknowledged on the original subscription: nothing more arrives
            assert consumer.dead_letter_topic(consumer._children[0]) == dlq_topic

    run(main)


def test_dead_letter_topic_name_matches_official(broker: BrokerProcess, topic: str) -> None:
    """The official client dead-letters to the same ``<topic>-<subscription>-DLQ``."""
    official = pulsar.Client(broker.url, logger=QUIET)
    try:
        consumer = official.subscribe(
            topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=20,
            dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=1))
        producer = official.create_producer(topic)
        producer.send(b"poison")
        for _ in range(2):
            consumer.negative_acknowledge(consumer.receive(5000))

        async def main() -> None:
            async with Client(broker.url) as client:
                dlq = await client.subscribe(f"{topic}-sub-DLQ", "x",
                                             initial_position=InitialPosition.Earliest)
                assert (await dlq.receive(10000)).data() == b"poison"

        run(main)
    finally:
        official.close()


def test_batch_receive(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(
                topic, "s", batch_receive_policy=ConsumerBatchReceivePolicy(
                    max_num_message=4, max_num_bytes=1 << 20, timeout_ms=100))
            p = await client.create_producer(topic)
            for i in range(6):
                await p.send(b"b%d" % i)
            first = await consumer.batch_receive()
            # the messages may still be on their way: collect until all 6 came
            got = [m.data() for m in first]
            assert len(first) <= 4
            while len(got) < 6:
                more = await consumer.batch_receive()
                assert len(more) <= 4
                got += [m.data() for m in more]
            assert got == [b"b%d" % i for i in range(6)]
            t0 = time.monotonic()
            assert await consumer.batch_receive() == []
            assert 0.09 <= time.monotonic() - t0 < 2

    run(main)


def test_batch_message_acked_when_all_members_are(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            c1 = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared)
            p = await client.create_producer(topic, batching_enabled=True)
            futs = [await p.send_async(b"m%d" % i) for i in range(4)]
            await p.flush()
            await asyncio.gather(*futs)
            msgs = [await c1.receive(5000) for _ in range(4)]
            for m in msgs[:3]:
                await c1.acknowledge(m)
            await c1.close()
            # the entry was not fully acknowledged: the whole batch comes back
            c2 = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared)
            again = [(await c2.receive(5000)).data() for _ in range(4)]
            assert sorted(again) == [b"m0", b"m1", b"m2", b"m3"]
            for m in again:
                del m

    run(main)


def test_ack_timeout_with_partly_acked_batch(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared,
                                              unacked_messages_timeout_ms=200)
            p = await client.create_producer(topic, batching_enabled=True)
            futs = [await p.send_async(b"x%d" % i) for i in range(3)]
            await p.flush()
            await asyncio.gather(*futs)
            msgs = [await consumer.receive(5000) for _ in range(3)]
            await consumer.acknowledge(msgs[0])
            # the entry is not fully acknowledged: it comes back (the whole batch)
            again = await consumer.receive(5000)
            assert again.redelivery_count() >= 1

    run(main)


def test_batch_index_ack(broker: BrokerProcess, topic: str) -> None:
    needs_magnetar(broker, "a batch acknowledged with an ack_set is never redelivered")

    async def main() -> None:
        async with Client(broker.url) as client:
            c1 = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared,
                                        batch_index_ack_enabled=True)
            p = await client.create_producer(topic, batching_enabled=True)
            futs = [await p.send_async(b"i%d" % i) for i in range(5)]
            await p.flush()
            await asyncio.gather(*futs)
            msgs = [await c1.receive(5000) for _ in range(5)]
            for m in (msgs[0], msgs[2], msgs[3]):
                await c1.acknowledge(m)
            await c1.close()
            c2 = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared)
            again = sorted([(await c2.receive(5000)).data() for _ in range(2)])
            assert again == [b"i1", b"i4"]

    run(main)
