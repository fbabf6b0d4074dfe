"""One TCP (or TLS) connection to a broker: handshake, request/response, dispatch.

Theory of operation: the connection is an ``asyncio.Protocol``. Bytes go through
the protocol's ``FrameDecoder`` (payloads left raw for ``split_message``); each frame is
dispatched by command type. Responses that carry
a ``request_id`` resolve the future registered by ``request``; producer and consumer
traffic (receipts, messages, close notices) goes to the handler registered under its id.
When the connection drops, every pending request fails with ``NotConnected`` and every
handler is told, so it can reconnect on its own schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, Protocol

from magnetar import __version__
from magnetar.client.auth import Authentication
from magnetar.client.errors import (
    AuthenticationError,
    ConnectError,
    NotConnected,
    Timeout,
    TlsError,
    UnknownHost,
    WrongServiceUrl,
    server_error,
)
from magnetar.protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    PROTOCOL_VERSION,
    ProtocolError,
    command,
    encode_command,
    pb,
)
from magnetar.protocol.errors import FrameTooLarge
from magnetar.protocol.frames import FRAME_PADDING, FrameDecoder, MessageFrame
from magnetar.protocol.peers import orders_txn_adds, orders_txn_ends
from magnetar.protocol.sniff import is_http_response

log = logging.getLogger(__name__)

CLIENT_VERSION = f"magnetar-python-{__version__}"
T = pb.BaseCommand

#: Response types whose sub-message carries a ``request_id``.
_RESPONSES: dict[int, str] = {
    T.SUCCESS: "success",
    T.ERROR: "error",
    T.PRODUCER_SUCCESS: "producer_success",
    T.LOOKUP_RESPONSE: "lookupTopicResponse",
    T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    T.GET_SCHEMA_RESPONSE: "getSchemaResponse",
    T.GET_OR_CREATE_SCHEMA_RESPONSE: "getOrCreateSchemaResponse",
    T.CONSUMER_STATS_RESPONSE: "consumerStatsResponse",
    T.ACK_RESPONSE: "ackResponse",
    T.TC_CLIENT_CONNECT_RESPONSE: "tcClientConnectResponse",
    T.NEW_TXN_RESPONSE: "newTxnResponse",
    T.ADD_PARTITION_TO_TXN_RESPONSE: "addPartitionToTxnResponse",
    T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE: "addSubscriptionToTxnResponse",
    T.END_TXN_RESPONSE: "endTxnResponse",
}


class ProducerHandler(Protocol):
    def _on_receipt(self, receipt: pb.CommandSendReceipt) -> None: ...
    def _on_send_error(self, err: pb.CommandSendError) -> None: ...
    def _on_disconnect(self, cnx: Connection, assigned_url: str | None = None) -> None: ...


class ConsumerHandler(Protocol):
    def _on_message(self, msg: MessageFrame) -> None: ...
    def _on_disconnect(self, cnx: Connection, assigned_url: str | None = None) -> None: ...
    def _on_end_of_topic(self) -> None: ...


class Connection(asyncio.Protocol):
    """A handshaken connection; create with ``Connection.open``."""

    def __init__(self, address: str, auth: Authentication | None,
                 keepalive_seconds: float = 30.0) -> None:
        self.address = address
        self._auth = auth
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        # frames written in this turn of the loop, sent together at its end (`write`)
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE + FRAME_PADDING, raw_payload=True)
        self._requests: dict[int, asyncio.Future[Any]] = {}
        self._next_request = 0
        self.producers: dict[int, ProducerHandler] = {}
        self.consumers: dict[int, ConsumerHandler] = {}
        self._connected: asyncio.Future[pb.CommandConnected] = self._loop.create_future()
        self.max_message_size = DEFAULT_MAX_FRAME_SIZE
        self.protocol_version = PROTOCOL_VERSION
        self.closed = False
        self.txn_adds_in_order = False  # set from the broker's Connected (`_h_connected`)
        self.txn_ends_in_order = False  # the same
        self._keepalive = keepalive_seconds
        self._last_seen = time.monotonic()
        self._ping_handle: asyncio.TimerHandle | None = None
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self.on_close: list[Callable[[Connection], None]] = []
        self._dispatch: dict[int, Callable[[pb.BaseCommand, bytes | None], None]] = {
            T.SEND_RECEIPT: self._h_receipt,
            T.SEND_ERROR: self._h_send_error,
            T.MESSAGE: self._h_message,
            T.PING: self._h_ping,
            T.PONG: lambda c, p: None,
            T.CLOSE_PRODUCER: self._h_close_producer,
            T.CLOSE_CONSUMER: self._h_close_consumer,
            T.REACHED_END_OF_TOPIC: self._h_end_of_topic,
            T.ACTIVE_CONSUMER_CHANGE: lambda c, p: None,
            T.CONNECTED: self._h_connected,
            T.AUTH_CHALLENGE: self._h_auth_challenge,
        }

    # ------------------------------------------------------------------ opening
    @classmethod
    async def open(cls, host: str, port: int, *, address: str,
                   auth: Authentication | None = None,
                   ssl_context: ssl.SSLContext | None = None,
                   server_hostname: str | None = None,
                   timeout: float = 10.0, keepalive: float = 30.0) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, cnx = await loop.create_connection(
                    lambda: cls(address, auth, keepalive), host, port, ssl=ssl_context,
                    server_hostname=server_hostname if ssl_context else None)
                await cnx._connected
        except TimeoutError:
            raise ConnectError(f"timed out connecting to {address}") from None
        except ssl.SSLError as exc:
            raise TlsError(f"TLS handshake with {address} failed: {exc}") from None
        except socket.gaierror as exc:
            if exc.errno == socket.EAI_AGAIN:  # a resolver that may answer next time
                raise ConnectError(f"cannot connect to {address}: {exc.strerror}") from None
            raise UnknownHost(f"cannot connect to {address}: unknown host {host!r}") from None
        except OSError as exc:
            raise ConnectError(f"cannot connect to {address}: {exc.strerror or exc}") from None
        return cnx

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fields: dict[str, Any] = {
            "client_version": CLIENT_VERSION,
            "protocol_version": PROTOCOL_VERSION,
            "feature_flags": pb.FeatureFlags(supports_auth_refresh=True),
        }
        if self._auth is not None:
            fields["auth_method_name"] = self._auth.method_name
            fields["auth_data"] = self._auth.auth_data()
        self.write(encode_command(command(T.CONNECT, **fields)))

    def _h_connected(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.connected
        if c.HasField("max_message_size") and c.max_message_size > 0:
            self.max_message_size = c.max_message_size
            self._decoder.max_frame_size = max(self._decoder.max_frame_size,
                                               c.max_message_size + FRAME_PADDING)
        self.protocol_version = min(PROTOCOL_VERSION, c.protocol_version)
        # a Magnetar broker handles a connection's transaction commands and sends in the
        # order they came: a send may follow its AddPartitionToTxn without waiting for it
        self.txn_adds_in_order = orders_txn_adds(c.server_version)
        # ... and commits only once the sends read before an EndTxn are answered: a
        # commit may be written right behind its transaction's last sends
        self.txn_ends_in_order = orders_txn_ends(c.server_version)
        if not self._connected.done():
            self._connected.set_result(c)
        self._schedule_ping()

    def _h_auth_challenge(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        ch = cmd.authChallenge
        data = ch.challenge.auth_data if ch.HasField("challenge") else b""
        if self._auth is None:
            return
        resp = pb.AuthData(auth_method_name=self._auth.method_name,
                           auth_data=self._auth.challenge(data))
        self.write(encode_command(command(
            T.AUTH_RESPONSE, client_version=CLIENT_VERSION, response=resp,
            protocol_version=PROTOCOL_VERSION)))

    # ---------------------------------------------------------------- keepalive
    def _schedule_ping(self) -> None:
        if self._keepalive > 0 and not self.closed:
            self._ping_handle = self._loop.call_later(self._keepalive, self._ping)

    def _ping(self) -> None:
        if self.closed:
            return
        if time.monotonic() - self._last_seen > 2 * self._keepalive:
            log.warning("%s: no traffic for %.0fs, closing", self.address, 2 * self._keepalive)
            self.close()
            return
        self.write(encode_command(command(T.PING)))
        self._schedule_ping()

    # ------------------------------------------------------------------ reading
    def data_received(self, data: bytes) -> None:
        self._last_seen = time.monotonic()
        try:
            frames = self._decoder.feed_messages(data)
        except ProtocolError as exc:
            if (isinstance(exc, FrameTooLarge) and is_http_response(exc.size)
                    and not self._connected.done()):
                self._connected.set_exception(WrongServiceUrl(
                    f"{self.address} answered in HTTP: that is a web service port; use "
                    f"http://{self.address.split('://', 1)[-1]} as the service URL, or the "
                    "broker's binary port (6650 by default) with pulsar://"))
            else:
                log.error("%s: bad frame from broker: %s", self.address, exc)
            self.close()
            return
        dispatch = self._dispatch
        consumers = self.consumers
        for frame in frames:
            if frame.__class__ is MessageFrame:  # the hot path: read without protobuf
                c = consumers.get(frame.consumer_id)
                if c is not None:
                    c._on_message(frame)
                continue
            cmd = frame.command  # type: ignore[union-attr]
            kind = cmd.type
            handler = dispatch.get(kind)
            if handler is not None:
                handler(cmd, frame.payload_part)
            elif kind in _RESPONSES:
                self._h_response(cmd, _RESPONSES[kind])
            else:
                log.debug("%s: ignoring command %s", self.address, kind)

    def _h_response(self, cmd: pb.BaseCommand, field: str) -> None:
        body = getattr(cmd, field)
        if cmd.type == T.PRODUCER_SUCCESS and body.HasField("producer_ready") \
                and not body.producer_ready:
            return  # queued behind an exclusive producer: wait for the ready one
        if cmd.type == T.ERROR and not self._connected.done():
            self._connected.set_exception(
                AuthenticationError(body.message)
                if body.error == pb.AuthenticationError
                else server_error(body.error, body.message))
            return
        fut = self._requests.pop(body.request_id, None)
        if fut is None or fut.done():
            return
        if cmd.type == T.ERROR:
            fut.set_exception(server_error(body.error, body.message))
        else:
            fut.set_result(body)

    def _h_receipt(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        r = cmd.send_receipt
        p = self.producers.get(r.producer_id)
        if p is not None:
            p._on_receipt(r)

    def _h_send_error(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        e = cmd.send_error
        p = self.producers.get(e.producer_id)
        if p is not None:
            p._on_send_error(e)

    def _h_message(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        m = cmd.message
        c = self.consumers.get(m.consumer_id)
        if c is not None and payload is not None:
            c._on_message(MessageFrame.from_command(m, payload))

    def _h_ping(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        self.write(encode_command(command(T.PONG)))

    def _assigned_url(self, close: pb.CommandCloseProducer | pb.CommandCloseConsumer
                      ) -> str | None:
        """The new owner a broker named when closing us (a bundle moving away), in this
        connection's scheme; None when it named none."""
        tls = self.address.startswith(("pulsar+ssl://", "pulsars://"))
        url = close.assignedBrokerServiceUrlTls if tls else close.assignedBrokerServiceUrl
        return url or None

    def _h_close_producer(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        p = self.producers.pop(cmd.close_producer.producer_id, None)
        if p is not None:
            p._on_disconnect(self, self._assigned_url(cmd.close_producer))

    def _h_close_consumer(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = self.consumers.pop(cmd.close_consumer.consumer_id, None)
        if c is not None:
            c._on_disconnect(self, self._assigned_url(cmd.close_consumer))

    def _h_end_of_topic(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = self.consumers.get(cmd.reachedEndOfTopic.consumer_id)
        if c is not None:
            c._on_end_of_topic()

    # ------------------------------------------------------------------ writing
    def write(self, data: bytes) -> None:
        """Queue ``data``; what this turn of the loop writes leaves in one write at its
        end (a burst of sends, a transaction's add or commit with them: one system call,
        and the broker reads them together instead of waking for each)."""
        if self._transport is not None and not self.closed:
            self._out.append(data)
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)

    def writelines(self, chunks: list[bytes]) -> None:
        if self._transport is not None and not self.closed:
            self.write(b"".join(chunks))

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        self._out = []
        if self._transport is not None and not self.closed:
            self._transport.write(out[0] if len(out) == 1 else b"".join(out))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if self._write_paused and not self.closed:
            w = self._loop.create_future()
            self._drain_waiters.append(w)
            await w

    def new_request_id(self) -> int:
        self._next_request += 1
        return self._next_request

    async def request(self, kind: int, timeout: float = 30.0, **fields: Any) -> Any:
        """Send a command carrying a fresh ``request_id``; return the response body."""
        rid, fut = self.request_now(kind, **fields)
        return await self.answer(kind, rid, fut, timeout)

    def request_now(self, kind: int, **fields: Any) -> tuple[int, asyncio.Future[Any]]:
        """Write a command carrying a fresh ``request_id`` now: ``(request_id, future of
        its response body)``, for `answer` to await (a caller that must know the command
        left before it writes the next one)."""
        if self.closed:
            raise NotConnected(f"connection to {self.address} is closed")
        rid = self.new_request_id()
        # encoded before the answer is awaited: a request that cannot be encoded (a value
        # out of range) fails here, leaving no pending future behind
        frame = encode_command(command(kind, request_id=rid, **fields))
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._requests[rid] = fut
        self.write(frame)
        return rid, fut

    async def answer(self, kind: int, rid: int, fut: asyncio.Future[Any],
                     timeout: float = 30.0) -> Any:
        """The response body of request ``rid`` (from `request_now`), within ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError:
            raise Timeout(f"no response to {pb.BaseCommand.Type.Name(kind)} "
                          f"from {self.address} within {timeout}s") from None
        finally:
            self._requests.pop(rid, None)

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        if self._transport is not None:
            self._flush()  # (what was written before the close leaves first)
            self._transport.close()
        self.connection_lost(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        if self._ping_handle is not None:
            self._ping_handle.cancel()
        err = NotConnected(f"connection to {self.address} closed")
        if not self._connected.done():
            self._connected.set_exception(ConnectError(f"{self.address} closed the connection"))
            self._connected.exception()  # mark retrieved
        for fut in self._requests.values():
            if not fut.done():
                fut.set_exception(err)
        self._requests.clear()
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        producers, self.producers = self.producers, {}
        consumers, self.consumers = self.consumers, {}
        for p in producers.values():
            p._on_disconnect(self)
        for c in consumers.values():
            c._on_disconnect(self)
        for cb in self.on_close:
            cb(self)
