"""`ManagedLedger`: the ledger's parts put together (see the package docstring), and
the durable cursors it holds (opened, deleted and persisted through the factory).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

from ..cursor import ManagedCursor
from ..errors import (
    LedgerClosedError,
    StorageError,
)
from ..position import EARLIEST
from .lifecycle import LedgerLifecycle
from .reads import LedgerReads
from .retention import LedgerRetention


async def _stored(future: Future[Any], what: str) -> None:
    """Wait for a storage thread's write (shielded: a waiter that gives up does not cancel
    it); its failure as `StorageError` ``"<what>: <error>"``."""
    try:
        await asyncio.shield(asyncio.wrap_future(future))
    except Exception as exc:  # CancelledError is not an Exception: it passes through
        raise StorageError(f"{what}: {exc}") from exc


class ManagedLedger(LedgerLifecycle, LedgerRetention, LedgerReads):
    """A named, durable, append-only sequence of entries. Use from one event loop thread."""

    def _load_cursors(self, states: dict[str, dict[str, Any]]) -> None:
        for cname, state in states.items():
            cur = ManagedCursor(self, cname, EARLIEST)
            cur.load_state(state)
            self._cursors[cname] = cur

    def open_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        """The durable cursor ``name``, created if needed at ``"latest"`` (after the last
        confirmed entry) or ``"earliest"`` (before the first). A new cursor exists in
        memory at once; its first row is written off the loop (`ManagedCursor.creating`),
        after this ledger's queued work (a delete of a cursor of the same name lands
        first) and before any later write of it; nothing here waits for it (see
        `open_cursor_async`)."""
        self._check_open()
        cur = self._cursors.get(name)
        if cur is None:
            if initial_position == "latest":
                md = self.last_confirmed() or EARLIEST
            elif initial_position == "earliest":
                md = EARLIEST
            else:
                raise ValueError(
                    f"initial_position must be latest|earliest, not {initial_position!r}"
                )
            cur = ManagedCursor(self, name, md)
            self._cursors[name] = cur
            self._factory._store_new_cursor(self.name, cur)
        return cur

    async def open_cursor_async(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        """`open_cursor`, returning once the cursor's row is stored (a subscription that
        is answered exists after a crash). A first write that failed is tried again here;
        StorageError if that fails too."""
        cur = self.open_cursor(name, initial_position)
        creating = cur.creating
        if creating is None:
            return cur
        try:
            await asyncio.shield(asyncio.wrap_future(creating))
        except asyncio.CancelledError:
            raise
        except Exception:
            if cur.closed or cur.creating is not creating:
                raise
            again = self._factory._store_new_cursor(self.name, cur)
            if again is None:
                raise
            await _stored(again, f"cannot store cursor {name} of {self.name}")
        if cur.closed:
            raise LedgerClosedError(f"cursor {name} of {self.name} was deleted meanwhile")
        return cur

    def delete_cursor(self, name: str) -> Future[Any]:
        """Forget the cursor ``name`` at once; its row is deleted on the factory's cursor
        writer thread (after its queued writes; a reopen of the ledger and a new cursor of
        the same name wait for it). Returns that deletion's future."""
        cur = self._cursors.pop(name, None)
        creating = None
        if cur is not None:
            cur.closed = True
            creating = cur.creating
            self._factory._forget_cursor(cur)
        return self._factory._cursor_deleted(self.name, name, creating)

    async def delete_cursor_async(self, name: str) -> None:
        """`delete_cursor`, returning once the row is gone (StorageError if that failed)."""
        await _stored(self.delete_cursor(name), f"cannot delete cursor {name} of {self.name}")

    def cursors(self) -> dict[str, ManagedCursor]:
        return dict(self._cursors)

    def cursor(self, name: str) -> ManagedCursor | None:
        """The durable cursor ``name``, if there is one."""
        return self._cursors.get(name)

    def _cursor_changed(self, cursor: ManagedCursor) -> None:
        self._factory._schedule_cursor_persist(cursor)

    def _persist_cursors(self, cursors: list[ManagedCursor]) -> None:
        self._factory._persist_cursors(cursors)

    def _persist_cursor_later(self, cursor: ManagedCursor) -> Future[Any] | None:
        return self._factory._persist_cursor_later(cursor)
