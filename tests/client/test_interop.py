"""Interop with the official client on the same topics, in both directions."""

from __future__ import annotations

import asyncio
import os

import pulsar
import pytest

from magnetar.client import Client, CompressionType, InitialPosition
from tests.client.conftest import QUIET, BrokerProcess, needs_magnetar, receive_unique, run

CODECS = [
    (CompressionType.NONE, pulsar.CompressionType.NONE),
    (CompressionType.LZ4, pulsar.CompressionType.LZ4),
    (CompressionType.ZLib, pulsar.CompressionType.ZLib),
    (CompressionType.ZSTD, pulsar.CompressionType.ZSTD),
    (CompressionType.SNAPPY, pulsar.CompressionType.SNAPPY),
]


@pytest.mark.parametrize(("ours", "theirs"), CODECS, ids=[c[0].name for c in CODECS])
def test_official_batches_to_us(broker: BrokerProcess, official: pulsar.Client, topic: str,
                                ours: CompressionType, theirs: pulsar.CompressionType) -> None:
    producer = official.create_producer(topic, batching_enabled=True,
                                        batching_max_messages=10, compression_type=theirs,
                                        batching_max_publish_delay_ms=1000)
    for i in range(25):
        producer.send_async(b"o-%d" % i * 10, None, properties={"n": str(i)},
                            partition_key=f"k{i}" if i % 2 else None)
    producer.flush()

    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "s",
                                              initial_position=InitialPosition.Earliest)
            for i, msg in enumerate(await receive_unique(consumer, 25)):
                assert msg.data() == b"o-%d" % i * 10
                assert msg.properties() == {"n": str(i)}
                assert msg.partition_key() == (f"k{i}" if i % 2 else "")
                assert msg.message_id().batch_index() == i % 10
                await consumer.acknowledge(msg)

    run(main)


@pytest.mark.parametrize(("ours", "theirs"), CODECS, ids=[c[0].name for c in CODECS])
def test_our_batches_to_official(broker: BrokerProcess, official: pulsar.Client, topic: str,
                                 ours: CompressionType, theirs: pulsar.CompressionType) -> None:
    consumer = official.subscribe(topic, "s")

    async def main() -> list[object]:
        async with Client(broker.url) as client:
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_max_messages=10, compression_type=ours)
            futs = [await producer.send_async(b"m-%d" % i * 10, properties={"n": str(i)},
                                              partition_key=f"k{i}" if i % 3 == 0 else None)
                    for i in range(25)]
            await producer.flush()
            return list(await asyncio.gather(*futs))

    ids = run(main)
    seen = set()
    i = 0
    while i < 25:
        msg = consumer.receive(5000)
        if str(msg.message_id()) in seen:
            continue  # pulsar-lite duplicate dispatch
        seen.add(str(msg.message_id()))
        assert msg.data() == b"m-%d" % i * 10
        assert msg.properties() == {"n": str(i)}
        assert msg.partition_key() == (f"k{i}" if i % 3 == 0 else "")
        assert msg.message_id().entry_id() == ids[i].entry_id()
        assert msg.message_id().batch_index() == ids[i].batch_index()
        consumer.acknowledge(msg)
        i += 1


def test_unbatched_both_ways(broker: BrokerProcess, official: pulsar.Client, topic: str) -> None:
    theirs = official.subscribe(topic, "official")
    producer = official.create_producer(topic)

    async def main() -> None:
        async with Client(broker.url) as client:
            ours = await client.subscribe(topic, "ours")
            p = await client.create_producer(topic)
            await p.send(b"from-us", properties={"x": "y"}, event_timestamp=77)
            await asyncio.to_thread(producer.send, b"from-them", properties={"a": "b"},
                                    event_timestamp=88)
            m1 = await ours.receive(5000)
            m2 = await ours.receive(5000)
            assert (m1.data(), m1.properties(), m1.event_timestamp()) == (
                b"from-us", {"x": "y"}, 77)
            assert (m2.data(), m2.properties(), m2.event_timestamp()) == (
                b"from-them", {"a": "b"}, 88)

    run(main)
    m = theirs.receive(5000)
    assert (m.data(), m.properties(), m.event_timestamp()) == (b"from-us", {"x": "y"}, 77)


def test_chunked_both_ways(broker: BrokerProcess, official: pulsar.Client, topic: str) -> None:
    """6 MiB payloads exceed the default 5 MiB limit: both clients split and join chunks."""
    needs_magnetar(broker, "entries are sometimes dispatched twice, which breaks the "
                   "official client's chunk reassembly")
    big_ours = os.urandom(6 * 1024 * 1024)
    big_theirs = os.urandom(6 * 1024 * 1024)
    theirs = official.subscribe(topic, "official")
    producer = official.create_producer(topic, chunking_enabled=True, batching_enabled=False)

    async def main() -> None:
        async with Client(broker.url) as client:
            ours = await client.subscribe(topic, "ours")
            p = await client.create_producer(topic, chunking_enabled=True)
            mid = await p.send(big_ours, properties={"big": "1"})
            assert mid._chunk_ids is not None and mid._chunk_ids[0] != mid
            await asyncio.to_thread(producer.send, big_theirs)
            m1 = await ours.receive(10000)
            assert m1.data() == big_ours and m1.properties() == {"big": "1"}
            m2 = await ours.receive(10000)
            assert m2.data() == big_theirs
            await ours.acknowledge(m1)
            await ours.acknowledge(m2)

    run(main)
    m = theirs.receive(10000)
    assert m.data() == big_ours and m.properties() == {"big": "1"}


def test_chunk_needs_chunking_enabled(broker: BrokerProcess, topic: str) -> None:
    from magnetar.client import MessageTooBig

    async def main() -> None:
        async with Client(broker.url) as client:
            p = await client.create_producer(topic)
            with pytest.raises(MessageTooBig):
                await p.send(b"x" * (6 * 1024 * 1024))

    run(main)


def test_chunked_ours_only(broker: BrokerProcess, topic: str) -> None:
    """Our producer and consumer alone, with compression."""
    needs_magnetar(broker, "6 MiB entries sometimes stall its dispatch")
    big = os.urandom(6 * 1024 * 1024 + 5)

    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "ours")
            p = await client.create_producer(topic, chunking_enabled=True,
                                             compression_type=CompressionType.LZ4)
            await p.send(big)
            await p.send(b"small")
            msg = await consumer.receive(10000)
            assert msg.data() == big
            assert (await consumer.receive(10000)).data() == b"small"

    run(main)


def test_many_chunks_with_small_limit(small_broker: BrokerProcess, topic: str) -> None:
    """A 64 KiB broker limit (from Connected.max_message_size): ~16 chunks each way."""
    payload = os.urandom(1024 * 1024)
    official = pulsar.Client(small_broker.url, logger=QUIET)
    try:
        theirs = official.subscribe(topic, "official")
        their_producer = official.create_producer(topic, chunking_enabled=True,
                                                  batching_enabled=False)

        async def main() -> None:
            async with Client(small_broker.url) as client:
                ours = await client.subscribe(topic, "ours")
                p = await client.create_producer(topic, chunking_enabled=True)
                mid = await p.send(payload)
                assert len(mid._chunk_ids or []) == 2
                await asyncio.to_thread(their_producer.send, payload[::-1])
                assert (await ours.receive(10000)).data() == payload
                assert (await ours.receive(10000)).data() == payload[::-1]

        run(main)
        assert theirs.receive(10000).data() == payload
        assert theirs.receive(10000).data() == payload[::-1]
    finally:
        official.close()


def test_message_id_serialization_interop() -> None:
    from magnetar.client import MessageId

    ours = MessageId(partition=2, ledger_id=17, entry_id=42, batch_index=3, batch_size=5)
    theirs = pulsar.MessageId.deserialize(ours.serialize())
    assert (theirs.ledger_id(), theirs.entry_id(), theirs.partition(), theirs.batch_index()) \
        == (17, 42, 2, 3)
    back = MessageId.deserialize(pulsar.MessageId(1, 9, 8, -1).serialize())
    assert (back.partition(), back.ledger_id(), back.entry_id(), back.batch_index()) == \
        (1, 9, 8, -1)
    assert MessageId.deserialize(pulsar.MessageId.earliest.serialize()) == MessageId.earliest
    assert MessageId.deserialize(pulsar.MessageId.latest.serialize()) == MessageId.latest
