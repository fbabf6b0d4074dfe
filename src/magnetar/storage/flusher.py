"""`Flusher`: the one group-commit thread of a factory.

The event loop writes a batch of records to a segment, then `submit`s it. The flusher
thread takes everything submitted so far, fdatasyncs each segment involved once, and
hands the batches back to their event loop (``call_soon_threadsafe``) in submission
order, each with the error of its segment's sync, if any. Everything in a round was
written before that round's fdatasync started, so a batch is never reported durable
early. Batches that already failed at write time travel the same queue, so the owner
sees outcomes strictly in append order.

When the thread is idle, `try_inline` lets the event loop sync one small batch itself (the
ledger decides what is small), at most once per loop iteration: a lone send then costs one
fdatasync and no thread hand-offs (two context switches and a wake-up of the loop fewer,
the bulk of an unbatched send's CPU on a virtual machine). Under load the thread is busy
and takes every batch, so the loop keeps reading and writing while the disk syncs.

An inline sync is disk work on the event loop: if the disk stalls, every connection waits
for it. So every sync is timed (`Segment.sync` returns how long its fdatasync took; a
sync that fails is not counted), inline or on the thread, and one that takes longer than
``slow_sync_s`` turns inline syncing off for ``backoff_s``: meanwhile every batch goes to
the thread, and each slow sync there pushes the end of the back-off further. Once the
back-off has passed without a slow sync, the next lone batch is synced inline again (the
probe). What remains on the loop: the first slow inline sync of a slow-disk episode (and
a probe that meets a disk still slow after a quiet back-off) blocks the loop once, for
as long as that one fdatasync takes.

A segment's first sync is dearer than the others: its directory entry is made durable too
(by an fsync of the directory, or where the file system does it, by the file's own sync:
`StorageConfig.dir_fsync`) and the file's new size goes through the journal (on ext4 two
journal commits, ~10-20 ms on a shared virtual disk). While topics are created (each a new
ledger: a new directory and segment) a round held a dozen of those, synced one after the
other, and every other topic's batch of that round and the next waited for all of them
(bench/many_topics_bench.py: sends of an unrelated producer up to 0.5 s). So a round hands
each ledger with a batch on a *fresh* segment (one not yet synced) to the `fresh` pool,
whose threads sync such ledgers in parallel (concurrent fsyncs share journal commits) and
complete their batches themselves, and goes on with the others at once. A ledger stays
with its pool job until the job finds nothing more of it to sync: its later batches join
the job, so each ledger's batches are still completed in the order they were submitted.
Fresh segments are never synced inline either (a directory sync on the event loop), and no
other segment is while a fresh one's sync is under way: the new directory entries and
inode sizes are in the file system's running journal transaction, which any fdatasync then
waits to commit (10-130 ms on a shared disk while topics are created: with the loop
blocked, every connection waited; bench/many_topics_bench.py). The thread takes those
batches instead. For the same reason nothing is synced inline while the owner says other
disk work is under way (``busy_elsewhere``: the factory's ledger closes, whose seals
truncate segments and write index sidecars; 40 ms fdatasyncs on the loop while 5,000
topics were unloaded).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import metrics
from .segment import Segment

log = logging.getLogger(__name__)

#: threads syncing the first writes of new segments (ledgers) in parallel
FRESH_THREADS = 8


@dataclass(eq=False)
class Batch:
    """Records ``first..first+len(futures)-1`` written to ``segment`` by one ledger;
    ``futures``: who waits for each (futures or callbacks, the ledger's business)."""

    segment: Segment
    first: int
    futures: list[Any]
    positions: list[Any]
    loop: asyncio.AbstractEventLoop
    on_done: Callable[[Batch, BaseException | None], None]
    error: BaseException | None = None
    done: bool = field(default=False)


class Flusher:
    """Background fdatasync thread shared by all ledgers of a factory."""

    def __init__(
        self,
        name: str = "magnetar-storage-flusher",
        inline: bool = True,
        slow_sync_s: float = 0.020,
        backoff_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        busy_elsewhere: Callable[[], bool] | None = None,
    ) -> None:
        """``inline``: let the loop sync a lone batch while the thread idles; a sync
        slower than ``slow_sync_s`` turns that off for ``backoff_s`` (``clock`` seconds),
        and none is inline while ``busy_elsewhere()`` is true (other disk work under way)."""
        self.inline = inline
        self._busy_elsewhere = busy_elsewhere
        self.slow_sync_s = slow_sync_s
        self.backoff_s = backoff_s
        self._clock = clock
        # inline syncs are off until this clock time (a slow sync was seen)
        self._inline_after = 0.0
        self.slow_syncs = 0
        # A C-level queue: one put per submitted batch costs far less than a Condition.
        self._queue: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stopping = False
        self._busy = False  # a round is being synced by the thread
        self._inline_loops: set[asyncio.AbstractEventLoop] = set()
        self.rounds = 0
        self.inline_rounds = 0
        # ledgers (by directory) with a batch on a fresh segment: their batches, synced and
        # completed by a `fresh` thread, in order (see the module docstring)
        self._held: dict[str, list[Batch]] = {}
        self._held_lock = threading.Lock()
        self.fresh = ThreadPoolExecutor(FRESH_THREADS, thread_name_prefix="magnetar-sync-new")
        self.fresh_jobs = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, batch: Batch) -> None:
        with self._lock:  # a plain lock: nothing may slip in behind the stop sentinel
            if self._stopping:
                raise RuntimeError("flusher stopped")
            self._queue.put(batch)

    def try_inline(self, batch: Batch) -> bool:
        """Sync ``batch`` on the calling (event loop) thread and complete it, if the thread
        is idle and this loop has not synced inline in its current iteration. Returns
        False (nothing done) otherwise; the caller then `submit`s the batch."""
        loop = batch.loop
        if not self.inline or self._busy or not self._queue.empty() or self._stopping or loop in self._inline_loops:
            return False
        if self._inline_after and self._clock() < self._inline_after:
            return False  # a recent sync was slow: the thread takes every batch for now
        if batch.segment.dir_sync:
            return False  # a fresh segment: its directory too (see the module docstring)
        if self._busy_elsewhere is not None and self._busy_elsewhere():
            return False  # e.g. ledgers being sealed: their journal commit (module docstring)
        held = self._held  # (read without the lock: a stale answer costs a hand-off or one inline sync)
        if len(held) > 1 or (held and batch.segment.directory not in held):
            return False  # another ledger's first sync is under way: see the module docstring
        self._inline_loops.add(loop)
        loop.call_soon(self._inline_loops.discard, loop)  # once per loop iteration
        error: BaseException | None = batch.error
        if error is None:
            seg = batch.segment
            try:
                elapsed = seg.sync()
            except OSError as exc:
                log.error("fdatasync of %s failed: %s", seg.path, exc)
                error = exc
            else:
                if elapsed > self.slow_sync_s:
                    self._slow(seg, elapsed)
        self.inline_rounds += 1
        metrics.group_commit_batches.observe(1)
        _complete([(batch, error)])
        return True

    @property
    def idle(self) -> bool:
        """Whether nothing is being synced: no round on the thread, nothing queued, no
        ledger with the `fresh` pool (the state in which `try_inline` may sync)."""
        return not (self._busy or self._held) and self._queue.empty()

    @property
    def inline_paused(self) -> bool:
        """Whether inline syncs are off for now (a recent sync was slow)."""
        return self._clock() < self._inline_after

    def _slow(self, seg: Segment, elapsed: float) -> None:
        """A sync of ``seg`` (event loop or flusher thread) took ``elapsed`` seconds, past
        ``slow_sync_s``: inline syncs stop for ``backoff_s`` from now."""
        self.slow_syncs += 1
        now = self._clock()
        if now >= self._inline_after and self.inline:
            log.warning(
                "fdatasync of %s took %.1f ms: the event loop leaves syncs to the flusher "
                "thread for %.0f s", seg.path, elapsed * 1000, self.backoff_s)
        self._inline_after = max(self._inline_after, now + self.backoff_s)

    def stop(self) -> None:
        """Finish what is queued, then end the thread."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
        self._queue.put(None)
        self._thread.join()
        self.fresh.shutdown(wait=True)

    def _run(self) -> None:
        q = self._queue
        stop = False
        item: Batch | None = None
        while not stop:
            first = q.get()
            self._busy = True
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
                self._busy = False
                continue
            batches = self._hand_off_fresh(batches)
            self._sync_and_complete(batches, timed=True)
            self.rounds += 1
            metrics.group_commit_batches.observe(len(batches))
            self._busy = False
            # no batch outlives its round in this frame: a batch holds its ledger, and an
            # unloaded topic must be freed by reference counting alone (broker/heap.py)
            first = item = None
            batches = []

    def _sync_and_complete(self, batches: list[Batch], timed: bool) -> None:
        """fdatasync each segment of ``batches`` once, then hand the batches back to their
        loops in order, each with its error (its write's, or its segment's sync's).
        ``timed``: a slow sync pauses inline syncs (not for fresh segments, slower by
        nature and never synced inline)."""
        errors: dict[Segment, BaseException] = {}
        for seg in dict.fromkeys(b.segment for b in batches if b.error is None):
            try:
                elapsed = seg.sync()
            except OSError as exc:
                log.error("fdatasync of %s failed: %s", seg.path, exc)
                errors[seg] = exc
            except Exception as exc:  # never let the thread die
                log.exception("fdatasync of %s failed", seg.path)
                errors[seg] = exc
            else:
                if timed and elapsed > self.slow_sync_s:
                    self._slow(seg, elapsed)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Batch, BaseException | None]]] = {}
        for b in batches:
            err = b.error if b.error is not None else errors.get(b.segment)
            by_loop.setdefault(b.loop, []).append((b, err))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_complete, items)
            except RuntimeError:  # loop closed: nobody is waiting any more
                log.debug("event loop closed; dropping %d batch results", len(items))

    def _hand_off_fresh(self, batches: list[Batch]) -> list[Batch]:
        """Give the `fresh` pool every batch of a ledger that has one on a fresh segment
        in this round or a pool job under way; returns the batches left to this thread."""
        fresh = {b.segment.directory for b in batches if b.segment.dir_sync and b.error is None}
        if not fresh and not self._held:
            return batches
        mine: list[Batch] = []
        with self._held_lock:
            held = self._held
            for b in batches:
                key = b.segment.directory
                waiting = held.get(key)
                if waiting is not None:
                    waiting.append(b)
                elif key in fresh:
                    held[key] = [b]
                    self.fresh_jobs += 1
                    self.fresh.submit(self._fresh_job, key)
                else:
                    mine.append(b)
        return mine

    def _fresh_job(self, key: str) -> None:
        """On a `fresh` thread: sync and complete the held batches of ledger ``key`` until
        none is left, then let the ledger's batches go to the flusher thread again."""
        while True:
            with self._held_lock:
                batches = self._held.get(key)
                if not batches:
                    self._held.pop(key, None)
                    return
                self._held[key] = []
            self._sync_and_complete(batches, timed=False)


def _complete(items: list[tuple[Batch, BaseException | None]]) -> None:
    for batch, err in items:
        if not batch.done:
            batch.on_done(batch, err)
