"""Magnetar's client API for transactions against a real broker: new_transaction
(round-robin over the coordinators), commit/abort and the states, a handle by id, the
errors as exceptions with Pulsar's names, and the blocking facade."""

from __future__ import annotations

import pytest

import magnetar
from magnetar import sync
from magnetar.client.errors import (
    InvalidTxnStatus,
    NotAllowed,
    TransactionCoordinatorNotFound,
    TransactionNotFound,
)
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
