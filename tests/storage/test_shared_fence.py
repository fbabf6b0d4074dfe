"""Shared storage (``StorageConfig.shared``): two factories on one data directory, as two
brokers of a cluster on one host. Ledger ids never repeat between them and keep growing
across a takeover; a takeover fences the previous writer, whose appends and cursor writes
are then refused, and which never confirms anything the new writer cannot see."""

from __future__ import annotations

import asyncio
import os

import pytest

from magnetar.storage import SegmentFileMissingError, StorageError
from magnetar.storage.fence import Fence, FencedError
from tests.storage.storage_testlib import IdCounter as Counter
from tests.storage.storage_testlib import append_all, run


@pytest.fixture(params=["storage.db", "state files"])
def make_factory(request, make_factory):
    """Each test twice: the rows in the shared storage.db (brokers without a metadata
    store, one host), and as a cluster's brokers keep them (ledger and cursor files, ids
    from the store's counter)."""
    if request.param == "storage.db":
        return make_factory
    counter = Counter()

    def make(**kw):
        factory = make_factory(state_files=True, **kw)
        factory.use_ledger_id_source(counter.reserve, 1000)
        return factory

    return make


def fenced(factory, epoch: int):
    """``factory`` as a cluster's broker sets it up: ledgers fenced with ``epoch``."""
    factory.fence_epoch = lambda name: epoch
    return factory


def test_ids_are_reserved_across_factories(make_factory) -> None:
    a, b = make_factory(shared=True), make_factory(shared=True)
    la, lb = a.open("ta"), b.open("tb")
    pa = run(append_all(la, [b"a"]))[0]
    pb = run(append_all(lb, [b"b"]))[0]
    assert pa.ledger_id != pb.ledger_id  # each took its own block


def test_takeover_fences_the_old_writer(make_factory) -> None:
    a = fenced(make_factory(shared=True, segment_max_entries=3), 1)
    b = fenced(make_factory(shared=True, segment_max_entries=3), 2)
    old = a.open("t")
    kept = run(append_all(old, [b"m%d" % i for i in range(5)]))
    cursor = run(old.open_cursor_async("sub", "earliest"))  # its row is written
    new = b.open("t")  # B takes the ledger over: fence, then scan
    key = b._cursor_key("t", "sub")
    row = b._store.get(key)
    assert row is not None
    assert [d for _, d in new.read_entries(kept[0], 10)] == [b"m%d" % i for i in range(5)]
    # the old writer can no longer append: refused before anything is written
    with pytest.raises(StorageError, match="fenced"):
        run(append_all(old, [b"stale"]))
    # the new writer appends above every id of the ledger
    after = run(append_all(new, [b"n0"]))[0]
    assert after.ledger_id > max(p.ledger_id for p in kept)
    assert new.next_position(kept[-1]) == after
    # the old writer's cursor state does not overwrite the new writer's rows
    cursor.mark_delete(kept[-1])
    old.close()
    a.close()  # a closing factory writes its cursors' last states: not this one's
    assert b._store.get(key) == row


def test_a_batch_not_confirmed_before_the_fence_is_refused(make_factory) -> None:
    a = fenced(make_factory(shared=True), 1)
    ml = a.open("t")
    run(append_all(ml, [b"first"]))

    async def go() -> None:
        fut = ml.append(b"second")  # written now, synced and confirmed later
        Fence.take(ml.directory, 2)  # another broker fences in between
        with pytest.raises(StorageError, match="fenced"):
            await asyncio.wait_for(fut, 10)

    run(go())


def test_a_stale_owner_cannot_fence_out_a_newer_one(make_factory) -> None:
    a = fenced(make_factory(shared=True), 1)
    b = fenced(make_factory(shared=True), 2)
    old = a.open("t")
    run(append_all(old, [b"x"]))
    new = b.open("t")
    old.close()  # the stale owner unloads the ledger and opens it again: refused
    with pytest.raises(FencedError):
        a.open("t")
    assert run(append_all(new, [b"y"]))  # the newer owner keeps writing


def test_a_takeover_keeps_a_segment_whose_file_is_missing(make_factory) -> None:
    """A segment of the previous owner whose file is gone when the ledger is taken over
    (lost by the shared file system), its sidecar index still there, stays the
    ledger's: its reads fail as a missing file's (`SegmentFileMissingError`) until the
    file is back, instead of the new owner going on without it."""
    a = fenced(make_factory(shared=True, segment_max_entries=3), 1)
    b = fenced(make_factory(shared=True, segment_max_entries=3), 2)
    old = a.open("t")
    data = [b"m%d" % i for i in range(7)]
    kept = run(append_all(old, data))
    first = old._segments[0]
    a.close()
    assert os.path.exists(first.idx_path)
    os.rename(first.path, first.path + ".away")
    new = b.open("t")
    assert new._segments[0].ledger_id == first.ledger_id
    with pytest.raises(SegmentFileMissingError):
        new.read_entries(kept[0], 10)
    assert [d for _, d in new.read_entries(kept[3], 10)] == data[3:]
    os.rename(first.path + ".away", first.path)
    assert [d for _, d in new.read_entries(kept[0], 10)] == data
