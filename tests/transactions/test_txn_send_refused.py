"""A send the broker refuses for good (``NotAllowedError``: a transaction's message to a
non-persistent topic) fails at once in Magnetar's client with `NotAllowed`, and the
producer's other sends go on, as with the Java client; it is not resent forever."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import magnetar
from magnetar.client.errors import NotAllowed
from tests.client.conftest import BrokerProcess, run


def test_a_refused_transactional_send_fails_and_the_producer_goes_on(
        txn_broker: BrokerProcess) -> None:
    topic = f"non-persistent://public/default/txn-refused-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True,
                                   operation_timeout_seconds=30) as client:
            producer = await client.create_producer(topic, send_timeout_millis=120_000)
            txn = await client.new_transaction(timeout_ms=60_000)
            before = await producer.send_async(b"plain-before")
            refused = await producer.send_async(b"in-txn", txn=txn)
            after = await producer.send_async(b"plain-after")
            # well before the send timeout: the refusal is final, not retried
            with pytest.raises(NotAllowed, match="not persistent"):
                await asyncio.wait_for(refused, 20)
            await asyncio.wait_for(asyncio.gather(before, after), 20)
            assert await producer.send(b"plain-later") is not None
            await txn.abort()

    run(go)
