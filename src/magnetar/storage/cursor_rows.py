"""`CursorRows`, the factory's part that keeps cursor state in ``storage.db``: the
persist timer for dirty cursors, their batched writes on the cursor writer thread (in
order, `_run_after`), first rows of new cursors, deletes, the last states of a closing
ledger, and the *settling* registry (`_settle`) of each ledger's disk work that a reopen
of the same name waits for. A mixin of `ManagedLedgerFactory`, over the fields its
``__init__`` sets up (declared below)."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from .config import StorageConfig
from .cursor import ManagedCursor
from .errors import StorageError
from .fence import FenceUnknownError
from .futures import all_done, copy_outcome, pending, run_into, running_future, running_loop
from .ledger_files import CURSOR_PREFIX, CURSOR_SEP, LedgerFilesStore
from .metadata import SqliteMetadataStore

log = logging.getLogger(__name__)

_CURSOR = CURSOR_PREFIX
_SEP = CURSOR_SEP
T = TypeVar("T")


def _created(cursor: ManagedCursor, write: Future[Any]) -> None:
    """A new cursor's first row is stored (event loop): the write's done callback holds
    the cursor, so the cursor lets go of the write, and a closed cursor and its ledger
    are freed by reference counting (the broker freezes them out of the collector's
    reach: magnetar.broker.heap)."""
    if cursor.creating is write:
        cursor.creating = None


class CursorRows:
    """Cursor state rows and the ordered writes of them; see the module docstring."""

    # what the cursor rows use of the factory (set up by `ManagedLedgerFactory.__init__`)
    config: StorageConfig
    readers: ThreadPoolExecutor
    _store: SqliteMetadataStore | LedgerFilesStore
    _meta_writer: ThreadPoolExecutor
    _metadata_writer: ThreadPoolExecutor
    _dirty_cursors: dict[ManagedCursor, None]
    _settling: dict[str, Future[Any]]
    _persist_handle: asyncio.TimerHandle | None
    _persist_loop: asyncio.AbstractEventLoop | None
    _closed: bool
    @staticmethod
    def _cursor_key(ledger: str, cursor: str) -> str:
        return f"{_CURSOR}{ledger}{_SEP}{cursor}"

    def _schedule_cursor_persist(self, cursor: ManagedCursor) -> None:
        self._dirty_cursors[cursor] = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # persisted by persist()/close()
        if self._persist_handle is None or self._persist_loop is not loop:
            self._persist_loop = loop
            self._persist_handle = loop.call_later(
                self.config.cursor_persist_interval_s, self._persist_dirty
            )

    def _persist_dirty(self) -> None:
        """The timer's write: the dirty cursors' states are taken on the loop and written
        to SQLite on the metadata writer thread. A cursor whose first row is still being
        written (`_store_new_cursor`) waits for the next tick, so that row never lands
        over a newer state."""
        self._persist_handle = None
        loop = self._persist_loop
        if not self._dirty_cursors:
            return
        cursors, items = self._take_states(list(self._dirty_cursors), skip_creating=True)
        if self._dirty_cursors and loop is not None and not loop.is_closed():
            self._persist_handle = loop.call_later(
                self.config.cursor_persist_interval_s, self._persist_dirty
            )
        if not items:
            return
        future = self._meta_writer.submit(self._store.put_many, items)

        def written(f: Any) -> None:
            if f.exception() is not None and loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self._persist_failed, cursors, f.exception())

        future.add_done_callback(written)

    def _take_states(
        self, cursors: builtins.list[ManagedCursor], skip_creating: bool = False
    ) -> tuple[builtins.list[ManagedCursor], dict[str, Any]]:
        cap = self.config.cursor_max_persisted_ranges
        items = {}
        taken = []
        for c in cursors:
            if c.closed:
                self._dirty_cursors.pop(c, None)  # (changed after it was closed: nothing to write)
                continue
            if skip_creating and pending(c.creating):
                continue
            fence = c.ledger.fence
            try:
                holds = fence is None or fence.holds()
            except FenceUnknownError as exc:
                # a storage error, not a takeover: keep the state, try again next time
                log.warning("cursor %s of %s not persisted: %s", c.name, c.ledger.name, exc)
                continue
            if not holds:
                # fenced (shared storage): the new writer's cursor rows are not ours to write
                c.dirty = False
                self._dirty_cursors.pop(c, None)
                continue
            items[self._cursor_key(c.ledger.name, c.name)] = c.to_state(cap)
            c.dirty = False
            self._dirty_cursors.pop(c, None)
            taken.append(c)
        return taken, items

    def _persist_failed(self, cursors: builtins.list[ManagedCursor], exc: BaseException) -> None:
        log.error("persisting %d cursors failed: %s", len(cursors), exc)
        for c in cursors:
            if not c.closed:
                c.dirty = False
                c._changed()  # dirty again: the next timer tries once more

    def _persist_cursors(self, cursors: builtins.list[ManagedCursor]) -> None:
        """Write the cursors' states now, on the calling thread (blocking), after any write
        still queued (so nothing older lands after them)."""
        taken, items = self._take_states(cursors)
        if not items:
            return
        for c in taken:
            creating = c.creating
            if creating is not None:
                with contextlib.suppress(Exception):  # a failed first write: this one counts
                    creating.result()
        self._drain_writes()
        try:
            self._store.put_many(items)
        except StorageError as exc:
            self._persist_failed(taken, exc)

    def _persist_cursor_later(self, cursor: ManagedCursor) -> Future[Any] | None:
        """Write the cursor's state on the cursor writer thread, after the writes queued
        before it (its own first row included); None when there is nothing to write (a
        closed cursor)."""
        _, items = self._take_states([cursor])
        if not items:
            return None
        return self._run_after(cursor.creating, self._meta_writer, self._store.put_many, items)

    def _store_new_cursor(self, ledger: str, cursor: ManagedCursor) -> Future[Any] | None:
        """Write a new cursor's first row off the loop (`ManagedCursor.creating`; the
        subscription exists in memory at once, `open_cursor_async` waits for the row).
        Only this ledger's queued work comes first (a cursor of the same name may have
        been deleted there, a close may be writing its cursors), chained without blocking a
        thread; other ledgers' queued cursor writes hold nothing of it, so it does not
        wait behind them: it runs on a ``readers`` thread, not the cursor writer. Later
        writes of this cursor wait for it (`_run_after`, the timer skips it meanwhile); a
        reopen of the ledger waits for it too."""
        taken, items = self._take_states([cursor])
        if not items:
            return None
        earlier = self._settling.get(ledger)
        future = self._run_after(earlier, self.readers, self._store.put_many, items)
        cursor.creating = future
        self._settle(ledger, future)
        loop = self._persist_loop if self._persist_loop is not None else running_loop()

        def written(f: Future[Any]) -> None:
            exc = None if f.cancelled() else f.exception()
            if exc is None and loop is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_created, cursor, f)
            if exc is not None:
                log.error("ledger %s: storing new cursor %s failed: %s", ledger, cursor.name, exc)
                if loop is not None and not loop.is_closed():
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(self._persist_failed, taken, exc)

        future.add_done_callback(written)
        return future

    def _run_after(
        self, first: Future[Any] | None, executor: ThreadPoolExecutor,
        fn: Callable[..., Any], *args: Any
    ) -> Future[Any]:
        """``fn(*args)`` on ``executor`` once ``first`` (if any) is done, however it ended;
        the waiting blocks no thread (a callback submits it). Its future cannot be
        cancelled (a waiter that gives up must not cancel a write others count on); if
        the executor is shut down by then, ``fn`` runs on the thread that finished
        ``first`` (or on this one)."""
        out = running_future()

        def go(_: Future[Any] | None = None) -> None:
            try:
                inner = executor.submit(fn, *args)
            except RuntimeError:  # shut down: nothing else queued any more
                run_into(out, fn, *args)
                return
            inner.add_done_callback(lambda f: copy_outcome(f, out))

        if first is None:
            go()
        else:
            first.add_done_callback(go)
        return out

    def _drain_writes(self) -> None:
        """Wait for the metadata writer thread to finish what it was given."""
        with contextlib.suppress(RuntimeError):  # already shut down: nothing is queued
            self._meta_writer.submit(lambda: None).result()

    def _forget_cursor(self, cursor: ManagedCursor) -> None:
        """A closed cursor writes nothing more (its last state is written by the caller,
        on the cursor writer thread, behind any queued write of an older one)."""
        self._dirty_cursors.pop(cursor, None)

    def _cursor_deleted(self, ledger: str, cursor: str,
                        creating: Future[Any] | None = None) -> Future[Any]:
        """Delete a cursor's row on the cursor writer thread, after any queued write of it
        (``creating``: its first row, if still being written); a reopen of the ledger, and
        a new cursor of the same name, wait for it. Returns its future."""
        key = self._cursor_key(ledger, cursor)
        future = self._run_after(creating, self._meta_writer, self._store.delete, key)
        self._settle(ledger, future)
        return future

    def _ledger_closing(
        self, ledger: str, cursors: builtins.list[ManagedCursor]
    ) -> Future[Any] | None:
        """Write a closing ledger's cursor states on the cursor writer thread (after the
        writes queued before them, and the first rows of new cursors still being written);
        the loop does not wait: a reopen of the ledger does. Returns the write's future."""
        taken, items = self._take_states(cursors)
        if not items:
            return None
        creating = [c.creating for c in taken if c.creating is not None and not c.creating.done()]
        first = all_done(creating) if creating else None
        future = self._run_after(first, self._meta_writer, self._store.put_many, items)

        count = len(taken)  # (the callback holds no cursor: see _created)

        def written(f: Future[Any]) -> None:
            if f.exception() is not None:
                log.error("ledger %s: persisting %d cursors on close failed: %s",
                          ledger, count, f.exception())

        future.add_done_callback(written)
        self._settle(ledger, future)
        return future

    def persist_cursors(self) -> None:
        """Persist every dirty cursor now."""
        self._persist_cursors(list(self._dirty_cursors))

    def _settle(self, name: str, future: Future[Any]) -> Future[Any]:
        """Note ``future`` as the latest disk work of ledger ``name``: opens wait for it
        and for the ledger's earlier work still under way. Returns ``future``."""
        for other in [n for n, f in self._settling.items() if f.done()]:
            del self._settling[other]
        earlier = self._settling.get(name)
        self._settling[name] = future if earlier is None else all_done([earlier, future])
        return future
