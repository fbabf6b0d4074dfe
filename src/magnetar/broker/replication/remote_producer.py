"""`RemoteProducer`: one producer on another cluster's broker, over the protocol codec.

The broker does not load the client package (tests/test_layers.py); a replicator needs only
Connect, a topic lookup (following redirects), Producer and Send with receipts, which this
module speaks with `magnetar.protocol`. Plain ``pulsar://`` only (no TLS, no credentials).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from magnetar.protocol import pb
from magnetar.protocol.commands import FIELD_BY_TYPE, command
from magnetar.protocol.frames import Frame, FrameDecoder, encode_command, encode_payload_command
from magnetar.protocol.version import PROTOCOL_VERSION

log = logging.getLogger(__name__)

_MAX_REDIRECTS = 8


class RemoteError(Exception):
    """The remote cluster refused or failed a request, or the connection was lost."""


def parse_broker_url(url: str) -> tuple[str, int]:
    """(host, port) of a ``pulsar://host:port`` URL (the first of a list)."""
    if not url.startswith("pulsar://"):
        raise RemoteError(f"only pulsar:// broker URLs are supported for replication: {url!r}")
    hostport = url[len("pulsar://"):].split(",")[0].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host:
        return hostport, 6650
    return host, int(port)


class _Connection:
    """One connection: requests answered by request id, receipts by sequence id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.next_request = 1
        self.requests: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self.receipts: dict[int, asyncio.Future[None]] = {}
        self.connected: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        error: BaseException = RemoteError("connection closed by the remote broker")
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                for frame in self.decoder.feed(data):
                    if isinstance(frame, Frame):
                        self._on_frame(frame.command)
        except (OSError, Exception) as exc:  # a protocol error ends the connection too
            error = RemoteError(f"connection failed: {exc}")
        finally:
            self._fail_all(error)

    def _fail_all(self, error: BaseException) -> None:
        futures: list[asyncio.Future[Any]] = [
            self.connected, self.closed, *self.requests.values(), *self.receipts.values()]
        for fut in futures:
            if not fut.done():
                fut.set_exception(error)
                fut.exception()  # retrieved: nobody may await it any more
        self.requests.clear()
        self.receipts.clear()
        self.writer.close()

    def _on_frame(self, cmd: pb.BaseCommand) -> None:
        t = cmd.type
        if t == pb.BaseCommand.SEND_RECEIPT:
            receipt = self.receipts.pop(cmd.send_receipt.sequence_id, None)
            if receipt is not None and not receipt.done():
                receipt.set_result(None)
        elif t == pb.BaseCommand.SEND_ERROR:
            # the broker closes the connection after a send error: fail everything
            self._fail_all(RemoteError(f"send failed: {cmd.send_error.message}"))
        elif t == pb.BaseCommand.CONNECTED:
            if not self.connected.done():
                self.connected.set_result(cmd)
        elif t == pb.BaseCommand.PING:
            self.writer.write(encode_command(command(pb.BaseCommand.PONG)))
        elif t == pb.BaseCommand.CLOSE_PRODUCER:
            self._fail_all(RemoteError("the remote broker closed the producer"))
        elif t == pb.BaseCommand.ERROR and not self.connected.done():
            self.connected.set_exception(RemoteError(cmd.error.message))
        else:
            body = getattr(cmd, _body_field(cmd), None)
            request_id = getattr(body, "request_id", None)
            if not isinstance(request_id, int):
                return
            fut = self.requests.get(request_id)
            if fut is None:
                return
            if t == pb.BaseCommand.PRODUCER_SUCCESS and cmd.producer_success.HasField(
                    "producer_ready") and not cmd.producer_success.producer_ready:
                return  # waiting for exclusive access: the next answer tells
            self.requests.pop(request_id, None)
            if not fut.done():
                fut.set_result(cmd)

    async def request(self, kind: int, **fields: Any) -> pb.BaseCommand:
        request_id = self.next_request
        self.next_request += 1
        fut: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self.requests[request_id] = fut
        self.writer.write(encode_command(command(kind, request_id=request_id, **fields)))
        answer = await fut
        if answer.type == pb.BaseCommand.ERROR:
            raise RemoteError(f"{pb.ServerError.Name(answer.error.error)}: {answer.error.message}")
        return answer

    def close(self) -> None:
        self.task.cancel()
        self._fail_all(RemoteError("closed"))


def _body_field(cmd: pb.BaseCommand) -> str:
    return FIELD_BY_TYPE.get(cmd.type, "")


async def _connect(host: str, port: int, timeout: float) -> _Connection:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    conn = _Connection(reader, writer)
    writer.write(encode_command(command(
        pb.BaseCommand.CONNECT, client_version="magnetar-replicator",
        protocol_version=PROTOCOL_VERSION)))
    try:
        await asyncio.wait_for(asyncio.shield(conn.connected), timeout)
    except BaseException:
        conn.close()
        raise
    return conn


class RemoteProducer:
    """A producer named ``name`` on ``topic`` of the cluster at ``url``. `open` it, then
    `send` payload parts; each send's future is done when the remote has stored it."""

    def __init__(self, conn: _Connection, producer_id: int, last_sequence_id: int) -> None:
        self._conn = conn
        self.producer_id = producer_id
        #: the highest sequence id the remote has stored from this producer (-1: none known)
        self.last_sequence_id = last_sequence_id

    @classmethod
    async def open(cls, url: str, topic: str, name: str, timeout: float = 30.0) -> RemoteProducer:
        host, port = parse_broker_url(url)
        conn = await _connect(host, port, timeout)
        try:
            authoritative = False
            for _ in range(_MAX_REDIRECTS):
                answer = await asyncio.wait_for(conn.request(
                    pb.BaseCommand.LOOKUP, topic=topic, authoritative=authoritative), timeout)
                lookup = answer.lookupTopicResponse
                if lookup.response == pb.CommandLookupTopicResponse.Failed:
                    raise RemoteError(f"lookup of {topic} failed: {lookup.message}")
                target = parse_broker_url(lookup.brokerServiceUrl) if lookup.brokerServiceUrl else (host, port)
                if target != (host, port):
                    conn.close()
                    host, port = target
                    conn = await _connect(host, port, timeout)
                if lookup.response == pb.CommandLookupTopicResponse.Connect:
                    break
                authoritative = lookup.authoritative
            answer = await asyncio.wait_for(conn.request(
                pb.BaseCommand.PRODUCER, topic=topic, producer_id=1, producer_name=name,
                user_provided_producer_name=True), timeout)
            return cls(conn, 1, answer.producer_success.last_sequence_id)
        except BaseException:
            conn.close()
            raise

    def send(self, sequence_id: int, num_messages: int, part: bytes) -> asyncio.Future[None]:
        """Send one payload part (a whole batch: ``num_messages``) as ``sequence_id``."""
        conn = self._conn
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if conn.closed.done():
            fut.set_exception(RemoteError("connection closed"))
            return fut
        conn.receipts[sequence_id] = fut
        cmd = command(pb.BaseCommand.SEND, producer_id=self.producer_id, sequence_id=sequence_id,
                      highest_sequence_id=sequence_id, num_messages=num_messages)
        conn.writer.write(encode_payload_command(cmd, part))
        return fut

    async def drain(self) -> None:
        """Wait while the connection's write buffer is full."""
        await self._conn.writer.drain()

    @property
    def lost(self) -> asyncio.Future[None]:
        """Done (with RemoteError) once the connection is lost or closed."""
        return self._conn.closed

    @property
    def connection_id(self) -> str:
        """``[L:host:port - R:host:port]``: this end of the connection (the address the
        remote broker shows as its ``inboundConnection``) and the remote broker's."""
        def address(key: str) -> str:
            info = self._conn.writer.get_extra_info(key)
            return f"{info[0]}:{info[1]}" if info else "?"
        return f"[L:{address('sockname')} - R:{address('peername')}]"

    def close(self) -> None:
        self._conn.close()
