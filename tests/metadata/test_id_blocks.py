"""`IdBlocks` (ids in blocks from a counter key, compare-and-set) on both backends, and the
storage's `SourcedLedgerIds` taking ledger ids from it through a real ZooKeeper: brokers
allocating at the same time never get the same id, ids keep growing across restarts, and
the ids of a block whose broker died are skipped, never handed out again."""

from __future__ import annotations

import asyncio
import itertools
import threading

import pytest

from magnetar.metadata import IdBlocks, MetadataStoreError, create_metadata_store, json_encode
from magnetar.storage import StorageError
from magnetar.storage.ledger_ids import SourcedLedgerIds
from tests.zkserver import ZooKeeperServer

from .conftest import Backend, run

PATH = "/magnetar/ledger-ids"


def test_concurrent_blocks_never_overlap(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        one, two = await b.store(), await b.store()
        counters = [IdBlocks(one, PATH), IdBlocks(two, PATH)]
        starts = await asyncio.gather(*(counters[i % 2].reserve(7) for i in range(40)))
        blocks = sorted((s, s + 7) for s in starts)
        for (_, end), (start, _) in itertools.pairwise(blocks):
            assert start >= end, f"blocks overlap: {blocks}"
        # nothing lost either: 40 blocks of 7 side by side from 0, the counter past them
        assert blocks[0][0] == 0 and blocks[-1][1] == 280
        got = await one.get(PATH)
        assert got is not None and got[0] == json_encode(280)

    run(backend, scenario)


def test_ids_grow_across_restarts_and_a_floor_lifts_them(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        first = await b.store()
        assert await IdBlocks(first, PATH).reserve(10) == 0  # taken, never used: a crash
        await first.close()
        again = await b.store()
        counter = IdBlocks(again, PATH)
        assert await counter.reserve(10) == 10  # the dead broker's block is skipped
        assert await counter.reserve(5, floor=100) == 100  # ids in use that it never gave
        assert await counter.reserve(5, floor=3) == 105
        with pytest.raises(ValueError):
            await counter.reserve(0)

    run(backend, scenario)


def test_a_counter_that_is_not_a_count_is_refused(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        store = await b.store()
        await store.put(PATH, b'"seven"')
        with pytest.raises(MetadataStoreError, match="not a count"):
            await IdBlocks(store, PATH).reserve(10)
        assert (await store.get(PATH))[0] == b'"seven"'  # type: ignore[index]

    run(backend, scenario)


class Broker:
    """One broker's ledger id allocator over its own ZooKeeper session."""

    def __init__(self, url: str, block: int) -> None:
        self.url = url
        self.block = block

    async def start(self) -> Broker:
        self.store = await create_metadata_store(self.url)
        self.counter = IdBlocks(self.store, PATH)
        self.ids = SourcedLedgerIds(self.counter.reserve_blocking, self.block)
        return self

    def take(self, n: int) -> list[int]:
        """``n`` ids, as segment roll-overs take them (a thread; waits for the next block
        when none is at hand, as a retried append would)."""
        out = []
        while len(out) < n:
            try:
                out.append(self.ids.allocate())
            except StorageError:
                spare = self.ids.spare()
                assert spare is not None
                spare.result(30)
        return out

    async def close(self) -> None:
        self.ids.close()
        await self.store.close()


def test_two_brokers_allocating_at_once_never_collide(zookeeper: ZooKeeperServer) -> None:
    async def main() -> None:
        url = zookeeper.url("/id-blocks-two")
        a, b = await Broker(url, 5).start(), await Broker(url, 5).start()
        try:
            barrier = threading.Barrier(2)

            def both(broker: Broker) -> list[int]:
                barrier.wait(10)
                return broker.take(300)

            ids_a, ids_b = await asyncio.wait_for(
                asyncio.gather(asyncio.to_thread(both, a), asyncio.to_thread(both, b)), 120)
            assert not set(ids_a) & set(ids_b), "an id handed out twice"
            for ids in (ids_a, ids_b):
                assert ids == sorted(ids) and len(set(ids)) == len(ids)  # growing, no repeat
            got = await a.store.get(PATH)
            assert got is not None
            counter = int(got[0])
            assert max(ids_a + ids_b) < counter  # every id came from the store's counter

            # broker a dies holding the rest of its block and the next one it asked for
            await a.close()
            got = await b.store.get(PATH)
            assert got is not None
            counter = int(got[0])
            c = await Broker(url, 5).start()  # a restarted broker
            try:
                ids_c = await asyncio.to_thread(c.take, 12)
            finally:
                await c.close()
            assert min(ids_c) >= counter  # a's unused ids are skipped, not handed out again
            assert not set(ids_c) & set(ids_a + ids_b)
        finally:
            await b.close()

    asyncio.run(main())


def test_a_ledger_written_higher_gets_a_block_above_it(zookeeper: ZooKeeperServer) -> None:
    """A broker opening a ledger another broker wrote with higher ids waits (off the loop)
    for a block above them: the ledger's ids keep growing across owners."""
    async def main() -> None:
        url = zookeeper.url("/id-blocks-floor")
        a, b = await Broker(url, 10).start(), await Broker(url, 10).start()
        try:
            await asyncio.to_thread(a.take, 1)  # a holds a block and has the next one
            spare = a.ids.spare()
            assert spare is not None
            a_spare = await asyncio.wrap_future(spare)
            high = max(await asyncio.to_thread(b.take, 25))  # b's ledger, written meanwhile
            assert high >= a_spare + 10  # above both of a's blocks
            await asyncio.to_thread(a.ids.ensure, high + 1, True)  # a opens b's ledger
            a.ids.raise_floor(high + 1)
            assert a.ids.allocate() > high  # no wait: a block above is at hand
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())
