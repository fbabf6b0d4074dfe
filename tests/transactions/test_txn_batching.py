"""A batching producer batches a transaction's messages, as the Java client does: one
transaction per batch (a message of another transaction, or of none, sends the open batch
first), the batch's metadata and Send carrying the transaction id; the broker keeps the
batches back until the commit and drops them at an abort."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import magnetar
from magnetar import BatchingType
from magnetar.client.message_id import MessageId
from tests.client.conftest import BrokerProcess, run


@pytest.mark.parametrize("batching_type", [BatchingType.Default, BatchingType.KeyBased])
def test_a_transactions_messages_go_in_batches_of_their_own(
        txn_broker: BrokerProcess, batching_type: BatchingType) -> None:
    topic = f"persistent://public/default/txn-batch-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            consumer = await client.subscribe(topic, "s")
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_max_messages=5,
                batching_max_publish_delay_ms=60_000, batching_type=batching_type)
            first = await client.new_transaction(timeout_ms=60_000)
            second = await client.new_transaction(timeout_ms=60_000)
            sends: list[tuple[str, asyncio.Future[MessageId]]] = []
            for i in range(10):
                sends.append(("first", await producer.send_async(b"a%d" % i, txn=first)))
            for i in range(3):
                sends.append(("plain", await producer.send_async(b"p%d" % i)))
            for i in range(4):
                sends.append(("second", await producer.send_async(b"b%d" % i, txn=second)))
            await producer.flush()
            ids = {kind: [] for kind in ("first", "plain", "second")}  # type: ignore[var-annotated]
            for kind, fut in sends:
                ids[kind].append(await asyncio.wait_for(fut, 30))
            entries = {kind: {(m.ledger_id(), m.entry_id()) for m in got} for kind, got in ids.items()}
            # batched (two full batches of five), each batch in one transaction only
            assert len(entries["first"]) == 2 and len(entries["second"]) == 1
            assert len(entries["plain"]) == 1
            assert all(m.batch_index() >= 0 for got in ids.values() for m in got)
            assert not entries["first"] & entries["plain"]
            assert not entries["plain"] & entries["second"]
            # the open transactions hold back the plain batch behind them
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(consumer.receive(), 1.0)
            await second.abort()
            await first.commit()
            got = [(await asyncio.wait_for(consumer.receive(), 30)).data() for _ in range(13)]
            assert got == [b"a%d" % i for i in range(10)] + [b"p%d" % i for i in range(3)]
            last = await producer.send_async(b"last")  # (the batch waits for its delay)
            await producer.flush()
            await asyncio.wait_for(last, 30)
            assert (await asyncio.wait_for(consumer.receive(), 30)).data() == b"last"

    run(go)
