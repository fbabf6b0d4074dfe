"""`TxnLog`, a broker alone's transaction records in one append-only file: what is written
is there after a reopen (a kill -9 loses nothing written), a torn tail is cut off, versions
are checked as the metadata store's compare-and-set, compaction keeps the live records and
the ones written while it runs, and the SQLite store of earlier versions is moved in once."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from magnetar.broker.transactions.records import (
    ABORTING,
    COMMITTING,
    OPEN,
    TxnRecord,
    TxnRecords,
)
from magnetar.broker.transactions.txnlog import TxnLog, replay
from magnetar.metadata import BadVersionError, LocalMetadataStore

T = TypeVar("T")


def run(work: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await work()

    return asyncio.run(main())


async def opened(path: Path, **kwargs: int) -> TxnLog:
    txn_log = TxnLog(str(path), **kwargs)
    await txn_log.open(migrate_from=str(path.parent / "transactions.db"))
    return txn_log


def test_records_and_counters_are_there_after_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "transactions.log"

    async def write() -> None:
        txn_log = await opened(path)
        assert await txn_log.counter(3).reserve(100) == 0
        assert await txn_log.counter(3).reserve(100) == 100
        assert await txn_log.counter(4).reserve(10, floor=50) == 50
        for seq in range(3):
            await txn_log.create(TxnRecord(3, seq, OPEN, 1, 2, 3))
        rec = await txn_log.get(3, 1)
        assert rec is not None and rec.version == 0
        rec = rec.changed(partitions=["persistent://a/b/c"], subscriptions=[("t", "s")])
        await txn_log.update(rec)
        assert rec.version == 1
        await txn_log.update(rec.changed(state=COMMITTING))
        gone = await txn_log.get(3, 2)
        assert gone is not None
        await txn_log.delete(gone)
        # no close: as a kill -9 leaves it (every record went to the OS when written)
        os.close(txn_log._fd)
        txn_log._fd = -1

    run(write)

    async def read() -> None:
        txn_log = await opened(path)
        assert await txn_log.counter(3).reserve(1) == 200
        assert await txn_log.counter(4).reserve(1) == 60
        assert await txn_log.counter(5).reserve(1) == 0
        assert sorted(r.seq for r in await txn_log.load(3)) == [0, 1]
        assert await txn_log.load(4) == []
        rec = await txn_log.get(3, 1)
        assert rec is not None
        assert (rec.state, rec.version) == (COMMITTING, 2)
        assert rec.partitions == ["persistent://a/b/c"]
        assert rec.subscriptions == [("t", "s")]
        assert (rec.opened_ms, rec.timeout_ms, rec.deadline_ms) == (1, 2, 3)
        assert await txn_log.get(3, 2) is None
        await txn_log.close()

    run(read)


def test_versions_are_checked(tmp_path: Path) -> None:
    async def work() -> None:
        txn_log = await opened(tmp_path / "transactions.log")
        rec = TxnRecord(0, 7)
        await txn_log.create(rec)
        with pytest.raises(BadVersionError):
            await txn_log.create(TxnRecord(0, 7))
        stale = rec.changed()
        await txn_log.update(rec.changed(state=ABORTING))
        with pytest.raises(BadVersionError):
            await txn_log.update(stale.changed(state=COMMITTING))  # a stale owner's write
        with pytest.raises(BadVersionError):
            await txn_log.update(TxnRecord(0, 8, version=0))  # never created
        await txn_log.delete(stale)  # changed since: nothing deleted
        got = await txn_log.get(0, 7)
        assert got is not None and got.state == ABORTING
        got.state = COMMITTING  # a copy: the log's record is not changed
        again = await txn_log.get(0, 7)
        assert again is not None and again.state == ABORTING
        await txn_log.close()

    run(work)


def test_a_torn_tail_is_cut_off(tmp_path: Path) -> None:
    path = tmp_path / "transactions.log"

    async def write() -> None:
        txn_log = await opened(path)
        await txn_log.create(TxnRecord(1, 1))
        await txn_log.create(TxnRecord(1, 2))
        await txn_log.close()

    run(write)
    whole = path.read_bytes()
    recs, _, good = replay(whole)
    assert set(recs) == {(1, 1), (1, 2)} and good == len(whole)
    for torn in (whole[:-3], whole + b"\x10\x00", whole[:-1] + bytes([whole[-1] ^ 1])):
        path.write_bytes(torn)

        async def read(cut: bool) -> None:
            txn_log = await opened(path)
            assert await txn_log.get(1, 1) is not None
            assert (await txn_log.get(1, 2) is None) == cut
            # written after the cut: read back whole
            await txn_log.create(TxnRecord(1, 3))
            await txn_log.close()
            txn_log = await opened(path)
            assert await txn_log.get(1, 3) is not None
            await txn_log.close()

        asyncio.run(read(len(torn) <= len(whole)))


def test_compaction_keeps_live_records_and_those_written_meanwhile(tmp_path: Path) -> None:
    path = tmp_path / "transactions.log"

    async def work() -> None:
        txn_log = await opened(path, compact_min_bytes=20_000)
        await txn_log.counter(2).reserve(100)
        for seq in range(400):
            rec = TxnRecord(2, seq, OPEN, seq, 10, seq + 10, partitions=[f"t{seq}"])
            await txn_log.create(rec)
            await txn_log.update(rec.changed(state=COMMITTING))
            if seq % 4:
                ended = await txn_log.get(2, seq)
                assert ended is not None
                await txn_log.delete(ended)
        compacting = txn_log._compacting
        if compacting is not None:
            await compacting
        assert txn_log.compactions >= 1
        assert path.stat().st_size < 40_000  # (about 400 x 3 records written)
        await txn_log.close()
        assert txn_log.syncs >= 1  # (every 500 records, on a thread)
        assert not (tmp_path / "transactions.log.tmp").exists()
        txn_log = await opened(path, compact_min_bytes=20_000)
        recs = await txn_log.load(2)
        assert sorted(r.seq for r in recs) == list(range(0, 400, 4))
        assert all(r.state == COMMITTING and r.version == 1 for r in recs)
        assert {r.partitions[0] for r in recs} == {f"t{s}" for s in range(0, 400, 4)}
        assert await txn_log.counter(2).reserve(1) == 100
        await txn_log.close()

    run(work)


def test_the_sqlite_store_of_earlier_versions_is_moved_in_once(tmp_path: Path) -> None:
    db = tmp_path / "transactions.db"

    async def before() -> None:
        store = LocalMetadataStore(str(db))
        await store.start()
        records = TxnRecords(store)
        assert await records.counter(5).reserve(100) == 0
        rec = TxnRecord(5, 3, OPEN, 1, 60_000, 60_001, partitions=["persistent://p/n/t"])
        await records.create(rec)
        await records.update(rec.changed(state=COMMITTING))
        await records.create(TxnRecord(6, 0))
        await store.close()

    run(before)

    async def after(next_id: int) -> None:
        txn_log = await opened(tmp_path / "transactions.log")
        rec = await txn_log.get(5, 3)
        assert rec is not None
        assert (rec.state, rec.partitions, rec.deadline_ms) == (
            COMMITTING, ["persistent://p/n/t"], 60_001)
        await txn_log.update(rec.changed(state=COMMITTING))  # its version came along
        assert [r.seq for r in await txn_log.load(6)] == [0]
        assert await txn_log.counter(5).reserve(1) == next_id
        await txn_log.close()

    run(lambda: after(100))
    assert not db.exists() and (tmp_path / "transactions.db.migrated").exists()
    run(lambda: after(101))  # once: the log is read, nothing moved again
