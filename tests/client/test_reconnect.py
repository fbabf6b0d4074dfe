"""Broker restarts: producers resend what is pending, consumers resubscribe; send timeout."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client import (
    Client,
    InitialPosition,
    MessageId,
    ProducerAccessMode,
    ProducerFenced,
    Timeout,
)
from tests.client.conftest import BrokerProcess, needs_magnetar, run


def test_producer_and_consumer_survive_restart(own_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(own_broker.url, operation_timeout_seconds=10) as client:
            consumer = await client.subscribe(topic, "s",
                                              initial_position=InitialPosition.Earliest)
            producer = await client.create_producer(topic, batching_enabled=True,
                                                    batching_max_messages=5)
            first = [await producer.send_async(b"a%d" % i) for i in range(10)]
            await producer.flush()
            await asyncio.gather(*first)
            for _ in range(10):
                await consumer.acknowledge(await consumer.receive(5000))
            consumer._children[0].flush_acks()
            await asyncio.to_thread(own_broker.kill)
            # queued while the broker is down: written after the producer reconnects
            pending = [await producer.send_async(b"b%d" % i) for i in range(10)]
            await asyncio.to_thread(own_broker.start)
            ids = await asyncio.wait_for(asyncio.gather(*pending), 20)
            assert len(set(ids)) == 10
            assert producer.last_sequence_id() == 19
            got: list[bytes] = []
            while len(got) < 10:
                data = (await consumer.receive(20000)).data()
                # acks of the a's may die with a killed broker: at-least-once redelivery
                if data.startswith(b"b"):
                    got.append(data)
            assert got == [b"b%d" % i for i in range(10)]
            assert producer.is_connected() and consumer.is_connected()

    run(main)


def test_sequence_ids_resume_from_broker(own_broker: BrokerProcess, topic: str) -> None:
    needs_magnetar(own_broker, "ProducerSuccess carries no last_sequence_id")

    async def main() -> None:
        async with Client(own_broker.url) as client:
            p = await client.create_producer(topic, producer_name="resumer")
            for _ in range(5):
                await p.send(b"x")
            await p.close()
            again = await client.create_producer(topic, producer_name="resumer")
            assert again.last_sequence_id() == 4
            await again.send(b"y")
            assert again.last_sequence_id() == 5

    run(main)


def test_send_timeout(own_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(own_broker.url, operation_timeout_seconds=2) as client:
            producer = await client.create_producer(topic, send_timeout_millis=300)
            await producer.send(b"ok")
            await asyncio.to_thread(own_broker.kill)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(Timeout):
                await producer.send(b"lost")
            assert 0.25 <= loop.time() - t0 < 5

    run(main)


def test_create_retries_until_the_broker_is_up(own_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        await asyncio.to_thread(own_broker.kill)
        # (a broker's start takes seconds on a loaded machine: both budgets cover that)
        async with Client(own_broker.url, operation_timeout_seconds=60,
                          connection_timeout_ms=60_000) as client:
            producer_task = asyncio.ensure_future(client.create_producer(topic))
            consumer_task = asyncio.ensure_future(client.subscribe(topic, "s"))
            await asyncio.to_thread(own_broker.start)
            producer = await producer_task
            consumer = await consumer_task
            await producer.send(b"hello")
            assert (await consumer.receive(5000)).data() == b"hello"

    run(main)


def test_create_gives_up_after_operation_timeout(own_broker: BrokerProcess, topic: str) -> None:
    from magnetar.client import ConnectError

    async def main() -> None:
        await asyncio.to_thread(own_broker.kill)
        async with Client(own_broker.url, operation_timeout_seconds=0.5) as client:
            with pytest.raises(ConnectError):
                await client.create_producer(topic)

    run(main)


def test_an_exclusive_producer_fenced_by_a_newer_one_fails_its_sends(
    broker: BrokerProcess, topic: str
) -> None:
    needs_magnetar(broker, "producer access modes")

    async def main() -> None:
        async with Client(broker.url, operation_timeout_seconds=10) as client:
            old = await client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
            await old.send(b"old")
            new = await client.create_producer(
                topic, access_mode=ProducerAccessMode.ExclusiveWithFencing)
            await new.send(b"new")
            # closed by the broker; its reconnect carries its topic epoch, which is stale
            with pytest.raises(ProducerFenced):
                await asyncio.wait_for(await old.send_async(b"lost"), 10)
            with pytest.raises(ProducerFenced):
                await old.send_async(b"refused at once")
            await new.send(b"still new")  # the newest producer kept the topic
            reader = await client.create_reader(topic, MessageId.earliest)
            got = [(await reader.read_next(5000)).data() for _ in range(3)]
            assert got == [b"old", b"new", b"still new"]

    run(main)
