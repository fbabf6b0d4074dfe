"""A commit marker may linger in its topic's write buffer for the next append
(``magnetarTransactionMarkerLingerMillis``): EndTxn is answered once the COMMITTING record
is stored and the marker appended, not synced; the transaction's messages become visible
only once the marker is durable, and a kill -9 before that loses nothing (the stored
COMMITTING record has the marker written again at restart)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import magnetar
from tests.broker import txnraw
from tests.broker.rawconsumer import connected
from tests.client.conftest import run
from tests.transactions.conftest import TxnBroker
from tests.transactions.test_txn_end_recovery import nothing, wait_status

#: long enough that nothing but the next append (or a restart) writes the marker
LINGER = {"magnetarTransactionMarkerLingerMillis": "600000"}


@pytest.fixture
def lingering_broker() -> Iterator[TxnBroker]:
    b = TxnBroker("magnetar", **LINGER)
    yield b
    b.stop()


def topic_name() -> str:
    return f"persistent://public/default/txn-linger-{uuid.uuid4().hex[:8]}"


async def sent_in_a_transaction(client: magnetar.Client, topic: str,
                                count: int) -> tuple[Any, Any, Any]:
    """A consumer of ``topic`` from the earliest, a producer, and a transaction (10
    minutes) in which the producer sent ``count`` messages ``c0``, ``c1``...: not ended."""
    consumer = await client.subscribe(
        topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = await client.create_producer(topic)
    txn = await client.new_transaction(timeout_ms=600_000)
    for i in range(count):
        await producer.send(f"c{i}".encode(), txn=txn)
    return consumer, producer, txn


def test_a_lingering_marker_shows_nothing_until_the_next_append_stores_it(
        lingering_broker: TxnBroker) -> None:
    broker = lingering_broker
    topic = topic_name()

    async def go() -> tuple[int, int]:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            consumer, producer, txn = await sent_in_a_transaction(client, topic, 3)
            await txn.commit()  # answered: the marker is appended, not yet written
            await nothing(consumer)
            await producer.send(b"after")  # its batch writes and syncs the marker too
            got = [(await consumer.receive(15_000)).data() for _ in range(4)]
            assert got == [b"c0", b"c1", b"c2", b"after"]
            await nothing(consumer)
            return txn.id

    txn = run(go)
    wait_status(broker, txn, "COMMITTED")


def test_kill_9_before_the_marker_is_stored_still_commits_once(
        lingering_broker: TxnBroker) -> None:
    broker = lingering_broker
    topic = topic_name()

    async def before() -> tuple[int, int]:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            consumer, _, txn = await sent_in_a_transaction(client, topic, 3)
            await txn.commit()
            await nothing(consumer)  # the marker lingers: it is in no file yet
            return txn.id

    txn = run(before)
    broker.kill()
    # restarted without the linger: the recovered COMMITTING record's marker is written
    # and synced at once
    (broker.dir / "broker.conf").write_text("")
    broker.start()

    async def after() -> None:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            consumer = await client.subscribe(
                topic, "s", initial_position=magnetar.InitialPosition.Earliest)
            got = [(await consumer.receive(30_000)).data() for _ in range(3)]
            assert got == [b"c0", b"c1", b"c2"]
            await nothing(consumer)  # once: no copy, no other entry visible
            await client.transaction(*txn).commit()  # a retried end: success again

    run(after)
    wait_status(broker, txn, "COMMITTED")


def test_a_reader_asking_after_the_commit_sees_the_committed_messages(
        lingering_broker: TxnBroker) -> None:
    """GetLastMessageId (and the admin API's lastMessageId) on a topic whose marker lingers
    writes it and answers once it is durable: a reader created after the commit's answer
    finds the messages at once."""
    broker = lingering_broker
    topic = topic_name()
    path = f"/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/lastMessageId"

    async def go() -> None:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            producer = await client.create_producer(topic)
            txn = await client.new_transaction(timeout_ms=600_000)
            ids = [await producer.send(f"c{i}".encode(), txn=txn) for i in range(2)]
            await txn.commit()
            status, doc = await asyncio.to_thread(broker.rest, "GET", path)
            assert status == 200, doc
            # past the transaction's last message (at its marker): not before its first
            assert (doc["ledgerId"], doc["entryId"]) > (ids[1].ledger_id(), ids[1].entry_id())
            txn = await client.new_transaction(timeout_ms=600_000)
            for i in range(2, 4):
                await producer.send(f"c{i}".encode(), txn=txn)
            await txn.commit()
            reader = await client.create_reader(topic, magnetar.MessageId.earliest)
            assert await reader.has_message_available()
            got = [(await reader.read_next(15_000)).data() for _ in range(4)]
            assert got == [b"c0", b"c1", b"c2", b"c3"]
            assert not await reader.has_message_available()

    run(go)


def test_an_end_asked_by_another_process_answers_once_its_marker_is_durable(
        lingering_broker: TxnBroker) -> None:
    """EndTxnOnPartition (a coordinator on another broker telling the topic) never lets
    the marker linger: that coordinator forgets the transaction once answered, so the
    answer waits for the marker's sync and the messages are visible with no further
    append (here the linger is 10 minutes: a lingering marker would show nothing)."""
    broker = lingering_broker
    topic = topic_name()

    async def go() -> None:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            consumer, _, txn = await sent_in_a_transaction(client, topic, 2)
            raw = connected(broker.url)
            try:
                answer = await asyncio.to_thread(txnraw.end_on_partition, raw, topic, txn.id)
            finally:
                raw.close()
            assert not answer.HasField("error"), answer.message
            got = [(await consumer.receive(15_000)).data() for _ in range(2)]
            assert got == [b"c0", b"c1"]

    run(go)
