"""End to end with Magnetar's client: consume-transform-produce in transactions (acks and
sends in one transaction), read by the official client. A committed transaction's outputs
all appear and its inputs are acknowledged; an aborted one's outputs never appear and its
inputs come again. A broker alone tells its own topics and subscriptions in-process, never
over a connection to itself."""

from __future__ import annotations

import asyncio
import json
import uuid

import pulsar
import pytest

import magnetar
from magnetar.broker.subscriptions.pending_acks import PROPERTY_PREFIX
from magnetar.client.errors import Timeout
from magnetar.storage.ledger.lifecycle import LedgerLifecycle

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


def test_acks_sent_together_in_a_transaction_share_their_writes(
    broker: ThreadedBroker, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A transaction's acknowledgements sent together are stored in a write or two of the
    subscription's pending acks, not one write each (each write holds every held ack, so
    one a message made a transaction of n acknowledgements cost n writes of up to n acks:
    2 ms of broker CPU a message at 100 a transaction). Each is answered once stored, and
    the commit applies them all."""
    topic = f"persistent://public/default/e2e-acks-{uuid.uuid4().hex[:8]}"
    writes: list[str] = []
    real = LedgerLifecycle.set_property_async

    async def counted(self: LedgerLifecycle, key: str, value: str) -> None:
        if key.startswith(PROPERTY_PREFIX):
            writes.append(value)
        await real(self, key, value)

    monkeypatch.setattr(LedgerLifecycle, "set_property_async", counted)

    async def run() -> tuple[list[str], int]:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            consumer = await client.subscribe(
                topic, "s", initial_position=magnetar.InitialPosition.Earliest)
            producer = await client.create_producer(topic, batching_enabled=False)
            await asyncio.gather(*[await producer.send_async(b"m%d" % i) for i in range(100)])
            msgs = [await consumer.receive(timeout_millis=15_000) for _ in range(100)]
            txn = await client.new_transaction(timeout_ms=60_000)
            await asyncio.gather(*(consumer.acknowledge(msg, txn=txn) for msg in msgs))
            held = list(writes)  # every ack answered: each stored
            await txn.commit()
            await consumer.close()
            again = await client.subscribe(topic, "s")
            try:
                await again.receive(timeout_millis=700)
            except Timeout:
                return held, 0
            return held, 1

    held, redelivered = asyncio.run(run())
    assert 1 <= len(held) <= 10, len(held)  # one a message before
    assert len(json.loads(held[-1])["ind"]) == 100  # the last holds all of them
    assert redelivered == 0  # the commit acknowledged all hundred
