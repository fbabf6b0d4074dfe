"""`Flusher`: the one group-commit thread of a factory.

The event loop writes a batch of records to a segment, then `submit`s it. The flusher
thread takes everything submitted so far, fdatasyncs each segment involved once, and
hands the batches back to their event loop (``call_soon_threadsafe``) in submission
order, each with the error of its segment's sync, if any. Everything in a round was
written before that round's fdatasync started, so a batch is never reported durable
early. Batches that already failed at write time travel the same queue, so the owner
sees outcomes strictly in append order.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .segment import Segment

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Batch:
    """Records ``first..first+len(futures)-1`` written to ``segment`` by one ledger."""

    segment: Segment
    first: int
    futures: list[asyncio.Future[Any]]
    positions: list[Any]
    loop: asyncio.AbstractEventLoop
    on_done: Callable[[Batch, BaseException | None], None]
    error: BaseException | None = None
    done: bool = field(default=False)


class Flusher:
    """Background fdatasync thread shared by all ledgers of a factory."""

    def __init__(self, name: str = "magnetar-storage-flusher") -> None:
        # A C-level queue: one put per submitted batch costs far less than a Condition.
        self._queue: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stopping = False
        self.rounds = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, batch: Batch) -> None:
        with self._lock:  # a plain lock: nothing may slip in behind the stop sentinel
            if self._stopping:
                raise RuntimeError("flusher stopped")
            self._queue.put(batch)

    def stop(self) -> None:
        """Finish what is queued, then end the thread."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        q = self._queue
        stop = False
        while not stop:
            first = q.get()
            batches: list[Batch] = []
            if first is None:
                stop = True
            else:
                batches.append(first)
            while True:  # everything submitted meanwhile joins this round
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                else:
                    batches.append(item)
            if not batches:
                continue
            errors: dict[Segment, BaseException] = {}
            for seg in dict.fromkeys(b.segment for b in batches if b.error is None):
                try:
                    seg.sync()
                except OSError as exc:
                    log.error("fdatasync of %s failed: %s", seg.path, exc)
                    errors[seg] = exc
                except Exception as exc:  # never let the thread die
                    log.exception("fdatasync of %s failed", seg.path)
                    errors[seg] = exc
            self.rounds += 1
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Batch, BaseException | None]]] = {}
            for b in batches:
                err = b.error if b.error is not None else errors.get(b.segment)
                by_loop.setdefault(b.loop, []).append((b, err))
            for loop, items in by_loop.items():
                try:
                    loop.call_soon_threadsafe(_complete, items)
                except RuntimeError:  # loop closed: nobody is waiting any more
                    log.debug("event loop closed; dropping %d batch results", len(items))


def _complete(items: list[tuple[Batch, BaseException | None]]) -> None:
    for batch, err in items:
        if not batch.done:
            batch.on_done(batch, err)
