"""Readers (earliest, latest, from an id inclusive or not), seek, last message id."""

from __future__ import annotations

import asyncio
import time

from magnetar.client import Client, InitialPosition, MessageId, Timeout
from tests.client.conftest import BrokerProcess, run


async def _fill(client: Client, topic: str, n: int, batched: bool = False) -> list[MessageId]:
    p = await client.create_producer(topic, batching_enabled=batched, batching_max_messages=4)
    futs = [await p.send_async(b"v%d" % i) for i in range(n)]
    await p.flush()
    return list(await asyncio.gather(*futs))


async def _drain(reader: object) -> list[bytes]:
    out = []
    while await reader.has_message_available():  # type: ignore[attr-defined]
        out.append((await reader.read_next(5000)).data())  # type: ignore[attr-defined]
    return out


def test_reader_earliest_latest(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            await _fill(client, topic, 5)
            early = await client.create_reader(topic, MessageId.earliest)
            assert await _drain(early) == [b"v%d" % i for i in range(5)]
            assert not await early.has_message_available()
            late = await client.create_reader(topic, MessageId.latest)
            assert not await late.has_message_available()
            with __import__("pytest").raises(Timeout):
                await late.read_next(100)
            p = await client.create_producer(topic)
            await p.send(b"fresh")
            assert (await late.read_next(5000)).data() == b"fresh"
            assert (await early.read_next(5000)).data() == b"fresh"

    run(main)


def test_reader_from_id(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            ids = await _fill(client, topic, 6)
            exclusive = await client.create_reader(topic, ids[2])
            assert await _drain(exclusive) == [b"v3", b"v4", b"v5"]
            inclusive = await client.create_reader(topic, ids[2],
                                                   start_message_id_inclusive=True)
            assert await _drain(inclusive) == [b"v2", b"v3", b"v4", b"v5"]
            # a serialized id works too
            again = await client.create_reader(topic, MessageId.deserialize(ids[4].serialize()))
            assert await _drain(again) == [b"v5"]

    run(main)


def test_reader_from_id_inside_batch(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            ids = await _fill(client, topic, 8, batched=True)
            assert ids[5].batch_index() == 1
            exclusive = await client.create_reader(topic, ids[5])
            assert await _drain(exclusive) == [b"v6", b"v7"]
            inclusive = await client.create_reader(topic, ids[5],
                                                   start_message_id_inclusive=True)
            assert await _drain(inclusive) == [b"v5", b"v6", b"v7"]

    run(main)


def test_get_last_message_id(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            ids = await _fill(client, topic, 3)
            consumer = await client.subscribe(topic, "s")
            last = await consumer.get_last_message_id()
            assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(),
                                                           ids[-1].entry_id())

    run(main)


def test_consumer_seek_by_id_and_time(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            ids = await _fill(client, topic, 3)
            filled = int(time.time() * 1000)  # at or after v0..v2's publish times
            while int(time.time() * 1000) <= filled:
                await asyncio.sleep(0.001)
            middle = int(time.time() * 1000)  # after them: a seek here lands on v3
            while int(time.time() * 1000) <= middle:
                await asyncio.sleep(0.001)  # publish times must move past ``middle``
            p = await client.create_producer(topic)
            for i in range(3, 6):
                await p.send(b"v%d" % i)
            consumer = await client.subscribe(topic, "s",
                                              initial_position=InitialPosition.Earliest)
            for _ in range(6):
                await consumer.acknowledge(await consumer.receive(5000))
            await consumer.seek(ids[1])
            got = [(await consumer.receive(5000)).data()]
            while got[-1] != b"v5":
                got.append((await consumer.receive(5000)).data())
            # Pulsar's seek puts the cursor *at* the id: the message itself may come back
            assert got in ([b"v%d" % i for i in range(1, 6)], [b"v%d" % i for i in range(2, 6)])
            if broker.kind == "magnetar":  # pulsar-lite's seek by time goes to the start
                await consumer.seek(middle)
                assert (await consumer.receive(5000)).data() == b"v3"

    run(main)


def test_reader_seek(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            ids = await _fill(client, topic, 5)
            reader = await client.create_reader(topic, MessageId.earliest)
            assert len(await _drain(reader)) == 5
            await reader.seek(ids[1])
            assert (await reader.read_next(5000)).data() == b"v1"
            publish_time = (await reader.read_next(5000)).publish_timestamp()
            await reader.seek(publish_time)
            assert (await reader.read_next(5000)).data() <= b"v2"
            await reader.seek(MessageId.earliest)
            assert (await reader.read_next(5000)).data() == b"v0"

    run(main)
