"""Magnetar's client API for transactions against a real broker: new_transaction
(round-robin over the coordinators), commit/abort and the states, a handle by id, the
errors as exceptions with Pulsar's names, and the blocking facade."""

from __future__ import annotations

import asyncio

import pytest

import magnetar
from magnetar import sync
from magnetar.client.errors import (
    InvalidTxnStatus,
    NotAllowed,
    Timeout,
    TransactionCoordinatorNotFound,
    TransactionHasOperationFailed,
    TransactionNotFound,
)
from magnetar.client.transaction import Transaction
from magnetar.protocol import pb
from tests.client.conftest import BrokerProcess, run


def test_new_commit_abort_and_states(txn_broker: BrokerProcess) -> None:
    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            first = await client.new_transaction(timeout_ms=60_000)
            second = await client.new_transaction(timeout_ms=60_000)
            # round-robin: consecutive transactions go to consecutive coordinators
            assert (second.id[0] - first.id[0]) % 16 == 1
            assert first.state == "OPEN"
            await first.commit()
            assert first.state == "COMMITTED"
            await first.commit()  # again: nothing to do
            await second.abort()
            assert second.state == "ABORTED"
            with pytest.raises(InvalidTxnStatus):
                await second.commit()
            # a handle by id (another process's transaction): a repeated commit succeeds,
            # the opposite end is refused with Pulsar's error
            again = client.transaction(*first.id)
            await again.commit()
            assert again.state == "COMMITTED"
            with pytest.raises(InvalidTxnStatus):
                await client.transaction(*first.id).abort()
            with pytest.raises(TransactionNotFound):
                await client.transaction(first.id[0], 10**12).commit()

    run(go)


def test_a_client_without_transactions_says_so(txn_broker: BrokerProcess) -> None:
    async def go() -> None:
        async with magnetar.Client(txn_broker.url) as client:
            with pytest.raises(NotAllowed, match="enable_transaction=True"):
                await client.new_transaction()

    run(go)


def test_coordinators_off_raise_not_allowed(no_txn_broker: BrokerProcess) -> None:
    async def go() -> None:
        async with magnetar.Client(no_txn_broker.url, enable_transaction=True,
                                   operation_timeout_seconds=10) as client:
            with pytest.raises(TransactionCoordinatorNotFound,
                               match="transactionCoordinatorEnabled"):
                await client.new_transaction()

    run(go)


def test_blocking_facade(txn_broker: BrokerProcess) -> None:
    with sync.Client(txn_broker.url, enable_transaction=True) as client:
        txn = client.new_transaction(timeout_ms=30_000)
        assert txn.state == "OPEN"
        txn.commit()
        assert txn.state == "COMMITTED"
        handle = client.transaction(*txn.id)
        handle.commit()
        with pytest.raises(InvalidTxnStatus):
            client.transaction(*txn.id).abort()



def test_many_sends_in_one_transaction_commit(txn_broker: BrokerProcess) -> None:
    """More sends than a transaction keeps unchecked (it forgets the done ones in bulk):
    commit waits for every one."""
    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            producer = await client.create_producer("persistent://public/default/txn-many-ops")
            txn = await client.new_transaction(timeout_ms=60_000)
            futures = [await producer.send_async(b"m", txn=txn) for _ in range(700)]
            await txn.commit()
            assert txn.state == "COMMITTED" and all(f.done() and not f.exception() for f in futures)

    run(go)


def test_a_failed_operation_is_found_among_many() -> None:
    """The first failed operation is noted whether it ended before the list was pruned
    or only by the commit's wait (what makes commit abort with
    TransactionHasOperationFailed)."""
    async def go() -> None:
        loop = asyncio.get_running_loop()
        for failed_at in (3, 650):
            txn = Transaction(None, 1, 2)  # type: ignore[arg-type]  # no coordinator needed here
            futures = [loop.create_future() for _ in range(700)]
            for i, fut in enumerate(futures):
                txn._track(fut)
                if i < 600:  # most end before later ones are tracked
                    if i == failed_at:
                        fut.set_exception(RuntimeError(f"op {i}"))
                    else:
                        fut.set_result(None)
            assert len(txn._ops) < 700  # the done ones were forgotten
            for i, fut in enumerate(futures[600:], 600):
                fut.set_exception(RuntimeError(f"op {i}")) if i == failed_at else fut.set_result(None)
            await txn._wait_ops()
            assert str(txn._failed) == f"op {failed_at}" and txn._ops == []

    asyncio.run(go())


def test_one_add_partition_per_partition_and_commit_after_awaited_sends(
        txn_broker: BrokerProcess) -> None:
    """A transaction asks AddPartitionToTxn once per partition: the sends after the first
    skip it (`Transaction._joined`), concurrent first sends share the one request, and a
    send after the end is still refused. A commit after the sends were awaited has
    nothing left to wait for (the done ones are pruned first) and commits."""
    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            topic = "persistent://public/default/txn-one-add-partition"
            producer = await client.create_producer(topic)
            coordinators = client._transactions()
            asked: list[int] = []
            call = coordinators.call

            async def counting(tc: int, kind: int, **fields: object) -> object:
                asked.append(kind)
                return await call(tc, kind, **fields)

            coordinators.call = counting  # type: ignore[method-assign]
            txn = await client.new_transaction(timeout_ms=60_000)
            first = await asyncio.gather(*(producer.send_async(b"a", txn=txn) for _ in range(3)))
            futures = [*first, *[await producer.send_async(b"b", txn=txn) for _ in range(20)]]
            await asyncio.gather(*futures)
            assert asked.count(pb.BaseCommand.ADD_PARTITION_TO_TXN) == 1
            assert txn._joined(topic)
            await txn.commit()
            assert txn.state == "COMMITTED" and txn._ops == []
            assert not txn._joined(topic)
            with pytest.raises(InvalidTxnStatus):
                await producer.send_async(b"late", txn=txn)

    run(go)


def test_a_first_send_goes_right_behind_its_add_on_a_magnetar_broker(
        txn_broker: BrokerProcess) -> None:
    """On one connection to a Magnetar broker, which handles a connection's commands in
    order, a transaction's first send on a partition is written right behind its
    AddPartitionToTxn: ``send_async`` returns before the add's answer has come, and the
    send is stored in the transaction (seen once committed, and only then)."""
    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            topic = "persistent://public/default/txn-send-behind-add"
            producer = await client.create_producer(topic)
            consumer = await client.subscribe(topic, "s")
            txn = await client.new_transaction(timeout_ms=60_000)
            first = await producer.send_async(b"first", txn=txn)
            assert topic in txn._joining and not txn._joined(topic)  # no answer awaited
            second = await producer.send_async(b"second", txn=txn)  # behind the same add
            await asyncio.gather(first, second)
            assert txn._joined(topic)
            with pytest.raises(Timeout):
                await consumer.receive(300)  # open: nothing visible
            await txn.commit()
            got = [(await consumer.receive(10_000)).data() for _ in range(2)]
            assert got == [b"first", b"second"]

    run(go)


def test_a_send_behind_a_refused_add_fails_alone_without_a_reconnection(
        txn_broker: BrokerProcess) -> None:
    """The add written with the send is refused (the transaction ended elsewhere): the
    send fails with the broker's ``InvalidTxnStatus`` at once, on the same connection (a
    send refused for its transaction is not resent), and the commit aborts."""
    async def go() -> None:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            topic = "persistent://public/default/txn-send-behind-refused-add"
            producer = await client.create_producer(topic)
            txn = await client.new_transaction(timeout_ms=60_000)
            await client.transaction(*txn.id).abort()  # ended by another handle
            part = producer._single
            assert part is not None
            cnx = part.cnx
            sent = await producer.send_async(b"late", txn=txn)
            assert topic in txn._joining  # written right behind its add
            with pytest.raises(InvalidTxnStatus):
                await asyncio.wait_for(sent, 10)
            assert topic not in txn._joining  # the add refused: a later send asks again
            assert part.cnx is cnx and cnx is not None and not cnx.closed
            with pytest.raises(TransactionHasOperationFailed):
                await txn.commit()
            assert (await producer.send(b"plain")) is not None  # the producer goes on

    run(go)
