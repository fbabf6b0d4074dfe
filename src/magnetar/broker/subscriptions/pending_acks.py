"""Pending acks: a subscription's acknowledgements made in transactions (Pulsar's
``PendingAckHandleImpl``).

An Ack with a transaction id is held here, not applied: individual acks (a whole entry or
batch indexes) and at most one cumulative ack at a time. The messages acked leave their
consumer's unacknowledged set and are not dispatched again meanwhile. At commit
(``CommandEndTxnOnSubscription`` COMMIT) the acks are applied to the cursor as ordinary
ones would be (and the cursor is stored before the answer); at abort they are dropped and
the messages are delivered again. Conflicts answer ``TransactionConflict``: acking in a
transaction a message already acknowledged, or one (or a batch index) another open
transaction holds, or a cumulative ack while another transaction holds one.

Durability: the held acks of a subscription are stored, with every change and before its
AckResponse, in the ledger property ``txnPendingAck/{subscription}`` (JSON), and read back
when the subscription is loaded. The changes made while a write is under way share the
next one (`_store`): a transaction's acknowledgements, sent together, cost a write or two
of the state, not one each (each write holds every held ack, so one per ack made a
transaction of n acknowledgements cost n writes of up to n acks). A subscription that
never saw a transactional ack has no `PendingAcks` (``PersistentSubscription.pending_acks``
is None) and pays nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magnetar.broker.entries import entry_metadata, entry_num_messages
from magnetar.broker.errors import BrokerError
from magnetar.broker.subscriptions import ack_set as ack_sets
from magnetar.protocol import pb
from magnetar.storage import Position, StorageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from magnetar.broker.subscriptions.consumer import Consumer
    from magnetar.broker.subscriptions.subscription import PersistentSubscription

log = logging.getLogger(__name__)

TxnId = tuple[int, int]
#: the ledger property prefix of a subscription's pending acks
PROPERTY_PREFIX = "txnPendingAck/"
_ENDED_KEPT = 10_000


def _name(txn: TxnId) -> str:
    return f"({txn[0]},{txn[1]})"


@dataclass
class TxnAcks:
    """What one transaction acknowledged on the subscription."""

    individual: dict[Position, list[int]] = field(default_factory=dict)  # [] = whole entry
    cumulative: tuple[Position, list[int]] | None = None


def _acked_bits(words: list[int], count: int) -> set[int]:
    """The batch indexes an ack set acknowledges (its cleared bits, below ``count``)."""
    return {i for i in range(count) if not (words[i // 64] >> (i % 64)) & 1} if words else set(range(count))


class PendingAcks:
    """The transactional acks of one persistent subscription (module docstring)."""

    def __init__(self, sub: PersistentSubscription, stored: dict[str, Any] | None = None) -> None:
        self.sub = sub
        self.txns: dict[TxnId, TxnAcks] = {}
        # position -> the transactions holding (part of) it
        self.held: dict[Position, set[TxnId]] = {}
        self.verified: set[TxnId] = set()
        self.ended: OrderedDict[TxnId, bool] = OrderedDict()
        self.committed_count = 0
        self.aborted_count = 0
        #: the write of the state under way, and the one the changes made since it began
        #: wait for (started once it is done: `_store`)
        self._writing: asyncio.Future[None] | None = None
        self._next: asyncio.Future[None] | None = None
        if stored:
            self._load(stored)

    @property
    def key(self) -> str:
        return PROPERTY_PREFIX + self.sub.name

    @classmethod
    def restore(cls, sub: PersistentSubscription) -> PendingAcks | None:
        """The pending acks stored for ``sub`` (None: none)."""
        text = sub.topic.ledger.properties.get(PROPERTY_PREFIX + sub.name)
        if not text:
            return None
        try:
            stored = json.loads(text)
        except ValueError:
            log.error("%s/%s: unreadable pending acks dropped", sub.topic.name, sub.name)
            return None
        acks = cls(sub, stored)
        return acks if acks.txns else None

    # -- state ---------------------------------------------------------------------------

    def _load(self, stored: dict[str, Any]) -> None:
        for most, least, lid, eid, words in stored.get("ind", []):
            self._hold((most, least), Position(lid, eid), list(words))
        for most, least, lid, eid, words in stored.get("cum", []):
            self.txns.setdefault((most, least), TxnAcks()).cumulative = (Position(lid, eid), list(words))

    def _state(self) -> dict[str, Any]:
        ind = [[t[0], t[1], p[0], p[1], w] for t, a in self.txns.items() for p, w in a.individual.items()]
        cum = [[t[0], t[1], a.cumulative[0][0], a.cumulative[0][1], a.cumulative[1]]
               for t, a in self.txns.items() if a.cumulative is not None]
        return {"ind": ind, "cum": cum}

    async def _store(self) -> None:
        """Return once the held acks as they are now are stored (in order with the
        ledger's other property writes). Callers share writes: the state is taken when a
        write begins, the next turn of the loop or once the write under way is done, so
        every change made before this call is in the write it waits for."""
        waiting = self._next
        if waiting is None:
            waiting = self._next = asyncio.get_running_loop().create_future()
            if self._writing is None:
                asyncio.get_running_loop().call_soon(self._write_next)
        await asyncio.shield(waiting)

    def _write_next(self) -> None:
        """Begin the write that the callers of `_store` since the last one wait for."""
        waiting, self._next = self._next, None
        if waiting is None:
            return
        text = json.dumps(self._state(), separators=(",", ":")) if self.txns else ""
        writing = self._writing = asyncio.ensure_future(
            self.sub.topic.ledger.set_property_async(self.key, text))

        def written(done: asyncio.Future[None]) -> None:
            self._writing = None
            error = None if done.cancelled() else done.exception()
            if done.cancelled():
                waiting.cancel()
            elif error is not None:
                waiting.set_exception(error)
                waiting.exception()  # (retrieved: a caller gone meanwhile is no error)
            else:
                waiting.set_result(None)
            if self._next is not None:  # changes made while this one was written
                self._write_next()

        writing.add_done_callback(written)

    def _hold(self, txn: TxnId, p: Position, words: list[int]) -> None:
        acks = self.txns.setdefault(txn, TxnAcks())
        known = acks.individual.get(p)
        if known is not None and words and known:
            words = [a & b for a, b in zip(known, words, strict=False)]
        elif known is not None and not known:
            words = []
        acks.individual[p] = words
        self.held.setdefault(p, set()).add(txn)

    def holds(self, p: Position) -> bool:
        """Whether a transaction holds the whole entry at ``p`` (not dispatched meanwhile)."""
        txns = self.held.get(p)
        if not txns:
            return False
        return any(not self.txns[t].individual.get(p) for t in txns)

    def skip_filter(self, is_deleted: Callable[[Position], bool]) -> Callable[[Position], bool]:
        """``is_deleted`` widened to the entries transactions hold (for dispatchers)."""
        if not self.held:
            return is_deleted
        holds = self.holds
        return lambda p: is_deleted(p) or holds(p)

    # -- acks ------------------------------------------------------------------------------

    async def acknowledge(self, ack: pb.CommandAck, targets: list[tuple[Position, list[int]]],
                          counts: dict[Position, int]) -> None:
        """Hold ``ack`` (its positions and batch ack sets: ``targets``; ``counts``: the
        message count of each batch entry) for its transaction, stored before this
        returns. BrokerError: TransactionConflict, or the checker's refusal."""
        txn = (ack.txnid_most_bits, ack.txnid_least_bits)
        sub = self.sub
        if txn in self.ended:
            raise BrokerError(pb.InvalidTxnStatus,
                              f"transaction {_name(txn)} already ended on subscription {sub.name}")
        if txn not in self.verified:
            await sub.topic.service.txn_checker.check_open(txn[0], txn[1], sub.topic.name, sub.name)
            self.verified.add(txn)
        cumulative = ack.ack_type == pb.CommandAck.Cumulative
        self._check(txn, targets, counts, cumulative)
        if cumulative:
            position, words = targets[-1]
            acks = self.txns.setdefault(txn, TxnAcks())
            if acks.cumulative is None or acks.cumulative[0] < position:
                acks.cumulative = (position, words)
        else:
            for position, words in targets:
                self._hold(txn, position, words)
                for consumer in sub.consumers:
                    if not words and consumer.pending.pop(position, None) is not None:
                        break
        await self._store()

    def _check(self, txn: TxnId, targets: list[tuple[Position, list[int]]],
               counts: dict[Position, int], cumulative: bool) -> None:
        cursor = self.sub.cursor
        md = cursor.mark_delete_position
        if cumulative:
            position = targets[-1][0]
            for other, acks in self.txns.items():
                if other != txn and acks.cumulative is not None:
                    raise BrokerError(pb.TransactionConflict, (
                        f"transaction {_name(other)} holds a cumulative ack on subscription "
                        f"{self.sub.name}; {_name(txn)} cannot ack cumulatively"))
            if position <= md:
                raise BrokerError(pb.TransactionConflict, (
                    f"{position} is already acknowledged on subscription {self.sub.name}"))
            return
        for position, words in targets:
            if position <= md or cursor.is_deleted(position):
                raise BrokerError(pb.TransactionConflict, (
                    f"message {position} is already acknowledged on subscription {self.sub.name}"))
            count = counts.get(position, 1)
            mine = _acked_bits(words, count)
            stored = cursor.batch_ack_set(position)
            if words and stored is not None and mine - _acked_bits(stored, count) != mine:
                raise BrokerError(pb.TransactionConflict, (
                    f"a batch index of {position} is already acknowledged on {self.sub.name}"))
            for other in self.held.get(position, ()):
                if other == txn:
                    continue
                theirs = _acked_bits(self.txns[other].individual.get(position, []), count)
                if mine & theirs:
                    raise BrokerError(pb.TransactionConflict, (
                        f"message {position} is acknowledged in transaction {_name(other)} "
                        f"on subscription {self.sub.name}"))

    # -- ending ----------------------------------------------------------------------------

    async def end(self, txn: TxnId, action: int) -> None:
        """Commit (apply) or abort (drop, deliver again) what ``txn`` held; idempotent."""
        commit = action == pb.COMMIT
        acks = self.txns.pop(txn, None)
        self.verified.discard(txn)
        if acks is None:
            self._remember(txn, commit)
            return
        for p in acks.individual:
            holders = self.held.get(p)
            if holders is not None:
                holders.discard(txn)
                if not holders:
                    del self.held[p]
        sub = self.sub
        if commit:
            self.committed_count += 1
            self._apply(acks)
            cursor = sub.cursor
            if hasattr(cursor, "persist_async"):
                await cursor.persist_async()
        else:
            self.aborted_count += 1
            self._redeliver(acks)
        self._remember(txn, commit)
        await self._store()

    def _remember(self, txn: TxnId, commit: bool) -> None:
        self.ended[txn] = commit
        if len(self.ended) > _ENDED_KEPT:
            self.ended.popitem(last=False)

    def _apply(self, acks: TxnAcks) -> None:
        sub = self.sub
        cursor = sub.cursor
        before = cursor.mark_delete_position
        deleted = ack_sets.settle_individual(cursor, acks.individual.items())
        if deleted:
            cursor.delete(deleted)
            for p in deleted:
                sub.redelivery_counts.pop(p, None)
                for consumer in sub.consumers:
                    consumer.pending.pop(p, None)
        if acks.cumulative is not None:
            position, words = acks.cumulative
            if words and not ack_sets.is_all_acked(words):
                sub.mark_delete_to(Position(position[0], position[1] - 1))
                cursor.set_batch_ack(position, words)
            else:
                sub.mark_delete_to(position)  # (the consumers' unacked entries up to it too)
        sub.acks_applied(before)

    def _redeliver(self, acks: TxnAcks) -> None:
        sub = self.sub
        dispatcher = sub.dispatcher
        if dispatcher is None:
            return
        positions = [p for p, words in acks.individual.items() if not words]
        if acks.cumulative is not None:
            upto = acks.cumulative[0]
            for consumer in sub.consumers:
                mine = [p for p in consumer.pending if p <= upto]
                for p in mine:
                    del consumer.pending[p]
                positions.extend(mine)
        if hasattr(dispatcher, "active"):  # Exclusive/Failover keep order: from the first unacked
            dispatcher.rewind()
        elif positions:
            dispatcher.redeliver_positions(sorted(set(positions)), None, count=False)
        dispatcher.schedule()

    # -- stats -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Pulsar's ``TransactionPendingAckStats`` JSON (with Magnetar's counts)."""
        return {
            "state": "Ready",
            "lowWaterMarks": {},
            "ongoingTxnSize": len(self.txns),
            "committedTxnCount": self.committed_count,
            "abortedTxnCount": self.aborted_count,
        }


#: the transactional acks being held (a reference keeps each task alive until done)
_ACKING: set[asyncio.Future[None]] = set()


def acknowledge_in_txn(sub: PersistentSubscription, consumer: Consumer, ack: pb.CommandAck) -> bool:
    """Hold ``ack`` (it has a transaction id) in ``sub``'s pending acks; answered through
    ``consumer.cnx.ack_applied`` once stored (or refused). Always True: answered later."""
    if not sub.durable:
        raise BrokerError(pb.NotAllowedError,
                          f"subscription {sub.name} is not durable: no acknowledgement in a transaction")
    acks = sub.pending_acks
    if acks is None:
        acks = sub.pending_acks = PendingAcks(sub)

    async def run() -> None:
        error: BrokerError | None = None
        try:
            targets, unread = sub.ack_targets(consumer, ack, None)
            counts: dict[Position, int | Exception] = {}
            if unread:
                read = await sub.topic.ledger.read_positions_cold(unread)
                counts.update((p, entry_num_messages(entry_metadata(d))) for p, d in read.entries)
                counts.update(read.failed)
                targets, _ = sub.ack_targets(consumer, ack, counts)
            sizes = {}
            for p, words in targets:
                if words:
                    known = consumer.pending.get(p) or counts.get(p)
                    if not isinstance(known, int):
                        known = sub.stored_count(p)
                    sizes[p] = known if isinstance(known, int) and known > 0 else 64 * len(words)
            await acks.acknowledge(ack, targets, sizes)
        except BrokerError as exc:
            error = exc
        except StorageError as exc:
            error = BrokerError(pb.ServiceNotReady, f"pending acks not stored: {exc}")
        except Exception:
            log.exception("%s/%s: acknowledgement in a transaction failed", sub.topic.name, sub.name)
            error = BrokerError(pb.UnknownError, "internal broker error")
        if not consumer.cnx.closed:
            consumer.cnx.ack_applied(ack, error)

    task = asyncio.ensure_future(run())
    _ACKING.add(task)
    task.add_done_callback(_ACKING.discard)
    return True


__all__ = ["PROPERTY_PREFIX", "PendingAcks", "TxnAcks", "acknowledge_in_txn"]
