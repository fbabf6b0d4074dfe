"""The machinery every command family of `ServerCnx` stands on (`CnxBase`): transport
events, frame decoding and dispatch to the handler table, running handlers (refusals and
bugs become error replies), work finished off the loop, output batching (one write per
turn), backpressure, the authorization check, and `PublishBuffer`, the broker-wide
count of unanswered publish bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from magnetar.broker.connection.txn_responses import TXN_RESPONSES, txn_error_response
from magnetar.broker.connection.with_receipts import AnswersWithReceipts
from magnetar.broker.errors import BrokerError
from magnetar.metadata import MetadataStoreError
from magnetar.protocol import pb
from magnetar.protocol.errors import FrameTooLarge, ProtocolError
from magnetar.protocol.frames import (
    Frame,
    FrameDecoder,
    SendFrame,
    encode_command,
    encode_payload_command,
)
from magnetar.protocol.peers import MAGNETAR_BROKER
from magnetar.protocol.sniff import HTTP_ON_BINARY_PORT_REPLY, is_http_request
from magnetar.storage import StorageError
from magnetar.storage.descriptors import ALARM, out_of_descriptors

if TYPE_CHECKING:
    from collections.abc import Iterable

    from magnetar.broker.connection.server_cnx import ServerCnx
    from magnetar.broker.security.auth.service import Identity
    from magnetar.broker.service import BrokerService
    from magnetar.broker.subscriptions.consumer import Consumer
    from magnetar.broker.topics.producer import Producer

#: The one logger of a connection, whichever part of `ServerCnx` logs (operators and
#: tests filter on it).
CNX_LOGGER = "magnetar.broker.connection.server_cnx"
log = logging.getLogger(CNX_LOGGER)

T = pb.BaseCommand
#: the request id of an Error that answers no request (a refused Connect): -1 on the wire
NO_REQUEST = (1 << 64) - 1
FRAME_OVERHEAD = 10 * 1024
#: Bytes of messages one connection queues in an event-loop turn before its dispatchers wait
#: for the next turn (then for the transport to drain, if its buffer is above high water).
OUT_BUFFER_LIMIT = 1 << 20
#: A turn's output smaller than this is joined into one buffer before the write; larger
#: output goes to ``transport.writelines`` as it was queued (uvloop writes it with one
#: ``writev``), so stored payloads are never copied on their way to the socket.
JOIN_BELOW = 16 * 1024
SERVER_VERSION = f"{MAGNETAR_BROKER}-v0.1.0"


class PublishBuffer:
    """Broker-wide count of the payload bytes of sends not yet answered
    (``maxMessagePublishBufferSizeInMB``), and the connections it stopped reading."""

    def __init__(self, limit_mb: int) -> None:
        self.bytes = 0
        self.limit = limit_mb * 1024 * 1024 if limit_mb > 0 else _NO_LIMIT
        self.resume_below = self.limit // 2
        self.paused: list[CnxBase] = []

    def pause(self, connections: Iterable[CnxBase]) -> None:
        """Stop reading from every connection that has producers."""
        for cnx in connections:
            if cnx.producers and not cnx.buffer_paused and not cnx.closed:
                cnx.buffer_paused = True
                self.paused.append(cnx)
                if not cnx.reading_paused and cnx.transport is not None:
                    cnx.transport.pause_reading()
        log.info("publish buffer full (%d bytes pending, limit %d): %d connections paused",
                 self.bytes, self.limit, len(self.paused))

    def resume(self) -> None:
        paused, self.paused = self.paused, []
        for cnx in paused:
            cnx.buffer_paused = False
            if (not cnx.reading_paused and not cnx.rate_holds and not cnx.closed
                    and cnx.transport is not None):
                cnx.transport.resume_reading()
        log.info("publish buffer below %d bytes: %d connections resumed",
                 self.resume_below, len(paused))


_NO_LIMIT = 1 << 62


class CnxBase(AnswersWithReceipts, asyncio.BufferedProtocol):
    """What every part of a client connection shares; see the module docstring."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.config = service.config
        self.loop = asyncio.get_running_loop()
        self.decoder = FrameDecoder(max_frame_size=self.config.maxMessageSize + FRAME_OVERHEAD,
                                    send_frames=True)
        self.transport: asyncio.Transport | None = None
        self.connected = False
        self.closed = False
        self.client_version = ""
        self.understands_end_of_topic = True
        self.remote_protocol_version = 0
        self.principal: str | None = None
        # security (broker/security.py): who the peer is, credentials refresh, limits
        self.security = service.security
        self.identity: Identity | None = None
        self.auth_task: asyncio.Task[None] | None = None
        self.auth_challenge_pending = False
        self.supports_auth_refresh = False
        self.server_version = SERVER_VERSION
        self.counted_ip: str | None = None
        self.lookups_held = 0  # maxConcurrentLookupRequest slots held until the next flush
        self.handshake_timer: asyncio.TimerHandle | None = None
        self.supports_entry_metadata = False
        self.producers: dict[int, Producer] = {}
        # ids of producers the broker closed (oldest first): their late Sends are ignored
        self.closed_producers: dict[int, None] = {}
        self.consumers: dict[int, Consumer] = {}
        # commands finishing off the event loop (run_async, loaded_or_defer)
        self.pending_tasks: set[asyncio.Task[None]] = set()
        # cluster lookups in progress (one may wait for a dead owner's bundle): cancelled
        # when the connection closes, so a client that went holds no lookup slot
        self.lookup_tasks: set[asyncio.Task[None]] = set()
        # AddPartitionToTxn / AddSubscriptionToTxn finishing in a task, by transaction:
        # a Send of that transaction read after them waits for them (`txn_sends`)
        self.txn_adds: dict[tuple[int, int], list[asyncio.Task[None]]] = {}
        # a client that may write its EndTxn behind its last sends (`ends_txn_after_sends`):
        # the transactions one of whose Sends on this connection was refused or dropped
        # since their last EndTxn here (a commit is then refused: `TransactionCommands`)
        self.ends_txn_after_sends = False
        self.txn_lost: set[tuple[int, int]] = set()
        self.pending_sends = 0
        max_pending = self.config.maxPendingPublishRequestsPerConnection
        self.max_pending_sends = max_pending if max_pending > 0 else _NO_LIMIT
        self.reading_paused = False  # too many sends pending on this connection
        self.buffer_paused = False  # the broker's publish buffer is full
        self.rate_holds = 0  # topics over their publish rate holding this connection
        self.publish_buffer: PublishBuffer = service.publish_buffer
        self.last_received = time.monotonic()
        self.ping_outstanding = False
        self.peer = "?"
        self._out: list[bytes | memoryview] = []
        self._out_bytes = 0  # queued in _out, not yet handed to the transport
        self._flush_scheduled = False
        self._held = False  # write_held queued output that release_held will write
        self._flushes = 0  # writes so far (`AnswersWithReceipts`)
        self._transport_paused = False  # the transport's buffer is above its high-water mark
        self._dispatch_held = False  # a dispatcher stopped because this connection was full
        #: command type -> handler (filled by `ServerCnx` from its command families)
        self.handlers: dict[int, Callable[[pb.BaseCommand, Frame], None]] = {}

    @property
    def _whole(self) -> ServerCnx:
        """This connection as the rest of the broker knows it (every part is one
        `ServerCnx`)."""
        return cast("ServerCnx", self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (asyncio's or uvloop's, which is not an asyncio.Transport subclass)
        stream = cast("asyncio.Transport", transport)
        self.transport = stream
        peer = stream.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        refusal = self.security.limits.admit(self, peer[0] if peer else "?")
        if refusal is not None:  # answered before any Connect, as Pulsar answers it
            self.closed = True
            error = pb.CommandError(request_id=NO_REQUEST, error=refusal.code,
                                    message=f"connection refused: {refusal}")
            stream.write(encode_command(T(type=T.ERROR, error=error)))
            stream.close()
            return
        self.service.connections.add(self._whole)
        log.debug("connection from %s", self.peer)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.service.connections.discard(self)
        self.security.limits.release(self)
        if self.lookups_held:
            self.security.limits.release_lookups(self.lookups_held)
            self.lookups_held = 0
        if self.auth_task is not None:
            self.auth_task.cancel()
        for task in list(self.lookup_tasks):
            task.cancel()
        for producer in list(self.producers.values()):
            producer.topic.remove_producer(producer)
        for consumer in list(self.consumers.values()):
            consumer.subscription.remove_consumer(consumer)
        self.producers.clear()
        self.consumers.clear()
        log.debug("connection from %s closed", self.peer)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._take_frames(self.decoder.buffer_updated, nbytes)

    def data_received(self, data: bytes) -> None:
        """Bytes in (what a transport without ``get_buffer`` calls; tests feed bytes here)."""
        self._take_frames(self.decoder.feed, data)

    def _take_frames(self, decode: Callable[[Any], list[Any]], arg: Any) -> None:
        """Decode what just arrived and handle its frames; bad input closes the connection."""
        self.last_received = time.monotonic()
        try:
            frames = decode(arg)
        except FrameTooLarge as exc:
            if not self.connected and is_http_request(exc.size):
                self._http_on_binary_port()
                return
            self._protocol_violation(f"frame too large ({exc}); limit is maxMessageSize")
            return
        except ProtocolError as exc:
            self._protocol_violation(f"malformed frame: {exc}")
            return
        self.handle_frames(frames)

    def handle_frames(self, frames: list[Frame | SendFrame]) -> None:
        """Hand each decoded frame to its command's handler, in order."""
        for frame in frames:
            if self.closed:
                return
            if type(frame) is SendFrame:
                if not self.connected:
                    self._protocol_violation("command SEND before Connect")
                    return
                self.run_send(frame)
                continue
            cmd = frame.command
            kind = cmd.type
            if not self.connected and kind != T.CONNECT:
                self._protocol_violation(f"command {T.Type.Name(kind)} before Connect")
                return
            handler = self.handlers.get(kind)
            if handler is None:
                self._unsupported(cmd)
                continue
            self.run_handler(handler, cmd, frame)

    def run_handler(self, handler: Callable[[pb.BaseCommand, Frame], None], cmd: pb.BaseCommand,
                    frame: Frame) -> None:
        """Run one command's handler; a refusal (BrokerError) or a bug becomes the error
        reply to that command."""
        kind = cmd.type
        try:
            handler(cmd, frame)
        except BrokerError as exc:
            log.info("%s: %s refused (%s): %s", self.peer, T.Type.Name(kind),
                     pb.ServerError.Name(exc.code), exc)
            self._reply_error(cmd, exc.code, str(exc))
        except Exception as exc:  # a bug must not take the other connections down
            if out_of_descriptors(exc):
                self._reply_error(cmd, pb.ServiceNotReady, ALARM.raised(T.Type.Name(kind)))
                return
            log.exception("%s: failed to handle %s", self.peer, T.Type.Name(kind))
            self._reply_error(cmd, pb.UnknownError, "internal broker error")

    def txn_send_lost(self, txn: tuple[int, int]) -> None:
        """A Send of transaction ``txn`` read here was refused or dropped unanswered."""
        if self.ends_txn_after_sends:
            self.txn_lost.add(txn)

    def note_txn_add(self, most: int, least: int, task: asyncio.Task[None]) -> None:
        """Note an add to transaction (``most``, ``least``) finishing in ``task``: in
        ``txn_adds`` until it is done (`txn_sends` holds the transaction's later sends)."""
        key = (most, least)
        self.txn_adds.setdefault(key, []).append(task)

        def done(task: asyncio.Task[None]) -> None:
            tasks = self.txn_adds.get(key)
            if tasks is not None:
                tasks.remove(task)
                if not tasks:
                    del self.txn_adds[key]

        task.add_done_callback(done)

    def run_async(self, cmd: pb.BaseCommand, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Finish a command in a task (its storage or metadata work runs off the loop); as
        in `run_handler`, a refusal or a bug becomes the error reply. Nothing is sent once
        the connection is closed."""

        async def run() -> None:
            try:
                await work
            except BrokerError as exc:
                if not self.closed:
                    log.info("%s: %s refused (%s): %s", self.peer, T.Type.Name(cmd.type),
                             pb.ServerError.Name(exc.code), exc)
                    self._reply_error(cmd, exc.code, str(exc))
            except MetadataStoreError as exc:  # down or closing (the broker stops): retry
                if not self.closed:
                    log.warning("%s: %s not answered: metadata store: %s", self.peer,
                                T.Type.Name(cmd.type), exc or type(exc).__name__)
                    self._reply_error(cmd, pb.ServiceNotReady,
                                      f"metadata store unavailable ({type(exc).__name__}); retry")
            except Exception as exc:  # a bug must not take the other connections down
                if out_of_descriptors(exc):
                    message = ALARM.raised(T.Type.Name(cmd.type))
                    if not self.closed:
                        self._reply_error(cmd, pb.ServiceNotReady, message)
                    return
                log.exception("%s: failed to handle %s", self.peer, T.Type.Name(cmd.type))
                if not self.closed:
                    self._reply_error(cmd, pb.UnknownError, "internal broker error")

        task = self.loop.create_task(run())
        self.pending_tasks.add(task)
        task.add_done_callback(self.pending_tasks.discard)
        return task

    def loaded_or_defer(self, topic: str, create: bool, handler: Callable[[pb.BaseCommand, Frame], None],
                        cmd: pb.BaseCommand, frame: Frame) -> bool:
        """Whether ``topic`` is loaded (or has nothing to load). If not, it is loaded off the
        event loop (`BrokerService.load_topic`: its ledger's recovery scan and metadata
        reads run on the storage threads) and ``handler`` runs again on ``cmd`` once it is:
        a topic whose disk is slow then delays only the requests that need it."""
        name = self.service.check_topic_name(topic)
        if not name.is_persistent or str(name) in self.service.topics:
            return True
        return self.ready_or_defer(self.service.load_topic(topic, create), handler, cmd, frame,
                                   failure=f"topic {topic} could not be loaded")

    def ready_or_defer(self, work: Coroutine[Any, Any, Any] | None,
                       handler: Callable[[pb.BaseCommand, Frame], None],
                       cmd: pb.BaseCommand, frame: Frame, failure: str = "storage error") -> bool:
        """Whether nothing needs doing off the loop before ``handler`` can answer ``cmd``
        (``work`` None). Otherwise ``work`` (loading a topic, storing a new schema
        version) is awaited in a task and ``handler`` runs again on ``cmd`` once it is
        done; a StorageError answers ServiceNotReady (``failure``: what the answer says)."""
        if work is None:
            return True

        async def work_then_handle() -> None:
            try:
                await work
            except StorageError as exc:
                if out_of_descriptors(exc):
                    message = f"{failure}: {ALARM.raised(failure)}"
                else:
                    log.error("%s: %s: %s: %s", self.peer, T.Type.Name(cmd.type), failure, exc)
                    message = f"{failure}: {exc}"
                if not self.closed:
                    self._reply_error(cmd, pb.ServiceNotReady, message)
                return
            if not self.closed:
                self.run_handler(handler, cmd, frame)

        self.run_async(cmd, work_then_handle())
        return False

    def hold_reading(self) -> None:
        """A topic this connection publishes to is over its publish rate: stop reading
        (`topics.publish_rate.PublishThrottle`) until every such topic releases it."""
        self.rate_holds += 1
        if (self.rate_holds == 1 and not self.reading_paused and not self.buffer_paused
                and self.transport is not None and not self.closed):
            self.transport.pause_reading()

    def release_reading(self) -> None:
        self.rate_holds -= 1
        if (self.rate_holds == 0 and not self.reading_paused and not self.buffer_paused
                and self.transport is not None and not self.closed):
            self.transport.resume_reading()

    @property
    def writable(self) -> bool:
        """Whether dispatchers may queue more messages for this connection: not while the
        transport's buffer is above its high-water mark (the client reads slower than we
        dispatch), nor while this turn's output already holds ``OUT_BUFFER_LIMIT`` bytes.
        A flood of permits thus costs at most about one read and one buffer per connection."""
        if self._transport_paused:
            return False
        if self._out_bytes >= OUT_BUFFER_LIMIT:
            self._dispatch_held = True
            return False
        return True

    def pause_writing(self) -> None:
        self._transport_paused = True

    def resume_writing(self) -> None:
        self._transport_paused = False
        self._wake_dispatchers()

    def _wake_dispatchers(self) -> None:
        self._dispatch_held = False
        for consumer in list(self.consumers.values()):
            dispatcher = consumer.subscription.dispatcher
            if dispatcher is not None:
                dispatcher.schedule()

    def send(self, cmd: pb.BaseCommand) -> None:
        self.write(encode_command(cmd))

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        self._out.append(data)
        self._out_bytes += len(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def write_held(self, data: bytes) -> bool:
        """Queue ``data`` without scheduling a flush: the caller writes it with
        `release_held` before it returns to the event loop (so the receipts of a batch the
        storage completed leave in one write, in the loop turn of their fdatasync). True
        when the caller must call `release_held` (False: a flush is already due)."""
        if self.closed:
            return False
        self._out.append(data)
        self._out_bytes += len(data)
        if self._flush_scheduled or self._held:
            return False
        self._held = True
        return True

    def release_held(self) -> None:
        """Write what `write_held` queued (unless a scheduled flush will)."""
        self._held = False
        if not self._flush_scheduled:
            self._flush()

    def write_frame(self, head: bytes, payload: bytes | memoryview) -> None:
        """Queue a frame in two pieces (its head, then a stored payload part, which is
        written as it is, never copied into a joined buffer)."""
        if self.closed:
            return
        out = self._out
        out.append(head)
        out.append(payload)
        self._out_bytes += len(head) + len(payload)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._flushes += 1
        if self.lookups_held:  # the answers of these lookups are written now
            self.security.limits.release_lookups(self.lookups_held)
            self.lookups_held = 0
        if self._out and self.transport is not None and not self.closed:
            out = self._out
            self._out = []
            size, self._out_bytes = self._out_bytes, 0
            if len(out) == 1:
                self.transport.write(out[0])
            elif size < JOIN_BELOW:  # small frames: one copy costs less than an iovec each
                self.transport.write(b"".join(out))
            else:  # one writev of every piece (uvloop); no copy of the payloads
                self.transport.writelines(out)
            # a dispatcher that stopped on a full buffer goes on once the transport took it
            if self._dispatch_held and not self._transport_paused:
                self._wake_dispatchers()

    def send_message(
        self, cmd: pb.BaseCommand, payload: bytes, entry_metadata: bytes | None = None
    ) -> None:
        self.write(encode_payload_command(cmd, payload, entry_metadata))

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self._flush()
            self.closed = True
            self.transport.close()

    def abort(self, why: str) -> None:
        """Close at once, dropping what is not sent: the peer is silent (a dead link), and a
        graceful close would wait on TCP's retransmissions before the producers and
        consumers of this connection are released."""
        if not self.closed:
            log.warning("%s: closing connection: %s", self.peer, why)
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    async def check_liveness(self, timeout: float) -> bool:
        """Whether the peer answers a Ping within ``timeout`` seconds (anything it sends
        counts, and so does a connection not reading for backpressure); one that does not
        is closed (Pulsar's connection liveness check)."""
        if self.closed:
            return False
        before = self.last_received
        self.send(T(type=T.PING, ping=pb.CommandPing()))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            if self.closed:
                return False
            if self.last_received > before or self.reading_paused or self.buffer_paused \
                    or self.rate_holds:
                return True
        self.abort(f"no answer to the liveness check's Ping within {timeout:g} s")
        return False

    def _http_on_binary_port(self) -> None:
        """An HTTP request on this port: say so to the peer (in HTTP) and in the log."""
        log.warning("%s: closing connection: an HTTP request on the binary protocol port "
                    "(http:// URLs go to the web service port)", self.peer)
        if self.transport is not None:
            self.transport.write(HTTP_ON_BINARY_PORT_REPLY)
        self.close()

    def _protocol_violation(self, why: str) -> None:
        log.warning("%s: closing connection: %s", self.peer, why)
        self.close()

    def _unsupported(self, cmd: pb.BaseCommand) -> None:
        name = T.Type.Name(cmd.type)
        log.info("%s: command %s is not supported", self.peer, name)
        request_id = _request_id(cmd)
        if request_id is not None:
            self.send_error(request_id, pb.NotAllowedError, f"{name} is not supported by magnetar")

    def send_error(self, request_id: int, code: pb.ServerError, message: str) -> None:
        self.send(T(type=T.ERROR, error=pb.CommandError(request_id=request_id, error=code, message=message)))

    def send_success(self, request_id: int) -> None:
        self.send(T(type=T.SUCCESS, success=pb.CommandSuccess(request_id=request_id)))

    def _reply_error(self, cmd: pb.BaseCommand, code: pb.ServerError, message: str) -> None:
        if cmd.type == T.SEND:
            self._reply_send_error(SendFrame.from_command(cmd, None), code, message)
            return
        response = error_response(cmd, code, message)
        if response is not None:
            self.send(response)
            return
        request_id = _request_id(cmd)
        if request_id is not None:
            self.send_error(request_id, code, message)
        else:  # the caller logged the failure; nothing to answer
            log.debug("%s: %s failed without a request id to answer", self.peer, T.Type.Name(cmd.type))

    def authorize(self, topic: str, action: str) -> None:
        """Raise AuthorizationError unless this connection's role may ``action`` on ``topic``."""
        authz = self.security.authorization
        if authz.enabled:
            identity = self.identity
            authz.check(identity.role if identity else None,
                        identity.original_principal if identity else None, topic, action, self.peer)

    # the SEND path, in ``ProducerCommands`` (producers.py): frames arrive here
    def run_send(self, send: SendFrame) -> None:
        raise NotImplementedError

    def _reply_send_error(self, send: SendFrame, code: pb.ServerError, message: str) -> None:
        raise NotImplementedError


_REQUEST_FIELDS = {
    T.LOOKUP: "lookupTopic",
    T.PARTITIONED_METADATA: "partitionMetadata",
    T.PRODUCER: "producer",
    T.SUBSCRIBE: "subscribe",
    T.CLOSE_PRODUCER: "close_producer",
    T.CLOSE_CONSUMER: "close_consumer",
    T.UNSUBSCRIBE: "unsubscribe",
    T.SEEK: "seek",
    T.GET_LAST_MESSAGE_ID: "getLastMessageId",
    T.CONSUMER_STATS: "consumerStats",
    T.GET_TOPICS_OF_NAMESPACE: "getTopicsOfNamespace",
    T.GET_SCHEMA: "getSchema",
    T.GET_OR_CREATE_SCHEMA: "getOrCreateSchema",
}


def error_response(cmd: pb.BaseCommand, code: pb.ServerError,
                    message: str) -> pb.BaseCommand | None:
    """The failure answer for requests the client matches only by their own response type.

    The official client resolves a lookup, partition-metadata, consumer-stats or schema
    request only from its response command: a generic Error with that request id would
    leave it waiting until its operation timeout. ``None`` means "answer with Error".
    """
    kind = cmd.type
    if kind in TXN_RESPONSES:
        return txn_error_response(cmd, code, message)
    if kind == T.LOOKUP:
        return T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=pb.CommandLookupTopicResponse(
            request_id=cmd.lookupTopic.request_id, response=pb.CommandLookupTopicResponse.Failed,
            error=code, message=message))
    if kind == T.PARTITIONED_METADATA:
        return T(type=T.PARTITIONED_METADATA_RESPONSE,
                 partitionMetadataResponse=pb.CommandPartitionedTopicMetadataResponse(
                     request_id=cmd.partitionMetadata.request_id,
                     response=pb.CommandPartitionedTopicMetadataResponse.Failed,
                     error=code, message=message))
    if kind == T.CONSUMER_STATS:
        return T(type=T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=pb.CommandConsumerStatsResponse(
            request_id=cmd.consumerStats.request_id, error_code=code, error_message=message))
    if kind == T.GET_SCHEMA:
        return T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=pb.CommandGetSchemaResponse(
            request_id=cmd.getSchema.request_id, error_code=code, error_message=message))
    if kind == T.GET_OR_CREATE_SCHEMA:
        return T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE,
                 getOrCreateSchemaResponse=pb.CommandGetOrCreateSchemaResponse(
                     request_id=cmd.getOrCreateSchema.request_id, error_code=code,
                     error_message=message))
    if kind == T.ACK and cmd.ack.HasField("request_id"):
        return T(type=T.ACK_RESPONSE, ackResponse=pb.CommandAckResponse(
            consumer_id=cmd.ack.consumer_id, request_id=cmd.ack.request_id, error=code,
            message=message))
    return None


def _request_id(cmd: pb.BaseCommand) -> int | None:
    field = _REQUEST_FIELDS.get(cmd.type)
    request_id: int
    if field is not None:
        request_id = getattr(cmd, field).request_id
        return request_id
    # Commands we do not implement still carry a request id in most cases.
    for desc, value in cmd.ListFields():
        if desc.name != "type" and hasattr(value, "request_id"):
            request_id = value.request_id
            return request_id
    return None
