"""ManagedCursor: mark-delete, individual ranges, batch ack sets, helpers, persistence."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.storage import EARLIEST, Position

from .storage_testlib import append_all, run


@pytest.fixture
def setup(make_factory):
    f = make_factory(segment_max_entries=5)
    ml = f.open("t")
    pos = run(append_all(ml, [b"e%d" % i for i in range(12)]))  # segments of 5, 5, 2
    return f, ml, pos


def test_initial_positions(setup):
    _, ml, pos = setup
    assert ml.open_cursor("late", "latest").mark_delete_position == pos[-1]
    early = ml.open_cursor("early", "earliest")
    assert early.mark_delete_position == EARLIEST
    assert early.backlog() == 12
    assert early.read_position == pos[0]
    assert ml.open_cursor("early") is early


def test_mark_delete_and_individual_ranges(setup):
    _, ml, pos = setup
    c = ml.open_cursor("c", "earliest")
    c.mark_delete(pos[1])
    assert c.is_deleted(pos[0]) and c.is_deleted(pos[1]) and not c.is_deleted(pos[2])
    c.delete([pos[3], pos[4], pos[5], pos[6], pos[9]])
    # 3..6 crosses the segment boundary and still merges into one range
    assert c.individually_deleted == [(pos[3], pos[6]), (pos[9], pos[9])]
    assert c.backlog() == 12 - 2 - 5
    assert c.first_unacked_after(None) == pos[2]
    assert c.first_unacked_after(pos[2]) == pos[7]
    assert list(c.unacked_positions()) == [pos[2], pos[7], pos[8], pos[10], pos[11]]
    c.delete([pos[2]])  # fills the hole: mark-delete jumps over the range
    assert c.mark_delete_position == pos[6]
    assert c.individually_deleted == [(pos[9], pos[9])]
    c.delete([pos[7], pos[8]])
    assert c.mark_delete_position == pos[9]
    assert c.individually_deleted == []
    c.mark_delete(pos[3])  # never backwards
    assert c.mark_delete_position == pos[9]
    c.mark_delete(Position(10**9, 0))  # clamped to the last entry
    assert c.mark_delete_position == pos[11]
    assert c.backlog() == 0 and c.read_position is None


def test_delete_range_acknowledges_a_run_at_once(setup):
    """`delete_range` (a segment skipped whole): the run acknowledged in one range, its
    batch ack sets dropped, folded into the mark-delete position when it touches it,
    clamped to the last entry, and nothing at or below the mark-delete position moves."""
    _, ml, pos = setup
    c = ml.open_cursor("c", "earliest")
    c.set_batch_ack(pos[6], [1])
    c.delete_range(pos[5], pos[9])  # the second segment
    assert c.individually_deleted == [(pos[5], pos[9])]
    assert c.batch_ack_set(pos[6]) is None
    assert c.backlog() == 12 - 5
    c.delete_range(pos[0], pos[4])  # the first: everything up to the second's end
    assert c.mark_delete_position == pos[9] and c.individually_deleted == []
    c.delete_range(pos[2], pos[3])  # below the mark-delete position: nothing changes
    assert c.mark_delete_position == pos[9] and c.individually_deleted == []
    c.delete_range(pos[11], Position(10**9, 0))  # clamped to the last entry
    assert c.individually_deleted == [(pos[11], pos[11])] and c.backlog() == 1


def test_in_order_acks_stay_compact(make_factory):
    f = make_factory()
    ml = f.open("t")
    pos = run(append_all(ml, [b"x"] * 1000))
    c = ml.open_cursor("c", "earliest")
    c.delete(pos[500:])
    assert len(c.individually_deleted) == 1
    c.delete(pos[1:500:2])
    assert len(c.individually_deleted) == 250
    c.delete(pos[0:500:2])
    assert c.individually_deleted == [] and c.mark_delete_position == pos[-1]


def test_batch_ack_sets(setup):
    _, ml, pos = setup
    c = ml.open_cursor("c", "earliest")
    p = pos[4]
    c.set_batch_ack(p, [0b1110])  # index 0 acked of a 4-message batch
    assert c.batch_ack_set(p) == [0b1110] and not c.is_deleted(p)
    c.set_batch_ack(p, [0b1011])  # AND merge: index 2 acked too
    assert c.batch_ack_sets[p] == [0b1010]
    assert c.backlog() == 12
    c.set_batch_ack(p, [0b0101])  # all bits clear: the entry is acknowledged
    assert c.is_deleted(p) and p not in c.batch_ack_sets
    c.set_batch_ack(pos[6], [-2])  # signed 64-bit words as on the wire
    c.mark_delete(pos[6])
    assert c.batch_ack_sets == {}


def test_reset_seeks(setup):
    _, ml, pos = setup
    c = ml.open_cursor("c", "earliest")
    c.delete([pos[8]])
    c.set_batch_ack(pos[9], [1])
    c.reset(pos[5])
    assert c.mark_delete_position == Position(pos[5].ledger_id, -1)
    assert c.read_position == pos[5]
    assert c.individually_deleted == [] and c.batch_ack_sets == {}
    assert c.backlog() == 7
    c.reset(Position(10**9, 10**9))  # past the end: caught up
    assert c.backlog() == 0
    c.reset(EARLIEST)
    assert c.backlog() == 12


def test_read_unacked(setup):
    _, ml, pos = setup
    c = ml.open_cursor("c", "earliest")
    c.delete([pos[1], pos[2], pos[6]])
    got = c.read_unacked(None, 4)
    assert [p for p, _ in got] == [pos[0], pos[3], pos[4], pos[5]]
    assert [d for _, d in got] == [b"e0", b"e3", b"e4", b"e5"]
    assert [p for p, _ in c.read_unacked(pos[5], 10)] == [pos[7], *pos[8:12]]


def test_persistence_across_reopen(make_factory):
    f = make_factory(segment_max_entries=5)
    ml = f.open("t")
    pos = run(append_all(ml, [b"e%d" % i for i in range(12)]))
    c = ml.open_cursor("sub", "earliest")
    c.mark_delete(pos[2])
    c.delete([pos[5], pos[6], pos[9]])
    c.set_batch_ack(pos[7], [0b110, -1])
    ml.open_cursor("other", "latest")
    f.close()
    ml = make_factory(segment_max_entries=5).open("t")
    assert set(ml.cursors()) == {"sub", "other"}
    c = ml.cursors()["sub"]
    assert c.mark_delete_position == pos[2]
    assert c.individually_deleted == [(pos[5], pos[6]), (pos[9], pos[9])]
    assert c.batch_ack_sets == {pos[7]: [0b110, -1]}
    assert ml.cursors()["other"].mark_delete_position == pos[11]
    ml.delete_cursor("other")
    f2 = ml._factory
    f2.close()
    assert set(make_factory().open("t").cursors()) == {"sub"}


def test_properties_persist_across_reopen(make_factory):
    f = make_factory()
    ml = f.open("t")
    run(append_all(ml, [b"e0"]))
    c = ml.open_cursor("sub", "earliest")
    assert c.properties == {}
    c.set_property("pulsar.replicated.subscription", 1)
    c.set_property("gone", 2)
    c.set_property("gone", None)
    f.close()
    c = make_factory().open("t").cursors()["sub"]
    assert c.properties == {"pulsar.replicated.subscription": 1}


def test_persisted_on_timer_and_crash_lags_at_most_that(make_factory):
    f = make_factory(cursor_persist_interval_s=30)
    ml = f.open("t")
    pos = run(append_all(ml, [b"x"] * 10))

    async def go():
        c = ml.open_cursor("c", "earliest")
        c.mark_delete(pos[3])
        handle = f._persist_handle
        assert handle is not None  # a timer, not a write per ack
        assert handle.when() - asyncio.get_running_loop().time() <= 30
        c.mark_delete(pos[4])
        assert f._persist_handle is handle  # one timer for all changes
        f.persist_cursors()  # what the timer does when it fires
        c.mark_delete(pos[8])  # acknowledged after the last persist
        return c

    run(go())
    # "crash": a second factory reads the disk state without closing the first
    crashed = make_factory(data_dir=f.config.data_dir).open("t").cursors()["c"]
    assert crashed.mark_delete_position == pos[4]  # lags, never ahead: redelivery only


def test_persisted_ranges_are_capped(make_factory):
    f = make_factory(cursor_max_persisted_ranges=3)
    ml = f.open("t")
    pos = run(append_all(ml, [b"x"] * 40))
    c = ml.open_cursor("c", "earliest")
    c.delete(pos[2:40:4])
    assert len(c.individually_deleted) == 10
    f.close()
    c = make_factory(cursor_max_persisted_ranges=3).open("t").cursors()["c"]
    assert c.individually_deleted == [(pos[2], pos[2]), (pos[6], pos[6]), (pos[10], pos[10])]
    assert c.backlog() == 37


def test_acks_beyond_last_confirmed_are_ignored(make_factory):
    f = make_factory()
    ml = f.open("t")
    pos = run(append_all(ml, [b"x"] * 3))
    c = ml.open_cursor("c", "earliest")
    c.delete([Position(pos[0].ledger_id, 50)])
    assert c.individually_deleted == []
    later = run(append_all(ml, [b"y"] * 60))
    assert not c.is_deleted(later[47])


def test_persist_timer_fires(make_factory):
    f = make_factory(cursor_persist_interval_s=0.01)
    ml = f.open("t")
    pos = run(append_all(ml, [b"x"] * 5))
    real = f._persist_dirty

    async def go():
        fired = asyncio.Event()
        cursors = []

        def wrapped():
            real()
            # (a tick while the cursor's first row is still being written skips it)
            if cursors and cursors[0] not in f._dirty_cursors:
                fired.set()

        f._persist_dirty = wrapped
        c = ml.open_cursor("c", "earliest")
        cursors.append(c)
        c.mark_delete(pos[2])
        await asyncio.wait_for(fired.wait(), 10)

    run(go())
    f._meta_writer.submit(lambda: None).result(10)  # the timer's write, queued before this
    other = make_factory(data_dir=f.config.data_dir).open("t")
    assert other.cursors()["c"].mark_delete_position == pos[2]


def test_mark_delete_at_the_end_of_a_ledger_absorbs_the_range_beyond_it(make_factory):
    """Found by the model test: entries (L1, last) and (L2, 0) acknowledged individually,
    then mark-delete at (L1, last): the range must fold in, up to (L2, 0)."""
    f = make_factory(segment_max_entries=5, fsync="never")
    ml = f.open("t")
    pos = run(append_all(ml, [b"%d" % i for i in range(12)]))
    c = ml.open_cursor("c", "earliest")
    c.delete([pos[4], pos[5]])  # the last of the first ledger, the first of the next
    c.mark_delete(pos[4])
    assert c.mark_delete_position == pos[5]
    assert c.individually_deleted == []
    assert c.backlog() == 6


def test_periodic_cursor_writes_run_off_the_event_loop(make_factory):
    """The timer's SQLite write of dirty cursors happens on the metadata writer thread."""
    import asyncio
    import threading

    f = make_factory(cursor_persist_interval_s=0.01)
    ml = f.open("t")
    threads: list[str] = []
    real = f._store.put_many

    def recording(items, **kwargs):
        threads.append(threading.current_thread().name)
        return real(items, **kwargs)

    async def go() -> None:
        pos = [await ml.append(b"%d" % i) for i in range(3)]
        cursor = ml.open_cursor("c", "earliest")  # written at once, on the loop
        f._store.put_many = recording
        cursor.mark_delete(pos[1])
        for _ in range(500):  # bounded poll for the timer's write
            if threads:
                return
            await asyncio.sleep(0.01)

    asyncio.run(go())
    assert threads and threads[0].startswith("magnetar-meta"), threads
    f.close()
    reopened = make_factory(cursor_persist_interval_s=0.01).open("t")
    assert reopened.cursors()["c"].mark_delete_position.entry_id == 1
