"""Transactions: ``Transaction`` and the client's side of the coordinators.

As the Java and Go clients do: the coordinators are the partitions of
``persistent://pulsar/system/transaction_coordinator_assign``; coordinator N is reached by
looking up partition N, and a connection to it starts with ``TcClientConnectRequest``.
``new_transaction`` takes the coordinators in turn (round-robin). A send in a transaction
first adds its partition to the transaction (``AddPartitionToTxn``, once per partition), an
acknowledgement its subscription (``AddSubscriptionToTxn``, once per subscription). The
send waits for the add's answer, as in the Java and Go clients, unless the coordinator is
reached over the producer's own connection to a Magnetar broker, which handles a
connection's commands in order: then the send is written right behind the add
(`Transaction._join_now`). Commit and abort wait for the transaction's sends (and adds)
first; a commit whose send or add failed aborts instead (``TransactionHasOperationFailed``).
Where all of a transaction's pending sends went over its coordinator's connection to a
Magnetar broker, the commit is written right behind them instead (`_ends_behind_sends`):
that broker answers it only once those sends are answered, and refuses it if one failed.
``EndTxn`` is sent again after a lost answer or a coordinator that moved (the broker
answers a repeated commit with success).

The NewTxn's ``txn_ttl_seconds`` carries milliseconds, as the Java and Go clients send it
(and as Pulsar's broker reads it).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from magnetar.client.backoff import Backoff
from magnetar.client.errors import RETRIABLE_CODES as _RETRIABLE
from magnetar.client.errors import (
    InvalidTxnStatus,
    NotConnected,
    PulsarException,
    ServerError,
    Timeout,
    TopicNotFound,
    TransactionCoordinatorNotFound,
    TransactionHasOperationFailed,
    TransactionNotFound,
    server_error,
)
from magnetar.protocol import pb

if TYPE_CHECKING:
    from magnetar.client.client import Client
    from magnetar.client.connection import Connection
    from magnetar.client.topic_producer import TopicProducer

log = logging.getLogger(__name__)
T = pb.BaseCommand

ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"

OPEN = "OPEN"
COMMITTING = "COMMITTING"
COMMITTED = "COMMITTED"
ABORTING = "ABORTING"
ABORTED = "ABORTED"
ERROR = "ERROR"
TIMEOUT = "TIMEOUT"

#: a transaction's list of operations is pruned of the done ones when it reaches this
#: length (or twice what was left pending at the last pruning)
_PRUNE_AT = 256


def _retriable(exc: BaseException) -> bool:
    if isinstance(exc, TransactionCoordinatorNotFound):
        return True
    if isinstance(exc, ServerError):
        return exc.code in _RETRIABLE
    return isinstance(exc, NotConnected | Timeout | ConnectionError | OSError)


def _check(body: Any) -> Any:
    if body.HasField("error"):
        raise server_error(body.error, body.message)
    return body


class Coordinators:
    """The client's connections to the transaction coordinators."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._count: int | None = None
        self._cnx: dict[int, Connection] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._turn = itertools.count()

    async def count(self) -> int:
        if self._count is None:
            try:
                n = await self._client._partitions(ASSIGN_TOPIC)
            except TopicNotFound as exc:
                raise TransactionCoordinatorNotFound(
                    pb.TransactionCoordinatorNotFound,
                    f"no transaction coordinators ({exc}): is transactionCoordinatorEnabled "
                    "on at the broker?") from None
            if n <= 0:
                raise TransactionCoordinatorNotFound(
                    pb.TransactionCoordinatorNotFound,
                    f"{ASSIGN_TOPIC} has no partitions: no transaction coordinators")
            self._count = n
        return self._count

    async def connection(self, tc: int) -> Connection:
        """A connection to coordinator ``tc`` (looked up, TcClientConnect sent)."""
        cnx = self._cnx.get(tc)
        if cnx is not None and not cnx.closed:
            return cnx
        lock = self._locks.setdefault(tc, asyncio.Lock())
        async with lock:
            cnx = self._cnx.get(tc)
            if cnx is not None and not cnx.closed:
                return cnx
            client = self._client
            address = await client._lookup.lookup(f"{ASSIGN_TOPIC}-partition-{tc}")
            cnx = await client._pool.get(address)
            _check(await cnx.request(T.TC_CLIENT_CONNECT_REQUEST, timeout=client._op_timeout,
                                     tc_id=tc))
            self._cnx[tc] = cnx
            return cnx

    @property
    def op_timeout(self) -> float:
        """The client's operation timeout, seconds."""
        return self._client._op_timeout

    def connected(self, tc: int) -> Connection | None:
        """The open connection to coordinator ``tc``, if there is one (no lookup)."""
        cnx = self._cnx.get(tc)
        return cnx if cnx is not None and not cnx.closed else None

    def forget(self, tc: int) -> None:
        self._cnx.pop(tc, None)

    async def call(self, tc: int, kind: int,
                   sent: tuple[Connection, int, asyncio.Future[Any]] | None = None,
                   **fields: Any) -> Any:
        """Send a coordinator command to ``tc`` and return its response body, retrying
        (with backoff, within the operation timeout) when the coordinator moved, is not
        ready or the connection dropped. ``sent``: the command was written already
        (``Connection.request_now`` on that connection): its answer is awaited first."""
        client = self._client
        deadline = time.monotonic() + client._op_timeout
        backoff = Backoff(0.1, 5.0)
        while True:
            try:
                if sent is not None:
                    cnx, rid, answer = sent
                    sent = None
                    return _check(await cnx.answer(kind, rid, answer, client._op_timeout))
                cnx = await self.connection(tc)
                return _check(await cnx.request(kind, timeout=client._op_timeout, **fields))
            except Exception as exc:
                if isinstance(exc, TransactionCoordinatorNotFound | NotConnected):
                    self.forget(tc)
                delay = backoff.next()
                if not _retriable(exc) or time.monotonic() + delay > deadline:
                    raise
                log.debug("transaction coordinator %d: %s; retried", tc, exc)
            await asyncio.sleep(delay)

    async def new_transaction(self, timeout_ms: int) -> Transaction:
        n = await self.count()
        tc = next(self._turn) % n
        body = await self.call(tc, T.NEW_TXN, tc_id=tc, txn_ttl_seconds=int(timeout_ms))
        return Transaction(self, body.txnid_most_bits, body.txnid_least_bits, timeout_ms,
                           opened_here=True)


class Transaction:
    """A transaction; create with ``Client.new_transaction`` (or ``Client.transaction`` for
    one made elsewhere, by id)."""

    def __init__(self, coordinators: Coordinators, most: int, least: int,
                 timeout_ms: int | None = None, opened_here: bool = False) -> None:
        self._coordinators = coordinators
        # opened by this client (NewTxn), so owned by its role: an add of it is refused
        # only if it ended, and then so is a send behind it (`_join_now`); a handle by id
        # may be another role's, whose adds the broker refuses while a send behind one
        # would pass its check: its sends wait for their add's answer
        self._opened_here = opened_here
        self._most = most
        self._least = least
        self._state = OPEN
        self._deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000.0
        self._partitions: dict[str, asyncio.Future[None]] = {}
        self._added: set[str] = set()  # the partitions whose AddPartitionToTxn succeeded
        # the partitions whose AddPartitionToTxn was written with its send (`_join_now`)
        self._joining: dict[str, Connection] = {}
        self._id = (most, least)
        self._subscriptions: dict[tuple[str, str], asyncio.Future[None]] = {}
        # its operations (sends) not yet seen done: checked in bulk, not by a callback each
        self._ops: list[asyncio.Future[Any]] = []
        # the producers (one topic or partition each) that sent in it (`_ends_behind_sends`)
        self._parts: set[TopicProducer] = set()
        self._prune_at = _PRUNE_AT
        self._failed: BaseException | None = None

    @property
    def id(self) -> tuple[int, int]:
        """(most bits, least bits): (coordinator id, sequence)."""
        return self._id

    @property
    def state(self) -> str:
        """OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED, ERROR or TIMEOUT."""
        if self._state == OPEN and self._deadline is not None and time.monotonic() > self._deadline:
            return TIMEOUT
        return self._state

    def __repr__(self) -> str:
        return f"Transaction({self._most}, {self._least}, {self.state})"

    # ------------------------------------------------------------ participants
    def _check_open(self, what: str) -> None:
        if self._state != OPEN:
            raise InvalidTxnStatus(pb.InvalidTxnStatus,
                                   f"cannot {what} transaction {self.id}: it is {self._state}")

    def _check_can_end(self, what: str, ending: str) -> None:
        """Open, or a try at the same end that failed (EndTxn is sent again: the
        coordinator answers a repeat of the end under way or done with success)."""
        if self._state not in (OPEN, ERROR, ending):
            raise InvalidTxnStatus(pb.InvalidTxnStatus,
                                   f"cannot {what} transaction {self.id}: it is {self._state}")

    async def _once(self, futures: dict[Any, asyncio.Future[None]], key: Any, kind: int,
                    **fields: Any) -> None:
        fut = futures.get(key)
        if fut is None or (fut.done() and fut.exception() is not None):
            fut = futures[key] = asyncio.ensure_future(self._coordinators.call(
                self._most, kind, txnid_most_bits=self._most, txnid_least_bits=self._least,
                **fields))
        await asyncio.shield(fut)

    def _joined(self, topic: str) -> bool:
        """Whether a send in ``topic`` may go at once: the transaction is open and
        ``topic`` was added to it (AddPartitionToTxn answered); a producer tests
        `_joined_on` before it joins: every send after a partition's first."""
        return self._state == OPEN and topic in self._added

    async def _add_partition(self, topic: str) -> None:
        """AddPartitionToTxn once for ``topic`` (a partition's full name)."""
        self._check_open("send in")
        if topic in self._added:
            return
        await self._once(self._partitions, topic, T.ADD_PARTITION_TO_TXN, partitions=[topic])
        self._added.add(topic)

    def _join_now(self, topic: str, cnx: Connection | None) -> asyncio.Future[None] | None:
        """AddPartitionToTxn for ``topic`` written now, its answer not awaited, when a send
        on ``cnx`` may follow it at once: the coordinator is reached over ``cnx`` itself
        and its broker handles a connection's commands in order
        (`Connection.txn_adds_in_order`: the send is stored only after the add). Returns
        the add's future (a send written after it on ``cnx`` needs nothing more), or
        None: the caller awaits `_add_partition` (always for a handle by id: see
        ``_opened_here``). Saves the send one round trip, the broker one wake-up and
        read per transaction and partition. Called only where `_joined_on` is false."""
        self._check_open("send in")
        if cnx is None or not cnx.txn_adds_in_order or not self._opened_here:
            return None
        fut = self._partitions.get(topic)
        if fut is not None and not (fut.done() and fut.exception() is not None):
            return None  # an add under way, not written on ``cnx`` (`_joined_on`): awaited
        if self._coordinators.connected(self._most) is not cnx:
            return None
        fields = {"txnid_most_bits": self._most, "txnid_least_bits": self._least,
                  "partitions": [topic]}
        rid, answer = cnx.request_now(T.ADD_PARTITION_TO_TXN, **fields)
        fut = self._partitions[topic] = asyncio.ensure_future(
            self._joined_when(topic, self._coordinators.call(
                self._most, T.ADD_PARTITION_TO_TXN, sent=(cnx, rid, answer), **fields)))
        self._joining[topic] = cnx
        self._track(fut)  # (its failure fails the commit, as the sends behind it fail)
        return fut

    def _joined_on(self, topic: str, cnx: Connection | None) -> bool:
        """`_joined`, or the add was written on ``cnx`` (`_join_now`) and not refused: a
        send written on ``cnx`` after it needs nothing more."""
        return self._state == OPEN and (topic in self._added
                                        or (cnx is not None and self._joining.get(topic) is cnx))

    async def _joined_when(self, topic: str, add: Awaitable[Any]) -> None:
        try:
            await add
        except BaseException:
            self._joining.pop(topic, None)  # refused: a later send asks again
            raise
        self._added.add(topic)

    async def _add_subscription(self, topic: str, subscription: str) -> None:
        self._check_open("acknowledge in")
        await self._once(self._subscriptions, (topic, subscription), T.ADD_SUBSCRIPTION_TO_TXN,
                         subscription=[pb.Subscription(topic=topic, subscription=subscription)])

    def _track(self, fut: asyncio.Future[Any]) -> None:
        """An operation (a send) commit and abort wait for."""
        ops = self._ops
        ops.append(fut)
        if len(ops) >= self._prune_at:
            self._prune()

    def _track_send(self, fut: asyncio.Future[Any], part: TopicProducer) -> None:
        """A send in this transaction by ``part``: commit and abort wait for it."""
        self._parts.add(part)
        self._track(fut)

    def _prune(self) -> None:
        """Forget the operations done (noting the first that failed): amortized, instead
        of a done-callback per send."""
        pending = []
        for fut in self._ops:
            if not fut.done():
                pending.append(fut)
            elif not fut.cancelled() and fut.exception() is not None and self._failed is None:
                self._failed = fut.exception()
        self._ops = pending
        self._prune_at = max(_PRUNE_AT, 2 * len(pending))

    # ------------------------------------------------------------------ ending
    async def commit(self) -> None:
        """Commit, once the transaction's sends are done (a send that failed: the
        transaction is aborted and ``TransactionHasOperationFailed`` raised)."""
        if self._state == COMMITTED:
            return
        self._check_can_end("commit", COMMITTING)
        cnx = self._ends_behind_sends()
        if cnx is not None and await self._commit_behind_sends(cnx):
            return
        await self._wait_ops()
        if self._failed is not None:
            await self._end(False)
            raise TransactionHasOperationFailed(
                f"transaction {self.id} aborted: one of its operations failed: {self._failed}")
        await self._end(True)

    def _ends_behind_sends(self) -> Connection | None:
        """The connection to write the commit on right behind the transaction's last
        sends, without waiting for their receipts, or None (the receipts are awaited
        first, as the Java and Go clients do). Only for a transaction opened here whose
        coordinator is reached over the one connection every pending send of it was
        written on (each of its producers' open batch is written out now), to a broker
        that commits only once the sends read before the EndTxn on that connection are
        answered, refusing the commit if one of the transaction's failed
        (`Connection.txn_ends_in_order`). Saves the broker a wake-up and a read per
        transaction."""
        if self._state != OPEN or not self._opened_here:
            return None
        self._prune()
        if self._failed is not None:
            return None  # a send failed already: aborted instead
        cnx = self._coordinators.connected(self._most)
        if cnx is None or not cnx.txn_ends_in_order:
            return None
        for part in self._parts:
            part.flush_now()
            if part.pending and part.cnx is not cnx:
                return None  # (elsewhere, or not written yet: reconnecting)
        return cnx

    async def _commit_behind_sends(self, cnx: Connection) -> bool:
        """EndTxn (commit) written on ``cnx`` now; True once committed. False: the
        broker refused it (a send of the transaction failed, or its end could not be
        decided), and nothing was committed: the caller waits for the sends and aborts or
        commits again as when it waits first. If ``cnx`` drops before the answer, whether
        the commit was done is not known: the sends are waited for (resent where the
        producers reconnect); if they all succeeded, committing again is right whichever
        it was; if one failed, an abort tells (refused as ``InvalidTxnStatus``: the first
        commit was done, with every send written before it)."""
        self._state = COMMITTING
        fields = {"txnid_most_bits": self._most, "txnid_least_bits": self._least,
                  "txn_action": pb.COMMIT}
        try:
            rid, answer = cnx.request_now(T.END_TXN, **fields)
            _check(await cnx.answer(T.END_TXN, rid, answer, self._coordinators.op_timeout))
        except (TransactionNotFound, InvalidTxnStatus):
            late = self._deadline is not None and time.monotonic() > self._deadline
            self._state = TIMEOUT if late else ERROR
            raise
        except ServerError:
            self._state = OPEN  # refused, decided: not committed
            return False
        except (NotConnected, Timeout, ConnectionError, OSError):
            await self._wait_ops()
            if self._failed is None:
                self._state = OPEN
                return False  # committed again: the same outcome whether it was or not
            try:
                await self._end(False)
            except InvalidTxnStatus:
                # committed by the first EndTxn, every send written before it included
                log.warning("transaction %s: committed, though a send of it failed "
                            "after its connection dropped (%s)", self.id, self._failed)
                self._state = COMMITTED
                return True
            raise TransactionHasOperationFailed(
                f"transaction {self.id} aborted: one of its operations failed: "
                f"{self._failed}") from None
        # answered after every send written before it (their answers came first)
        self._prune()
        self._state = COMMITTED
        return True

    async def abort(self) -> None:
        """Abort (the transaction's sends finish first; their messages are discarded)."""
        if self._state == ABORTED:
            return
        self._check_can_end("abort", ABORTING)
        await self._wait_ops()
        await self._end(False)

    async def _wait_ops(self) -> None:
        """Wait for the operations not done yet (the done ones are pruned first: an
        application that awaited its sends has them all done, and gathering them again
        would cost a callback and a loop turn's work each)."""
        self._prune()
        if self._ops:
            await asyncio.gather(*self._ops, return_exceptions=True)
            self._prune()

    async def _end(self, commit: bool) -> None:
        self._state = COMMITTING if commit else ABORTING
        try:
            await self._coordinators.call(
                self._most, T.END_TXN, txnid_most_bits=self._most, txnid_least_bits=self._least,
                txn_action=pb.COMMIT if commit else pb.ABORT)
        except (TransactionNotFound, InvalidTxnStatus):
            late = self._deadline is not None and time.monotonic() > self._deadline
            self._state = TIMEOUT if late else ERROR
            raise
        except PulsarException:
            self._state = ERROR
            raise
        self._state = COMMITTED if commit else ABORTED
