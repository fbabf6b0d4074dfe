"""I/O errors: failed appends fail their futures with StorageError, are never visible,
and the ledger stays readable and writable."""

from __future__ import annotations

import asyncio
import errno
import os
import threading

import pytest

from magnetar.storage import Position, StorageError
from magnetar.storage.ledger import append as append_module

from .storage_testlib import append_all, run


class FailOnce:
    """Wrap an os function so that its next ``n`` calls raise OSError(code)."""

    def __init__(self, real, code: int, n: int = 1) -> None:
        self.real, self.code, self.left = real, code, n
        self.armed = False

    def __call__(self, *a):
        if self.armed and self.left > 0:
            self.left -= 1
            raise OSError(self.code, os.strerror(self.code))
        return self.real(*a)


@pytest.mark.parametrize("policy", ["group", "never", "always"])
def test_write_error_fails_futures_and_ledger_survives(make_factory, monkeypatch, policy):
    fail = FailOnce(os.pwritev, errno.ENOSPC)
    monkeypatch.setattr(os, "pwritev", fail)
    f = make_factory(fsync=policy)
    ml = f.open("t")
    good = run(append_all(ml, [b"ok1", b"ok2"]))

    async def go():
        fail.armed = True
        futs = [ml.append(b"bad%d" % i) for i in range(1 if policy == "always" else 5)]
        results = await asyncio.gather(*futs, return_exceptions=True)
        return results

    results = run(go())
    assert results and all(isinstance(r, StorageError) for r in results)
    assert ml.entry_count() == 2
    assert [d for _, d in ml.read_entries(Position(-1, -1), 10)] == [b"ok1", b"ok2"]
    later = run(append_all(ml, [b"ok3"]))[0]  # retried appends work (in a new segment)
    assert later.ledger_id > good[0].ledger_id
    assert [d for _, d in ml.read_entries(Position(-1, -1), 10)] == [b"ok1", b"ok2", b"ok3"]
    f.close()
    ml = make_factory().open("t")
    assert [d for _, d in ml.read_entries(Position(-1, -1), 10)] == [b"ok1", b"ok2", b"ok3"]


def test_fsync_error_fails_batch_and_nothing_phantom(make_factory, monkeypatch):
    fail = FailOnce(os.fdatasync, errno.EIO)
    monkeypatch.setattr(os, "fdatasync", fail)
    f = make_factory(fsync="group")
    ml = f.open("t")
    run(append_all(ml, [b"ok1"]))

    async def go():
        fail.armed = True
        futs = [ml.append(b"bad%d" % i) for i in range(5)]
        return await asyncio.gather(*futs, return_exceptions=True)

    results = run(go())
    assert all(isinstance(r, StorageError) for r in results)
    assert [d for _, d in ml.read_entries(Position(-1, -1), 10)] == [b"ok1"]
    seg = ml._segments[0]
    assert os.path.getsize(seg.path) == seg.end  # failed records cut from the file
    run(append_all(ml, [b"ok2"]))
    f.close()
    ml = make_factory().open("t")
    assert [d for _, d in ml.read_entries(Position(-1, -1), 10)] == [b"ok1", b"ok2"]


def test_failures_resolve_in_append_order(make_factory, monkeypatch):
    """Earlier appends that succeed resolve before later ones fail."""
    fail = FailOnce(os.pwritev, errno.ENOSPC)
    monkeypatch.setattr(os, "pwritev", fail)
    f = make_factory(fsync="group")
    ml = f.open("t")
    order: list[str] = []

    async def go():
        ok = [ml.append(b"ok%d" % i) for i in range(3)]
        await asyncio.sleep(0)  # written; the fsync is pending
        fail.armed = True
        bad = [ml.append(b"bad%d" % i) for i in range(3)]
        for tag, futs in (("ok", ok), ("bad", bad)):
            for fut in futs:
                fut.add_done_callback(lambda fu, tag=tag: order.append(tag))
        await asyncio.gather(*ok, *bad, return_exceptions=True)

    run(go())
    assert order == ["ok"] * 3 + ["bad"] * 3


def test_segment_create_error(make_factory, monkeypatch):
    f = make_factory()
    ml = f.open("t")
    real_open = os.open

    def broken_open(path, flags, *a):
        if str(path).endswith(".seg") and flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", broken_open)
    with pytest.raises(StorageError):
        run(append_all(ml, [b"x"]))
    monkeypatch.setattr(os, "open", real_open)
    assert run(append_all(ml, [b"y"]))[0].entry_id == 0


def nothing_stored_and_the_ledger_goes_on(make_factory, f, ml) -> None:
    """No entry of ``ml`` (of factory ``f``) is visible; the next append is stored, and
    is the ledger's only entry after a reopen."""
    assert ml.entry_count() == 0 and ml.last_confirmed() is None
    ok = run(append_all(ml, [b"c"]))[0]
    assert [d for _, d in ml.read_entries(Position(-1, -1), 10)] == [b"c"]
    f.close()
    ml = make_factory(segment_max_entries=3).open("t")
    assert [(p, d) for p, d in ml.read_entries(Position(-1, -1), 10)] == [(ok, b"c")]


def test_appends_behind_a_failed_fsync_fail_too(make_factory, monkeypatch):
    """A failed fsync fails every later pending append, even in a newer segment, and
    none of them is visible; the ledger then continues in a new segment."""
    real = os.fdatasync
    gate = threading.Event()
    calls = []

    def held_failing_sync(fd):
        calls.append(fd)
        if len(calls) == 1:
            gate.wait(10)
            raise OSError(errno.EIO, "I/O error")
        return real(fd)

    monkeypatch.setattr(os, "fdatasync", held_failing_sync)
    f = make_factory(fsync="group", segment_max_entries=3, inline_sync_when_idle=False)
    ml = f.open("t")

    async def go():
        first = [ml.append(b"a%d" % i) for i in range(3)]
        await asyncio.sleep(0)  # written; the flusher holds its (failing) fsync
        later = [ml.append(b"b%d" % i) for i in range(4)]  # rolls into new segments
        await asyncio.sleep(0)
        gate.set()
        return await asyncio.gather(*first, *later, return_exceptions=True)

    results = run(go())
    assert all(isinstance(r, StorageError) for r in results)
    nothing_stored_and_the_ledger_goes_on(make_factory, f, ml)


def test_appends_held_for_a_segment_file_fail_behind_a_failed_fsync(make_factory, monkeypatch):
    """Appends held until their new segment's file is made fail too when an earlier
    fsync fails first: none is written, confirmed or visible once the file is there."""
    real_sync = os.fdatasync
    real_make = append_module.make_file
    synced = threading.Event()
    file_may_go = threading.Event()
    made = []

    def failing_sync(fd):
        if not synced.is_set():
            synced.set()
            raise OSError(errno.EIO, "I/O error")
        return real_sync(fd)

    def held_make(seg, block):
        made.append(seg.ledger_id)
        if len(made) > 1:  # the first segment is made at once; the next wait for the test
            file_may_go.wait(10)
        return real_make(seg, block)

    monkeypatch.setattr(os, "fdatasync", failing_sync)
    monkeypatch.setattr(append_module, "make_file", held_make)
    f = make_factory(fsync="group", segment_max_entries=3, inline_sync_when_idle=False)
    ml = f.open("t")

    async def go():
        first = [ml.append(b"a%d" % i) for i in range(3)]
        later = [ml.append(b"b%d" % i) for i in range(4)]  # held: their files wait
        failed = await asyncio.gather(*first, return_exceptions=True)
        file_may_go.set()  # (only now: the held appends could be written after the failure)
        settled = await asyncio.gather(*later, return_exceptions=True)
        await ml._files_settled()
        return failed, settled

    failed, settled = run(go())
    assert all(isinstance(r, StorageError) for r in failed)
    assert all(isinstance(r, StorageError) for r in settled), settled
    nothing_stored_and_the_ledger_goes_on(make_factory, f, ml)


def test_a_failed_inline_fsync_fails_its_batch_and_the_ledger_goes_on(make_factory, monkeypatch):
    """The loop thread syncs a lone batch itself when the flusher idles: a failure there
    fails that batch, hides its entries, and later appends go to a new segment."""
    real = os.fdatasync
    calls = []

    def first_fails(fd):
        calls.append(threading.get_ident())
        if len(calls) == 1:
            raise OSError(errno.EIO, "I/O error")
        return real(fd)

    f = make_factory(fsync="group")
    ml = f.open("t")

    async def go():
        await ml.append(b"before")  # (a fresh segment's first sync is never inline)
        monkeypatch.setattr(os, "fdatasync", first_fails)
        failed = await asyncio.gather(ml.append(b"lost"), return_exceptions=True)
        return failed, await ml.append(b"kept")

    (failed,), _ = run(go())
    assert isinstance(failed, StorageError)
    assert calls[0] == threading.get_ident()  # it was the inline path that failed
    assert [d for _, d in ml.read_entries(Position(-1, -1), 10)] == [b"before", b"kept"]
