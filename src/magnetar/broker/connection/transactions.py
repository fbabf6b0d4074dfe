"""The transaction coordinator's commands on a client connection: TcClientConnect, NewTxn,
AddPartitionToTxn, AddSubscriptionToTxn and EndTxn (`broker/transactions/`).

Each is answered by its own response command, an error included (``error`` and
``message``: `base.error_response`), since clients match them by type and request id.
With coordinators off each answers ``NotAllowedError``; a coordinator id that does not
exist or is not served here answers ``TransactionCoordinatorNotFound`` (the Java and Go
clients look the coordinator up again).

A connection's commands are handled in the order they came: a Send of a transaction read
after an AddPartitionToTxn of it on the same connection is stored only once that add is
done (at once on a broker alone; an add in a task holds the transaction's sends that
follow it: ``txn_adds``). Magnetar's client relies on it to write a transaction's first
send on a partition right behind the add, without waiting for the add's answer.

Records are written to the metadata store before the answer. On a broker alone, whose
coordinators' store writes on the loop (`TransactionCoordinator.inline`), a command to a
coordinator loaded here is done and answered as it is read, without a coroutine or a task
(the coordinator's `*_now` forms); an EndTxn whose participants cannot all be told at
once, a coordinator still to load, and every command in a cluster go on in a task
(`run_async`).

As in Pulsar, a transaction belongs to the role that opened it (its record's ``owner``; none
without authentication): AddPartitionToTxn, AddSubscriptionToTxn and EndTxn from another
role answer ``TransactionNotFound`` unless that role is a superuser (authentication and
authorization on; through a proxy both the proxy's role and the client's must be).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from magnetar.broker.connection.base import CnxBase
from magnetar.broker.errors import BrokerError
from magnetar.broker.security.authorization import CONSUME, PRODUCE
from magnetar.broker.topic_name import TopicName
from magnetar.broker.topics.send_settling import after_sends_settle
from magnetar.broker.transactions.coordinator import TransactionCoordinator
from magnetar.protocol import pb
from magnetar.protocol.fastpath import (
    ADD_PARTITION_TO_TXN_RESPONSE,
    ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
    END_TXN_RESPONSE,
    NEW_TXN_RESPONSE,
    txn_answer_frame,
)
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


class TransactionCommands(CnxBase):
    """The coordinator's commands (see the module docstring)."""

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
        if self.service.transactions.serving(req.tc_id) is not None:
            self.send(_tc_connected(req.request_id))
            return

        async def work() -> None:
            await self.service.transactions.get(req.tc_id)
            self.send(_tc_connected(req.request_id))

        self.run_async(cmd, work())

    def handle_new_txn(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.newTxn
        coordinator = self.service.transactions.serving_inline(req.tc_id)
        if coordinator is not None:
            rec = coordinator.new_txn_now(req.txn_ttl_seconds, self.principal or "")
            self.write(txn_answer_frame(NEW_TXN_RESPONSE, req.request_id, rec.tc, rec.seq))
            return

        async def work() -> None:
            coordinator = await self.service.transactions.get(req.tc_id)
            rec = await coordinator.new_txn(req.txn_ttl_seconds, self.principal or "")
            self.write(txn_answer_frame(NEW_TXN_RESPONSE, req.request_id, rec.tc, rec.seq))

        self.run_async(cmd, work())

    def handle_add_partition_to_txn(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.addPartitionToTxn
        loaded = self.service.topics
        # (a loaded topic's key is its full name: not parsed again)
        partitions = [p if p in loaded else _topic(p) for p in req.partitions]
        for name in partitions:
            self.authorize(name, PRODUCE)
        most, least = req.txnid_most_bits, req.txnid_least_bits

        def now(coordinator: TransactionCoordinator) -> None:
            coordinator.add_partitions_now(least, partitions)
            for name in partitions:  # checked open for them: their first sends need no check
                buf = getattr(loaded.get(name), "txn_buffer", None)
                if buf is not None:
                    buf.added((most, least))

        self._add_to_txn(cmd, most, least, now,
                         lambda coordinator: coordinator.add_partitions(least, partitions),
                         txn_answer_frame(ADD_PARTITION_TO_TXN_RESPONSE, req.request_id, most,
                                          least))

    def handle_add_subscription_to_txn(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.addSubscriptionToTxn
        subs = []
        for sub in req.subscription:
            name = _topic(sub.topic)
            if not sub.subscription:
                raise BrokerError(pb.NotAllowedError, f"empty subscription name for {name}")
            self.authorize(name, CONSUME)
            subs.append((name, sub.subscription))
        most, least = req.txnid_most_bits, req.txnid_least_bits
        self._add_to_txn(cmd, most, least,
                         lambda coordinator: coordinator.add_subscriptions_now(least, subs),
                         lambda coordinator: coordinator.add_subscriptions(least, subs),
                         txn_answer_frame(ADD_SUBSCRIPTION_TO_TXN_RESPONSE, req.request_id,
                                          most, least))

    def _add_to_txn(self, cmd: pb.BaseCommand, most: int, least: int,
                    now: Callable[[TransactionCoordinator], None],
                    later: Callable[[TransactionCoordinator], Awaitable[None]],
                    answer: bytes) -> None:
        """Add to transaction (``most``, ``least``) with ``now`` as the command is read when
        its coordinator is loaded here on a store that writes at once, else with ``later``
        in a task (the coordinator loaded first; noted in ``txn_adds`` until it ends, so
        that the transaction's sends read after it on this connection wait for it:
        `txn_sends`); then write ``answer`` (a frame)."""
        coordinator = self.service.transactions.serving_inline(most)
        if coordinator is not None:
            self._check_owner(coordinator, least)
            now(coordinator)
            if self.ends_txn_after_sends:  # (its sends may be right behind it: no wait)
                self.write_with_receipts(answer)
            else:
                self.write(answer)
            return

        async def work() -> None:
            coordinator = await self.service.transactions.get(most)
            self._check_owner(coordinator, least)
            await later(coordinator)
            self.write(answer)

        self.note_txn_add(most, least, self.run_async(cmd, work()))

    def handle_end_txn(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        action = cmd.endTxn.txn_action
        if action not in (pb.COMMIT, pb.ABORT):
            raise BrokerError(pb.NotAllowedError, f"unknown txn_action {action}")
        if (action == pb.COMMIT and self.ends_txn_after_sends
                and after_sends_settle(self.producers.values(),
                                       partial(self.run_handler, self._end_txn, cmd, frame),
                                       self.flush_soon, self.loop)):
            # decided once the Sends read before it here are answered; its answer leaves
            # in one write with their receipts
            return
        self._end_txn(cmd, frame)

    def _end_txn(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        """EndTxn, every Send read before it here answered (for a client that writes it
        behind its sends: `ends_txn_after_sends`). A commit after one of the transaction's
        Sends here was refused or dropped since its last EndTxn here is refused, the
        transaction left open: the client finds out which of its sends failed, then aborts,
        or commits again once they are all stored (a dropped send is sent again)."""
        if self.closed:
            return
        req = cmd.endTxn
        action = req.txn_action
        most, least = req.txnid_most_bits, req.txnid_least_bits
        lost = self.txn_lost
        if lost and (most, least) in lost:
            lost.discard((most, least))
            if action == pb.COMMIT:
                raise BrokerError(pb.NotAllowedError, (
                    f"a Send of transaction ({most},{least}) on this connection was refused or "
                    "dropped before this EndTxn: not committed, the transaction is still open "
                    "(abort it, or commit again once every send of it is stored)"))
        coordinator = self.service.transactions.serving_inline(most)
        if coordinator is not None:
            self._check_owner(coordinator, least)
            if coordinator.end_now(least, action == pb.COMMIT):
                self.write(txn_answer_frame(END_TXN_RESPONSE, req.request_id, most, least))
                return
            # (its end is under way: `end` waits for it)

        async def work() -> None:
            coordinator = await self.service.transactions.get(most)
            self._check_owner(coordinator, least)
            await coordinator.end(least, action == pb.COMMIT)
            self.write(txn_answer_frame(END_TXN_RESPONSE, req.request_id, most, least))

        self.run_async(cmd, work())


def _tc_connected(request_id: int) -> pb.BaseCommand:
    return T(type=T.TC_CLIENT_CONNECT_RESPONSE, tcClientConnectResponse=(
        pb.CommandTcClientConnectResponse(request_id=request_id)))
