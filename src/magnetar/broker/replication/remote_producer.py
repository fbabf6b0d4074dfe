"""`RemoteProducer`: one producer on another cluster's broker, over the protocol codec.

The broker does not load the client package (tests/test_layers.py); a replicator needs only
Connect (with the credentials of `RemoteSettings`, over TLS for ``pulsar+ssl://``), a topic
lookup (following redirects), Producer, GetOrCreateSchema and Send with receipts, which this
module speaks with `magnetar.protocol`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from typing import TYPE_CHECKING, Any

from magnetar.protocol import pb
from magnetar.protocol.commands import FIELD_BY_TYPE, command
from magnetar.protocol.frames import Frame, FrameDecoder, encode_command, encode_payload_command
from magnetar.protocol.version import PROTOCOL_VERSION

if TYPE_CHECKING:
    from magnetar.broker.replication.remote_settings import RemoteSettings

log = logging.getLogger(__name__)

_MAX_REDIRECTS = 8


class RemoteError(Exception):
    """The remote cluster refused or failed a request, or the connection was lost."""


class _Closed(RemoteError):
    """The remote closed the connection."""


def broker_hosts(url: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a ``pulsar://h1:p1,h2:p2`` or ``pulsar+ssl://...`` URL, a
    cluster's brokers as its record lists them (a host without a port: the scheme's)."""
    if url.startswith("pulsar://"):
        scheme, default = "pulsar://", 6650
    elif url.startswith("pulsar+ssl://"):
        scheme, default = "pulsar+ssl://", 6651
    else:
        raise RemoteError(f"not a pulsar:// or pulsar+ssl:// broker URL: {url!r}")
    hosts: list[tuple[str, int]] = []
    for hostport in url[len(scheme):].rstrip("/").split(","):
        host, _, port = hostport.strip().rpartition(":")
        if not host:
            hosts.append((hostport.strip(), default))
            continue
        try:
            hosts.append((host, int(port)))
        except ValueError:
            raise RemoteError(f"bad port in broker URL {url!r}") from None
    return hosts


def parse_broker_url(url: str) -> tuple[str, int]:
    """(host, port) of a ``pulsar://host:port`` or ``pulsar+ssl://host:port`` URL (the
    first of a list)."""
    return broker_hosts(url)[0]


class _Connection:
    """One connection: requests answered by request id, receipts by sequence id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 settings: RemoteSettings | None = None) -> None:
        self.settings = settings
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
        error: BaseException = _Closed("connection closed by the remote broker")
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                for frame in self.decoder.feed(data):
                    if isinstance(frame, Frame):
                        self._on_frame(frame.command)
        except (ConnectionResetError, ssl.SSLError) as exc:
            # the peer ended it, as with an end of file: over TLS 1.3 a client certificate the
            # remote refuses shows as either, depending on timing
            error = _Closed(f"connection closed by the remote broker: {exc}")
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
        elif t == pb.BaseCommand.AUTH_CHALLENGE:
            if self.settings is not None:  # the credentials again (a token file re-read)
                response = pb.AuthData(auth_method_name=self.settings.auth_method,
                                       auth_data=self.settings.auth_data())
                self.writer.write(encode_command(command(
                    pb.BaseCommand.AUTH_RESPONSE, client_version=_CLIENT_VERSION,
                    response=response, protocol_version=PROTOCOL_VERSION)))
        elif t == pb.BaseCommand.PING:
            self.writer.write(encode_command(command(pb.BaseCommand.PONG)))
        elif t == pb.BaseCommand.CLOSE_PRODUCER:
            self._fail_all(RemoteError("the remote broker closed the producer"))
        elif t == pb.BaseCommand.ERROR and not self.connected.done():
            self.connected.set_exception(RemoteError(
                f"{pb.ServerError.Name(cmd.error.error)}: {cmd.error.message}"))
            self.connected.exception()
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


_CLIENT_VERSION = "magnetar-replicator"


async def _connect_any(hosts: list[tuple[str, int]], timeout: float, settings: RemoteSettings
                       ) -> tuple[_Connection, tuple[str, int]]:
    """A connection to the first of ``hosts`` that answers, tried from a random one on (as
    Pulsar's client spreads its lookups over a multi-host service URL): a broker of the
    remote cluster that is down does not stop replication into the others."""
    start = random.randrange(len(hosts))
    errors: list[str] = []
    for host, port in hosts[start:] + hosts[:start]:
        try:
            return await _connect(host, port, timeout, settings), (host, port)
        except RemoteError as exc:
            errors.append(str(exc))
    raise RemoteError("; ".join(errors))


async def _connect(host: str, port: int, timeout: float,
                   settings: RemoteSettings | None = None) -> _Connection:
    """A connection to ``host:port``, over TLS when ``settings`` has a context, with its
    credentials in Connect; RemoteError naming the cause when it fails."""
    context = settings.ssl_context if settings is not None else None
    where = f"{'pulsar+ssl' if context else 'pulsar'}://{host}:{port}"
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            host, port, ssl=context, server_hostname=host if context else None), timeout)
    except ssl.SSLError as exc:
        raise RemoteError(f"TLS handshake with {where} failed: {exc}") from None
    except TimeoutError:
        raise RemoteError(f"timed out connecting to {where}") from None
    except OSError as exc:
        raise RemoteError(f"cannot connect to {where}: {exc.strerror or exc}") from None
    conn = _Connection(reader, writer, settings)
    fields: dict[str, Any] = {"client_version": _CLIENT_VERSION, "protocol_version": PROTOCOL_VERSION}
    if settings is not None and settings.auth_method:
        fields["auth_method_name"] = settings.auth_method
        fields["auth_data"] = settings.auth_data()
    writer.write(encode_command(command(pb.BaseCommand.CONNECT, **fields)))
    try:
        await asyncio.wait_for(asyncio.shield(conn.connected), timeout)
    except _Closed:
        conn.close()
        hint = " (over TLS: does it trust the client certificate presented, if any?)" if context else ""
        raise RemoteError(f"{where} closed the connection before answering Connect{hint}") from None
    except RemoteError as exc:
        conn.close()
        raise RemoteError(f"{where} refused the connection: {exc}") from None
    except BaseException:
        conn.close()
        raise
    return conn


class RemoteProducer:
    """A producer named ``name`` on ``topic`` of the cluster at ``url``. `open` it, then
    `send` payload parts; each send's future is done when the remote has stored it."""

    def __init__(self, conn: _Connection, topic: str, producer_id: int,
                 last_sequence_id: int) -> None:
        self._conn = conn
        self.topic = topic
        self.producer_id = producer_id
        #: the highest sequence id the remote has stored from this producer (-1: none known)
        self.last_sequence_id = last_sequence_id
        #: local schema version -> the remote's version of the same schema (b"": none)
        self.schema_versions: dict[bytes, bytes] = {}

    @classmethod
    async def open(cls, settings: RemoteSettings, topic: str, name: str,
                   timeout: float = 30.0) -> RemoteProducer:
        """Look ``topic`` up at ``settings.broker_url`` and open the producer where it is
        served (``pulsar+ssl://`` redirects are followed when the settings have TLS)."""
        tls = settings.ssl_context is not None
        conn, (host, port) = await _connect_any(broker_hosts(settings.broker_url), timeout,
                                                settings)
        try:
            authoritative = False
            for _ in range(_MAX_REDIRECTS):
                answer = await asyncio.wait_for(conn.request(
                    pb.BaseCommand.LOOKUP, topic=topic, authoritative=authoritative), timeout)
                lookup = answer.lookupTopicResponse
                if lookup.response == pb.CommandLookupTopicResponse.Failed:
                    raise RemoteError(f"lookup of {topic} failed: {lookup.message}")
                where = lookup.brokerServiceUrlTls if tls else lookup.brokerServiceUrl
                if tls and not where and lookup.brokerServiceUrl:
                    raise RemoteError(f"lookup of {topic}: the remote broker has no TLS "
                                      f"URL (only {lookup.brokerServiceUrl})")
                target = parse_broker_url(where) if where else (host, port)
                if target != (host, port):
                    conn.close()
                    host, port = target
                    conn = await _connect(host, port, timeout, settings)
                if lookup.response == pb.CommandLookupTopicResponse.Connect:
                    break
                authoritative = lookup.authoritative
            answer = await asyncio.wait_for(conn.request(
                pb.BaseCommand.PRODUCER, topic=topic, producer_id=1, producer_name=name,
                user_provided_producer_name=True), timeout)
            return cls(conn, topic, 1, answer.producer_success.last_sequence_id)
        except BaseException:
            conn.close()
            raise

    async def map_schema(self, local_version: bytes, schema: pb.Schema | None,
                         timeout: float = 30.0) -> None:
        """Register ``schema`` (the local one of ``local_version``; None: gone) on the remote
        topic (GetOrCreateSchema, as Pulsar's producers do for a message's schema) and
        remember the remote's version of it; RemoteError when the remote refuses it."""
        if schema is None:
            self.schema_versions[local_version] = b""
            return
        answer = await asyncio.wait_for(self._conn.request(
            pb.BaseCommand.GET_OR_CREATE_SCHEMA, topic=self.topic, schema=schema), timeout)
        response = answer.getOrCreateSchemaResponse
        if response.HasField("error_code"):
            raise RemoteError(f"the remote refused the schema of {self.topic}: "
                              f"{pb.ServerError.Name(response.error_code)}: {response.error_message}")
        self.schema_versions[local_version] = bytes(response.schema_version)

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


#: a connection and its opening, for the broker's other calls to brokers (transactions
#: telling their participants, broker/transactions/participants.py)
BrokerConnection = _Connection
connect_broker = _connect
