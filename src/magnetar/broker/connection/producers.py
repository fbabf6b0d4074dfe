"""The producer commands of a connection (`ProducerCommands`): Producer, CloseProducer, and
the SEND path (`run_send`, `publish`: the hot path of a publish) with its per-connection
and broker-wide backpressure and the topic's publish rate.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.errors import BrokerError
from magnetar.broker.security.authorization import PRODUCE
from magnetar.protocol import pb
from magnetar.protocol.frames import (
    Frame,
    SendFrame,
    part_checksum,
)
from magnetar.storage.descriptors import ALARM, out_of_descriptors

if TYPE_CHECKING:
    from magnetar.broker.topics.producer import Producer

from magnetar.broker.connection.base import CNX_LOGGER, CnxBase

log = logging.getLogger(CNX_LOGGER)

T = pb.BaseCommand
#: How many producer ids the broker closed a connection remembers, to ignore the Sends
#: its client wrote before it read the CloseProducer (the oldest are forgotten first).
CLOSED_PRODUCERS_KEPT = 1024


class ProducerCommands(CnxBase):
    """Producers and the publish path."""

    def handle_producer(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.producer
        self.closed_producers.pop(req.producer_id, None)
        if req.producer_id in self.producers:
            existing = self.producers[req.producer_id]
            if existing.topic.name == req.topic:  # a retry of a request that already succeeded
                self.send(existing.success_command(req.request_id))
                return
            raise BrokerError(pb.ProducerBusy, f"producer id {req.producer_id} is already in use on this connection")
        self.service.check_topic_name(req.topic)
        # in a cluster: a topic served elsewhere gets ServiceNotReady (the client looks it
        # up again); a free one (a client sent here by assignedBrokerServiceUrl) is taken
        if self.service.cluster is not None and not self.ready_or_defer(
                self.service.cluster.claim(req.topic), self.handle_producer, cmd, frame):
            return
        self.authorize(req.topic, PRODUCE)
        self.security.limits.check_producer(self, req.topic)
        attacher = self.service.attacher
        if (self.loaded_or_defer(req.topic, True, self.handle_producer, cmd, frame)
                and self.ready_or_defer(attacher.producer_work(req), self.handle_producer, cmd, frame)
                and self.ready_or_defer(attacher.quota_read(req), self.handle_producer, cmd, frame)
                and self.ready_or_defer(attacher.name_holder_check(self._whole, req),
                                        self.handle_producer, cmd, frame)):
            attacher.create_producer(self._whole, req)

    def on_producer_ready(self, producer: Producer, request_id: int) -> None:
        producer.ready = True
        self.producers[producer.producer_id] = producer
        self.send(producer.success_command(request_id))

    def handle_send(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        """A SEND that protobuf parsed (a transactional or unusual one)."""
        self.run_send(SendFrame.from_command(cmd, frame.payload_part))

    def run_send(self, send: SendFrame) -> None:
        """Publish one SEND; a refusal or a bug becomes its SendError."""
        try:
            self.publish(send)
        except BrokerError as exc:
            log.info("%s: SEND refused (%s): %s", self.peer, pb.ServerError.Name(exc.code), exc)
            self._reply_send_error(send, exc.code, str(exc))
        except Exception as exc:  # a bug must not take the other connections down
            if out_of_descriptors(exc):
                self._reply_send_error(send, pb.ServiceNotReady, ALARM.raised("SEND"))
                return
            log.exception("%s: failed to handle SEND", self.peer)
            self._reply_send_error(send, pb.UnknownError, "internal broker error")

    def publish(self, send: SendFrame) -> None:
        producer = self.producers.get(send.producer_id)
        if producer is None and send.producer_id in self.closed_producers:
            # sent before the client read our CloseProducer: it sends it again where it
            # reconnects (Pulsar's "recently closed producer": ignored, the connection kept)
            log.debug("%s: Send for producer id %d, closed by the broker: ignored",
                      self.peer, send.producer_id)
            if send.txnid is not None:
                self.txn_send_lost(send.txnid)
            return
        if producer is None or not producer.ready:
            state = "unknown" if producer is None else "not yet ready (waiting for exclusive access)"
            self._protocol_violation(f"Send for {state} producer id {send.producer_id}")
            return
        payload = send.payload_part
        if payload is None:
            raise BrokerError(pb.UnknownError, "Send without a payload")
        part_crc = part_checksum(payload)  # the one CRC32C of this send: storage keeps it
        if part_crc is None:
            log.warning("%s: checksum mismatch from producer %s", self.peer, producer.name)
            self._reply_send_error(send, pb.ChecksumError, "checksum of the message does not match its content")
            return
        self.pending_sends += 1
        if self.pending_sends >= self.max_pending_sends and not self.reading_paused:
            self.reading_paused = True
            if self.transport is not None and not self.buffer_paused and not self.rate_holds:
                self.transport.pause_reading()
        size = len(payload)
        buffer = self.publish_buffer
        buffer.bytes += size
        if buffer.bytes >= buffer.limit and not self.buffer_paused:
            buffer.pause(self.service.connections)
        try:
            producer.publish(send, payload, size, part_crc)
        except BaseException:  # no answer will come for this send: release what it holds
            self.on_send_done(size)
            raise
        limits = producer.topic.limits
        if limits.generation != limits.store.generation:  # the policies changed
            limits.refresh()
        throttle = limits.publish_throttle
        if throttle is not None:  # the topic's publish rate (topics/topic_limits.py)
            throttle.published(self, send.num_messages, size)

    def _reply_send_error(self, send: SendFrame, code: pb.ServerError, message: str) -> None:
        if send.txnid is not None:
            self.txn_send_lost(send.txnid)
        self.send(T(type=T.SEND_ERROR, send_error=pb.CommandSendError(
            producer_id=send.producer_id, sequence_id=send.sequence_id, error=code, message=message)))

    def on_send_done(self, size: int) -> None:
        """A send was answered (receipt or error): it no longer counts against the limits."""
        self.pending_sends -= 1
        if self.reading_paused and self.pending_sends <= self.max_pending_sends // 2:
            self.reading_paused = False
            if (self.transport is not None and not self.closed and not self.buffer_paused
                    and not self.rate_holds):
                self.transport.resume_reading()
        buffer = self.publish_buffer
        buffer.bytes -= size
        if buffer.bytes < buffer.resume_below and buffer.paused:
            buffer.resume()

    def handle_close_producer(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        """Detach the producer at once; answer (and forget its id) after its last receipt,
        as Pulsar does, so no receipt names an id the client has closed."""
        req = cmd.close_producer
        producer = self.producers.get(req.producer_id)
        if producer is None:
            self.send_success(req.request_id)
            return
        producer.topic.remove_producer(producer)

        def closed() -> None:
            if self.producers.get(req.producer_id) is producer:
                del self.producers[req.producer_id]
            self.send_success(req.request_id)

        producer.after_answers(closed)

    def producer_closed_by_broker(self, producer: Producer) -> None:
        """Tell the client its producer is closed (`Producer.close_by_broker` calls this
        after the producer's last receipt) and forget the producer."""
        if self.producers.get(producer.producer_id) is producer:
            del self.producers[producer.producer_id]
            closed = self.closed_producers
            closed[producer.producer_id] = None
            if len(closed) > CLOSED_PRODUCERS_KEPT:
                del closed[next(iter(closed))]
            close = pb.CommandCloseProducer(producer_id=producer.producer_id, request_id=0)
            if producer.topic.moving_to is not None:  # its bundle moves: go straight there
                url, tls_url = producer.topic.moving_to
                close.assignedBrokerServiceUrl, close.assignedBrokerServiceUrlTls = url, tls_url
            self.send(T(type=T.CLOSE_PRODUCER, close_producer=close))
