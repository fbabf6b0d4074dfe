"""The participant commands of transactions (`TxnParticipantCommands`): a coordinator's
broker tells a topic's owner that a transaction ended, with ``CommandEndTxnOnPartition``
(the topic's transaction buffer: `topics/transaction_buffer.py`) and
``CommandEndTxnOnSubscription`` (a subscription's pending acks:
`subscriptions/pending_acks.py`).

Both are idempotent: ending a transaction again the way it ended answers success, and so
does a topic or subscription that never saw it (or that does not exist). A topic this
broker does not serve answers ``ServiceNotReady`` (the coordinator looks it up again and
retries); a transaction ended the other way answers ``InvalidTxnStatus``. With
authentication and authorization on, only a superuser (the brokers' ``brokerClient*``
role) may send them: another role is answered ``TransactionNotFound``, as Pulsar does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from magnetar.broker.connection.base import CNX_LOGGER, CnxBase
from magnetar.broker.connection.transactions import is_superuser
from magnetar.broker.errors import BrokerError
from magnetar.broker.transactions.participants import end_on_partition, end_on_subscription
from magnetar.protocol import pb
from magnetar.storage import StorageError

if TYPE_CHECKING:
    from magnetar.protocol.frames import Frame

log = logging.getLogger(CNX_LOGGER)

T = pb.BaseCommand
#: how a participant command is answered: success (no code), or a code and a message
Answer = Callable[..., None]


class TxnParticipantCommands(CnxBase):
    """EndTxnOnPartition and EndTxnOnSubscription."""

    def handle_end_txn_on_partition(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.endTxnOnPartition
        txn = (req.txnid_most_bits, req.txnid_least_bits)

        def answer(code: pb.ServerError | None = None, message: str = "") -> None:
            resp = pb.CommandEndTxnOnPartitionResponse(
                request_id=req.request_id, txnid_most_bits=txn[0], txnid_least_bits=txn[1])
            if code is not None:
                resp.error, resp.message = code, message
            self.send(T(type=T.END_TXN_ON_PARTITION_RESPONSE, endTxnOnPartitionResponse=resp))

        async def end() -> None:
            await end_on_partition(self.service, req.topic, txn, req.txn_action, durable=True)

        self._end_participant(cmd, f"EndTxnOnPartition {txn} on {req.topic}", end, answer)

    def handle_end_txn_on_subscription(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.endTxnOnSubscription
        txn = (req.txnid_most_bits, req.txnid_least_bits)

        def answer(code: pb.ServerError | None = None, message: str = "") -> None:
            resp = pb.CommandEndTxnOnSubscriptionResponse(
                request_id=req.request_id, txnid_most_bits=txn[0], txnid_least_bits=txn[1])
            if code is not None:
                resp.error, resp.message = code, message
            self.send(T(type=T.END_TXN_ON_SUBSCRIPTION_RESPONSE,
                        endTxnOnSubscriptionResponse=resp))

        async def end() -> None:
            await end_on_subscription(self.service, req.subscription.topic,
                                      req.subscription.subscription, txn, req.txn_action)

        self._end_participant(
            cmd, f"EndTxnOnSubscription {txn} on {req.subscription.subscription}", end, answer)

    def _end_participant(self, cmd: pb.BaseCommand, what: str,
                         end: Callable[[], Awaitable[None]], answer: Answer) -> None:
        """Run ``end`` off this command's turn and answer: success, the refusal's code, or
        ServiceNotReady for a storage error (the coordinator retries)."""

        async def work() -> None:
            try:
                if not is_superuser(self):
                    raise BrokerError(pb.TransactionNotFound, (
                        f"role {self.principal} is not a superuser: {what} is for the "
                        "transaction coordinators"))
                await end()
            except BrokerError as exc:
                log.info("%s: %s refused: %s", self.peer, what, exc)
                if not self.closed:
                    answer(exc.code, str(exc))
                return
            except StorageError as exc:
                if not self.closed:
                    answer(pb.ServiceNotReady, f"storage error: {exc}; retry")
                return
            if not self.closed:
                answer()

        self.run_async(cmd, work())
