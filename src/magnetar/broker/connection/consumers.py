"""The consumer commands of a connection (`ConsumerCommands`): Subscribe, Flow, Ack,
redelivery, CloseConsumer, Unsubscribe, Seek, GetLastMessageId and ConsumerStats.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from magnetar.broker.errors import BrokerError
from magnetar.broker.security.authorization import CONSUME
from magnetar.broker.subscriptions.subscription import position_of
from magnetar.broker.topics.transaction_buffer import ends_under_way
from magnetar.protocol import pb
from magnetar.protocol.frames import (
    Frame,
)

if TYPE_CHECKING:
    from magnetar.broker.subscriptions.consumer import Consumer

from magnetar.broker.connection.base import CNX_LOGGER, CnxBase

log = logging.getLogger(CNX_LOGGER)

T = pb.BaseCommand


class ConsumerCommands(CnxBase):
    """Consumers, acknowledgements, seeks and consumer stats."""

    def _consumer(self, consumer_id: int) -> Consumer:
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            raise BrokerError(pb.ConsumerNotFound, f"consumer id {consumer_id} is not known on this connection")
        return consumer

    def handle_subscribe(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.subscribe
        if req.consumer_id in self.consumers:
            existing = self.consumers[req.consumer_id]
            if existing.subscription.topic.name == req.topic and existing.subscription.name == req.subscription:
                self.send_success(req.request_id)
                return
            raise BrokerError(pb.ConsumerBusy, f"consumer id {req.consumer_id} is already in use on this connection")
        self.service.check_topic_name(req.topic)
        if self.service.cluster is not None and not self.ready_or_defer(  # as for producers
                self.service.cluster.claim(req.topic), self.handle_subscribe, cmd, frame):
            return
        self.authorize(req.topic, CONSUME)
        self.security.limits.check_consumer(self, req.topic, req.subscription)
        attacher = self.service.attacher
        if (self.loaded_or_defer(req.topic, req.force_topic_creation, self.handle_subscribe, cmd, frame)
                and self.ready_or_defer(attacher.subscribe_work(req), self.handle_subscribe, cmd, frame)):
            attacher.subscribe(self._whole, req)

    def on_consumer_ready(self, consumer: Consumer, request_id: int) -> None:
        self.consumers[consumer.consumer_id] = consumer
        self.send_success(request_id)

    def handle_flow(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        flow = cmd.flow
        consumer = self.consumers.get(flow.consumer_id)
        if consumer is None:
            log.warning("%s: Flow for unknown consumer id %d", self.peer, flow.consumer_id)
            return
        consumer.flow(flow.messagePermits)

    def handle_ack(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        ack = cmd.ack
        consumer = self.consumers.get(ack.consumer_id)
        if consumer is None:
            if ack.HasField("request_id"):
                self._ack_response(ack, pb.ConsumerNotFound, f"consumer id {ack.consumer_id} is not known")
            else:
                log.warning("%s: Ack for unknown consumer id %d", self.peer, ack.consumer_id)
            return
        try:
            if consumer.subscription.acknowledge(consumer, ack):
                return  # applied later (an entry is read off the loop): see ack_applied
        except BrokerError as exc:
            self.ack_applied(ack, exc)
            return
        if ack.HasField("request_id"):
            self._ack_response(ack, None, "")

    def ack_applied(self, ack: pb.CommandAck, error: BrokerError | None) -> None:
        """Answer ``ack`` (if it asked for a receipt) now that it was applied, or refused
        with ``error`` (logged when nobody asked)."""
        if self.closed:
            return
        if error is None:
            if ack.HasField("request_id"):
                self._ack_response(ack, None, "")
        elif ack.HasField("request_id"):
            self._ack_response(ack, error.code, str(error))
        else:
            log.warning("%s: Ack refused: %s", self.peer, error)

    def _ack_response(self, ack: Any, error: pb.ServerError | None, message: str) -> None:
        resp = pb.CommandAckResponse(consumer_id=ack.consumer_id, request_id=ack.request_id)
        if ack.HasField("txnid_least_bits"):
            resp.txnid_least_bits = ack.txnid_least_bits
            resp.txnid_most_bits = ack.txnid_most_bits
        if error is not None:
            resp.error = error
            resp.message = message
        self.send(T(type=T.ACK_RESPONSE, ackResponse=resp))

    def handle_redeliver(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.redeliverUnacknowledgedMessages
        consumer = self.consumers.get(req.consumer_id)
        if consumer is None:
            log.warning("%s: redelivery for unknown consumer id %d", self.peer, req.consumer_id)
            return
        ids = [position_of(m) for m in req.message_ids]
        consumer.subscription.redeliver(consumer, ids)

    def handle_close_consumer(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.close_consumer
        consumer = self.consumers.pop(req.consumer_id, None)
        if consumer is not None:
            consumer.subscription.remove_consumer(consumer)
        self.send_success(req.request_id)

    def consumer_closed_by_broker(self, consumer: Consumer) -> None:
        if self.consumers.pop(consumer.consumer_id, None) is not None:
            close = pb.CommandCloseConsumer(consumer_id=consumer.consumer_id, request_id=0)
            moving_to = consumer.subscription.topic.moving_to
            if moving_to is not None:  # its bundle moves: go straight there
                close.assignedBrokerServiceUrl, close.assignedBrokerServiceUrlTls = moving_to
            self.send(T(type=T.CLOSE_CONSUMER, close_consumer=close))

    def handle_unsubscribe(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        """The subscription goes at once; the answer once its cursor's row is deleted
        (off the loop), as Pulsar answers after the cursor's deletion."""
        req = cmd.unsubscribe
        consumer = self._consumer(req.consumer_id)
        deleting = consumer.subscription.unsubscribe(consumer)
        self.consumers.pop(req.consumer_id, None)
        if deleting is None:
            self.send_success(req.request_id)
            return

        async def deleted() -> None:
            try:
                await asyncio.wrap_future(deleting)
            except Exception as exc:
                raise BrokerError(pb.MetadataError, f"unsubscribe failed to store: {exc}") from exc
            if not self.closed:
                self.send_success(req.request_id)

        self.run_async(cmd, deleted())

    def handle_seek(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.seek
        consumer = self._consumer(req.consumer_id)
        if not req.HasField("message_id") and not req.HasField("message_publish_time"):
            raise BrokerError(pb.MetadataError, "Seek needs a message id or a publish time")
        task = asyncio.ensure_future(self._seek(consumer.subscription, req))
        task.add_done_callback(lambda t: self._seek_done(consumer, req.request_id, t))

    async def _seek(self, sub: Any, req: pb.CommandSeek) -> None:
        """Move the subscription (a seek by time searches the ledger off the loop) and
        store the cursor's new position off the loop; `_seek_done` answers once it is."""
        if req.HasField("message_id"):
            sub.seek_to_id(position_of(req.message_id))
        else:
            await sub.seek_to_time_async(req.message_publish_time)
        await sub.cursor.persist_async()

    def _seek_done(self, consumer: Consumer, request_id: int, task: Any) -> None:
        if self.closed:
            return
        exc = task.exception() if not task.cancelled() else BrokerError(
            pb.ServiceNotReady, "seek cancelled: the broker is stopping")
        if exc is not None:
            code = exc.code if isinstance(exc, BrokerError) else pb.UnknownError
            if not isinstance(exc, BrokerError):
                log.error("%s: seek failed: %r", self.peer, exc)
            self.send_error(request_id, code, str(exc))
            return
        # As Pulsar does: the consumers are closed before the seek is answered, so a client
        # takes the seek's reconnection path (it drops what it holds and any filter it
        # kept from an earlier seek) instead of treating the close as an ordinary one. Both
        # in one turn: a consumer reconnecting before the answer would be sent entries
        # the client drops when the answer comes (what went to the old one is redelivered).
        consumer.subscription.disconnect_for_seek()
        self.send_success(request_id)

    def handle_get_last_message_id(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        """Answered at once when the last entry is in the read cache; else once it was
        read on the storage's reader threads (a slow disk delays only this request)."""
        req = cmd.getLastMessageId
        sub = self._consumer(req.consumer_id).subscription
        partition = sub.topic.topic_name.partition_index
        ends = ends_under_way(sub.topic)
        if ends is not None:  # a transaction ending here: answered once its marker is durable

            async def after_ends() -> None:
                await ends
                ids = await sub.last_message_id_async()
                if not self.closed:
                    self._send_last_message_id(req.request_id, partition, *ids)

            self.run_async(cmd, after_ends())
            return
        answer = sub.last_message_id()
        if answer is not None:
            self._send_last_message_id(req.request_id, partition, *answer)
            return

        async def read() -> None:
            ids = await sub.last_message_id_async()
            if not self.closed:
                self._send_last_message_id(req.request_id, partition, *ids)

        self.run_async(cmd, read())

    def _send_last_message_id(self, request_id: int, partition: int, last: pb.MessageIdData,
                              mark_delete: pb.MessageIdData | None) -> None:
        """The answer names the topic's partition index in the last id, as Pulsar's does."""
        resp = pb.CommandGetLastMessageIdResponse(request_id=request_id)
        resp.last_message_id.CopyFrom(last)
        if partition >= 0:
            resp.last_message_id.partition = partition
        if mark_delete is not None:
            resp.consumer_mark_delete_position.CopyFrom(mark_delete)
        self.send(T(type=T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=resp))

    def handle_consumer_stats(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.consumerStats
        consumer = self.consumers.get(req.consumer_id)
        if consumer is None:
            resp = pb.CommandConsumerStatsResponse(
                request_id=req.request_id, error_code=pb.ConsumerNotFound,
                error_message=f"consumer id {req.consumer_id} is not known",
            )
        else:
            resp = consumer.stats_response(req.request_id)
        self.send(T(type=T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=resp))
