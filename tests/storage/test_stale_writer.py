"""A fenced writer changes nothing a reader reads (`takeover.py`), even with a write under
way when the fence moved; and a storage error is never reported as a lost fence.

Two (or three) factories on one data directory play a cluster's brokers, as a cluster
keeps its state (ledger and cursor files, ids from the store's counter). The stale
writer "with a write under way" is simulated by making its fence checks pass although
a newer owner fenced the ledger: every check then comes "just before" the fence moved,
the worst a pause between a check and its write can do."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading

import pytest

from magnetar.storage import StorageError
from magnetar.storage.position import Position
from magnetar.storage.takeover import latest_record
from tests.cluster.file_rule import assert_untouched, changes, snapshot
from tests.storage.storage_testlib import IdCounter, append_all, run

START = Position(-1, -1)


@pytest.fixture
def broker(make_factory, tmp_path):
    """``broker(epoch)``: a factory as a cluster's broker sets it up, ledgers fenced
    with ``epoch``, all on one data directory and one id counter."""
    counter = IdCounter()

    def make(epoch: int, **kw):
        kw.setdefault("segment_max_entries", 3)
        factory = make_factory(shared=True, state_files=True, **kw)
        factory.use_ledger_id_source(counter.reserve, 1000)
        factory.fence_epoch = lambda name: epoch
        return factory

    make.data = tmp_path / "data"
    return make


def payloads(ledger) -> list[bytes]:
    return [d for _, d in ledger.read_entries(START, 1000)]


async def settle(ledger, data: list[bytes]) -> list[object]:
    """Every append's outcome (none left pending when the loop closes)."""
    return list(await asyncio.gather(*(ledger.append(d) for d in data),
                                     return_exceptions=True))


def blind(ledger) -> None:
    """The ledger's writer no longer sees its fence move: each of its checks passes, as a
    check made just before the fence moved would (a write under way)."""
    ledger.fence.holds = lambda: True
    ledger.fence.check = lambda: None
    for seg in ledger._segments:
        if seg.guard is not None:
            seg.guard = ledger.fence.check


def test_a_stale_writer_under_way_changes_nothing_readers_read(broker) -> None:
    a, b = broker(1), broker(2)
    old = a.open("t")
    run(append_all(old, [b"a%d" % i for i in range(5)]))  # two segments, one active
    new = b.open("t")  # fence, read, record
    run(append_all(new, [b"b0", b"b1"]))
    seen = payloads(new)
    assert seen == [b"a0", b"a1", b"a2", b"a3", b"a4", b"b0", b"b1"]
    # the old writer, all its checks stale: appends to its active segment (past the end
    # the new owner recorded), rolls over into new segments, seals, writes sidecars
    before = snapshot(broker.data)
    blind(old)
    run(append_all(old, [b"stale%d" % i for i in range(7)]))
    old.close()
    assert payloads(new) == seen  # the new owner's readers: unchanged
    # every file change it made lies where no reader looks (the file rule's judge agrees)
    unseen = assert_untouched(before, snapshot(broker.data), root=broker.data)
    assert any("created file" in line and ".e1.seg" in line for line in unseen), unseen
    assert any(line.startswith("grew") for line in unseen), unseen
    # a third owner takes over: it reads what the second read and wrote, nothing else
    c = broker(3)
    third = c.open("t")
    assert payloads(third) == seen
    epoch, ends = latest_record(third.directory, 3)
    assert epoch == 3 and set(ends) == set(third.segment_ids())
    # the stale writer's segment files (named by its epoch) are gone from the directory
    names = os.listdir(third.directory)
    assert not [n for n in names if n.endswith(".e1.seg") and
                int(n.split(".")[0]) not in third.segment_ids()]


def test_an_owner_reopening_with_its_own_epoch_keeps_everything(broker) -> None:
    """A ledger closed and opened again by the same owner (same epoch), its own segments
    not yet in any record, then taken over: every entry is there each time."""
    a = broker(1)
    ml = a.open("t")
    run(append_all(ml, [b"m%d" % i for i in range(5)]))
    ml.close()
    ml = a.open("t")
    assert payloads(ml) == [b"m%d" % i for i in range(5)]
    run(append_all(ml, [b"n%d" % i for i in range(5)]))
    ml.close()
    ml = a.open("t")
    want = [b"m%d" % i for i in range(5)] + [b"n%d" % i for i in range(5)]
    assert payloads(ml) == want
    assert payloads(broker(2).open("t")) == want


def test_a_batch_fenced_after_its_sync_is_not_cut_from_the_file(broker, monkeypatch) -> None:
    """The old writer wrote a batch; the new owner fenced and read it (complete records);
    the old writer's check after the sync fails: the batch fails, and the file is not
    truncated ("rolled back") under the new owner, who keeps reading what it read."""
    a = broker(1, segment_max_entries=100, inline_sync_when_idle=False)
    b = broker(2, segment_max_entries=100)
    old = a.open("t")
    run(append_all(old, [b"first"]))
    real_sync = os.fdatasync
    gate = threading.Event()

    def held(fd: int) -> None:  # the old writer's flusher: its sync waits for the gate
        if threading.current_thread().name.startswith("magnetar-storage-flusher"):
            gate.wait(10)
        real_sync(fd)

    monkeypatch.setattr(os, "fdatasync", held)

    async def go() -> tuple[list[bytes], int]:
        fut = old.append(b"second")
        old._write_pending()  # written to the file, its sync held: not confirmed
        new = b.open("t")
        read = payloads(new)
        size = os.path.getsize(new._segments[-1].path)
        gate.set()
        with pytest.raises(StorageError, match="fenced"):
            await asyncio.wait_for(fut, 10)
        old.close()
        assert os.path.getsize(new._segments[-1].path) == size
        assert payloads(new) == read
        return read, size

    read, _ = run(go())
    assert read == [b"first", b"second"]  # (never confirmed: the producer resends it)
    assert payloads(broker(3).open("t")) == read


def test_a_fenced_writer_touches_no_file(broker) -> None:
    """After the new owner's fence, the old writer's appends, roll-over, cursor writes,
    terminate, property, trim and close change no file of the data directory."""
    a, b = broker(1), broker(2)
    old = a.open("t")
    kept = run(append_all(old, [b"m%d" % i for i in range(5)]))
    cursor = run(old.open_cursor_async("sub", "earliest"))
    new = b.open("t")
    before = snapshot(broker.data)
    outcomes = run(settle(old, [b"x%d" % i for i in range(4)]))  # (one rolls over)
    assert all(isinstance(o, StorageError) and "fenced" in str(o) for o in outcomes)
    cursor.mark_delete(kept[-1])
    with pytest.raises(StorageError, match="fenced"):
        run(old.terminate_async())
    with pytest.raises(StorageError, match="fenced"):
        run(old.set_property_async("k", "v"))
    assert old.trim(0, 0) == []
    old.close()
    a.close()
    assert_untouched(before, snapshot(broker.data))
    assert not new.properties and payloads(new) == [b"m%d" % i for i in range(5)]


def test_a_stale_terminate_under_way_is_not_reported_done(broker) -> None:
    """The ledger's own row: a terminate whose check came before the new owner's fence
    and whose write lands after it is refused (not reported done), and the new owner's
    row, and a later owner's, stay unterminated."""
    a, b = broker(1), broker(2)
    old = a.open("t")
    run(append_all(old, [b"x"]))
    new = b.open("t")
    real = old.fence.holds
    calls = []

    def first_passes() -> bool:  # the check before the write came before the fence
        calls.append(1)
        return True if len(calls) == 1 else real()

    old.fence.holds = first_passes
    with pytest.raises(StorageError):
        run(old.terminate_async())
    assert run(append_all(new, [b"y"]))  # the new owner still appends
    assert payloads(broker(3).open("t")) == [b"x", b"y"]


def test_a_stale_terminate_before_the_copy_counts(broker) -> None:
    """A terminate that completed before the takeover is carried over to the new owner."""
    a, b = broker(1), broker(2)
    old = a.open("t")
    run(append_all(old, [b"x"]))
    run(old.terminate_async())
    run(old.set_property_async("k", "v"))
    new = b.open("t")
    assert new.properties == {"k": "v"}
    with pytest.raises(StorageError, match="terminated"):
        run(append_all(new, [b"y"]))


def test_takeover_reads_without_changing_a_file(broker) -> None:
    """The new owner's takeover neither truncates, renames nor removes the old owner's
    segments (a torn tail included): it records where each ends and writes its own
    files (fence, record, cursor folder) only."""
    a, b = broker(1, segment_max_entries=100), broker(2, segment_max_entries=100)
    old = a.open("t")
    run(append_all(old, [b"m%d" % i for i in range(3)]))
    seg = old._segments[-1]
    with open(seg.path, "ab") as f:
        f.write(b"\x07" * 13)  # a torn record a stale writer left
    before = snapshot(broker.data)
    new = b.open("t")
    after = snapshot(broker.data)

    def new_owners(rel: str) -> bool:
        base = os.path.basename(rel)
        return base in ("fence", "fence.lock") or base.startswith("takeover.") or \
            ".e2." in base or "cursors." in rel or base.endswith(".idx")

    assert_untouched(before, after, ignore=new_owners, who="the takeover")
    assert payloads(new) == [b"m0", b"m1", b"m2"]
    _, ends = latest_record(new.directory, 2)
    assert ends[seg.ledger_id] == seg.end  # the torn bytes are past the recorded end


@pytest.mark.parametrize("code", [errno.ENOTCONN, errno.EIO, errno.ESTALE])
def test_a_storage_error_on_the_fence_is_not_fenced(broker, monkeypatch, caplog, code) -> None:
    """The fence cannot be read (two GlusterFS bricks gone: ENOTCONN): the append fails
    with a storage error, to the caller and in the log, never 'fenced'."""
    a = broker(1)
    ml = a.open("t")
    run(append_all(ml, [b"x"]))
    real_stat = os.stat

    def broken(path, *args, **kw):
        if str(path).endswith(os.sep + "fence"):
            raise OSError(code, os.strerror(code))
        return real_stat(path, *args, **kw)

    monkeypatch.setattr(os, "stat", broken)
    caplog.set_level(logging.INFO)
    with pytest.raises(StorageError) as info:
        run(append_all(ml, [b"y"]))
    assert "storage error" in str(info.value) and "fenced" not in str(info.value)
    assert os.strerror(code) in str(info.value)
    assert "fenced" not in caplog.text and "storage error" in caplog.text
    monkeypatch.setattr(os, "stat", real_stat)
    assert run(append_all(ml, [b"z"]))  # the storage is back: the fence still holds


def test_a_fence_that_cannot_be_read_is_not_taken(broker, monkeypatch) -> None:
    """Opening a ledger whose fence cannot be read (EIO) fails with a storage error and
    leaves the fence as it is: writing over it could fence out a newer owner."""
    a, b = broker(1), broker(2)
    run(append_all(b.open("t"), [b"x"]))
    fence = os.path.join(b.open("t").directory, "fence")
    with open(fence, "rb") as f:
        kept = f.read()
    real_open = open

    def broken(path, *args, **kw):
        if str(path) == fence:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_open(path, *args, **kw)

    monkeypatch.setattr("builtins.open", broken)
    with pytest.raises(StorageError, match="storage error") as info:
        a.open("t")
    assert "fenced" not in str(info.value)
    monkeypatch.setattr("builtins.open", real_open)
    with open(fence, "rb") as f:
        assert f.read() == kept


def test_a_storage_error_writing_is_not_fenced(broker, monkeypatch, caplog) -> None:
    """ENOSPC (or EIO) on the write itself: a storage error, never 'fenced'."""
    a = broker(1)
    ml = a.open("t")
    run(append_all(ml, [b"x"]))
    real = os.pwritev

    def full(fd, bufs, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwritev", full)
    with pytest.raises(StorageError) as info:
        run(append_all(ml, [b"y"]))
    assert "No space left" in str(info.value) and "fenced" not in str(info.value)
    assert "fenced" not in caplog.text
    monkeypatch.setattr(os, "pwritev", real)
    assert run(append_all(ml, [b"z"]))


def test_file_rule_sees_each_kind_of_change(tmp_path) -> None:
    """The check itself: creation, growth, truncation, rewrite, replacement, removal."""
    root = tmp_path / "d"
    root.mkdir()
    for name in "abcde":
        (root / name).write_bytes(b"0123456789")
    before = snapshot(root)
    assert changes(before, snapshot(root)) == []
    (root / "new").write_bytes(b"")
    with open(root / "a", "ab") as f:
        f.write(b"+")
    os.truncate(root / "b", 3)
    with open(root / "c", "r+b") as f:
        f.write(b"X")
    (root / "tmp").write_bytes(b"other")
    os.replace(root / "tmp", root / "d")
    os.unlink(root / "e")
    found = changes(before, snapshot(root))
    assert [line.split()[0] for line in found] == \
        ["grew", "truncated", "rewrote", "replaced", "removed", "created"]
    with pytest.raises(AssertionError, match="created file new"):
        assert_untouched(before, snapshot(root))


def test_file_rule_flags_a_cut_below_the_recorded_end(broker) -> None:
    """The judge of `assert_untouched(root=...)` allows bytes past a recorded end, not a
    truncation or rewrite below it."""
    a, b = broker(1, segment_max_entries=100), broker(2, segment_max_entries=100)
    old = a.open("t")
    run(append_all(old, [b"m%d" % i for i in range(3)]))
    b.open("t")
    path = old._segments[-1].path
    before = snapshot(broker.data)
    with open(path, "ab") as f:
        f.write(b"past the end")
    assert assert_untouched(before, snapshot(broker.data), root=broker.data)
    os.truncate(path, os.path.getsize(path) - 20)
    with pytest.raises(AssertionError, match="truncated"):
        assert_untouched(before, snapshot(broker.data), root=broker.data)

