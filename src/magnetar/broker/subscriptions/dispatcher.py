"""Dispatcher base: reads entries for one subscription and hands them to its consumers.

Theory of operation: a dispatcher keeps a *read position* (the next entry of the ledger
not yet sent to anyone) and a *replay set* (entries to send again: redeliveries, entries
held back). ``schedule()`` asks for one dispatch pass at the next event-loop turn, however
many times it is called meanwhile; a pass reads at most ``dispatcherMaxReadBatchSize``
entries and, per read, at most ``dispatcherMaxReadSizeBytes`` (but always one entry)
(replay first, in position order), skips what the cursor already deleted, and
gives the rest to consumers by the rules of the subclass. Passes repeat while consumers
have permits and entries remain.

An entry that fails its checksum when read for the first time stops the pass. With
``autoSkipNonRecoverableData`` it is skipped (acknowledged for this subscription, one
error log, counted in the subscription's stats); otherwise dispatch retries it with a
doubling back-off up to a minute, logging once a minute, so that an operator can act
while the subscription's other work and every other subscription go on. A read from disk
that fails with an I/O error is retried the same way; one that finds a segment's file
missing (`SegmentFileMissingError`) too, unless ``autoSkipNonRecoverableData`` skips
the rest of that segment (as Pulsar skips a ledger that no longer exists).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Protocol

from sortedcontainers import SortedSet

from magnetar.broker.subscriptions.limits import SubscriptionLimits
from magnetar.storage import CorruptEntryError, SegmentFileMissingError, StorageError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from magnetar.broker.subscriptions.consumer import Consumer
    from magnetar.broker.subscriptions.subscription import PersistentSubscription
    from magnetar.storage import Position, PositionsRead

log = logging.getLogger(__name__)

#: A stored entry: from the read cache ``bytes``, from a cold read a ``memoryview`` of the
#: read's buffer (sent as it is; see ``ManagedLedger.read_cold``).
Entry = tuple["Position", "bytes | memoryview"]
#: An entry of a cold read (``ManagedLedger.read_cold``, ``CompactedView.read_cold``).
ColdEntry = tuple["Position", memoryview]


class EntrySource(Protocol):
    """Where a dispatcher reads entries: the topic's ``ManagedLedger``, or for a
    ``read_compacted`` subscription a ``topics.compaction.CompactedView`` over it."""

    def last_confirmed(self) -> Position | None: ...
    def cached_entry(self, position: Position) -> bytes | memoryview | None: ...
    def read_cached(self, start: Position, max_entries: int, max_bytes: int | None = None
                    ) -> list[tuple[Position, bytes | memoryview]]: ...
    def read_cold(self, start: Position, max_entries: int, max_bytes: int | None = None
                  ) -> asyncio.Future[list[tuple[Position, memoryview]]]: ...
    def read_positions_cold(self, positions: list[Position], max_bytes: int | None = None
                            ) -> asyncio.Future[PositionsRead]: ...


#: Reads one dispatch pass makes at most before it yields the event loop to others.
MAX_READS_PER_PASS = 64
#: Back-off of the retries of an unreadable entry, in seconds (doubling), and log interval.
CORRUPT_RETRY_MIN_S = 0.1
CORRUPT_RETRY_MAX_S = 60.0
CORRUPT_LOG_INTERVAL_S = 60.0


class Dispatcher:
    """What every persistent dispatcher shares; subclasses implement ``dispatch``."""

    def __init__(self, subscription: PersistentSubscription, sub_type: int) -> None:
        self.sub = subscription
        self.sub_type = sub_type
        # the topic's ledger, or a read_compacted subscription's compacted view (set by
        # `TopicAttacher.subscribe`)
        self.ledger: EntrySource = subscription.topic.ledger
        self.cursor = subscription.cursor
        self.config = subscription.topic.service.config
        self.consumers: list[Consumer] = []
        self.replay: SortedSet = SortedSet()  # kept in position order
        self.read_position: Position = self.start_position()
        self._scheduled = False
        self._loop = asyncio.get_event_loop()
        # a read from disk under way: (its start position, its future)
        self._cold_read: tuple[Position, asyncio.Future[list[ColdEntry]]] | None = None
        # a read from disk of replay-set positions under way: (the positions, its future)
        self._replay_read: tuple[list[Position], asyncio.Future[PositionsRead]] | None = None
        self._retry_delay = 0.0  # > 0 while an unreadable entry is being retried
        self._retry_timer: asyncio.TimerHandle | None = None
        self._corrupt_logged_at = -CORRUPT_LOG_INTERVAL_S
        self._rate_timer: asyncio.TimerHandle | None = None  # a dispatch rate holds reads

    # -- scheduling ------------------------------------------------------------------

    def schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        if not self.consumers:
            return
        self.follow_policies()
        if self._retry_timer is not None:
            return  # an unreadable entry or a failed read waits for its retry timer
        try:
            self.dispatch()
        except CorruptEntryError as exc:
            self._unreadable_entry(exc)
            return
        except SegmentFileMissingError as exc:
            if not self._skip_missing_segment(exc):
                self._retry_later(f"reading from storage failed ({exc})", "" if (
                    self.config.autoSkipNonRecoverableData) else " Set "
                    "autoSkipNonRecoverableData=true to skip missing segments.")
            return
        except (OSError, StorageError) as exc:
            # a read from disk failed (an I/O error, a shared mount gone for a moment): no
            # new entry or flow may come to ask again
            self._retry_later(f"reading from storage failed ({exc})")
            return
        except Exception:
            log.exception("dispatch failed on %s/%s", self.sub.topic.name, self.sub.name)

    def _unreadable_entry(self, exc: CorruptEntryError) -> None:
        where = f"{self.sub.topic.name}/{self.sub.name}"
        if self.config.autoSkipNonRecoverableData and exc.position is not None:
            position = type(self.read_position)(*exc.position)
            log.error("%s: skipping unreadable entry %s:%s (autoSkipNonRecoverableData): %s",
                      where, position[0], position[1], exc)
            self.sub.skipped_entries += 1
            self.cursor.delete([position])
            self.replay.discard(position)
            if self.read_position <= position:
                self.read_position = type(position)(position[0], position[1] + 1)
            self.schedule()
            return
        self._retry_later(f"cannot read the next entry ({exc})", " Set "
                          "autoSkipNonRecoverableData=true to skip unreadable entries.")

    def _skips_missing_segments(self) -> bool:
        """Whether this dispatcher skips what it cannot read of a segment whose file is
        missing: ``autoSkipNonRecoverableData`` is on and it reads the topic's own ledger
        (a ``read_compacted`` subscription's compacted view has segments of its own)."""
        return self.config.autoSkipNonRecoverableData and self.ledger is self.sub.topic.ledger

    def _skip_missing_segment(self, exc: SegmentFileMissingError) -> bool:
        """With ``autoSkipNonRecoverableData``, what is left to read of a segment whose
        file is missing is skipped, as Pulsar skips a ledger that no longer exists:
        acknowledged for this subscription in one range, one error log, counted in the
        subscription's stats; reading goes on after it. False: not skipped (the setting
        is off, or the read was not of the topic's own ledger), tried again instead."""
        rest = exc.rest_from(self.read_position)
        if rest is None or not self._skips_missing_segments():
            return False
        first, last = rest
        self.cursor.delete_range(first, last)
        for p in list(self.replay.irange(first, last)):
            self.replay.discard(p)
        count = last[1] - first[1] + 1
        self.sub.skipped_entries += count
        log.error("%s/%s: skipping %d entries %s-%s of a segment whose file is missing "
                  "(autoSkipNonRecoverableData): %s", self.sub.topic.name, self.sub.name,
                  count, first, last, exc)
        self.read_position = type(last)(last[0], last[1] + 1)
        self.schedule()
        return True

    def _retry_later(self, what: str, advice: str = "") -> None:
        """Dispatch again after a back-off (doubling from `CORRUPT_RETRY_MIN_S` up to
        `CORRUPT_RETRY_MAX_S`, reset once entries are read), logging ``what`` at most once
        per `CORRUPT_LOG_INTERVAL_S`: an unreadable entry, or a read from storage that
        failed (an I/O error, a shared mount gone for a moment), is tried again, never in a
        busy loop, and the subscription never waits for an event that will not come."""
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        self._retry_delay = min(CORRUPT_RETRY_MAX_S, max(CORRUPT_RETRY_MIN_S, self._retry_delay * 2))
        now = time.monotonic()
        if now - self._corrupt_logged_at >= CORRUPT_LOG_INTERVAL_S:
            self._corrupt_logged_at = now
            log.error("%s/%s: %s; retrying with back-off.%s", self.sub.topic.name,
                      self.sub.name, what, advice)
        self._retry_timer = self._loop.call_later(self._retry_delay, self._retry)

    def _retry(self) -> None:
        self._retry_timer = None
        self.schedule()

    # -- dispatch rates (dispatchRate, subscriptionDispatchRate) --------------------------

    def follow_policies(self) -> None:
        """Apply the policies' limits to the subscription, if they changed since it last
        did (`PolicyStore.generation`): dispatch and unacknowledged-message limits."""
        sub = self.sub
        topic = sub.topic
        store = topic.service.policies
        if sub.limits_generation == store.generation:
            return
        if topic.limits.generation != store.generation:
            topic.limits.refresh()
        p = store.for_topic(topic.topic_name)
        sub.apply_limits(store.generation, SubscriptionLimits(
            p.subscription_dispatch_rate_msgs, p.subscription_dispatch_rate_bytes,
            p.subscription_dispatch_rate_period, p.max_unacked_messages_per_consumer,
            p.max_unacked_messages_per_subscription))

    def rate_allowance(self) -> int:
        """How many entries the next read may take (``UNLIMITED`` when nothing limits it):
        the dispatch rates' tokens left, and the room under the subscription's
        unacknowledged-message limit. 0: none now; a dispatch rate's timer runs the
        dispatcher again once one may go (acknowledgements end an unacked block). What is
        sent is counted in `send` (messages and bytes), so a batch that spends more than
        the tokens left is paid back before anything more goes."""
        sub = self.sub
        allowed = sub.unacked_room()
        limiters = sub.dispatch_limiters
        if not limiters or not allowed:
            return allowed
        wait = 0.0
        for limiter in limiters:
            msgs, size = limiter.available()
            if msgs < 1 or size <= 0:
                wait = max(wait, limiter.until_available())
            elif msgs < allowed:
                allowed = int(msgs)
        if wait <= 0:
            return allowed
        if self._rate_timer is None:
            self._rate_timer = self._loop.call_later(wait + 0.001, self._rate_due)
        return 0

    def _rate_due(self) -> None:
        self._rate_timer = None
        self.schedule()

    def dispatch(self) -> None:
        raise NotImplementedError

    # -- consumers ---------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        if consumer.pending:
            # What a departing consumer held goes to the others; as in Pulsar, this does not
            # count as a redelivery (only the client's redelivery requests do).
            positions = list(consumer.pending)
            consumer.pending.clear()
            self.redeliver_positions(positions, None, count=False)

    def redeliver_positions(
        self, positions: list[Position], consumer: Consumer | None, count: bool = True
    ) -> None:
        """Send ``positions`` again (to whichever consumer the rules pick)."""
        counts = self.sub.redelivery_counts
        for p in positions:
            if self.cursor.is_deleted(p):
                continue
            if count:
                counts[p] = counts.get(p, 0) + 1
            self.replay.add(p)
            if consumer is not None:
                consumer.msg_redelivered += consumer.pending.get(p, 1)
        self.schedule()

    def redeliver_all(self, consumer: Consumer) -> None:
        positions = list(consumer.pending)
        consumer.pending.clear()
        self.redeliver_positions(positions, consumer)

    def rewind(self) -> None:
        """Forget what was sent: start again after the mark-delete position."""
        self.replay.clear()
        self.read_position = self.start_position()
        for consumer in self.consumers:
            consumer.pending.clear()
        self.schedule()

    def start_position(self) -> Position:
        """The first unacknowledged entry, or the position the next entry will take."""
        first: Position | None = self.cursor.read_position
        if first is not None:
            return first
        last = self.ledger.last_confirmed()
        md: Position = self.cursor.mark_delete_position
        if last is None:
            return type(md)(md[0], md[1] + 1)
        return type(last)(last[0], last[1] + 1)

    # -- reading -----------------------------------------------------------------------

    def has_more(self) -> bool:
        if self._reading():
            return False  # dispatch goes on when the read from disk is done
        if self.replay:
            return True
        last = self.readable_last()
        return last is not None and self.read_position <= last

    def skipped(self) -> Callable[[Position], bool]:
        """Whether an entry is not to be sent: acknowledged, or held by a transaction's
        ack (`PendingAcks`)."""
        acks = self.sub.pending_acks
        is_deleted = self.cursor.is_deleted
        return is_deleted if acks is None else acks.skip_filter(is_deleted)

    def readable_last(self) -> Position | None:
        """The last entry this dispatcher may read: the source's last, cut before the
        oldest open transaction of the topic (`TxnView.max_read`)."""
        last = self.ledger.last_confirmed()
        view = self.sub.topic.txn_buffer
        return last if view is None else view.readable_last(last)

    def _reading(self) -> bool:
        """Whether a read from disk is under way for this subscription (new entries or
        replayed ones): nothing else is read or sent meanwhile, as in Pulsar."""
        cold = self._cold_read
        if cold is not None and not cold[1].done():
            return True
        replay = self._replay_read
        return replay is not None and not replay[1].done()

    def read_replay(self, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` entries of the replay set, in position order, stopping
        before ``dispatcherMaxReadSizeBytes`` (at least one entry). Entries the read cache
        holds are taken at once; at the first one it does not hold, the rest are read from
        disk on the storage's reader threads (`_start_replay_read`) and this returns what
        came before: the dispatcher runs again once that read is done and takes them from
        it. A position that cannot be read (trimmed, unreadable) leaves the replay set,
        with a warning."""
        read = self._take_replay_read()
        replay = self.replay
        if not replay:
            return []
        out: list[Entry] = []
        budget = self.config.dispatcherMaxReadSizeBytes
        cached = self.ledger.cached_entry
        is_deleted = self.skipped()
        for p in list(replay.islice(0, max_entries)):
            if is_deleted(p):
                replay.discard(p)
                continue
            data = cached(p)
            if data is None:
                data = read.get(p) if read is not None else None
                if data is None:
                    self._start_replay_read(p, max_entries)
                    break  # the rest after that read, in position order
            if len(data) > budget and out:
                break  # stays in the replay set for the next read
            budget -= len(data)
            replay.discard(p)
            out.append((p, data))
        return out

    def _start_replay_read(self, first: Position, max_entries: int) -> None:
        """Read from disk, off the loop, the replay-set entries from ``first`` (up to
        ``max_entries`` positions, those the read cache lacks), unless a disk read is
        under way already (one at a time per subscription)."""
        if self._reading():
            return
        cached = self.ledger.cached_entry
        is_deleted = self.cursor.is_deleted
        positions = []
        for n, p in enumerate(self.replay.irange(minimum=first)):
            if n >= max_entries:
                break
            if not is_deleted(p) and cached(p) is None:
                positions.append(p)
        self._read_positions(positions)

    def _read_positions(self, positions: list[Position]) -> None:
        """Start reading ``positions`` (ascending) from disk on the storage's reader
        threads, at most ``dispatcherMaxReadSizeBytes`` of them; the dispatcher runs again
        when the read is done (`_take_replay_read` takes it). The caller checked that no
        disk read is under way."""
        try:
            future = self.ledger.read_positions_cold(positions, self.config.dispatcherMaxReadSizeBytes)
        except Exception as exc:  # (storage shutting down) a read that failed as a whole
            future = self._loop.create_future()
            future.set_exception(exc)
        self._replay_read = (positions, future)
        future.add_done_callback(lambda _f: self.schedule())

    def _take_replay_read(self) -> dict[Position, bytes | memoryview] | None:
        """The entries of the finished replay read, by position (None: there is none).
        Positions it could not read leave the replay set with a warning (a corrupt
        record, an entry trimmed away), but for an I/O error: those stay, read again after
        the back-off (`_retry_later`). Entries no longer in the replay set (acknowledged,
        rewound meanwhile) are simply not used."""
        pending = self._replay_read
        if pending is None or not pending[1].done():
            return None
        self._replay_read = None
        positions, future = pending
        if future.cancelled():
            return None
        exc = future.exception()
        if exc is not None:  # not one failure per position: the whole read failed
            failed: dict[Position, BaseException] = dict.fromkeys(positions, exc)
            entries: list[tuple[Position, bytes | memoryview]] = []
        else:
            result = future.result()
            failed, entries = dict(result.failed), list(result.entries)
        replay = self.replay
        io_error: OSError | None = None
        skip_missing = self._skips_missing_segments()
        skipped: list[Position] = []
        for p, error in failed.items():
            if p not in replay:
                continue
            if skip_missing and isinstance(error, SegmentFileMissingError):
                skipped.append(p)  # (as `_skip_missing_segment`, position by position)
                continue
            if isinstance(error, OSError):  # the disk or its mount, for now: read again
                io_error = error
                continue
            replay.discard(p)
            log.warning("cannot re-read %s on %s: %s", p, self.sub.topic.name, error)
        if skipped:
            self.cursor.delete(skipped)
            for p in skipped:
                replay.discard(p)
            self.sub.skipped_entries += len(skipped)
            log.error("%s/%s: skipping %d entries to deliver again, from %s, of a segment "
                      "whose file is missing (autoSkipNonRecoverableData)",
                      self.sub.topic.name, self.sub.name, len(skipped), skipped[0])
        if io_error is not None:
            self._retry_later(f"re-reading from storage failed ({io_error})")
        return dict(entries)

    def read_new(self, max_entries: int) -> list[Entry]:
        """Entries from the read position: from the read cache at once, else from disk on
        the storage's reader threads (this returns nothing meanwhile and the dispatcher
        runs again when the read is done), so a slow disk holds up only this subscription."""
        replaying = self._replay_read
        if replaying is not None and not replaying[1].done():
            return []  # replayed entries go first: new ones wait for their read
        last = self.readable_last()
        if last is None or self.read_position > last:
            return []
        entries = self._take_cold_read()
        if entries is None:
            entries = self.ledger.read_cached(
                self.read_position, max_entries, self.config.dispatcherMaxReadSizeBytes
            )
            if not entries:
                self._start_cold_read(max_entries)
                return []
        if entries and entries[-1][0] > last:  # past an open transaction: read it later
            first = entries[0][0]
            entries = [e for e in entries if e[0] <= last]
            if not entries:  # nothing stored between here and there (a new ledger)
                self.read_position = first  # (now past `last`: no more until it moves)
                return []
        if not entries:
            return []
        self._retry_delay = 0.0  # whatever was unreadable before, reading goes on
        tail = entries[-1][0]
        self.read_position = type(tail)(tail[0], tail[1] + 1)
        is_deleted = self.skipped()
        return [e for e in entries if not is_deleted(e[0])]

    def _start_cold_read(self, max_entries: int) -> None:
        if self._cold_read is not None or self._reading():
            return  # one read from disk at a time per subscription
        start = self.read_position
        future = self.ledger.read_cold(start, max_entries, self.config.dispatcherMaxReadSizeBytes)
        self._cold_read = (start, future)
        future.add_done_callback(lambda _f: self.schedule())

    def _take_cold_read(self) -> Sequence[Entry] | None:
        """The finished disk read that starts at the read position (None: there is none;
        a read of a position the dispatcher moved away from, by a seek or a rewind, is
        dropped). Its error, if it failed, is raised here."""
        pending = self._cold_read
        if pending is None or not pending[1].done():
            return None
        self._cold_read = None
        start, future = pending
        if future.cancelled() or start != self.read_position:
            return None
        return future.result()

    def send(self, consumer: Consumer, position: Position, data: bytes | memoryview,
             num_messages: int) -> None:
        for limiter in self.sub.dispatch_limiters:
            limiter.consume(num_messages, len(data))
        consumer.send_entry(
            position,
            data,
            num_messages,
            self.sub.redelivery_counts.get(position, 0),
            self.cursor.batch_ack_set(position),
        )

    def max_read(self) -> int:
        return self.config.dispatcherMaxReadBatchSize
