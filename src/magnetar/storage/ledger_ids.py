"""`SourcedLedgerIds`: ledger (segment) ids taken in blocks from a cluster-wide source.

A broker of a cluster does not reserve its ledger ids in the shared ``storage.db`` (SQLite
locking is only dependable on a local file system): it is handed an `IdSource` (the
broker passes the metadata store's id counter, `magnetar.metadata.IdBlocks`) and takes
blocks of ids from it. The factory keeps two blocks: the one it hands ids out of, and the
next one, asked for as soon as the previous spare is taken (on a ``magnetar-ids``
thread), so a segment roll-over on the event loop takes an id at once
and never waits for the source. If the source has not answered by the time a block is
used up (a thousand roll-overs in one round trip, or a metadata store that is down), the
roll-over fails with `StorageError` (the append is refused; the client retries) rather
than block the event loop.

A *floor* keeps a ledger's ids growing when it changes hands: a ledger opened after
another broker wrote it gets ids above all of its segments (`ensure`, on the thread
that opens it, waits for a block above them when the ones at hand are lower; `raise_floor`
then skips every id below). Ids skipped that way, and those of a block its broker never
used up, are never handed out again: the source's counter only grows.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future

from .errors import StorageError

log = logging.getLogger(__name__)

#: ``source(count, floor)``: reserve ``count`` ids, none below ``floor``, never handed out
#: before anywhere in the cluster, and return the first. Blocking; called only on a
#: ``magnetar-ids`` thread.
IdSource = Callable[[int, int], int]


class SourcedLedgerIds:
    """Blocks of ledger ids from an `IdSource` (see the module docstring)."""

    def __init__(self, source: IdSource, block: int, floor: int = 0,
                 wait_s: float = 60.0) -> None:
        self._source = source
        self._size = block
        self._wait_s = wait_s
        self._floor = floor  # no id below this is handed out any more
        self._next = self._limit = 0  # the block ids are handed out of: [next, limit)
        self._spare: Future[int] | None = None  # the next block's first id
        self._lock = threading.Lock()  # allocate (event loop) vs ensure (readers threads)
        with self._lock:
            self._request()

    def _request(self) -> Future[int]:
        """Ask the source for the next block (holding the lock), on a thread of its own: a
        daemon, so that a source that never answers (its event loop gone) cannot hold up
        the process's exit. One per block: rare."""
        spare: Future[int] = Future()
        spare.set_running_or_notify_cancel()
        floor = self._floor

        def reserve() -> None:
            try:
                spare.set_result(self._source(self._size, floor))
            except BaseException as exc:
                spare.set_exception(exc)

        threading.Thread(target=reserve, name="magnetar-ids", daemon=True).start()
        self._spare = spare
        return spare

    def spare(self) -> Future[int] | None:
        """The next block's reservation, reserved or under way (None: none asked for)."""
        return self._spare

    def allocate(self) -> int:
        """A new ledger id, above every id handed out before and every floor (event loop
        thread; never waits). `StorageError` if no block is at hand."""
        with self._lock:
            if max(self._next, self._floor) >= self._limit:
                self._take_spare()
            lid = max(self._next, self._floor)
            self._next = lid + 1
            return lid

    def _take_spare(self) -> None:
        spare = self._spare
        if spare is None:
            spare = self._request()
        if not spare.done():
            raise StorageError("no block of ledger ids from the metadata store yet")
        self._spare = None
        try:
            start = spare.result()
        except Exception as exc:
            self._request()
            raise StorageError(f"cannot reserve ledger ids: {exc}") from exc
        self._request()  # the block after this one, asked for at once
        if start + self._size <= self._floor:
            raise StorageError("the block of ledger ids at hand is below a ledger's ids")
        self._next, self._limit = start, start + self._size
        log.debug("ledger ids %d-%d reserved", start, start + self._size - 1)

    def raise_floor(self, floor: int) -> None:
        """Hand out no id below ``floor`` from now on (the event loop, as a ledger whose
        ids reach ``floor - 1`` is registered)."""
        with self._lock:
            self._floor = max(self._floor, floor)

    def ensure(self, floor: int, wait: bool) -> None:
        """`raise_floor`, and make sure a block above ``floor`` is at hand or asked for;
        with ``wait`` (a thread that may block: not the event loop, which the source may
        need) wait for it too. A source that fails is reported by `allocate`."""
        with self._lock:
            self._floor = max(self._floor, floor)
            if self._limit > self._floor:
                return
            spare = self._spare
            if spare is None or (spare.done() and not self._usable(spare)):
                spare = self._request()
        if not wait:
            return
        if self._usable(spare, self._wait_s):
            return
        with self._lock:
            if self._spare is not spare:
                return  # taken or replaced meanwhile: allocate sorts it out
            spare = self._request()  # reserved before the floor rose: once more, above it
        self._usable(spare, self._wait_s)

    def _usable(self, spare: Future[int], timeout: float = 0.0) -> bool:
        """Whether ``spare`` holds ids at or above the floor (waiting up to ``timeout``)."""
        try:
            start = spare.result(timeout)
        except Exception:  # failed, or not there in time: allocate reports it
            return False
        return start + self._size > self._floor

    def close(self) -> None:
        """Nothing to stop: a reservation under way ends on its own (or with the process)."""
