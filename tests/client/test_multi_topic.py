"""Subscriptions over several topics: lists and regex patterns."""

from __future__ import annotations

import re
import uuid

from magnetar.client import Client, ConsumerType, InitialPosition
from tests.client.conftest import BrokerProcess, needs_magnetar, run


def test_topic_list(broker: BrokerProcess) -> None:
    base = f"persistent://public/default/multi-{uuid.uuid4().hex[:8]}"
    topics = [f"{base}-{i}" for i in range(3)]

    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topics, "s", consumer_type=ConsumerType.Shared)
            for i, t in enumerate(topics):
                p = await client.create_producer(t)
                await p.send(b"from-%d" % i)
            msgs = [await consumer.receive(5000) for _ in range(3)]
            assert sorted(m.data() for m in msgs) == [b"from-0", b"from-1", b"from-2"]
            assert {m.topic_name() for m in msgs} == set(topics)
            for m in msgs:
                await consumer.acknowledge(m)
                # an id alone finds its topic too
                await consumer.acknowledge(m.message_id())
            await consumer.close()
            again = await client.subscribe(topics, "s", consumer_type=ConsumerType.Shared)
            import pytest

            from magnetar.client import Timeout

            with pytest.raises(Timeout):
                await again.receive(200)

    run(main)


def test_regex_subscription(broker: BrokerProcess) -> None:
    needs_magnetar(broker, "GetTopicsOfNamespace is never answered")
    tag = uuid.uuid4().hex[:8]
    matching = [f"persistent://public/default/rx-{tag}-{i}" for i in range(2)]
    other = f"persistent://public/default/other-{tag}"

    async def main() -> None:
        async with Client(broker.url) as client:
            for t in [*matching, other]:  # topics must exist to be listed
                p = await client.create_producer(t)
                await p.send(b"early " + t.encode())
            consumer = await client.subscribe(
                re.compile(f"persistent://public/default/rx-{tag}-.*"), "s",
                initial_position=InitialPosition.Earliest)
            got = {(await consumer.receive(5000)).topic_name() for _ in range(2)}
            assert got == set(matching)
            import pytest

            from magnetar.client import Timeout

            with pytest.raises(Timeout):
                await consumer.receive(200)

    run(main)


def test_regex_discovers_new_topics(broker: BrokerProcess) -> None:
    needs_magnetar(broker, "GetTopicsOfNamespace is never answered")
    tag = uuid.uuid4().hex[:8]

    async def main() -> None:
        async with Client(broker.url) as client:
            first = f"persistent://public/default/disc-{tag}-a"
            p = await client.create_producer(first)
            consumer = await client.subscribe(
                re.compile(f"persistent://public/default/disc-{tag}-.*"), "s",
                pattern_auto_discovery_period=0.1,
                initial_position=InitialPosition.Earliest)
            late = await client.create_producer(f"persistent://public/default/disc-{tag}-b")
            await late.send(b"late")
            await p.send(b"first")
            got = {(await consumer.receive(10000)).data() for _ in range(2)}
            assert got == {b"late", b"first"}

    run(main)
