"""Key_Shared, Failover and Shared dispatch seen from the client; delayed delivery."""

from __future__ import annotations

import asyncio
import time

from magnetar.client import Client, ConsumerType, Timeout
from tests.client.conftest import BrokerProcess, needs_magnetar, run


async def _drain(consumer: object) -> list[object]:
    out = []
    while True:
        try:
            msg = await consumer.receive(300)  # type: ignore[attr-defined]
        except Timeout:
            return out
        out.append(msg)
        await consumer.acknowledge(msg)  # type: ignore[attr-defined]


def test_key_shared_keeps_keys_together(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            c1 = await client.subscribe(topic, "ks", consumer_type=ConsumerType.KeyShared,
                                        consumer_name="a")
            c2 = await client.subscribe(topic, "ks", consumer_type=ConsumerType.KeyShared,
                                        consumer_name="b")
            p = await client.create_producer(topic)
            for i in range(60):
                await p.send(b"%d" % i, partition_key=f"key-{i % 12}")
            got1, got2 = await asyncio.gather(_drain(c1), _drain(c2))
            keys1 = {m.partition_key() for m in got1}  # type: ignore[attr-defined]
            keys2 = {m.partition_key() for m in got2}  # type: ignore[attr-defined]
            assert len(got1) + len(got2) == 60
            assert keys1 and keys2 and not keys1 & keys2

    run(main)


def test_shared_spreads_and_failover_has_one_active(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            s1 = await client.subscribe(topic, "sh", consumer_type=ConsumerType.Shared,
                                        receiver_queue_size=5)
            s2 = await client.subscribe(topic, "sh", consumer_type=ConsumerType.Shared,
                                        receiver_queue_size=5)
            f1 = await client.subscribe(topic, "fo", consumer_type=ConsumerType.Failover,
                                        consumer_name="f1")
            f2 = await client.subscribe(topic, "fo", consumer_type=ConsumerType.Failover,
                                        consumer_name="f2")
            p = await client.create_producer(topic)
            for i in range(40):
                await p.send(b"%d" % i)
            a, b = await asyncio.gather(_drain(s1), _drain(s2))
            assert len({m.data() for m in a + b}) == 40  # type: ignore[attr-defined]
            assert a and b
            x, y = await asyncio.gather(_drain(f1), _drain(f2))
            assert sorted(len(v) for v in (x, y)) == [0, 40]

    run(main)


def test_deliver_after(broker: BrokerProcess, topic: str) -> None:
    needs_magnetar(broker, "deliver_at_time is ignored (delivered at once)")

    async def main() -> None:
        async with Client(broker.url) as client:
            c = await client.subscribe(topic, "d", consumer_type=ConsumerType.Shared)
            p = await client.create_producer(topic)
            t0 = time.monotonic()
            await p.send(b"later", deliver_after=300)  # milliseconds, or a timedelta
            await p.send(b"now")
            assert (await c.receive(5000)).data() == b"now"
            assert (await c.receive(5000)).data() == b"later"
            assert time.monotonic() - t0 >= 0.25

    run(main)
