"""`SharedDirSync`: one directory fsync for the entries many threads made at once.

Each new ledger makes a directory under ``ledgers/`` and, before its row is written, syncs
``ledgers/`` so that the new entry survives a crash. While topics are created from many
clients, the ``readers`` threads each did that sync one after the other (~6 ms each on a
shared disk, every one a journal commit the live topics' fdatasyncs queue behind). An
fsync of a directory makes durable every entry made in it before the fsync began, so a
caller that finds a sync of the same directory under way waits for it to end and then for
the next one (started after its own entry was made), which it shares with every caller
that arrived meanwhile: N concurrent callers cost two syncs, not N. A failed sync fails
every caller that was waiting for it (each then fails its own open, as before).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .clean_stop import fsync_dir


class SharedDirSync:
    """Group commit for fsyncs of one directory (thread-safe)."""

    def __init__(self, path: str, sync: Callable[[str], None] = fsync_dir) -> None:
        self.path = path
        self._sync = sync
        self._cond = threading.Condition(threading.Lock())
        self._started = 0  # syncs begun
        self._finished = 0  # syncs ended (each ends in the order it began: one at a time)
        self._running = False
        self._errors: dict[int, OSError] = {}  # sync number -> its error, while waited for
        self._waiting: dict[int, int] = {}  # sync number -> callers still to read its outcome
        #: how many fsyncs were made (for tests and the benchmark's curiosity)
        self.syncs = 0

    def sync(self) -> None:
        """Return once a fsync of the directory that began after this call has ended
        (raise its OSError if it failed)."""
        with self._cond:
            mine = self._started + 1  # the first sync to begin from now on
            self._waiting[mine] = self._waiting.get(mine, 0) + 1
            while self._finished < mine:
                if self._running:
                    self._cond.wait()
                    continue
                self._running = True
                self._started += 1
                number = self._started
                self._cond.release()
                error: OSError | None = None
                try:
                    self._sync(self.path)
                except OSError as exc:
                    error = exc
                finally:
                    self._cond.acquire()
                    self.syncs += 1
                    self._running = False
                    self._finished = number
                    if error is not None:
                        self._errors[number] = error
                    self._cond.notify_all()
            self._waiting[mine] -= 1
            if not self._waiting[mine]:
                del self._waiting[mine]
                failed = self._errors.pop(mine, None)
            else:
                failed = self._errors.get(mine)
        if failed is not None:
            raise failed
