"""Shared storage with an id source (`ManagedLedgerFactory.use_ledger_id_source`: what a
cluster's broker passes, the metadata store's counter; here a counter in memory): ledger
ids come from the source in blocks, never from storage.db; a ledger another factory wrote
with higher ids gets ids above them; a source that has not answered, or failed, refuses the
append that needs an id (and the next one works) instead of blocking the event loop."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from magnetar.storage import StorageError
from tests.storage.storage_testlib import IdCounter, append_all, run


class Counter(IdCounter):
    """`IdCounter` that counts its calls, checks they come from the id thread, and can be
    held (``gate``) or made to fail once (``fail_next``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.gate = threading.Event()
        self.gate.set()
        self.fail_next = False

    def reserve(self, count: int, floor: int) -> int:
        assert threading.current_thread().name.startswith("magnetar-ids")
        self.gate.wait(30)
        with self.lock:
            self.calls += 1
            if self.fail_next:
                self.fail_next = False
                raise OSError("metadata store unreachable")
        return super().reserve(count, floor)


def sourced(factory, counter: Counter, block: int = 10):
    factory.use_ledger_id_source(counter.reserve, block)
    run(factory.ledger_ids_ready())
    return factory


def segment_ids(data: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (data / "ledgers").glob("*/*.seg"))


def test_ids_come_from_the_source_never_from_storage_db(make_factory, tmp_path: Path) -> None:
    counter = Counter()
    a = sourced(make_factory(shared=True, segment_max_entries=1), counter)
    b = sourced(make_factory(shared=True, segment_max_entries=1), counter)
    for i in range(15):  # one entry per segment: 15 ids each, two blocks and more
        run(append_all(a.open(f"a{i % 3}"), [b"x"]))
        run(append_all(b.open(f"b{i % 3}"), [b"y"]))
    ids = segment_ids(tmp_path / "data")
    assert len(ids) == 30 and len(set(ids)) == 30  # no id twice
    assert max(ids) < counter.next  # every one from the counter
    assert a._store.get("ids") is None  # storage.db holds no id block
    plain = make_factory(data_dir=tmp_path / "plain")  # standalone: storage.db, as before
    run(append_all(plain.open("t"), [b"z"]))
    assert plain._store.get("ids") == {"limit": 1000}


def test_a_ledger_written_higher_gets_ids_above_it(make_factory) -> None:
    counter = Counter()
    a = sourced(make_factory(shared=True), counter)  # asked for [0, 10)
    b = sourced(make_factory(shared=True), counter)  # asked for [10, 20)
    written = run(append_all(b.open("t"), [b"b"]))[0]
    b.open("t").close()
    assert written.ledger_id >= 10
    mine = run(append_all(a.open("t"), [b"a"]))[0]  # a's [0, 10) is below: skipped
    assert mine.ledger_id > written.ledger_id
    other = run(append_all(a.open("u"), [b"c"]))[0]
    assert other.ledger_id > mine.ledger_id  # ids below the floor stay unused


def test_no_block_at_hand_refuses_the_append_and_the_next_one_works(make_factory) -> None:
    counter = Counter()
    f = sourced(make_factory(shared=True, segment_max_entries=1), counter, block=1)
    ml = f.open("t")
    counter.gate.clear()  # the metadata store is slow: the next block is not there yet
    run(append_all(ml, [b"one"]))  # the block at hand
    with pytest.raises(StorageError, match="no block of ledger ids"):
        run(append_all(ml, [b"two"]))
    counter.fail_next = True  # ... and then fails
    counter.gate.set()
    with pytest.raises(StorageError, match="cannot reserve ledger ids"):
        run(f.ledger_ids_ready())
    with pytest.raises(StorageError, match="cannot reserve ledger ids"):
        run(append_all(ml, [b"two"]))  # (and asks again)
    run(f.ledger_ids_ready())
    assert run(append_all(ml, [b"two"]))[0].ledger_id == 1
    assert [d for _, d in ml.read_entries(ml.first_position(), 10)] == [b"one", b"two"]
