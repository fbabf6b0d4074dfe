"""An end's last stored write is the COMMITTING/ABORTING record (the decision); once the
participants are told, the transaction is COMMITTED/ABORTED in the coordinator's memory
only. After a kill -9 every such record has its participants told again: a transaction
whose markers were written is ended once (its messages appear once, its acks hold), one
whose markers were never written (the crash came between the decision and the markers)
is finished by the recovery."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest

import magnetar
from magnetar.broker.transactions.txnlog import TxnLog, replay
from magnetar.client.errors import InvalidTxnStatus, Timeout
from tests.client.conftest import run
from tests.transactions.conftest import TxnBroker

ABSENT_MS = 700  # how long to wait to see that a message does NOT come (it would at once)


def topic_name() -> str:
    return f"persistent://public/default/txn-end-rec-{uuid.uuid4().hex[:8]}"


def stored(broker: TxnBroker, txn: tuple[int, int]) -> dict[str, Any]:
    """The transaction's record in the broker's ``transactions.log`` (the broker stopped)."""
    recs, _, _ = replay((broker.dir / "data" / "transactions.log").read_bytes())
    assert txn in recs, f"no record of {txn}"
    return dict(json.loads(recs[txn][1]))


def decide(broker: TxnBroker, txn: tuple[int, int], state: str) -> None:
    """Store the end's decision as the coordinator does (its one compare-and-set), as a
    crash right after it would leave it: no marker written, no participant told."""

    async def write() -> None:
        txn_log = TxnLog(str(broker.dir / "data" / "transactions.log"))
        await txn_log.open()
        try:
            record = await txn_log.get(*txn)
            assert record is not None and record.state == "OPEN"
            await txn_log.update(record.changed(state=state))
        finally:
            await txn_log.close()

    asyncio.run(write())


def wait_status(broker: TxnBroker, txn: tuple[int, int], wanted: str) -> None:
    deadline = time.monotonic() + 60
    path = f"/admin/v3/transactions/transactionMetadata/{txn[0]}/{txn[1]}"
    while True:
        status, body = broker.rest("GET", path)
        assert status == 200, body
        if body["status"] == wanted:
            return
        assert time.monotonic() < deadline, f"{txn} stayed {body['status']}, not {wanted}"
        time.sleep(0.1)  # polling the broker's state, bounded by the deadline


async def nothing(consumer: magnetar.Consumer) -> None:
    with pytest.raises(Timeout):
        await consumer.receive(ABSENT_MS)


def test_ended_transactions_told_again_after_kill_9(own_txn_broker: TxnBroker) -> None:
    broker = own_txn_broker
    topic = topic_name()

    async def before() -> tuple[tuple[int, int], tuple[int, int]]:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            consumer = await client.subscribe(
                topic, "s", initial_position=magnetar.InitialPosition.Earliest)
            producer = await client.create_producer(topic)
            await producer.send(b"m0")
            await producer.send(b"m1")
            first = await consumer.receive(15_000)
            assert first.data() == b"m0"
            assert (await consumer.receive(15_000)).data() == b"m1"
            committed = await client.new_transaction(timeout_ms=600_000)
            for i in range(3):
                await producer.send(f"c{i}".encode(), txn=committed)
            await consumer.acknowledge(first, txn=committed)
            aborted = await client.new_transaction(timeout_ms=600_000)
            await producer.send(b"aborted", txn=aborted)
            await committed.commit()
            await aborted.abort()
            return committed.id, aborted.id

    committed, aborted = run(before)
    broker.kill()
    # the end's decision is the last write of each
    assert stored(broker, committed)["state"] == "COMMITTING"
    assert stored(broker, aborted)["state"] == "ABORTING"
    broker.start()
    wait_status(broker, committed, "COMMITTED")
    wait_status(broker, aborted, "ABORTED")

    async def after() -> None:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            await client.transaction(*committed).commit()  # a repeat: success
            with pytest.raises(InvalidTxnStatus):
                await client.transaction(*committed).abort()
            await client.transaction(*aborted).abort()
            consumer = await client.subscribe(
                topic, "s", initial_position=magnetar.InitialPosition.Earliest)
            producer = await client.create_producer(topic)
            await producer.send(b"plain")
            # m0 was acknowledged in the committed transaction; each committed message once
            got = [(await consumer.receive(15_000)).data() for _ in range(5)]
            assert got == [b"m1", b"c0", b"c1", b"c2", b"plain"]
            await nothing(consumer)

    run(after)


def test_decided_end_without_markers_finished_by_recovery(own_txn_broker: TxnBroker) -> None:
    broker = own_txn_broker
    topic = topic_name()

    async def before() -> tuple[tuple[int, int], tuple[int, int]]:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            producer = await client.create_producer(topic)
            to_commit = await client.new_transaction(timeout_ms=600_000)
            to_abort = await client.new_transaction(timeout_ms=600_000)
            for i in range(3):
                await producer.send(f"c{i}".encode(), txn=to_commit)
                await producer.send(f"a{i}".encode(), txn=to_abort)
            return to_commit.id, to_abort.id

    to_commit, to_abort = run(before)
    broker.kill()
    decide(broker, to_commit, "COMMITTING")
    decide(broker, to_abort, "ABORTING")
    broker.start()
    wait_status(broker, to_commit, "COMMITTED")
    wait_status(broker, to_abort, "ABORTED")

    async def after() -> None:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            await client.transaction(*to_commit).commit()  # the client's retry: success
            consumer = await client.subscribe(
                topic, "s", initial_position=magnetar.InitialPosition.Earliest)
            producer = await client.create_producer(topic)
            await producer.send(b"plain")
            got = [(await consumer.receive(15_000)).data() for _ in range(4)]
            assert got == [b"c0", b"c1", b"c2", b"plain"]
            await nothing(consumer)

    run(after)
