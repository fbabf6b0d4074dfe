"""The transaction coordinator's commands on a client connection: TcClientConnect, NewTxn,
AddPartitionToTxn, AddSubscriptionToTxn and EndTxn (`broker/transactions/`).

Each is answered by its own response command, an error included (``error`` and
``message``: `base.error_response`), since clients match them by type and request id.
With coordinators off each answers ``NotAllowedError``; a coordinator id that does not
exist or is not served here answers ``TransactionCoordinatorNotFound`` (the Java and Go
clients look the coordinator up again). Records are written to the metadata store before
the answer. On a broker alone, whose coordinators' store writes on the loop, the work
starts at once (`run_now`) and a command is usually answered without a task or a loop
turn; whatever has to wait (the participants of an EndTxn, a contended lock) goes on from
the done callback of the future it waits for, stepped as a task would step it but without
one (`run_now`). In a cluster it runs in a task (`run_async`) from the start.

As in Pulsar, a transaction belongs to the role that opened it (its record's ``owner``; none
without authentication): AddPartitionToTxn, AddSubscriptionToTxn and EndTxn from another
role answer ``TransactionNotFound`` unless that role is a superuser (authentication and
authorization on; through a proxy both the proxy's role and the client's must be).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

from magnetar.broker.connection.base import CnxBase
from magnetar.broker.errors import BrokerError
from magnetar.broker.security.authorization import CONSUME, PRODUCE
from magnetar.broker.stepping import RAISED, WAITS, step
from magnetar.broker.topic_name import TopicName
from magnetar.broker.transactions.coordinator import TransactionCoordinator
from magnetar.protocol import pb
from magnetar.protocol.frames import Frame

T = pb.BaseCommand


def _topic(name: str) -> str:
    try:
        return str(TopicName.parse(name))
    except ValueError as exc:
        raise BrokerError(pb.InvalidTopicName, str(exc)) from None


def is_superuser(cnx: CnxBase) -> bool:
    """Whether ``cnx`` acts as a superuser: always with authorization off; else its role
    is one (and, through a proxy, the client's role too), as Pulsar decides it for the
    transaction commands."""
    authz = cnx.security.authorization
    if not (cnx.security.authentication.enabled and authz.enabled):
        return True
    identity = cnx.identity
    return (identity is not None and authz.is_super_user(identity.role)
            and (not identity.original_principal
                 or authz.is_super_user(identity.original_principal)))


class _Resumed:
    """Awaiting it goes on with ``coro``, started elsewhere and suspended on ``waiting``
    (what it yielded: a future, or None for a bare turn of the loop): the task that awaits
    this passes ``waiting`` up and each wake-up or exception down, as if it had run
    ``coro`` from its start."""

    __slots__ = ("coro", "waiting")

    def __init__(self, coro: Coroutine[Any, Any, None], waiting: Any) -> None:
        self.coro = coro
        self.waiting = waiting

    def __await__(self) -> Generator[Any, None, None]:
        coro, waiting = self.coro, self.waiting
        while True:
            try:
                yield waiting
            except BaseException as exc:  # the task was cancelled: into the coroutine
                try:
                    waiting = coro.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    waiting = coro.send(None)
                except StopIteration:
                    return


async def _resume(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
    await _Resumed(coro, waiting)


async def _raise(exc: Exception) -> None:
    raise exc


class TransactionCommands(CnxBase):
    """The coordinator's commands (see the module docstring)."""

    def run_now(self, cmd: pb.BaseCommand, work: Coroutine[Any, Any, None]) -> None:
        """`run_async`, but ``work`` runs at once up to where it first waits, and only what
        is left after that goes on from the futures it waits for (`_go_on`); a refusal or
        a bug is answered as there.
        Only where the coordinators' store is this broker's own (`inline_store`): its
        path never needs to be in a task (a cluster's store bounds its waits with
        ``asyncio.timeout``, which does), so elsewhere it is `run_async` from the start."""
        if not self.service.transactions.inline_store:
            self.run_async(cmd, work)
            return
        state, value = step(work)
        if state == WAITS:
            self._go_on(cmd, work, value)
        elif state == RAISED:
            self.run_async(cmd, _raise(value))  # answered as run_async answers it

    def _go_on(self, cmd: pb.BaseCommand, work: Coroutine[Any, Any, None], waiting: Any) -> None:
        """``work`` waits for ``waiting`` (what it yielded): a future of this loop resumes
        it from its done callback, one step at a time, as a task would but without one (an
        EndTxn waits once, for its end's task: no task and no loop turn of its own for
        the answer); anything else (a bare turn of the loop) goes on in a task."""
        if not (isinstance(waiting, asyncio.Future) and waiting.get_loop() is self.loop):
            self.run_async(cmd, _resume(work, waiting))
            return
        waiting._asyncio_future_blocking = False  # (taken, as a task takes it)

        def resume(_: object) -> None:
            try:
                state, value = step(work)
            except asyncio.CancelledError:  # (as a task ends, unanswered)
                return
            if state == WAITS:
                self._go_on(cmd, work, value)
            elif state == RAISED:
                self.run_async(cmd, _raise(value))  # answered as run_async answers it

        waiting.add_done_callback(resume)

    def _check_owner(self, coordinator: TransactionCoordinator, seq: int) -> None:
        """Raise ``TransactionNotFound`` unless this connection's role opened transaction
        ``seq`` (or it has no owner) or is a superuser."""
        owner = coordinator.get(seq).owner
        if not owner or owner == self.principal:
            return
        if (self.security.authentication.enabled and self.security.authorization.enabled
                and is_superuser(self)):
            return
        raise BrokerError(pb.TransactionNotFound, (
            f"role {self.principal} is neither the owner of transaction "
            f"({coordinator.tc},{seq}) nor a superuser"))

    def handle_tc_client_connect(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.tcClientConnectRequest

        async def work() -> None:
            await self.service.transactions.get(req.tc_id)
            self.send(T(type=T.TC_CLIENT_CONNECT_RESPONSE,
                        tcClientConnectResponse=pb.CommandTcClientConnectResponse(
                            request_id=req.request_id)))

        self.run_now(cmd, work())

    def handle_new_txn(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.newTxn

        async def work() -> None:
            coordinator = await self.service.transactions.get(req.tc_id)
            rec = await coordinator.new_txn(req.txn_ttl_seconds, self.principal or "")
            self.send(T(type=T.NEW_TXN_RESPONSE, newTxnResponse=pb.CommandNewTxnResponse(
                request_id=req.request_id, txnid_most_bits=rec.tc, txnid_least_bits=rec.seq)))

        self.run_now(cmd, work())

    def handle_add_partition_to_txn(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.addPartitionToTxn
        ids: dict[str, Any] = {"request_id": req.request_id, "txnid_most_bits": req.txnid_most_bits,
               "txnid_least_bits": req.txnid_least_bits}

        async def work() -> None:
            partitions = [_topic(p) for p in req.partitions]
            for name in partitions:
                self.authorize(name, PRODUCE)
            coordinator = await self.service.transactions.get(req.txnid_most_bits)
            self._check_owner(coordinator, req.txnid_least_bits)
            await coordinator.add_partitions(req.txnid_least_bits, partitions)
            self.send(T(type=T.ADD_PARTITION_TO_TXN_RESPONSE,
                        addPartitionToTxnResponse=pb.CommandAddPartitionToTxnResponse(**ids)))

        self.run_now(cmd, work())

    def handle_add_subscription_to_txn(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.addSubscriptionToTxn
        ids: dict[str, Any] = {"request_id": req.request_id, "txnid_most_bits": req.txnid_most_bits,
               "txnid_least_bits": req.txnid_least_bits}

        async def work() -> None:
            subs = []
            for sub in req.subscription:
                name = _topic(sub.topic)
                if not sub.subscription:
                    raise BrokerError(pb.NotAllowedError, f"empty subscription name for {name}")
                self.authorize(name, CONSUME)
                subs.append((name, sub.subscription))
            coordinator = await self.service.transactions.get(req.txnid_most_bits)
            self._check_owner(coordinator, req.txnid_least_bits)
            await coordinator.add_subscriptions(req.txnid_least_bits, subs)
            self.send(T(type=T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
                        addSubscriptionToTxnResponse=pb.CommandAddSubscriptionToTxnResponse(**ids)))

        self.run_now(cmd, work())

    def handle_end_txn(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.endTxn
        ids: dict[str, Any] = {"request_id": req.request_id, "txnid_most_bits": req.txnid_most_bits,
               "txnid_least_bits": req.txnid_least_bits}

        async def work() -> None:
            if req.txn_action not in (pb.COMMIT, pb.ABORT):
                raise BrokerError(pb.NotAllowedError, f"unknown txn_action {req.txn_action}")
            coordinator = await self.service.transactions.get(req.txnid_most_bits)
            self._check_owner(coordinator, req.txnid_least_bits)
            await coordinator.end(req.txnid_least_bits, req.txn_action == pb.COMMIT)
            self.send(T(type=T.END_TXN_RESPONSE, endTxnResponse=pb.CommandEndTxnResponse(**ids)))

        self.run_now(cmd, work())
