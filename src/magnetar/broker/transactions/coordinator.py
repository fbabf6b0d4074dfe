"""`TransactionCoordinator`: one coordinator (one partition of the assign topic).

It keeps its transactions in memory and every change in the metadata store first (one
compare-and-set per change, `records.py`): a change is answered only once it is stored, so
after a crash (kill -9) the records are the truth. States: OPEN -> COMMITTING -> COMMITTED
and OPEN -> ABORTING -> ABORTED; a transaction past its deadline is aborted (ABORTING with
``timed_out``). Ending is one write to COMMITTING/ABORTING (the decision, the record's last
write), then the participants are told (`participants.py`, retried until each answers),
then the transaction is COMMITTED/ABORTED in memory; a recovered COMMITTING/ABORTING record
has its participants told again (idempotent), so nothing needs storing after the markers.

An EndTxn asking for the state a transaction is in or moving to answers success (a commit
retried after a lost answer: Pulsar's #19629); the opposite action answers
``InvalidTxnStatus``. Ended records stay ``ENDED_RETENTION_S`` so that retries find them.
Recovery (`recover`): OPEN records get their timers back (one past its deadline is aborted
at once), COMMITTING/ABORTING ones are driven to their end.

On a store that writes at once (``inline``: a broker alone's `TxnLog`) the commands have
plain forms (`new_txn_now`, `add_partitions_now`, `add_subscriptions_now`, `end_now`) that
a connection runs as it reads the command, without a coroutine, a task or a lock: nothing
there ever awaits while holding a transaction's lock, so no lock is ever seen taken. An
end whose participants can all be told at once (``notify_now``: topics this broker alone
has loaded) is ended before `end_now` returns; otherwise its participants are told in a
task and the EndTxn waits for it (`end`).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from magnetar.broker.deadlines import Deadlines
from magnetar.broker.errors import BrokerError
from magnetar.broker.transactions.records import (
    ABORTED,
    ABORTING,
    COMMITTED,
    COMMITTING,
    ENDED,
    ENDING,
    OPEN,
    InlineTxnStore,
    TxnRecord,
    TxnStore,
)
from magnetar.metadata import BadVersionError
from magnetar.protocol import pb

log = logging.getLogger(__name__)

#: ids taken from the coordinator's counter at a time
ID_BLOCK = 100
#: how long an ended transaction's record is kept for retried EndTxn and lookups
ENDED_RETENTION_S = 300.0
#: how long an EndTxn waits for the participants before answering (the coordinator keeps
#: telling them; the client's retry waits again)
END_WAIT_S = 20.0
#: append latency buckets (ms) of the metrics, as Pulsar's coordinator reports them
LATENCY_BUCKETS_MS = (10, 20, 50, 100, 500, 1000, 5000, 15000, 30000, 60000, 300000, 1500000, 3000000)

#: ``(record, commit) -> awaitable`` telling the participants of an ending transaction
Notify = Callable[[TxnRecord, bool], Awaitable[None]]
#: ``(record, commit) -> told``: `Notify` done before it returns where every participant
#: can be told at once (True); otherwise nothing is done (False)
NotifyNow = Callable[[TxnRecord, bool], bool]


@dataclasses.dataclass
class CoordinatorStats:
    created: int = 0
    committed: int = 0
    aborted: int = 0
    timed_out: int = 0
    append_count: int = 0
    append_sum_ms: float = 0.0
    append_buckets: list[int] = dataclasses.field(
        default_factory=lambda: [0] * (len(LATENCY_BUCKETS_MS) + 1))

    def note_append(self, ms: float) -> None:
        self.append_count += 1
        self.append_sum_ms += ms
        # the first bucket whose bound is at least ``ms`` (the last: above every bound)
        self.append_buckets[bisect.bisect_left(LATENCY_BUCKETS_MS, ms)] += 1


def now_ms() -> int:
    return int(time.time() * 1000)


def ttl_millis(txn_ttl: int, default_s: float) -> int:
    """The timeout of a NewTxn's ``txn_ttl_seconds``: Java and Go clients put milliseconds
    there (and Pulsar's broker reads them so), so a value of 1000 or more is milliseconds;
    a smaller one is seconds (a client that took the field's name at its word); 0: the
    broker's ``transactionTimeoutDefaultSeconds``."""
    if txn_ttl <= 0:
        return int(default_s * 1000)
    return txn_ttl if txn_ttl >= 1000 else txn_ttl * 1000


class TransactionCoordinator:
    """Coordinator ``tc``: its transactions, their timers and the ends under way."""

    def __init__(self, tc: int, records: TxnStore, notify: Notify, *,
                 notify_now: NotifyNow | None = None,
                 max_active: int = 0, default_timeout_s: float = 60.0) -> None:
        self.tc = tc
        self.records = records
        self.notify = notify
        self.notify_now = notify_now
        #: the store when it writes at once (the `*_now` commands), else None
        self._now: InlineTxnStore | None = (
            cast(InlineTxnStore, records) if getattr(records, "inline", False) else None)
        self.max_active = max_active
        self.default_timeout_s = default_timeout_s
        #: every transaction in memory, ended ones too until `purge` (changed by `_keep`)
        self.txns: dict[int, TxnRecord] = {}
        self._active = 0  # how many of ``txns`` are not ended (`active`)
        self.stats = CoordinatorStats()
        self.closed = False
        self._loop = asyncio.get_running_loop()
        # each open transaction's deadline (one timer for all of them: `Deadlines`)
        self._deadlines: Deadlines[int] = Deadlines(self._loop, self._expire)
        self._ends: dict[int, asyncio.Task[None]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._next_id = 0
        self._id_limit = 0
        self._id_lock = asyncio.Lock()

    # ------------------------------------------------------------------ lifecycle
    async def recover(self) -> None:
        """Read this coordinator's records: timers for the open ones, the ending ones
        driven to their end."""
        for rec in await self.records.load(self.tc):
            self._keep(rec)
            if rec.state == OPEN:
                self._arm(rec)
            elif rec.state in ENDING:
                self._start_end(rec)
        log.info("transaction coordinator %d: %d transactions recovered (%d active)", self.tc,
                 len(self.txns), self.active())

    def close(self) -> None:
        """Stop serving (the bundle moved away or the broker stops): timers and ends under
        way stop; the records stay for the next owner."""
        self.closed = True
        self._deadlines.clear()
        for task in [*self._ends.values(), *self._tasks]:
            task.cancel()

    def active(self) -> int:
        """How many transactions are not ended (counted as they change: a NewTxn under
        ``maxActiveTransactionsPerCoordinator`` asks this, and the ended ones kept for
        retried ends can be many)."""
        return self._active

    def _keep(self, rec: TxnRecord) -> None:
        """Make ``rec`` the transaction's record in memory, its state counted."""
        old = self.txns.get(rec.seq)
        self._active += (rec.state not in ENDED) - (old is not None and old.state not in ENDED)
        self.txns[rec.seq] = rec

    # ------------------------------------------------------------------ commands
    @property
    def inline(self) -> bool:
        """Whether the store writes at once: the `*_now` commands may be used."""
        return self._now is not None

    async def new_txn(self, txn_ttl: int, owner: str = "") -> TxnRecord:
        """Open a transaction; ``owner``: the role that opens it ("" without
        authentication), which alone (or a superuser) may add to it and end it."""
        if self._now is not None:
            return self.new_txn_now(txn_ttl, owner)
        self._check_room()
        seq = await self._take_id()
        rec = self._opening(seq, txn_ttl, owner)
        await self._store(rec, create=True)
        return self._opened(rec)

    def new_txn_now(self, txn_ttl: int, owner: str = "") -> TxnRecord:
        """`new_txn` on a store that writes at once (`inline`)."""
        store = self._now
        assert store is not None, "new_txn_now needs an inline store"
        self._check_room()
        seq = self._next_id
        if seq >= self._id_limit:  # (the id lock is the awaited reservation's only)
            seq = store.reserve(self.tc, ID_BLOCK)
            self._id_limit = seq + ID_BLOCK
        self._next_id = seq + 1
        rec = self._opening(seq, txn_ttl, owner)
        self._store_now(store.create_now, rec)
        return self._opened(rec)

    def _check_room(self) -> None:
        self._check_open()
        if self.max_active > 0 and self.active() >= self.max_active:
            raise BrokerError(pb.NotAllowedError, (
                f"transaction coordinator {self.tc} has {self.active()} active transactions, "
                f"its maximum (maxActiveTransactionsPerCoordinator={self.max_active})"))

    def _opening(self, seq: int, txn_ttl: int, owner: str) -> TxnRecord:
        timeout = ttl_millis(txn_ttl, self.default_timeout_s)
        opened = now_ms()
        return TxnRecord(self.tc, seq, OPEN, opened, timeout, opened + timeout, owner=owner)

    def _opened(self, rec: TxnRecord) -> TxnRecord:
        """``rec`` is stored: the transaction is open."""
        self._keep(rec)
        self.stats.created += 1
        self._arm(rec, rec.timeout_ms / 1000.0)
        return rec

    async def add_partitions(self, seq: int, partitions: list[str]) -> None:
        if self._now is not None:
            self.add_partitions_now(seq, partitions)
            return
        async with self._lock(seq):
            rec = self._open_txn(seq, "add a partition to")
            new = [p for p in dict.fromkeys(partitions) if p not in rec.partitions]
            if new:
                await self._change(rec, partitions=rec.partitions + new)

    def add_partitions_now(self, seq: int, partitions: list[str]) -> None:
        """`add_partitions` on a store that writes at once (`inline`)."""
        rec = self._open_txn(seq, "add a partition to")
        new = [p for p in dict.fromkeys(partitions) if p not in rec.partitions]
        if new:
            self._change_now(rec, partitions=rec.partitions + new)

    async def add_subscriptions(self, seq: int, subs: list[tuple[str, str]]) -> None:
        if self._now is not None:
            self.add_subscriptions_now(seq, subs)
            return
        async with self._lock(seq):
            rec = self._open_txn(seq, "add a subscription to")
            new = [s for s in dict.fromkeys(subs) if s not in rec.subscriptions]
            if new:
                await self._change(rec, subscriptions=rec.subscriptions + new)

    def add_subscriptions_now(self, seq: int, subs: list[tuple[str, str]]) -> None:
        """`add_subscriptions` on a store that writes at once (`inline`)."""
        rec = self._open_txn(seq, "add a subscription to")
        new = [s for s in dict.fromkeys(subs) if s not in rec.subscriptions]
        if new:
            self._change_now(rec, subscriptions=rec.subscriptions + new)

    def end_now(self, seq: int, commit: bool) -> bool:
        """`end` on a store that writes at once (`inline`), as far as it goes without a
        wait. True: the transaction has ended that way (now, its participants told at once
        by ``notify_now``, or before): the EndTxn may be answered. False: its end is under
        way (started here if it was open: the decision stored, the participants told in a
        task), and `end` waits for it. The opposite end raises ``InvalidTxnStatus``."""
        assert self._now is not None, "end_now needs an inline store"
        rec = self.get(seq)
        goal, ending = (COMMITTED, COMMITTING) if commit else (ABORTED, ABORTING)
        if rec.state == OPEN:
            rec = self._change_now(rec, state=ending)
            self._disarm(seq)
            told = False
            if self.notify_now is not None:
                try:
                    told = self.notify_now(rec, commit)
                except Exception:  # (the task tells them again, and logs what fails)
                    told = False
            if told:
                self._mark_ended(seq, commit)
                return True
            self._start_end(rec)
            return False
        if rec.state == goal:
            return True
        if rec.state != ending:
            raise self._cannot_end(rec, commit)
        return False

    def _cannot_end(self, rec: TxnRecord, commit: bool) -> BrokerError:
        why = " (it timed out)" if rec.timed_out else ""
        return BrokerError(pb.InvalidTxnStatus, (
            f"cannot {'commit' if commit else 'abort'} transaction {rec.txn_id}: it is "
            f"{rec.state}{why}"))

    async def end(self, seq: int, commit: bool, wait_s: float = END_WAIT_S) -> None:
        """Commit or abort; returns once the participants were told and the end is
        stored (a retry of the same end joins it, and answers success once ended)."""
        if self._now is not None and self.end_now(seq, commit):
            return
        async with self._lock(seq):
            rec = self.get(seq)
            goal, ending = (COMMITTED, COMMITTING) if commit else (ABORTED, ABORTING)
            if rec.state == OPEN:
                rec = await self._change(rec, state=ending)
                self._disarm(seq)
                self._start_end(rec)
            elif rec.state == goal:
                return
            elif rec.state != ending:
                raise self._cannot_end(rec, commit)
            task = self._ends.get(seq) or self._start_end(rec)
        if not task.done():
            await self._wait(task, wait_s)
        if not task.done():
            raise BrokerError(pb.ServiceNotReady, (
                f"transaction {rec.txn_id} is {self.txns[seq].state}: not every participant "
                "answered yet (the coordinator keeps telling them); send EndTxn again"))
        task.result()  # its failure, or CancelledError: the coordinator closed

    async def _wait(self, task: asyncio.Task[None], wait_s: float) -> None:
        """Wait for ``task`` at most ``wait_s``, leaving it running when this waiter is
        cancelled or gives up (what ``wait_for(shield(task))`` does, with one future and a
        timer instead of three futures and their callbacks on every EndTxn)."""
        waiter: asyncio.Future[None] = self._loop.create_future()

        def wake(_: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        task.add_done_callback(wake)
        timer = self._loop.call_later(wait_s, wake)
        try:
            await waiter
        finally:
            timer.cancel()
            task.remove_done_callback(wake)

    def get(self, seq: int) -> TxnRecord:
        rec = self.txns.get(seq)
        if rec is None:
            raise BrokerError(pb.TransactionNotFound,
                              f"transaction ({self.tc},{seq}) not found at coordinator {self.tc}")
        return rec

    # ------------------------------------------------------------------ timeouts
    def _arm(self, rec: TxnRecord, delay: float | None = None) -> None:
        """Arm ``rec``'s deadline (``delay``: seconds to it, when known)."""
        if delay is None:
            delay = max(0.0, (rec.deadline_ms - now_ms()) / 1000.0)
        self._deadlines.set(rec.seq, delay)

    def _disarm(self, seq: int) -> None:
        self._deadlines.drop(seq)

    def _expire(self, seq: int) -> None:
        if not self.closed:
            self._spawn(self._time_out(seq))

    async def _time_out(self, seq: int) -> None:
        async with self._lock(seq):
            rec = self.txns.get(seq)
            if rec is None or rec.state != OPEN:
                return
            try:
                rec = await self._change(rec, state=ABORTING, timed_out=True)
            except BrokerError as exc:
                log.warning("transaction %s: timing out failed (%s); retried", rec.txn_id, exc)
                self._deadlines.set(seq, 1.0)
                return
            self.stats.timed_out += 1
            log.info("transaction %s timed out after %d ms: aborting", rec.txn_id, rec.timeout_ms)
            self._start_end(rec)

    # ------------------------------------------------------------------ ending
    def _start_end(self, rec: TxnRecord) -> asyncio.Task[None]:
        task = self._ends.get(rec.seq)
        if task is None:
            task = self._loop.create_task(self._finish(rec.seq, rec.state == COMMITTING))
            self._ends[rec.seq] = task
            task.add_done_callback(functools.partial(self._ended, rec.seq))
        return task

    def _ended(self, seq: int, task: asyncio.Task[None]) -> None:
        if self._ends.get(seq) is task:
            del self._ends[seq]
        if not task.cancelled() and task.exception() is not None:
            log.warning("transaction (%d,%d): ending failed: %s", self.tc, seq, task.exception())

    async def _finish(self, seq: int, commit: bool) -> None:
        """Tell the participants of an ending transaction; then it is ended in memory
        only: the stored COMMITTING/ABORTING record is its last write (the decision), and
        a coordinator recovering such a record tells its participants again (they answer
        an end they already have with success)."""
        rec = self.txns[seq]
        await self.notify(rec, commit)
        lock = self._lock(seq)
        if lock.locked():  # (else nothing can change it before this returns: no await)
            async with lock:
                self._mark_ended(seq, commit)
        else:
            self._mark_ended(seq, commit)

    def _mark_ended(self, seq: int, commit: bool) -> None:
        rec = self.txns[seq]
        if rec.state in ENDED:
            return
        self._keep(rec.changed(state=COMMITTED if commit else ABORTED, ended_ms=now_ms()))
        if commit:
            self.stats.committed += 1
        else:
            self.stats.aborted += 1

    def purge(self, older_than_ms: int) -> None:
        """Forget the ended transactions that ended before ``older_than_ms``."""
        for rec in [r for r in self.txns.values() if r.state in ENDED and r.ended_ms < older_than_ms]:
            del self.txns[rec.seq]
            self._locks.pop(rec.seq, None)
            self._spawn(self.records.delete(rec))

    # ------------------------------------------------------------------ storing
    async def _change(self, rec: TxnRecord, **changes: Any) -> TxnRecord:
        """Store ``rec`` with ``changes``, then make it the one in memory."""
        if self._now is not None:
            return self._change_now(rec, **changes)
        new = rec.changed(**changes)
        await self._store(new, create=False)
        self._keep(new)
        return new

    def _change_now(self, rec: TxnRecord, **changes: Any) -> TxnRecord:
        """`_change` on a store that writes at once."""
        new = rec.changed(**changes)
        self._store_now(self._now.update_now, new)  # type: ignore[union-attr]  # inline only
        self._keep(new)
        return new

    async def _store(self, rec: TxnRecord, create: bool) -> None:
        started = time.monotonic()
        try:
            if create:
                await self.records.create(rec)
            else:
                await self.records.update(rec)
        except BadVersionError:
            raise self._moved(rec) from None
        self.stats.note_append((time.monotonic() - started) * 1000.0)

    def _store_now(self, write: Callable[[TxnRecord], None], rec: TxnRecord) -> None:
        """`_store` on a store that writes at once (``write``: its create or update)."""
        started = time.monotonic()
        try:
            write(rec)
        except BadVersionError:
            raise self._moved(rec) from None
        self.stats.note_append((time.monotonic() - started) * 1000.0)

    def _moved(self, rec: TxnRecord) -> BrokerError:
        return BrokerError(pb.TransactionCoordinatorNotFound, (
            f"transaction {rec.txn_id} was changed by another broker: coordinator {self.tc} "
            "moved; look it up again"))

    async def _take_id(self) -> int:
        if self._next_id >= self._id_limit or self._id_lock.locked():
            async with self._id_lock:  # a block to reserve (or one being reserved)
                if self._next_id >= self._id_limit:
                    start = await self.records.counter(self.tc).reserve(ID_BLOCK)
                    self._next_id, self._id_limit = start, start + ID_BLOCK
        seq = self._next_id  # (no await between the lock's release, or the test, and the take)
        self._next_id += 1
        return seq

    # ------------------------------------------------------------------ helpers
    def _check_open(self) -> None:
        if self.closed:
            raise BrokerError(pb.TransactionCoordinatorNotFound,
                              f"transaction coordinator {self.tc} is not served here any more")

    def _open_txn(self, seq: int, what: str) -> TxnRecord:
        self._check_open()
        rec = self.get(seq)
        if rec.state != OPEN:
            why = " (it timed out)" if rec.timed_out else ""
            raise BrokerError(pb.InvalidTxnStatus,
                              f"cannot {what} transaction {rec.txn_id}: it is {rec.state}{why}")
        return rec

    def _lock(self, seq: int) -> asyncio.Lock:
        lock = self._locks.get(seq)
        if lock is None:
            lock = self._locks[seq] = asyncio.Lock()
        return lock

    def _spawn(self, work: Awaitable[Any]) -> None:
        async def run() -> None:
            with contextlib.suppress(asyncio.CancelledError):
                await work

        task = self._loop.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
