"""Transactions survive a kill -9 of a ``magnetar standalone`` process: open ones are still
open (with their partitions and their timeouts), ending ones are still ending or ended,
ended ones answer a repeated end as before."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import magnetar
from magnetar.broker.transactions.records import TxnRecords
from magnetar.broker.transactions.txnlog import TxnLog
from magnetar.client.errors import InvalidTxnStatus
from magnetar.metadata import LocalMetadataStore
from magnetar.protocol import pulsar_pb2 as pb
from tests.client.conftest import run
from tests.transactions.conftest import TxnBroker
from tests.transactions.test_txn_wire import Wire, new_txn

T = pb.BaseCommand


def metadata(broker: TxnBroker, txn: tuple[int, int]) -> dict[str, Any]:
    status, body = broker.rest("GET", f"/admin/v3/transactions/transactionMetadata/{txn[0]}/{txn[1]}")
    assert status == 200, body
    return dict(body)


def wait_status(broker: TxnBroker, txn: tuple[int, int], wanted: set[str],
                within: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        doc = metadata(broker, txn)
        if doc["status"] in wanted:
            return doc
        assert time.monotonic() < deadline, f"{txn} stayed {doc['status']}, not {wanted}"
        time.sleep(0.1)  # polling the broker's state, bounded by the deadline


def test_kill_9_keeps_open_ending_and_ended_transactions(own_txn_broker: TxnBroker) -> None:
    broker = own_txn_broker
    topic = f"persistent://public/default/durable-{uuid.uuid4().hex[:8]}"

    async def before() -> dict[str, tuple[int, int]]:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            opened = await client.new_transaction(timeout_ms=600_000)
            await opened._add_partition(topic)
            await opened._add_subscription(topic, "sub")
            bare = await client.new_transaction(timeout_ms=600_000)
            short = await client.new_transaction(timeout_ms=4_000)
            committed = await client.new_transaction()
            await committed.commit()
            aborted = await client.new_transaction()
            await aborted.abort()
            return {"open": opened.id, "bare": bare.id, "short": short.id, "committed": committed.id,
                    "aborted": aborted.id}

    ids = run(before)
    # one left COMMITTING: its only participant is a topic of a namespace that does not
    # exist, so the coordinator keeps telling it (the EndTxn's answer is not awaited)
    wire = Wire(broker.port)
    ending = new_txn(wire, tc=5)
    wire.call(T.ADD_PARTITION_TO_TXN, "addPartitionToTxn", txnid_most_bits=ending[0],
              txnid_least_bits=ending[1], partitions=["persistent://public/nowhere/t"])
    wire.rid += 1
    end = T(type=T.END_TXN, endTxn=pb.CommandEndTxn(
        request_id=wire.rid, txnid_most_bits=ending[0], txnid_least_bits=ending[1],
        txn_action=pb.COMMIT))
    wire.write(end)
    wait_status(broker, ending, {"COMMITTING", "COMMITTED"})
    wire.close()

    broker.kill()
    broker.start()

    opened = metadata(broker, ids["open"])
    assert opened["status"] == "OPEN"
    assert list(opened["producedPartitions"]) == [topic]
    assert opened["ackedPartitions"] == {topic: {"sub": {}}}
    assert metadata(broker, ids["committed"])["status"] == "COMMITTED"
    assert metadata(broker, ids["aborted"])["status"] == "ABORTED"
    assert metadata(broker, ending)["status"] in ("COMMITTING", "COMMITTED")
    # the short one's timeout still runs after the restart: it is aborted
    doc = wait_status(broker, ids["short"], {"ABORTED", "ABORTING"})
    assert doc["timedOut"] is True

    async def after() -> None:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            await client.transaction(*ids["committed"]).commit()  # a repeat: success
            try:
                await client.transaction(*ids["aborted"]).commit()
                raise AssertionError("committing an aborted transaction succeeded")
            except InvalidTxnStatus:
                pass
            handle = client.transaction(*ids["bare"])
            await handle.commit()
            assert handle.state == "COMMITTED"
            # the open one, with a partition and a subscription, commits after the restart
            await client.transaction(*ids["open"]).commit()
            again = await client.new_transaction()
            assert again.id not in ids.values()

    run(after)
    assert metadata(broker, ids["bare"])["status"] == "COMMITTED"
    assert metadata(broker, ids["open"])["status"] == "COMMITTED"


def test_an_upgrade_from_transactions_db_keeps_open_transactions(own_txn_broker: TxnBroker) -> None:
    """A broker whose data directory holds the SQLite ``transactions.db`` of an earlier
    version (no ``transactions.log``) moves its records into the log at start: an open
    transaction is still open there, and commits."""
    broker = own_txn_broker
    topic = f"persistent://public/default/upgrade-{uuid.uuid4().hex[:8]}"

    async def before() -> tuple[int, int]:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            producer = await client.create_producer(topic)
            txn = await client.new_transaction(timeout_ms=600_000)
            await producer.send(b"in-txn", txn=txn)
            return txn.id

    txn = run(before)
    broker.kill()
    data = broker.dir / "data"

    async def downgrade() -> None:  # the log's records as the earlier version stored them
        txn_log = TxnLog(str(data / "transactions.log"))
        await txn_log.open()
        store = LocalMetadataStore(str(data / "transactions.db"))
        await store.start()
        records = TxnRecords(store)
        for tc in range(16):
            taken = txn_log.reserve(tc, 1)  # (the ids handed out: below it)
            if taken:
                await records.counter(tc).reserve(taken)
            for rec in await txn_log.load(tc):
                await records.create(rec)
        await store.close()
        await txn_log.close()

    asyncio.run(downgrade())
    (data / "transactions.log").unlink()
    broker.start()
    assert wait_status(broker, txn, {"OPEN"})["status"] == "OPEN"
    assert (data / "transactions.db.migrated").exists() and not (data / "transactions.db").exists()

    async def after() -> None:
        async with magnetar.Client(broker.url, enable_transaction=True) as client:
            consumer = await client.subscribe(
                topic, "s", initial_position=magnetar.InitialPosition.Earliest)
            await client.transaction(*txn).commit()
            assert (await consumer.receive(15_000)).data() == b"in-txn"
            fresh = await client.new_transaction(timeout_ms=60_000)  # ids not handed out twice
            assert fresh.id != txn
            await fresh.abort()

    run(after)
