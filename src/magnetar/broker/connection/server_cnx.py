"""ServerCnx: one client TCP connection, from bytes to broker calls and back.

Theory of operation: the transport reads into the sans-IO ``FrameDecoder``'s own buffer
(``get_buffer`` / ``buffer_updated``: a large frame lands in a buffer of its size, and a
producer's batch goes on to storage as a view of it, not copied); each decoded frame goes
to the handler named after its command type. A plain SEND comes as a ``SendFrame`` read
without protobuf and goes to ``run_send`` directly. Handlers never touch the socket:
they queue encoded frames with ``send``; everything queued during one event-loop turn goes
out in a single ``transport.write`` (``_flush`` runs once per turn). The handshake state
lives only here (``self.connected``): any command before Connect closes the connection.

Backpressure, as in Pulsar: once ``maxPendingPublishRequestsPerConnection`` sends wait for
their receipts, the connection stops reading until half of them are answered (0: no limit).
Across the broker, once the payload bytes of the sends not yet answered reach
``maxMessagePublishBufferSizeInMB`` (``PublishBuffer``), every connection with producers
stops reading until they drop below half of that (0 or less: no limit). A connection reads
again only when neither reason holds. The cost per send is one addition on the way in and
one subtraction on the way out, each followed by an integer comparison.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from magnetar.broker.errors import BrokerError
from magnetar.broker.security.auth import binary as auth_binary
from magnetar.broker.security.authorization import CONSUME, LOOKUP, PRODUCE
from magnetar.broker.subscriptions.subscription import position_of
from magnetar.protocol import pb
from magnetar.protocol.errors import ChecksumMismatch, FrameTooLarge, ProtocolError
from magnetar.protocol.frames import (
    Frame,
    FrameDecoder,
    SendFrame,
    encode_command,
    encode_payload_command,
    part_checksum,
)
from magnetar.protocol.peers import understands_reached_end_of_topic
from magnetar.protocol.version import PROTOCOL_VERSION
from magnetar.storage import StorageError

if TYPE_CHECKING:
    from magnetar.broker.security.auth.service import Identity
    from magnetar.broker.service import BrokerService
    from magnetar.broker.subscriptions.consumer import Consumer
    from magnetar.broker.topics.producer import Producer

log = logging.getLogger(__name__)

T = pb.BaseCommand
FRAME_OVERHEAD = 10 * 1024
#: Bytes of messages one connection queues in an event-loop turn before its dispatchers wait
#: for the next turn (then for the transport to drain, if its buffer is above high water).
OUT_BUFFER_LIMIT = 1 << 20
#: A turn's output smaller than this is joined into one buffer before the write; larger
#: output goes to ``transport.writelines`` as it was queued (uvloop writes it with one
#: ``writev``), so stored payloads are never copied on their way to the socket.
JOIN_BELOW = 16 * 1024
SERVER_VERSION = "Magnetar-Broker-v0.1.0"


class PublishBuffer:
    """Broker-wide count of the payload bytes of sends not yet answered
    (``maxMessagePublishBufferSizeInMB``), and the connections it stopped reading."""

    def __init__(self, limit_mb: int) -> None:
        self.bytes = 0
        self.limit = limit_mb * 1024 * 1024 if limit_mb > 0 else _NO_LIMIT
        self.resume_below = self.limit // 2
        self.paused: list[ServerCnx] = []

    def pause(self, connections: set[ServerCnx]) -> None:
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
            if not cnx.reading_paused and not cnx.closed and cnx.transport is not None:
                cnx.transport.resume_reading()
        log.info("publish buffer below %d bytes: %d connections resumed",
                 self.resume_below, len(paused))


_NO_LIMIT = 1 << 62


class ServerCnx(asyncio.BufferedProtocol):
    """Serves one client connection; owns its producers and consumers by client-given id."""

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
        self.consumers: dict[int, Consumer] = {}
        # commands finishing off the event loop (run_async, loaded_or_defer)
        self.pending_tasks: set[asyncio.Task[None]] = set()
        self.pending_sends = 0
        max_pending = self.config.maxPendingPublishRequestsPerConnection
        self.max_pending_sends = max_pending if max_pending > 0 else _NO_LIMIT
        self.reading_paused = False  # too many sends pending on this connection
        self.buffer_paused = False  # the broker's publish buffer is full
        self.publish_buffer: PublishBuffer = service.publish_buffer
        self.last_received = time.monotonic()
        self.ping_outstanding = False
        self.peer = "?"
        self._out: list[bytes | memoryview] = []
        self._out_bytes = 0  # queued in _out, not yet handed to the transport
        self._flush_scheduled = False
        self._held = False  # write_held queued output that release_held will write
        self._transport_paused = False  # the transport's buffer is above its high-water mark
        self._dispatch_held = False  # a dispatcher stopped because this connection was full
        self.handlers = {
            T.CONNECT: self.handle_connect,
            T.PING: self.handle_ping,
            T.PONG: self.handle_pong,
            T.LOOKUP: self.handle_lookup,
            T.PARTITIONED_METADATA: self.handle_partitioned_metadata,
            T.PRODUCER: self.handle_producer,
            T.SEND: self.handle_send,
            T.CLOSE_PRODUCER: self.handle_close_producer,
            T.SUBSCRIBE: self.handle_subscribe,
            T.FLOW: self.handle_flow,
            T.ACK: self.handle_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self.handle_redeliver,
            T.CLOSE_CONSUMER: self.handle_close_consumer,
            T.UNSUBSCRIBE: self.handle_unsubscribe,
            T.SEEK: self.handle_seek,
            T.GET_LAST_MESSAGE_ID: self.handle_get_last_message_id,
            T.CONSUMER_STATS: self.handle_consumer_stats,
            T.GET_TOPICS_OF_NAMESPACE: self.handle_get_topics_of_namespace,
            T.GET_SCHEMA: self.handle_get_schema,
            T.GET_OR_CREATE_SCHEMA: self.handle_get_or_create_schema,
            T.AUTH_RESPONSE: self.handle_auth_response,
        }

    # ------------------------------------------------------------------ transport events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (asyncio's or uvloop's, which is not an asyncio.Transport subclass)
        stream = cast("asyncio.Transport", transport)
        self.transport = stream
        peer = stream.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        if not self.security.limits.admit(self, peer[0] if peer else "?"):
            self.closed = True
            stream.abort()
            return
        self.service.connections.add(self)
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
        except Exception:  # a bug must not take the other connections down
            log.exception("%s: failed to handle %s", self.peer, T.Type.Name(kind))
            self._reply_error(cmd, pb.UnknownError, "internal broker error")

    def run_async(self, cmd: pb.BaseCommand, work: Coroutine[Any, Any, None]) -> None:
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
            except Exception:  # a bug must not take the other connections down
                log.exception("%s: failed to handle %s", self.peer, T.Type.Name(cmd.type))
                if not self.closed:
                    self._reply_error(cmd, pb.UnknownError, "internal broker error")

        task = self.loop.create_task(run())
        self.pending_tasks.add(task)
        task.add_done_callback(self.pending_tasks.discard)

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
                log.error("%s: %s: %s: %s", self.peer, T.Type.Name(cmd.type), failure, exc)
                if not self.closed:
                    self._reply_error(cmd, pb.ServiceNotReady, f"{failure}: {exc}")
                return
            if not self.closed:
                self.run_handler(handler, cmd, frame)

        self.run_async(cmd, work_then_handle())
        return False

    # ------------------------------------------------------------------ backpressure

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

    # ------------------------------------------------------------------ output

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
        response = _error_response(cmd, code, message)
        if response is not None:
            self.send(response)
            return
        request_id = _request_id(cmd)
        if request_id is not None:
            self.send_error(request_id, code, message)
        else:  # the caller logged the failure; nothing to answer
            log.debug("%s: %s failed without a request id to answer", self.peer, T.Type.Name(cmd.type))

    # ------------------------------------------------------------------ handshake & liveness

    def handle_connect(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        if self.connected or self.auth_task is not None:
            self._protocol_violation("second Connect on one connection")
            return
        connect = cmd.connect
        if self.security.authentication.enabled:
            self.supports_auth_refresh = bool(
                connect.HasField("feature_flags") and connect.feature_flags.supports_auth_refresh)
            auth_binary.start_connect(self, connect, lambda ident: self._connected(connect, ident))
            return
        try:
            self.principal = self.service.authenticate(connect)
        except BrokerError as exc:
            self.send_error(0, exc.code, str(exc))
            self.close()
            return
        self._connected(connect, None)

    def _connected(self, connect: pb.CommandConnect, identity: Identity | None) -> None:
        """The Connect is accepted (authenticated as ``identity`` when auth is on)."""
        if identity is not None:
            self.identity = identity
            self.principal = identity.principal
        self.security.limits.handshake_done(self)
        self.client_version = connect.client_version
        self.remote_protocol_version = connect.protocol_version
        self.understands_end_of_topic = understands_reached_end_of_topic(
            connect.client_version, connect.protocol_version
        )
        self.supports_entry_metadata = bool(
            connect.HasField("feature_flags")
            and connect.feature_flags.supports_broker_entry_metadata
        )
        self.connected = True
        connected = pb.CommandConnected(
            server_version=SERVER_VERSION,
            protocol_version=min(PROTOCOL_VERSION, connect.protocol_version),
            max_message_size=self.config.maxMessageSize,
        )
        connected.feature_flags.supports_auth_refresh = self.identity is not None
        connected.feature_flags.supports_broker_entry_metadata = True
        connected.feature_flags.supports_partial_producer = True
        self.send(T(type=T.CONNECTED, connected=connected))

    def handle_auth_response(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        auth_binary.handle_auth_response(self, cmd)

    def authorize(self, topic: str, action: str) -> None:
        """Raise AuthorizationError unless this connection's role may ``action`` on ``topic``."""
        authz = self.security.authorization
        if authz.enabled:
            identity = self.identity
            authz.check(identity.role if identity else None,
                        identity.original_principal if identity else None, topic, action, self.peer)

    def handle_ping(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        self.send(T(type=T.PONG, pong=pb.CommandPong()))

    def handle_pong(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        self.ping_outstanding = False

    def keepalive_tick(self) -> None:
        """Called by the service every keepAliveIntervalSeconds."""
        if self.closed:
            return
        silent = time.monotonic() - self.last_received > self.config.keepAliveIntervalSeconds
        if not self.connected:
            if silent:
                self._protocol_violation("no Connect within the keep-alive interval")
            return
        if self.ping_outstanding and silent and not (self.reading_paused or self.buffer_paused):
            # (while reading is paused for backpressure, the Pong may be waiting unread)
            self._protocol_violation("peer did not answer Ping")
            return
        if self.remote_protocol_version < 1:  # Ping/Pong arrived with protocol v1
            return
        self.ping_outstanding = True
        self.send(T(type=T.PING, ping=pb.CommandPing()))

    # ------------------------------------------------------------------ discovery

    def _advertised_host(self) -> str:
        host = self.config.advertisedAddress
        if not host and self.transport is not None:
            sock = self.transport.get_extra_info("sockname")
            host = sock[0] if sock else "localhost"
            if ":" in host:
                host = f"[{host}]"
        return host

    def _advertised_url(self) -> str:
        if self.service.port < 0:  # TLS only
            return self._advertised_tls_url() or ""
        return f"pulsar://{self._advertised_host()}:{self.service.port}"

    def _advertised_tls_url(self) -> str | None:
        tls_port = self.security.tls_port
        return None if tls_port is None else f"pulsar+ssl://{self._advertised_host()}:{tls_port}"

    def _lookup_admitted(self, cmd: pb.BaseCommand) -> bool:
        """Take a ``maxConcurrentLookupRequest`` slot for a lookup (held until its answer is
        flushed), or answer ``TooManyRequests`` at once and return False."""
        limits = self.security.limits
        if limits.acquire_lookup(self.peer):
            self.lookups_held += 1
            return True
        refusal = _error_response(
            cmd, pb.TooManyRequests, "too many lookup requests in progress on the broker "
            f"(maxConcurrentLookupRequest={self.config.maxConcurrentLookupRequest}); retry")
        assert refusal is not None
        self.send(refusal)
        return False

    def handle_lookup(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        if not self._lookup_admitted(cmd):
            return
        lookup = cmd.lookupTopic
        self.service.check_topic_name(lookup.topic)
        self.authorize(lookup.topic, LOOKUP)
        listener = lookup.advertised_listener_name if lookup.HasField("advertised_listener_name") else None
        response = pb.CommandLookupTopicResponse(
            request_id=lookup.request_id,
            response=pb.CommandLookupTopicResponse.Connect,
            brokerServiceUrl=self.service.listeners.broker_url(listener, self._advertised_url()),
            authoritative=True,
            proxy_through_service_url=False,
        )
        tls_url = self._advertised_tls_url()
        if tls_url is not None:
            response.brokerServiceUrlTls = tls_url
        self.send(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=response))

    def handle_partitioned_metadata(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        if not self._lookup_admitted(cmd):
            return
        req = cmd.partitionMetadata
        try:
            self.service.check_topic_name(req.topic)
            self.authorize(req.topic, LOOKUP)
        except BrokerError as exc:
            self.send_partitioned_metadata(req.request_id, exc)
            return

        limits = self.security.limits
        self.lookups_held -= 1  # the slot goes with the task, until its answer is sent

        async def answer() -> None:  # the metadata store is read off the event loop
            try:
                partitions = await self.service.partitioned_metadata_async(req.topic)
            except BrokerError as exc:
                self.send_partitioned_metadata(req.request_id, exc)
            else:
                self.send_partitioned_metadata(req.request_id, partitions)
            finally:
                limits.release_lookups(1)

        self.run_async(cmd, answer())

    def send_partitioned_metadata(self, request_id: int, outcome: int | BrokerError) -> None:
        if isinstance(outcome, BrokerError):
            resp = pb.CommandPartitionedTopicMetadataResponse(
                request_id=request_id,
                response=pb.CommandPartitionedTopicMetadataResponse.Failed,
                error=outcome.code,
                message=str(outcome),
            )
        else:
            resp = pb.CommandPartitionedTopicMetadataResponse(
                request_id=request_id,
                partitions=outcome,
                response=pb.CommandPartitionedTopicMetadataResponse.Success,
            )
        self.send(T(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=resp))

    def handle_get_topics_of_namespace(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.getTopicsOfNamespace
        if self.security.authorization.enabled:
            identity = self.identity
            self.security.authorization.check_namespace(
                identity.role if identity else None,
                identity.original_principal if identity else None, req.namespace, self.peer)

        async def answer() -> None:  # the metadata store is listed off the event loop
            topics, filtered = await self.service.topics_of_namespace_async(
                req.namespace, req.mode, req.topics_pattern if req.HasField("topics_pattern") else None
            )
            resp = pb.CommandGetTopicsOfNamespaceResponse(
                request_id=req.request_id, topics=topics, filtered=filtered, changed=True
            )
            self.send(T(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE, getTopicsOfNamespaceResponse=resp))

        self.run_async(cmd, answer())

    # ------------------------------------------------------------------ producers

    def handle_producer(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.producer
        if req.producer_id in self.producers:
            existing = self.producers[req.producer_id]
            if existing.topic.name == req.topic:  # a retry of a request that already succeeded
                self.send(existing.success_command(req.request_id))
                return
            raise BrokerError(pb.ProducerBusy, f"producer id {req.producer_id} is already in use on this connection")
        self.service.check_topic_name(req.topic)
        self.authorize(req.topic, PRODUCE)
        self.security.limits.check_producer(self, req.topic)
        attacher = self.service.attacher
        if (self.loaded_or_defer(req.topic, True, self.handle_producer, cmd, frame)
                and self.ready_or_defer(attacher.producer_work(req), self.handle_producer, cmd, frame)
                and self.ready_or_defer(attacher.quota_read(req), self.handle_producer, cmd, frame)):
            attacher.create_producer(self, req)

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
        except Exception:  # a bug must not take the other connections down
            log.exception("%s: failed to handle SEND", self.peer)
            self._reply_send_error(send, pb.UnknownError, "internal broker error")

    def publish(self, send: SendFrame) -> None:
        producer = self.producers.get(send.producer_id)
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
            if self.transport is not None and not self.buffer_paused:
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

    def _reply_send_error(self, send: SendFrame, code: pb.ServerError, message: str) -> None:
        self.send(T(type=T.SEND_ERROR, send_error=pb.CommandSendError(
            producer_id=send.producer_id, sequence_id=send.sequence_id, error=code, message=message)))

    def on_send_done(self, size: int) -> None:
        """A send was answered (receipt or error): it no longer counts against the limits."""
        self.pending_sends -= 1
        if self.reading_paused and self.pending_sends <= self.max_pending_sends // 2:
            self.reading_paused = False
            if self.transport is not None and not self.closed and not self.buffer_paused:
                self.transport.resume_reading()
        buffer = self.publish_buffer
        buffer.bytes -= size
        if buffer.bytes < buffer.resume_below and buffer.paused:
            buffer.resume()

    def handle_close_producer(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.close_producer
        producer = self.producers.pop(req.producer_id, None)
        if producer is not None:
            producer.topic.remove_producer(producer)
        self.send_success(req.request_id)

    def producer_closed_by_broker(self, producer: Producer) -> None:
        if self.producers.pop(producer.producer_id, None) is not None:
            self.send(
                T(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(
                    producer_id=producer.producer_id, request_id=0))
            )

    # ------------------------------------------------------------------ consumers

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
        self.authorize(req.topic, CONSUME)
        self.security.limits.check_consumer(self, req.topic, req.subscription)
        attacher = self.service.attacher
        if (self.loaded_or_defer(req.topic, req.force_topic_creation, self.handle_subscribe, cmd, frame)
                and self.ready_or_defer(attacher.subscribe_work(req), self.handle_subscribe, cmd, frame)):
            attacher.subscribe(self, req)

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
            self.send(
                T(type=T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(
                    consumer_id=consumer.consumer_id, request_id=0))
            )

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
        consumer.subscription.disconnect_consumers()
        self.send_success(request_id)

    def handle_get_last_message_id(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        """Answered at once when the last entry is in the read cache; else once it was
        read on the storage's reader threads (a slow disk delays only this request)."""
        req = cmd.getLastMessageId
        sub = self._consumer(req.consumer_id).subscription
        answer = sub.last_message_id()
        if answer is not None:
            self._send_last_message_id(req.request_id, *answer)
            return

        async def read() -> None:
            ids = await sub.last_message_id_async()
            if not self.closed:
                self._send_last_message_id(req.request_id, *ids)

        self.run_async(cmd, read())

    def _send_last_message_id(self, request_id: int, last: pb.MessageIdData,
                              mark_delete: pb.MessageIdData | None) -> None:
        resp = pb.CommandGetLastMessageIdResponse(request_id=request_id)
        resp.last_message_id.CopyFrom(last)
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

    # ------------------------------------------------------------------ schemas

    def handle_get_schema(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.getSchema
        version = req.schema_version if req.HasField("schema_version") else None
        resp = pb.CommandGetSchemaResponse(request_id=req.request_id)

        async def answer() -> None:  # the topic's versions are read off the loop
            found = await self.service.topic_schemas.get_schema_async(req.topic, version)
            if found is None:
                resp.error_code = pb.TopicNotFound
                resp.error_message = f"no schema for {req.topic}"
            else:
                schema, version_bytes = found
                resp.schema.CopyFrom(schema)
                resp.schema_version = version_bytes
            if not self.closed:
                self.send(T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=resp))

        self.run_async(cmd, answer())

    def handle_get_or_create_schema(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.getOrCreateSchema
        resp = pb.CommandGetOrCreateSchemaResponse(request_id=req.request_id)

        async def answer() -> None:  # stored off the loop, answered once stored
            try:
                resp.schema_version = await self.service.topic_schemas.get_or_create_async(
                    req.topic, req.schema)
            except BrokerError as exc:
                resp.error_code = exc.code
                resp.error_message = str(exc)
            if not self.closed:
                self.send(T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=resp))

        self.run_async(cmd, answer())


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


def _error_response(cmd: pb.BaseCommand, code: pb.ServerError,
                    message: str) -> pb.BaseCommand | None:
    """The failure answer for requests the client matches only by their own response type.

    The official client resolves a lookup, partition-metadata, consumer-stats or schema
    request only from its response command: a generic Error with that request id would
    leave it waiting until its operation timeout. ``None`` means "answer with Error".
    """
    kind = cmd.type
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


__all__ = ["ChecksumMismatch", "ServerCnx"]
