"""A coordinator on a store that writes at once (a broker alone's `TxnLog`) runs its
commands without awaits (`TransactionCoordinator.*_now`): each is stored before it
returns; an end whose participants are all told at once (``notify_now``) is ended when
`end_now` returns, and one whose participants cannot be goes on in a task that `end`
waits for. `Participants.end_now` tells only topics loaded on a broker alone."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from magnetar.broker.errors import BrokerError
from magnetar.broker.topics.transaction_buffer import OpenTxn, TransactionBuffer
from magnetar.broker.transactions.coordinator import TransactionCoordinator
from magnetar.broker.transactions.participants import Participants
from magnetar.broker.transactions.records import (
    ABORTED,
    COMMITTED,
    COMMITTING,
    OPEN,
    TxnRecord,
)
from magnetar.broker.transactions.txnlog import TxnLog, replay
from magnetar.protocol import pb
from magnetar.storage import Position

TOPIC = "persistent://public/default/t"


class Told:
    """The participants' side: what was told in the task (`notify`) and at once
    (`notify_now`, answering ``now``)."""

    def __init__(self, now: bool | Exception) -> None:
        self.now = now
        self.in_task: list[tuple[int, bool]] = []
        self.at_once: list[tuple[int, bool]] = []

    async def notify(self, rec: TxnRecord, commit: bool) -> None:
        await asyncio.sleep(0)  # (a participant answering later)
        self.in_task.append((rec.seq, commit))

    def notify_now(self, rec: TxnRecord, commit: bool) -> bool:
        if isinstance(self.now, Exception):
            raise self.now
        if self.now:
            self.at_once.append((rec.seq, commit))
        return self.now


def with_coordinator(tmp_path: Path, told: Told,
                     check: Callable[[TransactionCoordinator, TxnLog], Awaitable[None]]) -> None:
    async def main() -> None:
        log = TxnLog(str(tmp_path / "transactions.log"))
        await log.open()
        coordinator = TransactionCoordinator(3, log, told.notify, notify_now=told.notify_now)
        try:
            assert coordinator.inline
            await check(coordinator, log)
        finally:
            coordinator.close()
            await log.close()

    asyncio.run(main())


def stored(tmp_path: Path) -> dict[tuple[int, int], str]:
    """Each transaction's state as the log's file holds it."""
    recs, _, _ = replay((tmp_path / "transactions.log").read_bytes())
    return {key: body.decode() for key, (_, body) in recs.items()}


def test_commands_are_stored_before_they_return_and_an_end_told_at_once_is_ended(
        tmp_path: Path) -> None:
    told = Told(now=True)

    async def check(coordinator: TransactionCoordinator, log: TxnLog) -> None:
        rec = coordinator.new_txn_now(60_000)
        assert rec.state == OPEN and '"OPEN"' in stored(tmp_path)[(3, rec.seq)]
        coordinator.add_partitions_now(rec.seq, [TOPIC, TOPIC])
        assert coordinator.get(rec.seq).partitions == [TOPIC]
        assert TOPIC in stored(tmp_path)[(3, rec.seq)]
        assert coordinator.end_now(rec.seq, True) is True
        # ended before end_now returned: no task, the participants told at once
        assert coordinator.get(rec.seq).state == COMMITTED
        assert told.at_once == [(rec.seq, True)] and told.in_task == []
        assert not coordinator._ends
        assert '"COMMITTING"' in stored(tmp_path)[(3, rec.seq)]  # the decision, its last write
        # a retried commit answers success again; an abort now is refused
        assert coordinator.end_now(rec.seq, True) is True
        await coordinator.end(rec.seq, True)
        with pytest.raises(BrokerError) as refused:
            coordinator.end_now(rec.seq, False)
        assert refused.value.code == pb.InvalidTxnStatus
        assert coordinator.stats.committed == 1 and coordinator.stats.created == 1

    with_coordinator(tmp_path, told, check)


@pytest.mark.parametrize("now", [False, RuntimeError("a bug")], ids=["not-at-once", "failed"])
def test_an_end_not_told_at_once_goes_on_in_a_task_that_end_waits_for(
        tmp_path: Path, now: bool | Exception) -> None:
    told = Told(now=now)

    async def check(coordinator: TransactionCoordinator, log: TxnLog) -> None:
        rec = coordinator.new_txn_now(60_000)
        coordinator.add_partitions_now(rec.seq, [TOPIC])
        assert coordinator.end_now(rec.seq, False) is False
        assert coordinator.get(rec.seq).state == "ABORTING"  # stored, its end under way
        assert '"ABORTING"' in stored(tmp_path)[(3, rec.seq)]
        assert coordinator.end_now(rec.seq, False) is False  # a retry: still under way
        await asyncio.wait_for(coordinator.end(rec.seq, False), 10)
        assert told.in_task == [(rec.seq, False)]
        assert coordinator.get(rec.seq).state == ABORTED
        assert coordinator.end_now(rec.seq, False) is True

    with_coordinator(tmp_path, told, check)


class NoWalk(dict[int, TxnRecord]):
    """The coordinator's records, refusing to be walked."""

    def values(self) -> Any:
        raise AssertionError("walked every record")


def test_the_active_count_follows_opens_ends_purges_and_a_recovery(tmp_path: Path) -> None:
    told = Told(now=False)

    def walked(coordinator: TransactionCoordinator) -> int:
        return sum(1 for r in coordinator.txns.values() if r.state not in (COMMITTED, ABORTED))

    async def check(coordinator: TransactionCoordinator, log: TxnLog) -> None:
        recs = [coordinator.new_txn_now(60_000) for _ in range(4)]
        kept = coordinator.txns
        coordinator.txns = NoWalk(kept)  # counted, not walked (NewTxn asks it each time)
        assert coordinator.active() == 4
        coordinator.txns = kept
        coordinator.add_partitions_now(recs[0].seq, [TOPIC])  # a change of an open one
        assert coordinator.active() == 4
        assert coordinator.end_now(recs[1].seq, True) is False  # COMMITTING: still active
        assert coordinator.active() == 4
        await asyncio.wait_for(coordinator.end(recs[1].seq, True), 10)
        await asyncio.wait_for(coordinator.end(recs[2].seq, False), 10)
        assert coordinator.active() == 2 == walked(coordinator)
        await asyncio.wait_for(coordinator.end(recs[2].seq, False), 10)  # a retried end
        assert coordinator.active() == 2
        coordinator.purge(older_than_ms=2**62)  # the ended ones forgotten: none was active
        assert coordinator.active() == 2 == walked(coordinator) and len(coordinator.txns) == 2
        for _ in range(100):  # the purged records' deletes, spawned, take a turn or two
            if len(await log.load(3)) == 2:
                break
            await asyncio.sleep(0)
        assert len(await log.load(3)) == 2  # the two active ones are all the log keeps
        again = TransactionCoordinator(3, log, told.notify, notify_now=told.notify_now)
        try:
            await again.recover()
            assert again.active() == 2 == walked(again)
        finally:
            again.close()

    with_coordinator(tmp_path, told, check)


def test_the_awaited_commands_take_the_same_path_on_an_inline_store(tmp_path: Path) -> None:
    told = Told(now=True)

    async def check(coordinator: TransactionCoordinator, log: TxnLog) -> None:
        rec = await coordinator.new_txn(60_000, "role")
        await coordinator.add_subscriptions(rec.seq, [(TOPIC, "s")])
        await coordinator.end(rec.seq, True)
        assert coordinator.get(rec.seq).state == COMMITTED
        assert coordinator.get(rec.seq).owner == "role"
        assert told.at_once == [(rec.seq, True)]
        assert '"COMMITTING"' in stored(tmp_path)[(3, rec.seq)]
        # ids are taken from blocks reserved in the log: a new coordinator goes on after them
        recs = [coordinator.new_txn_now(0) for _ in range(150)]
        assert [r.seq for r in recs] == list(range(rec.seq + 1, rec.seq + 151))
        assert all(r.state == OPEN for r in recs)

    with_coordinator(tmp_path, told, check)


def test_participants_are_told_at_once_only_on_a_broker_alone_with_the_topic_loaded() -> None:
    ended: list[tuple[tuple[int, int], int]] = []

    class Buffer:
        def __init__(self, at_once: bool) -> None:
            self.at_once = at_once

        def end_now(self, txn: tuple[int, int], action: int) -> bool:
            if self.at_once:
                ended.append((txn, action))
            return self.at_once

    touched: list[str] = []
    service: Any = types.SimpleNamespace(
        cluster=None, topics={TOPIC: types.SimpleNamespace(txn_buffer=Buffer(True)),
                              TOPIC + "-b": types.SimpleNamespace(txn_buffer=None),
                              TOPIC + "-w": types.SimpleNamespace(txn_buffer=Buffer(False))},
        housekeeping=types.SimpleNamespace(touch=touched.append))
    participants = Participants(service)
    rec = TxnRecord(3, 7, COMMITTING, partitions=[TOPIC, TOPIC + "-b"])
    assert participants.end_now(rec, True) is True
    assert ended == [((3, 7), pb.COMMIT)] and touched == [TOPIC, TOPIC + "-b"]
    # a topic to load, a buffer that must wait, a subscription, a cluster: not at once
    assert participants.end_now(rec.changed(partitions=[TOPIC + "-unloaded"]), True) is False
    assert participants.end_now(rec.changed(partitions=[TOPIC + "-w"]), False) is False
    assert participants.end_now(rec.changed(subscriptions=[(TOPIC, "s")]), True) is False
    service.cluster = object()
    assert participants.end_now(rec, True) is False
    assert ended == [((3, 7), pb.COMMIT)]


class Ledger:
    """A topic's ledger that keeps what is appended and completes it when told."""

    def __init__(self) -> None:
        self.appended: list[tuple[bytes, Callable[[Any, Any], None], float]] = []

    def last_confirmed(self) -> None:
        return None

    def append_then(self, data: bytes, on_done: Callable[[Any, Any], None],
                    part_crc: int | None = None, linger_s: float = 0.0) -> None:
        self.appended.append((data, on_done, linger_s))


class StoredAtOnce(Ledger):
    """A ledger whose appends are durable before `append_then` returns (the ``always``
    fsync policy)."""

    def append_then(self, data: bytes, on_done: Callable[[Any, Any], None],
                    part_crc: int | None = None, linger_s: float = 0.0) -> None:
        super().append_then(data, on_done, part_crc, linger_s)
        on_done(Position(1, len(self.appended)), None)


def a_topic(linger_ms: int) -> Any:
    config = types.SimpleNamespace(
        magnetarTransactionMarkerLingerMillis=linger_ms,
        transactionBufferSnapshotMaxTransactionCount=1_000_000,
        transactionBufferSnapshotMinTimeInMillis=1_000_000_000)
    return types.SimpleNamespace(
        name=TOPIC, ledger=Ledger(), terminated=False, entry_index=-1, subscriptions={},
        service=types.SimpleNamespace(cluster=None, config=config),
        entries_confirmed=lambda: None, txn_visibility_changed=lambda: None)


@pytest.mark.parametrize("linger_ms", [10, 0])
def test_a_buffer_ends_at_once_only_when_its_marker_may_linger(linger_ms: int) -> None:
    async def main() -> None:
        topic = a_topic(linger_ms)
        buf = TransactionBuffer(topic)
        txn = (3, 7)
        assert buf.end_now(txn, pb.COMMIT) is False  # not ready yet: nothing done
        buf.ready.set_result(None)
        assert buf.end_now((3, 8), pb.ABORT) is (linger_ms > 0)  # never seen here: no marker
        buf.open[txn] = OpenTxn(Position(1, 0), [Position(1, 0)])
        if not linger_ms:  # the end must wait for its marker: `end`'s business
            assert buf.end_now(txn, pb.COMMIT) is False and not topic.ledger.appended
            return
        assert buf.end_now(txn, pb.COMMIT) is True
        [(part, on_done, linger_s)] = topic.ledger.appended
        assert linger_s == linger_ms / 1000 and part[:2] == b"\x0e\x01"
        assert buf.end_now(txn, pb.COMMIT) is False  # its end under way (the marker lingers)
        assert txn in buf.open  # nothing visible before the marker is durable
        on_done(Position(1, 1), None)
        await asyncio.sleep(0)
        assert txn not in buf.open and buf.ended[txn] is True
        assert buf.end_now(txn, pb.COMMIT) is True  # ended the same way: nothing to do
        with pytest.raises(BrokerError):
            buf.end_now(txn, pb.ABORT)

    asyncio.run(main())


def test_a_marker_told_before_its_append_returns_ends_the_transaction_or_fails_its_end() -> None:
    """A marker stored before the append returns (the ``always`` policy) ends the
    transaction at once, its end not taken as answered before it was durable; a marker
    refused at once (a terminated topic) fails the end and leaves the transaction open."""

    async def main() -> None:
        topic = a_topic(10)
        topic.ledger = StoredAtOnce()
        buf = TransactionBuffer(topic)
        buf.ready.set_result(None)
        txn = (3, 11)
        buf.open[txn] = OpenTxn(Position(1, 0), [Position(1, 0)])
        assert buf.end_now(txn, pb.COMMIT) is False  # (durable already: not a lingering one)
        assert txn not in buf.open and buf.ended[txn] is True and not buf._ending
        await buf.end(txn, pb.COMMIT)  # what the coordinator's `end` then asks: done

        refused = (3, 12)
        buf.open[refused] = OpenTxn(Position(1, 5), [Position(1, 5)])
        topic.terminated = True
        assert buf.end_now(refused, pb.ABORT) is False
        with pytest.raises(BrokerError) as raised:
            await buf.end(refused, pb.ABORT)
        assert raised.value.code == pb.ServiceNotReady
        assert refused in buf.open and refused not in buf.aborted and not buf._ending

    asyncio.run(main())


def test_a_lane_carries_its_entry_from_the_first_placed_until_the_end_begins() -> None:
    """`TxnLane`: a later send's lane carries its transaction's `OpenTxn` (what
    `PersistentTopic._persisted` notes the send's entry in, without a lookup) from its
    first entry placed here until its end begins; an entry still being appended then goes
    to `placed`, which notes it while the transaction is open and knows it once ended."""

    async def main() -> None:
        topic = a_topic(10)
        buf = TransactionBuffer(topic)
        buf.ready.set_result(None)
        txn = (3, 9)
        buf.verify(txn)
        lane = buf.verified[txn]
        assert lane.entry is None and lane.size == len(lane.fields) > 0
        buf.appending(txn)
        buf.placed(txn, Position(1, 0))
        assert lane.entry is buf.open[txn] and list(lane.entry.ids) == [0]
        buf.verify(txn)  # checked again (two producers' first sends): the same lane
        assert buf.verified[txn] is lane
        # open here before it was checked (a restart's): its lane has its entry at once
        restored = (3, 10)
        buf.open[restored] = OpenTxn(Position(1, 1), [Position(1, 1)])
        buf.verify(restored)
        assert buf.verified[restored].entry is buf.open[restored]
        assert buf.end_now(txn, pb.ABORT) is True  # its marker lingers
        assert lane.entry is None and txn not in buf.verified and txn in buf.open
        buf.placed(txn, Position(1, 2))  # appended before the marker, placed after its end began
        assert list(buf.open[txn].ids) == [0, 2]
        [(_, on_done, _)] = topic.ledger.appended
        on_done(Position(1, 3), None)
        await asyncio.sleep(0)
        assert txn not in buf.open and txn in buf.aborted
        assert buf.verified[restored].entry is buf.open[restored]  # the other one untouched

    asyncio.run(main())
