"""The participants' check (`TransactionCoordinators.check_open`) may be stepped once outside
any task (`txn_sends._check_now`, a transaction's first send on a topic): that step must
finish, refuse, or wait; never start what needs a task, as a cluster's store does (its
requests are bounded by `asyncio.timeout`)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from magnetar.broker.errors import BrokerError
from magnetar.broker.transactions.manager import TransactionCoordinators
from magnetar.broker.transactions.records import OPEN, TxnRecord

TOPIC = "persistent://public/default/t"


class TaskBoundRecords:
    """Records as a cluster's store reads them: each read bounded by `asyncio.timeout`."""

    def __init__(self, rec: TxnRecord) -> None:
        self.rec = rec
        self.reads = 0

    async def get(self, tc: int, seq: int) -> TxnRecord | None:
        async with asyncio.timeout(10):
            self.reads += 1
            return self.rec if (tc, seq) == (self.rec.tc, self.rec.seq) else None


def step_outside_a_task(coro: Coroutine[Any, Any, None]) -> Any:
    """One step of ``coro`` from a plain callback of the loop (as a connection's
    ``data_received`` runs): what it yielded, or the exception it ended with."""

    async def run() -> Any:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()

        def step() -> None:
            assert asyncio.current_task() is None
            try:
                done.set_result(coro.send(None))
            except BaseException as exc:  # StopIteration included: what the step ended with
                done.set_result(exc)

        loop.call_soon(step)
        return await done

    return run()


def coordinators(records: TaskBoundRecords, *, inline: bool) -> TransactionCoordinators:
    manager = object.__new__(TransactionCoordinators)
    manager.enabled = True
    manager.coordinators = {}  # the transaction's coordinator is served by another broker
    manager.records = records  # type: ignore[assignment]
    manager.inline_store = inline
    return manager


def test_a_check_stepped_outside_a_task_stops_before_a_clustered_store_read() -> None:
    async def main() -> None:
        rec = TxnRecord(3, 7, OPEN, partitions=[TOPIC])
        records = TaskBoundRecords(rec)
        manager = coordinators(records, inline=False)
        eager = manager.check_open(3, 7, TOPIC)
        # it waits a turn (no RuntimeError from the store's timeout outside a task)
        assert await step_outside_a_task(eager) is None
        eager.close()
        assert records.reads == 0
        # asked again in a task, it reads the record and passes
        await asyncio.wait_for(manager.check_open(3, 7, TOPIC), 10)
        assert records.reads == 1
        with pytest.raises(BrokerError):
            await asyncio.wait_for(manager.check_open(3, 8, TOPIC), 10)

    asyncio.run(main())


def test_a_check_of_a_transaction_served_here_finishes_in_one_step() -> None:
    async def main() -> None:
        rec = TxnRecord(3, 7, OPEN, partitions=[TOPIC])
        manager = coordinators(TaskBoundRecords(rec), inline=False)

        class Served:
            closed = False
            txns = {7: rec}

        manager.coordinators = {3: Served()}  # type: ignore[dict-item]
        assert isinstance(await step_outside_a_task(manager.check_open(3, 7, TOPIC)),
                          StopIteration)

    asyncio.run(main())
