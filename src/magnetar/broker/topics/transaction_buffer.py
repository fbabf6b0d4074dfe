"""The transaction buffer of a persistent topic (Pulsar's ``TopicTransactionBuffer``).

Messages sent in a transaction are appended to the topic's ledger like any entry, their
``MessageMetadata`` carrying the transaction id. The buffer tracks the transactions open
on the topic and the first position of each; nothing reads past ``max_read`` (just before
the oldest open transaction's first entry): dispatchers, readers' GetLastMessageId,
compaction, replicators and message expiry all stop there, so later non-transactional
messages wait behind an open transaction, as in Pulsar. Ending a transaction appends a
marker entry (``TXN_COMMIT`` / ``TXN_ABORT``, never dispatched) and, once it is durable,
moves ``max_read`` on: a committed transaction's messages become visible together, in
append order; an aborted one's go into the aborted index, and every reader skips them.

Durability: a topic that never saw a transaction has no buffer and pays nothing. The
buffer's state (the aborted index, the open transactions with their first positions,
the position it reflects) is a snapshot kept in the ledger's property ``txnBuffer``,
written when the buffer is created (before the first transactional entry is appended)
and after ``transactionBufferSnapshotMaxTransactionCount`` ended transactions or
``transactionBufferSnapshotMinTimeInMillis``. Loading a topic with that property replays
the entries after the snapshot's position (their metadata only) before the buffer is
``ready``; meanwhile nothing past the snapshot's position is read.

`TxnChecker` is how the buffer (and pending acks) ask the coordinator whether a
transaction seen for the first time on a topic is open (the service wires in its
coordinators; `AcceptAll`, every transaction taken as open, is for tests that play the
coordinator themselves). Answers are cached per (transaction, topic).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.entries import entry_metadata
from magnetar.broker.errors import BrokerError
from magnetar.broker.topics.markers import append_marker_then
from magnetar.broker.topics.txn_entries import OpenTxn, TxnLane
from magnetar.broker.topics.txn_metadata import TxnId, txn_of
from magnetar.protocol import pb
from magnetar.protocol.fastpath import txnid_fields
from magnetar.protocol.markers import TXN_ABORT, TXN_COMMIT, txn_marker_part
from magnetar.storage import Position, StorageError

if TYPE_CHECKING:
    from magnetar.broker.topics.topic import PersistentTopic

log = logging.getLogger(__name__)

#: the ledger property holding the buffer's snapshot
SNAPSHOT_PROPERTY = "txnBuffer"
#: how many ended transactions a topic remembers beyond its aborted index (late sends of
#: an ended transaction are refused while it is remembered)
_ENDED_KEPT = 10_000
#: entries read per step of a recovery replay
_REPLAY_BATCH = 500
#: a bound below every position: nothing readable
NOTHING = Position(-1, -1)
#: markers being appended again after a failure (a reference keeps each task alive)
_AGAIN: set[asyncio.Future[None]] = set()


class TxnChecker(Protocol):
    """Asks the coordinator whether a transaction is open (txn-coord provides the real one)."""

    async def check_open(self, most: int, least: int, topic: str,
                         subscription: str | None = None) -> None:
        """Return if transaction ``(most, least)`` is OPEN and may act on ``topic`` (its
        ``subscription``); raise BrokerError(TransactionNotFound | InvalidTxnStatus).
        A send's check may be run eagerly, outside any task (`txn_sends`): the coroutine
        stepped once, and closed if it does not finish in that step (it is asked again)."""
        ...


class AcceptAll:
    """A checker that takes every transaction as open (tests playing the coordinator)."""

    async def check_open(self, most: int, least: int, topic: str,
                         subscription: str | None = None) -> None:
        return None


def txn_name(txn: TxnId) -> str:
    """Pulsar's text form of a transaction id: ``(most,least)``."""
    return f"({txn[0]},{txn[1]})"


def before(p: Position) -> Position:
    """The position just before ``p`` (entry -1: before the first entry of its ledger)."""
    return Position(p[0], p[1] - 1)


class TransactionBuffer:
    """The transactions of one persistent topic (see the module docstring)."""

    def __init__(self, topic: PersistentTopic, snapshot: dict[str, Any] | None = None) -> None:
        self.topic = topic
        self.open: dict[TxnId, OpenTxn] = {}  # in order of their first position
        self.aborted: dict[TxnId, Position] = {}  # -> its abort marker's position
        self.ended: OrderedDict[TxnId, bool] = OrderedDict()  # -> committed (recent ones)
        # checked open with the coordinator (`verify`): -> its lane (its metadata fields,
        # for `with_txnid`, and its entry once placed here)
        self.verified: dict[TxnId, TxnLane] = {}
        # transactions whose first entry is being appended: -> a bound below it
        self.unplaced: dict[TxnId, Position] = {}
        self._ending: dict[TxnId, asyncio.Future[None]] = {}
        # every entry up to here is reflected (a later entry of an open transaction does
        # not move it: nothing of the stored state changes with one)
        self.position: Position = NOTHING
        self.max_read: Position | None = None  # None: no bound (nothing open)
        self.committed_count = 0
        self.aborted_count = 0
        self._since_snapshot = 0
        self._snapshot_at = time.monotonic()
        self._snapshot_task: asyncio.Future[None] | None = None
        self._snapshot_again = False
        self.ready: asyncio.Future[None] = asyncio.get_event_loop().create_future()
        self.recovery_s = 0.0
        if snapshot is not None:
            self._load(snapshot)
        else:
            last = topic.ledger.last_confirmed()
            self.position = last if last is not None else NOTHING
        self.update_bound()

    # -- state -------------------------------------------------------------------------

    def _load(self, snap: dict[str, Any]) -> None:
        self.position = Position(*snap["pos"])
        for most, least, lid, eid in snap.get("open", []):
            self.open[(most, least)] = OpenTxn(Position(lid, eid))
        for most, least, lid, eid in snap.get("aborted", []):
            self.aborted[(most, least)] = Position(lid, eid)

    def snapshot(self) -> dict[str, Any]:
        """The stored form of the buffer's state."""
        first = self.topic.ledger.first_position()
        return {
            "v": 1,
            "pos": list(self.position),
            "open": [[t[0], t[1], o.first[0], o.first[1]] for t, o in self.open.items()],
            # an aborted transaction whose marker was trimmed away has no entry left
            "aborted": [[t[0], t[1], p[0], p[1]] for t, p in self.aborted.items()
                        if first is None or p >= first],
        }

    def update_bound(self) -> None:
        """Recompute ``max_read``: before the oldest open transaction's first entry,
        below any transaction's first entry being appended, and, while recovering, at
        the snapshot's position."""
        bound: Position | None = None
        if self.open:
            bound = before(next(iter(self.open.values())).first)
        for floor in self.unplaced.values():
            if bound is None or floor < bound:
                bound = floor
        if not self.ready.done() and (bound is None or self.position < bound):
            bound = self.position
        self.max_read = bound

    def readable_last(self, last: Position | None) -> Position | None:
        """``last`` (a ledger's last confirmed position) cut at ``max_read``."""
        bound = self.max_read
        if bound is None or last is None or last <= bound:
            return last
        return bound

    def hides(self, metadata: pb.MessageMetadata) -> bool:
        """Whether an entry with this metadata is never given to a reader: a marker, or a
        message of an aborted transaction (an open one's lie past ``max_read``)."""
        if metadata.HasField("marker_type"):
            return True
        if not metadata.HasField("txnid_most_bits"):
            return False
        return (metadata.txnid_most_bits, metadata.txnid_least_bits) in self.aborted

    def hides_txn(self, metadata: pb.MessageMetadata | None) -> bool:
        """Whether an entry is a transaction's marker or an aborted transaction's message
        (what compaction and geo-replication leave out; other markers they handle)."""
        if metadata is None or not metadata.HasField("txnid_most_bits"):
            return False
        if metadata.HasField("marker_type"):
            return metadata.marker_type in (TXN_COMMIT, TXN_ABORT)
        return (metadata.txnid_most_bits, metadata.txnid_least_bits) in self.aborted

    def verify(self, txn: TxnId) -> None:
        """``txn`` was checked open with the coordinator: its sends are taken at once (a
        lane already there is kept: sends in flight may carry it)."""
        if txn not in self.verified:
            self.verified[txn] = TxnLane(txnid_fields(txn[0], txn[1]), self.open.get(txn))

    def added(self, txn: TxnId) -> None:
        """The coordinator added this topic to ``txn`` just now (a broker alone's
        AddPartitionToTxn, answered as it is read: the transaction is open and this topic
        one of its partitions, what `TxnChecker.check_open` asks): its sends are taken at
        once, the first one too, without a check of its own, if the buffer is ready and
        ``txn`` did not end here."""
        if self.ready.done() and not self.is_ended(txn):
            self.verify(txn)

    def verified_fields(self, txn: TxnId) -> bytes | None:
        """The metadata fields of ``txn`` if it is verified here (`verify`), else None."""
        lane = self.verified.get(txn)
        return lane.fields if lane is not None else None

    def _unverify(self, txn: TxnId) -> TxnLane | None:
        """``txn`` is no longer taken at once (its end began): its lane, if it had one,
        sends the entries still being appended with it to `placed`."""
        lane = self.verified.pop(txn, None)
        if lane is not None:
            lane.entry = None
        return lane

    def _open_at(self, txn: TxnId, first: Position) -> OpenTxn:
        """``txn``'s first entry here is at ``first``: open, its lane told."""
        entry = self.open[txn] = OpenTxn(first)
        lane = self.verified.get(txn)
        if lane is not None:
            lane.entry = entry
        return entry

    def is_ended(self, txn: TxnId) -> bool:
        return txn in self.aborted or txn in self.ended

    def _note(self, position: Position) -> None:
        if position > self.position:
            self.position = position

    # -- appends -----------------------------------------------------------------------

    def appending(self, txn: TxnId) -> None:
        """An entry of ``txn`` is handed to storage: until it is placed, nothing after what
        is confirmed now is readable if it is the transaction's first (a caller that sees
        ``txn`` in ``open`` or ``unplaced`` may skip the call: nothing to note)."""
        if txn not in self.open and txn not in self.unplaced:
            last = self.topic.ledger.last_confirmed()
            self.unplaced[txn] = last if last is not None else NOTHING
            self.update_bound()

    def placed(self, txn: TxnId, position: Position | None) -> None:
        """The append of an entry of ``txn`` finished (``position`` None: it failed). The
        topic notes the common case itself, as the fast path here does
        (`PersistentTopic._persisted`: a later entry of a transaction whose `TxnLane` has
        its entry, in that entry's latest ledger)."""
        entry = self.open.get(txn)
        if entry is not None and position is not None and self.ready.done():
            # a later entry of an open transaction (one in ``open`` is neither ended nor
            # unplaced: `appending` notes only one not open, `_ended` drops both): the
            # bound is unchanged, and ``position`` too
            ledger, entry_id = position
            if ledger == entry.ledger:
                entry.ids.append(entry_id)
            else:
                entry.add(position)
            return
        unplaced = self.unplaced.pop(txn, None) is not None
        if position is not None:
            self._note(position)
            if txn in self.aborted or txn in self.ended:
                # stored after its end (an append in flight when the marker went): hidden
                # if it was aborted (the aborted index), visible if committed
                if txn in self.aborted:
                    self._drop_from_cursors([position])
            else:
                entry = self.open.get(txn)
                if entry is None:
                    entry = self._open_at(txn, position)
                    unplaced = True  # a new first entry: the bound moves
                entry.add(position)
                if not unplaced and self.ready.done():
                    return  # a later entry of an open transaction: the bound is unchanged
        self.update_bound()

    # -- ending ------------------------------------------------------------------------

    async def end(self, txn: TxnId, action: int, wait: bool = False) -> None:
        """Commit (``pb.COMMIT``) or abort (``pb.ABORT``) ``txn`` on this topic: the marker
        is appended and, once durable, the transaction's entries become visible (commit)
        or are skipped from then on (abort). Idempotent: a transaction already ended the
        same way, or never seen here, succeeds. Ending it the other way than it ended
        raises InvalidTxnStatus.

        Returns once the marker is appended, not once it is durable (unless ``wait``, the
        broker is in a cluster, or ``magnetarTransactionMarkerLingerMillis`` is 0): the
        coordinator's stored COMMITTING/ABORTING record is what makes the end durable (a
        restart tells this topic again), and the marker may linger in the ledger's write
        buffer for the next append (`append_marker`'s ``linger_s``), sharing its write and
        sync. Until the marker is durable the transaction stays open here (nothing of it is
        visible, and readers of later entries wait as behind any open transaction); a
        marker whose append fails after this returned is appended again (`_end_again`)."""
        if not self.ready.done():
            await asyncio.shield(self.ready)
        running = self._ending.get(txn)
        if running is not None:
            await asyncio.shield(running)
        if self._had_end(txn, action):
            return
        done, answered = self._mark(txn, action, 0.0 if wait else self._linger_s())
        if not answered:
            await asyncio.shield(done)

    def end_now(self, txn: TxnId, action: int) -> bool:
        """`end` (without ``wait``) where it returns without waiting: the buffer ready, no
        end of ``txn`` under way here, and its marker may linger (`_linger_s`). True: done
        as `end` would (``InvalidTxnStatus`` raised as there); False: nothing done, or the
        marker refused at once (`end` then waits for that end and raises its failure)."""
        if not self.ready.done() or txn in self._ending:
            return False
        linger_s = self._linger_s()
        if linger_s <= 0.0:
            return False
        if self._had_end(txn, action):
            return True
        return self._mark(txn, action, linger_s)[1]

    def _had_end(self, txn: TxnId, action: int) -> bool:
        """Whether ``txn`` needs no marker here: it ended the same way (the opposite way
        raises ``InvalidTxnStatus``) or was never seen (remembered as ended now)."""
        commit = action == pb.COMMIT
        if txn in self.aborted or txn in self.ended:
            was_commit = txn not in self.aborted and self.ended.get(txn, False)
            if was_commit != commit:
                raise BrokerError(pb.InvalidTxnStatus, (
                    f"transaction {txn_name(txn)} was {'committed' if was_commit else 'aborted'} "
                    f"on {self.topic.name}; it cannot be {'committed' if commit else 'aborted'}"))
            return True
        if txn not in self.open and txn not in self.unplaced:
            self._remember(txn, commit)  # never seen here: nothing to mark
            self._unverify(txn)
            return True
        return False

    def _linger_s(self) -> float:
        """How long an end's marker may wait for the next append. Only on a broker alone
        (no cluster): its coordinator is in this process, so a crash that loses the marker
        loses the coordinator's memory too, and its stored COMMITTING/ABORTING record has
        the topic told again at restart; in a cluster the coordinator may live on
        (elsewhere, or on after this topic moved) and forget the transaction once answered
        (no linger: the end waits for its marker)."""
        service = self.topic.service
        if service.cluster is not None:
            return 0.0
        return float(service.config.magnetarTransactionMarkerLingerMillis) / 1000

    def _mark(self, txn: TxnId, action: int,
              linger_s: float) -> tuple[asyncio.Future[None], bool]:
        """Append ``txn``'s marker: (the future done once it is durable and ``txn`` ended
        here, whether the end may be answered before that: the marker lingers)."""
        done: asyncio.Future[None] = self.ready.get_loop().create_future()  # (no getpid)
        self._ending[txn] = done
        # its later sends (none, from a client that waited for them before its end) ask
        # the coordinator again, which refuses them: the transaction is ending
        lane = self._unverify(txn)
        part = txn_marker_part(TXN_COMMIT if action == pb.COMMIT else TXN_ABORT, txn[0], txn[1],
                               fields=lane.fields if lane is not None else None)
        answered: bool | None = None  # (None until `append_marker_then` returned)
        at_once: tuple[Position | None, BaseException | None] | None = None

        def stored(position: Position | None, exc: BaseException | None) -> None:
            nonlocal at_once
            if answered is None:  # told before it returned (refused, or the always policy)
                at_once = (position, exc)
                return
            self._marker_stored(txn, action, done, answered, position, exc)

        append_marker_then(self.topic, part, stored, linger_s)
        answered = linger_s > 0.0 and at_once is None
        if at_once is not None:
            self._marker_stored(txn, action, done, False, *at_once)
        return done, answered

    def ends_settled(self) -> Awaitable[None] | None:
        """None if no end is under way here; else what waits until every end under way
        (its marker appended, maybe lingering) is durable and visible, its lingering
        markers written now: a reader asking for the last message id after a commit was
        answered sees the committed messages, as if the answer had waited for them."""
        if not self._ending:
            return None
        self.topic.ledger.write_lingering()
        ends = list(self._ending.values())

        async def settled() -> None:
            for end in ends:
                with contextlib.suppress(Exception):  # (failed: the end's own business)
                    await asyncio.shield(end)

        return settled()

    def _marker_stored(self, txn: TxnId, action: int, done: asyncio.Future[None],
                       answered: bool, position: Position | None,
                       exc: BaseException | None) -> None:
        """The marker of ``txn``'s end is durable at ``position`` (or failed: None, and
        ``exc``), told from the storage's completion of its batch: the transaction is
        ended here, readers given a pass; a failure is raised to a waiting `end`, or, if
        the end was answered already, the marker appended again (`_end_again`)."""
        if self._ending.get(txn) is done:
            del self._ending[txn]
        if position is None:
            exc = exc or StorageError("append failed")
            done.set_exception(exc)
            done.exception()  # retrieved: a waiting `end` gets it
            if answered:
                log.warning("topic %s: the %s marker of transaction %s was not stored (%s): "
                            "appended again", self.topic.name,
                            "commit" if action == pb.COMMIT else "abort", txn_name(txn), exc)
                self._end_again(txn, action)
            return
        self._ended(txn, action == pb.COMMIT, position)
        done.set_result(None)
        self.topic.txn_visibility_changed()
        self._maybe_snapshot()

    def _end_again(self, txn: TxnId, action: int) -> None:
        """Append ``txn``'s marker again, with a back-off, until it is durable or this
        buffer is not the topic's any more (unloaded: the coordinator's stored end is told
        again when the broker restarts)."""

        async def again() -> None:
            delay = 0.1
            while self.topic.txn_buffer is self and self.topic.ledger.is_open:
                await asyncio.sleep(delay)
                try:
                    await self.end(txn, action, wait=True)
                    return
                except Exception as exc:
                    log.warning("topic %s: ending transaction %s again failed: %s",
                                self.topic.name, txn_name(txn), exc)
                delay = min(delay * 2, 5.0)

        task = asyncio.ensure_future(again())
        _AGAIN.add(task)
        task.add_done_callback(_AGAIN.discard)

    def _ended(self, txn: TxnId, commit: bool, marker: Position | None) -> None:
        entry = self.open.pop(txn, None)
        self.unplaced.pop(txn, None)
        self._unverify(txn)
        if marker is not None:
            self._note(marker)
        if commit:
            self._remember(txn, True)
            self.committed_count += 1
        else:
            self.aborted[txn] = marker if marker is not None else self.position
            self.aborted_count += 1
        hidden = [] if entry is None or commit else entry.positions
        if marker is not None:
            hidden.append(marker)
        self._drop_from_cursors(hidden)
        self._since_snapshot += 1
        self.update_bound()

    def _remember(self, txn: TxnId, commit: bool) -> None:
        self.ended[txn] = commit
        if len(self.ended) > _ENDED_KEPT:
            self.ended.popitem(last=False)

    def _drop_from_cursors(self, positions: list[Position]) -> None:
        """Entries no reader will ever get (markers, aborted messages): acknowledged for
        every durable subscription now, so that backlogs never count them."""
        if not positions:
            return
        for sub in self.topic.subscriptions.values():
            cursor = getattr(sub, "cursor", None)
            if cursor is None or getattr(cursor, "closed", False):
                continue
            md = cursor.mark_delete_position
            cursor.delete([p for p in positions if p > md])

    # -- snapshots and recovery ----------------------------------------------------------

    def _maybe_snapshot(self) -> None:
        config = self.topic.service.config
        due = (self._since_snapshot >= config.transactionBufferSnapshotMaxTransactionCount
               or (time.monotonic() - self._snapshot_at) * 1000
               >= config.transactionBufferSnapshotMinTimeInMillis)
        if due:
            self.take_snapshot()

    def take_snapshot(self) -> asyncio.Future[None]:
        """Store the buffer's state with the ledger (one write at a time: one asked for
        meanwhile is written after it)."""
        running = self._snapshot_task
        if running is not None and not running.done():
            self._snapshot_again = True
            return running
        self._since_snapshot = 0
        self._snapshot_at = time.monotonic()
        text = json.dumps(self.snapshot(), separators=(",", ":"))
        task = asyncio.ensure_future(
            self.topic.ledger.set_property_async(SNAPSHOT_PROPERTY, text))

        def done(f: asyncio.Future[None]) -> None:
            if not f.cancelled() and f.exception() is not None:
                log.warning("topic %s: transaction buffer snapshot not stored: %s",
                            self.topic.name, f.exception())
            if self._snapshot_again:
                self._snapshot_again = False
                self.take_snapshot()

        task.add_done_callback(done)
        self._snapshot_task = task
        return task

    async def recover(self) -> None:
        """Replay the entries after the snapshot's position (their metadata), then be
        ready. Called once, when a topic with a stored snapshot is loaded."""
        started = time.monotonic()
        try:
            ledger = self.topic.ledger
            target = ledger.last_confirmed()
            at: Position | None = self.position
            while target is not None and at is not None and at < target:
                start = ledger.next_position(at) if at != NOTHING else ledger.first_position()
                if start is None or start > target:
                    break
                entries = await ledger.read_cold(start, _REPLAY_BATCH)
                if not entries:
                    break
                for position, data in entries:
                    if position > target:
                        break
                    self._replay(position, data)
                    at = position
                await asyncio.sleep(0)
            if target is not None and target > self.position:
                self.position = target
        except Exception:
            log.exception("topic %s: transaction buffer recovery failed", self.topic.name)
            raise
        finally:
            self.recovery_s = time.monotonic() - started
            if not self.ready.done():
                self.ready.set_result(None)
            self.update_bound()
            self.topic.txn_visibility_changed()
        log.info("topic %s: transaction buffer recovered in %.3f s: %d open, %d aborted",
                 self.topic.name, self.recovery_s, len(self.open), len(self.aborted))

    def _replay(self, position: Position, data: bytes | memoryview) -> None:
        metadata = entry_metadata(data)
        txn = txn_of(metadata)
        if metadata is None or txn is None:
            return
        if metadata.HasField("marker_type"):
            if metadata.marker_type in (TXN_COMMIT, TXN_ABORT):
                self.open.pop(txn, None)
                if metadata.marker_type == TXN_COMMIT:
                    self._remember(txn, True)
                else:
                    self.aborted[txn] = position
            return
        if txn in self.aborted or txn in self.ended:
            return
        entry = self.open.get(txn)
        if entry is None:
            entry = self._open_at(txn, position)
        entry.add(position)

    # -- stats ---------------------------------------------------------------------------

    def stats(self, low_water_marks: bool = False) -> dict[str, Any]:
        """Pulsar's ``TransactionBufferStats`` JSON."""
        last = self.topic.ledger.last_confirmed()
        bound = self.readable_last(last)
        out: dict[str, Any] = {
            "state": "Ready" if self.ready.done() else "Initializing",
            "maxReadPosition": str(bound) if bound is not None else None,
            "lastSnapshotTimestamps": 0,
            "ongoingTxnSize": len(self.open) + len(self.unplaced),
            "recoverStartTime": 0,
            "recoverEndTime": 0,
            "committedTxnCount": self.committed_count,
            "abortedTxnCount": self.aborted_count,
            "abortedIndexSize": len(self.aborted),
            "snapshotType": "Single",
        }
        if low_water_marks:
            out["lowWaterMarks"] = {}
        return out


def ends_under_way(topic: object) -> Awaitable[None] | None:
    """None if no transaction is ending on ``topic``; else what waits until those ending
    (their markers appended, maybe lingering: `TransactionBuffer.end`) are ended here, their
    lingering markers written now (`TransactionBuffer.ends_settled`)."""
    buf = getattr(topic, "txn_buffer", None)
    return None if buf is None else buf.ends_settled()


async def ends_settled(topic: object) -> None:
    """Wait until the transactions ending on ``topic`` are ended here (`ends_under_way`):
    what asks about the topic right after an EndTxn was answered (its last message id,
    its buffer's stats) sees the end, as if the answer had waited for the marker."""
    ends = ends_under_way(topic)
    if ends is not None:
        await ends


def stored_snapshot(properties: dict[str, str]) -> dict[str, Any] | None:
    """The buffer snapshot among a ledger's properties (None: the topic never had one)."""
    text = properties.get(SNAPSHOT_PROPERTY)
    if text is None:
        return None
    try:
        snap: dict[str, Any] = json.loads(text)
    except ValueError:
        log.error("unreadable transaction buffer snapshot %r: replaying from the start", text[:80])
        return {"pos": list(NOTHING)}
    return snap


__all__ = [
    "NOTHING", "SNAPSHOT_PROPERTY", "AcceptAll", "OpenTxn", "TransactionBuffer", "TxnChecker",
    "TxnId", "ends_settled", "ends_under_way", "stored_snapshot", "txn_name", "txn_of",
]
