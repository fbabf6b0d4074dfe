"""Cursor rows written off the loop: a new cursor's first row (on a readers thread, after
its ledger's queued work), its deletion and explicit writes (on the cursor writer thread),
in an order that never lets an older state land over a newer one or a deleted cursor
come back, without the event loop waiting for any of them."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from magnetar.storage import EARLIEST, ManagedLedgerFactory, Position
from magnetar.storage.metadata import SqliteMetadataStore

from .storage_testlib import append_all, run


class Rows:
    """storage.db writes and deletes of cursor rows: noted (with their thread), and held
    (10 s at most) while ``hold`` is clear for the keys that contain ``held``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[str, str, str]] = []  # (what, cursor key, thread name)
        self.held = ""
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        real_put_many, real_delete = SqliteMetadataStore.put_many, SqliteMetadataStore.delete

        def put_many(store: SqliteMetadataStore, items: dict[str, Any], *a: Any, **k: Any) -> None:
            self._note("put", list(items))
            real_put_many(store, items, *a, **k)

        def delete(store: SqliteMetadataStore, key: str) -> bool:
            self._note("delete", [key])
            return real_delete(store, key)

        monkeypatch.setattr(SqliteMetadataStore, "put_many", put_many)
        monkeypatch.setattr(SqliteMetadataStore, "delete", delete)

    def _note(self, what: str, keys: list[str]) -> None:
        for key in keys:
            if key.startswith("cursor/"):
                self.log.append((what, key.split("\x1f")[1], threading.current_thread().name))
        if self.held and any(self.held in k for k in keys):
            self.entered.set()
            self.hold.wait(10)

    def stall(self, key_part: str) -> None:
        self.held = key_part
        self.entered.clear()
        self.hold.clear()


@pytest.fixture
def rows(monkeypatch: pytest.MonkeyPatch) -> Iterator[Rows]:
    r = Rows(monkeypatch)
    yield r
    r.hold.set()


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("timed out")


def test_a_new_cursor_row_is_written_off_the_loop(
    make_factory: Callable[..., ManagedLedgerFactory], rows: Rows
) -> None:
    f = make_factory()
    ml = f.open("t")
    run(append_all(ml, [b"a", b"b"]))
    rows.stall("\x1fc")

    async def main() -> None:
        c = ml.open_cursor("c", "earliest")  # returns at once: the row is being written
        assert c.mark_delete_position == EARLIEST and c.creating is not None
        opened = asyncio.ensure_future(ml.open_cursor_async("c"))
        await _until(rows.entered.is_set)
        await asyncio.sleep(0.05)  # the loop turns; the Subscribe-like wait does not end
        assert not opened.done()
        rows.hold.set()
        assert await opened is c

    run(main())
    assert rows.log == [("put", "c", rows.log[0][2])]
    assert rows.log[0][2].startswith("magnetar-read")
    ml.close()
    assert f.open("t").cursors()["c"].mark_delete_position == EARLIEST


def test_a_new_cursor_of_a_deleted_name_lands_after_the_delete(
    make_factory: Callable[..., ManagedLedgerFactory], rows: Rows
) -> None:
    """Unsubscribe then subscribe again with the same name while the delete is held: the
    new row waits for the delete (chained, no thread blocked, the loop free), so the
    stored cursor is the new one, never the deleted one and never none."""
    f = make_factory()
    ml = f.open("t")
    pos = run(append_all(ml, [b"x"] * 5))

    async def main() -> None:
        old = await ml.open_cursor_async("c", "earliest")
        old.mark_delete(pos[3])
        await old.persist_async()
        rows.stall("\x1fc")
        ml.delete_cursor("c")
        await _until(rows.entered.is_set)
        new = ml.open_cursor("c", "earliest")  # does not wait for the delete
        assert new is not old and new.mark_delete_position == EARLIEST
        creating = asyncio.ensure_future(ml.open_cursor_async("c"))
        await asyncio.sleep(0.05)
        assert not creating.done()
        assert [w for w, _, _ in rows.log][-1] == "delete"  # the new row is not written yet
        rows.hold.set()
        await creating

    run(main())
    assert [w for w, _, _ in rows.log][-2:] == ["delete", "put"]
    ml.close()
    assert f.open("t").cursors()["c"].mark_delete_position == EARLIEST


def test_later_writes_of_a_new_cursor_wait_for_its_first_row(
    make_factory: Callable[..., ManagedLedgerFactory], rows: Rows
) -> None:
    """While a new cursor's first row is held, the timer leaves the cursor for a later
    tick and a close or an explicit write is chained after that row: the stored state is
    the newest, never the first row landing over it."""
    f = make_factory(cursor_persist_interval_s=0.01)
    ml = f.open("t")
    pos = run(append_all(ml, [b"x"] * 5))
    rows.stall("\x1fc")

    async def main() -> None:
        c = ml.open_cursor("c", "earliest")
        await _until(rows.entered.is_set)
        c.mark_delete(pos[2])
        await asyncio.sleep(0.05)  # several timer ticks
        assert [w for w, k, _ in rows.log if k == "c"] == ["put"]  # only the held first row
        assert c.dirty
        persisted = asyncio.ensure_future(c.persist_async())
        await asyncio.sleep(0)  # it takes the state now and waits for the first row
        c.mark_delete(pos[3])
        closing = ml.close_async()
        await asyncio.sleep(0.05)
        assert not persisted.done() and not closing.done()
        rows.hold.set()
        await persisted
        await closing

    run(main())
    assert len([k for _, k, _ in rows.log if k == "c"]) == 3  # first row, persist, close
    assert f.open("t").cursors()["c"].mark_delete_position == pos[3]


def test_a_deleted_new_cursor_does_not_come_back(
    make_factory: Callable[..., ManagedLedgerFactory], rows: Rows
) -> None:
    f = make_factory()
    ml = f.open("t")
    run(append_all(ml, [b"x"] * 3))
    rows.stall("\x1fc")

    async def main() -> None:
        ml.open_cursor("c", "earliest")
        await _until(rows.entered.is_set)
        deleting = asyncio.wrap_future(ml.delete_cursor("c"))
        await asyncio.sleep(0.05)
        assert not deleting.done()
        rows.hold.set()
        await deleting

    run(main())
    assert [w for w, _, _ in rows.log] == ["put", "delete"]
    ml.close()
    assert "c" not in f.open("t").cursors()


def test_open_cursor_async_writes_again_after_a_failed_first_row(
    make_factory: Callable[..., ManagedLedgerFactory], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = make_factory()
    ml = f.open("t")
    run(append_all(ml, [b"x"]))
    real = SqliteMetadataStore.put_many
    failures = [1]

    def put_many(store: SqliteMetadataStore, items: dict[str, Any], *a: Any, **k: Any) -> None:
        if failures and any("\x1fc" in key for key in items):
            failures.pop()
            from magnetar.storage import StorageError
            raise StorageError("disk full")
        real(store, items, *a, **k)

    monkeypatch.setattr(SqliteMetadataStore, "put_many", put_many)

    async def main() -> Position:
        c = await ml.open_cursor_async("c", "earliest")
        return c.mark_delete_position

    assert run(main()) == EARLIEST
    ml.close()
    assert "c" in f.open("t").cursors()
