"""Produce and consume with the asyncio client against a real broker."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client import (
    Client,
    CompressionType,
    ConsumerType,
    InitialPosition,
    MessageId,
    ProducerQueueIsFull,
    Timeout,
)
from magnetar.protocol import FrameDecoder, pb
from tests.client.conftest import BrokerProcess, receive_unique, run


def test_send_receive_fields(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "sub")
            producer = await client.create_producer(topic, producer_name="p-fields")
            mid = await producer.send(b"hello", properties={"a": "1"}, partition_key="key-1",
                                      event_timestamp=1234)
            assert isinstance(mid, MessageId)
            msg = await consumer.receive(timeout_millis=5000)
            assert msg.data() == b"hello"
            assert msg.value() == b"hello"
            assert msg.properties() == {"a": "1"}
            assert msg.partition_key() == "key-1"
            assert msg.event_timestamp() == 1234
            assert msg.publish_timestamp() > 0
            assert msg.redelivery_count() == 0
            assert msg.topic_name() == topic
            assert msg.message_id() == mid
            assert msg.producer_name() == "p-fields"
            await consumer.acknowledge(msg)
            assert producer.producer_name() == "p-fields"
            assert producer.last_sequence_id() == 0

    run(main)


def test_receive_timeout_and_async_for(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "sub")
            with pytest.raises(Timeout):
                await consumer.receive(timeout_millis=50)
            producer = await client.create_producer(topic)
            for i in range(5):
                await producer.send(b"m%d" % i)
            got = []
            async for msg in consumer:
                got.append(msg.data())
                await consumer.acknowledge(msg)
                if len(got) == 5:
                    break
            assert got == [b"m%d" % i for i in range(5)]

    run(main)


def test_send_async_future_and_callback(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            producer = await client.create_producer(topic)
            seen: list[tuple[object, object]] = []
            futs = [await producer.send_async(b"x%d" % i, lambda e, m: seen.append((e, m)))
                    for i in range(10)]
            ids = await asyncio.gather(*futs)
            await asyncio.sleep(0)  # let done-callbacks run (they are scheduled, not awaited)
            assert len(set(ids)) == 10 and ids == sorted(ids)
            assert [m for _, m in seen] == ids and all(e is None for e, _ in seen)

    run(main)


@pytest.mark.parametrize("compression", list(CompressionType))
def test_batches_with_compression(broker: BrokerProcess, topic: str,
                                  compression: CompressionType) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "sub")
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_max_messages=50,
                batching_max_publish_delay_ms=1000, compression_type=compression)
            futs = [await producer.send_async(b"payload-%d" % i * 20,
                                              properties={"i": str(i)} if i % 7 == 0 else None)
                    for i in range(120)]
            await producer.flush()
            ids = await asyncio.gather(*futs)
            # 120 messages in batches of 50 -> 3 entries, indexes inside each batch
            assert len({(m.ledger_id(), m.entry_id()) for m in ids}) == 3
            assert [m.batch_index() for m in ids[:50]] == list(range(50))
            for i, msg in enumerate(await receive_unique(consumer, 120)):
                assert msg.data() == b"payload-%d" % i * 20
                assert msg.properties() == ({"i": str(i)} if i % 7 == 0 else {})
                assert msg.message_id() == ids[i]
                await consumer.acknowledge(msg)

    run(main)


def test_batch_flushed_by_delay_and_bytes(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_max_messages=1000,
                batching_max_publish_delay_ms=20, batching_max_allowed_size_in_bytes=1000)
            # 3 messages: far below the count limit, the delay must flush them
            ids = await asyncio.gather(*[await producer.send_async(b"d") for _ in range(3)])
            assert len({(m.ledger_id(), m.entry_id()) for m in ids}) == 1
            # 400-byte messages with a 1000-byte limit: at most 3 per batch
            ids = await asyncio.gather(*[await producer.send_async(b"b" * 400)
                                         for _ in range(9)])
            per_entry: dict[tuple[int, int], int] = {}
            for m in ids:
                per_entry[(m.ledger_id(), m.entry_id())] = per_entry.get(
                    (m.ledger_id(), m.entry_id()), 0) + 1
            assert max(per_entry.values()) <= 3 and len(per_entry) >= 3

    run(main)


def test_redelivery_after_close_without_ack(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            c1 = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
            producer = await client.create_producer(topic)
            for i in range(3):
                await producer.send(b"r%d" % i)
            first = await c1.receive(5000)
            await c1.acknowledge(first)
            await c1.receive(5000)
            await c1.close()
            c2 = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
            got = sorted([(await c2.receive(5000)).data() for _ in range(2)])
            assert got == [b"r1", b"r2"]

    run(main)


def test_acknowledge_cumulative(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            c1 = await client.subscribe(topic, "sub")
            producer = await client.create_producer(topic)
            for i in range(5):
                await producer.send(b"c%d" % i)
            msgs = [await c1.receive(5000) for _ in range(5)]
            await c1.acknowledge_cumulative(msgs[2])
            await c1.close()
            c2 = await client.subscribe(topic, "sub")
            got = [(await c2.receive(5000)).data() for _ in range(2)]
            assert got == [b"c3", b"c4"]

    run(main)


def test_initial_position_earliest_and_latest(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            producer = await client.create_producer(topic)
            await producer.send(b"old")
            early = await client.subscribe(topic, "early",
                                           initial_position=InitialPosition.Earliest)
            late = await client.subscribe(topic, "late")
            await producer.send(b"new")
            assert (await early.receive(5000)).data() == b"old"
            assert (await late.receive(5000)).data() == b"new"

    run(main)


def test_pending_queue_limits(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            producer = await client.create_producer(
                topic, max_pending_messages=5, batching_enabled=True,
                batching_max_publish_delay_ms=10000)
            futs = [await producer.send_async(b"q") for _ in range(5)]
            with pytest.raises(ProducerQueueIsFull):
                await producer.send_async(b"q")
            await producer.flush()
            assert all(f.done() for f in futs)
            blocking = await client.create_producer(
                topic, max_pending_messages=5, block_if_queue_full=True, batching_enabled=True,
                batching_max_publish_delay_ms=10000)
            futs = [await blocking.send_async(b"b%d" % i) for i in range(23)]
            await blocking.flush()
            ids = await asyncio.gather(*futs)
            assert len(set(ids)) == 23

    run(main)


def test_unsubscribe(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            producer = await client.create_producer(topic)
            c1 = await client.subscribe(topic, "gone")
            await producer.send(b"before")
            await c1.unsubscribe()
            await producer.send(b"after")
            c2 = await client.subscribe(topic, "gone", initial_position=InitialPosition.Latest)
            await producer.send(b"later")
            assert (await c2.receive(5000)).data() == b"later"

    run(main)


def test_flow_refill_and_grouped_acks(broker: BrokerProcess, topic: str) -> None:
    """A 10-message receiver queue must be refilled (at half) to get 100 messages; acks
    inside one group time leave as one command."""
    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "s", receiver_queue_size=10,
                                              ack_group_time_ms=10_000)
            child = consumer._children[0]
            writes: list[bytes] = []
            cnx = child._cnx
            real_write = cnx.write

            def spy(data: bytes) -> None:
                writes.append(data)
                real_write(data)

            cnx.write = spy  # type: ignore[method-assign]
            p = await client.create_producer(topic)
            for i in range(100):
                await p.send_async(b"f%d" % i)
            await p.flush()
            msgs = await receive_unique(consumer, 100)
            assert [m.data() for m in msgs] == [b"f%d" % i for i in range(100)]
            flows = [f for w in writes for f in FrameDecoder().feed(w)
                     if f.command.type == pb.BaseCommand.FLOW]
            assert len(flows) >= 18  # 5 permits at a time
            writes.clear()
            for m in msgs:
                await consumer.acknowledge(m)
            assert writes == []  # grouped: nothing sent yet
            child.flush_acks()
            assert len(writes) == 1

    run(main)


def test_concurrent_receivers(broker: BrokerProcess, topic: str) -> None:
    """Several coroutines blocked in ``receive`` all get served by one batch."""
    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "s")
            receivers = [asyncio.ensure_future(consumer.receive(5000)) for _ in range(4)]
            producer = await client.create_producer(topic, batching_enabled=True)
            futs = [await producer.send_async(b"c%d" % i) for i in range(4)]
            await producer.flush()
            await asyncio.gather(*futs)
            got = await asyncio.gather(*receivers)
            assert sorted(m.data() for m in got) == [b"c0", b"c1", b"c2", b"c3"]

    run(main)


def test_message_listener(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            got: asyncio.Queue[bytes] = asyncio.Queue()

            async def listener(consumer: object, msg: object) -> None:
                await consumer.acknowledge(msg)  # type: ignore[attr-defined]
                got.put_nowait(msg.data())  # type: ignore[attr-defined]

            await client.subscribe(topic, "s", message_listener=listener)
            p = await client.create_producer(topic)
            for i in range(3):
                await p.send(b"l%d" % i)
            assert [await asyncio.wait_for(got.get(), 5) for _ in range(3)] == \
                [b"l0", b"l1", b"l2"]

    run(main)


def test_pause_and_resume_message_listener(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            got: asyncio.Queue[bytes] = asyncio.Queue()

            def listener(consumer: object, msg: object) -> None:
                got.put_nowait(msg.data())  # type: ignore[attr-defined]

            consumer = await client.subscribe(topic, "s", message_listener=listener)
            consumer.pause_message_listener()
            p = await client.create_producer(topic)
            for i in range(3):
                await p.send(b"p%d" % i)
            # the listener task holds at most one message; the others wait in the queue
            end = asyncio.get_running_loop().time() + 5
            while len(consumer._queue) < 2 and asyncio.get_running_loop().time() < end:
                await asyncio.sleep(0.01)  # bounded poll
            for _ in range(10):
                await asyncio.sleep(0)  # let a (wrongly) running listener take them
            assert len(consumer._queue) >= 2 and got.empty()
            consumer.resume_message_listener()
            assert [await asyncio.wait_for(got.get(), 5) for _ in range(3)] == \
                [b"p0", b"p1", b"p2"]

    run(main)
