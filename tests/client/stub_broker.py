"""A tiny in-process broker stub for what the real brokers here cannot do: authentication
challenges, TLS, lookup redirects, refusing producers with ServiceNotReady, and closing
producers and consumers with an ``assignedBrokerServiceUrl`` (a bundle moving to another
broker). It speaks just enough of the protocol for a producer and a consumer."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from magnetar.protocol import FrameDecoder, command, encode_command, pb

T = pb.BaseCommand


class StubBroker:
    def __init__(self, ssl_context: ssl.SSLContext | None = None, challenge: bool = False,
                 redirect_to: StubBroker | None = None) -> None:
        self.ssl = ssl_context
        self.challenge = challenge
        self.redirect_to = redirect_to
        self.connects: list[pb.CommandConnect] = []
        self.auth_responses: list[pb.CommandAuthResponse] = []
        self.lookups: list[pb.CommandLookupTopic] = []
        self.partition_requests = 0
        self.pongs = 0
        self.pings = 0
        self.ping_on_connect = False
        self.sent: list[bytes] = []
        self.fail_producers = 0  # answer that many Producer commands with ServiceNotReady
        self.producer_cmds: list[pb.CommandProducer] = []
        self.subscribes: list[pb.CommandSubscribe] = []
        self._attached: list[tuple[asyncio.StreamWriter, int, int]] = []  # (w, kind, id)
        self.server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"{'pulsar+ssl' if self.ssl else 'pulsar'}://127.0.0.1:{self.port}"

    async def start(self) -> StubBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def close_all(self, assigned_url: str | None = None) -> int:
        """Close every producer and consumer attached here, naming ``assigned_url`` as the
        new owner (as a broker unloading a bundle does); how many were closed."""
        extra = {"assignedBrokerServiceUrl": assigned_url} if assigned_url else {}
        attached, self._attached = self._attached, []
        for writer, kind, ident in attached:
            if kind == T.PRODUCER:
                cmd = command(T.CLOSE_PRODUCER, producer_id=ident, request_id=0, **extra)
            else:
                cmd = command(T.CLOSE_CONSUMER, consumer_id=ident, request_id=0, **extra)
            writer.write(encode_command(cmd))
        return len(attached)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        entry = 0

        def send(kind: int, **fields: Any) -> None:
            writer.write(encode_command(command(kind, **fields)))

        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    cmd = frame.command
                    if cmd.type == T.CONNECT:
                        self.connects.append(cmd.connect)
                        if self.challenge:
                            send(T.AUTH_CHALLENGE, server_version="stub",
                                 challenge=pb.AuthData(auth_method_name="token",
                                                       auth_data=b"nonce"),
                                 protocol_version=21)
                        else:
                            send(T.CONNECTED, server_version="stub", protocol_version=21)
                        if self.ping_on_connect:
                            send(T.PING)
                    elif cmd.type == T.AUTH_RESPONSE:
                        self.auth_responses.append(cmd.authResponse)
                        send(T.CONNECTED, server_version="stub", protocol_version=21)
                    elif cmd.type == T.PARTITIONED_METADATA:
                        self.partition_requests += 1
                        send(T.PARTITIONED_METADATA_RESPONSE,
                             request_id=cmd.partitionMetadata.request_id, partitions=0)
                    elif cmd.type == T.LOOKUP:
                        lk = cmd.lookupTopic
                        self.lookups.append(lk)
                        R = pb.CommandLookupTopicResponse
                        target = self.redirect_to or self
                        kind = R.Redirect if self.redirect_to is not None else R.Connect
                        url_field = "brokerServiceUrlTls" if target.ssl else "brokerServiceUrl"
                        send(T.LOOKUP_RESPONSE, request_id=lk.request_id, response=kind,
                             authoritative=True, **{url_field: target.url})
                    elif cmd.type == T.PRODUCER:
                        self.producer_cmds.append(cmd.producer)
                        if self.fail_producers > 0:
                            self.fail_producers -= 1
                            send(T.ERROR, request_id=cmd.producer.request_id,
                                 error=pb.ServiceNotReady, message="not the owner")
                            continue
                        self._attached.append((writer, T.PRODUCER, cmd.producer.producer_id))
                        send(T.PRODUCER_SUCCESS, request_id=cmd.producer.request_id,
                             producer_name="stub-producer", last_sequence_id=-1)
                    elif cmd.type == T.SUBSCRIBE:
                        self.subscribes.append(cmd.subscribe)
                        self._attached.append((writer, T.SUBSCRIBE, cmd.subscribe.consumer_id))
                        send(T.SUCCESS, request_id=cmd.subscribe.request_id)
                    elif cmd.type == T.FLOW:
                        pass
                    elif cmd.type == T.SEND:
                        self.sent.append(frame.payload_part or b"")
                        send(T.SEND_RECEIPT, producer_id=cmd.send.producer_id,
                             sequence_id=cmd.send.sequence_id,
                             message_id=pb.MessageIdData(ledgerId=7, entryId=entry))
                        entry += 1
                    elif cmd.type == T.CLOSE_PRODUCER:
                        send(T.SUCCESS, request_id=cmd.close_producer.request_id)
                    elif cmd.type == T.CLOSE_CONSUMER:
                        send(T.SUCCESS, request_id=cmd.close_consumer.request_id)
                    elif cmd.type == T.PING:
                        self.pings += 1
                        send(T.PONG)
                    elif cmd.type == T.PONG:
                        self.pongs += 1
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
