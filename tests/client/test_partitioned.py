"""Partitioned topics: metadata, routing modes, key hashing shared with the official client."""

from __future__ import annotations

import asyncio

import pulsar

from magnetar.client import Client, HashingScheme, InitialPosition, PartitionsRoutingMode
from magnetar.protocol import boost_hash, java_string_hash
from tests.client.conftest import QUIET, BrokerProcess, receive_unique, run

KEYS = [f"key-{i}" for i in range(24)] + ["", "ü-ñ", "a" * 40]


def test_partition_metadata(partitioned_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(partitioned_broker.url) as client:
            parts = await client.get_topic_partitions(topic)
            assert parts == [f"{topic}-partition-{i}" for i in range(3)]

    run(main)


def test_key_routing_matches_official(partitioned_broker: BrokerProcess, topic: str) -> None:
    official = pulsar.Client(partitioned_broker.url, logger=QUIET)
    try:
        theirs = official.create_producer(topic)
        expected = {k: theirs.send(b"o", partition_key=k).partition() for k in KEYS if k}
    finally:
        official.close()

    async def main() -> dict[str, int]:
        async with Client(partitioned_broker.url) as client:
            ours = await client.create_producer(topic)
            return {k: (await ours.send(b"m", partition_key=k)).partition() for k in KEYS if k}

    got = run(main)
    assert got == expected
    assert len(set(got.values())) == 3  # the keys do spread
    assert all(got[k] == boost_hash(k) % 3 for k in got)


def test_java_string_hash_scheme(partitioned_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(partitioned_broker.url) as client:
            p = await client.create_producer(topic, hashing_scheme=HashingScheme.JavaStringHash)
            for k in KEYS[:12]:
                assert (await p.send(b"j", partition_key=k)).partition() == \
                    java_string_hash(k) % 3

    run(main)


def test_round_robin_and_single_partition(partitioned_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(partitioned_broker.url) as client:
            rr = await client.create_producer(topic)
            parts = [(await rr.send(b"r")).partition() for _ in range(9)]
            assert sorted(parts) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
            single = await client.create_producer(
                topic, message_routing_mode=PartitionsRoutingMode.UseSinglePartition)
            assert len({(await single.send(b"s")).partition() for _ in range(6)}) == 1
            custom = await client.create_producer(topic, message_router=lambda msg, n: n - 1)
            assert {(await custom.send(b"c")).partition() for _ in range(3)} == {2}

    run(main)


def test_consume_partitioned_and_official_interop(partitioned_broker: BrokerProcess,
                                                   topic: str) -> None:
    official = pulsar.Client(partitioned_broker.url, logger=QUIET)
    theirs = official.subscribe(topic, "official")

    async def main() -> None:
        async with Client(partitioned_broker.url) as client:
            consumer = await client.subscribe(topic, "ours",
                                              initial_position=InitialPosition.Earliest)
            p = await client.create_producer(topic, batching_enabled=True,
                                             batching_max_messages=4)
            futs = [await p.send_async(b"p%d" % i, partition_key=f"k{i % 5}")
                    for i in range(30)]
            await p.flush()
            ids = await asyncio.gather(*futs)
            msgs = await receive_unique(consumer, 30)
            assert sorted(m.data() for m in msgs) == sorted(b"p%d" % i for i in range(30))
            for m in msgs:
                i = int(m.data()[1:])
                assert m.topic_name() == f"{topic}-partition-{ids[i].partition()}"
                assert m.message_id().partition() == ids[i].partition()
                await consumer.acknowledge(m)
            # order is kept per key
            for k in range(5):
                seq = [int(m.data()[1:]) for m in msgs if int(m.data()[1:]) % 5 == k]
                assert seq == sorted(seq)

    try:
        run(main)
        got = set()
        while len(got) < 30:
            got.add(theirs.receive(5000).data())
        assert got == {b"p%d" % i for i in range(30)}
    finally:
        official.close()


def test_official_partitioned_batches_to_us(partitioned_broker: BrokerProcess,
                                            topic: str) -> None:
    official = pulsar.Client(partitioned_broker.url, logger=QUIET)
    try:
        producer = official.create_producer(topic, batching_enabled=True,
                                            compression_type=pulsar.CompressionType.LZ4)
        sent = {}
        for i in range(30):
            sent[b"o%d" % i] = None
            producer.send_async(b"o%d" % i, None, partition_key=f"key-{i % 6}")
        producer.flush()
    finally:
        official.close()

    async def main() -> None:
        async with Client(partitioned_broker.url) as client:
            consumer = await client.subscribe(topic, "ours",
                                              initial_position=InitialPosition.Earliest)
            msgs = await receive_unique(consumer, 30)
            assert {m.data() for m in msgs} == set(sent)
            for m in msgs:
                key = m.partition_key()
                assert m.topic_name() == f"{topic}-partition-{boost_hash(key) % 3}"

    run(main)


def test_reader_over_partitions(partitioned_broker: BrokerProcess, topic: str) -> None:
    from magnetar.client import MessageId

    async def main() -> None:
        async with Client(partitioned_broker.url) as client:
            p = await client.create_producer(topic)
            for i in range(9):
                await p.send(b"r%d" % i)
            reader = await client.create_reader(topic, MessageId.earliest)
            got = set()
            while await reader.has_message_available():
                got.add((await reader.read_next(5000)).data())
            assert got == {b"r%d" % i for i in range(9)}

    run(main)
