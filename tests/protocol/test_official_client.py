"""Byte compatibility with the official client (pulsar-client), no real broker needed.

A scripted stand-in broker, built only from this package's codec, answers the official
client's handshake, lookup and producer/consumer requests on a local socket. The client's
SEND frames are then decoded with our codec (checksum, compression, batches), and MESSAGE
frames built with our codec are handed to the official consumer, for every compression
type. Synchronisation is by blocking socket reads and queues with timeouts, never sleeps.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from collections.abc import Iterator

import pytest

from magnetar.protocol import (
    PROTOCOL_VERSION,
    Frame,
    FrameDecoder,
    ProtocolError,
    build_payload_part,
    command,
    compress,
    decode_batch,
    decompress,
    encode_batch,
    encode_command,
    encode_payload_command,
    message_id,
    parse_payload_part,
    pb,
    verify_checksum,
)

pulsar = pytest.importorskip("pulsar")

CODECS = {
    "NONE": (pb.NONE, "NONE"),
    "LZ4": (pb.LZ4, "LZ4"),
    "ZLIB": (pb.ZLIB, "ZLib"),
    "ZSTD": (pb.ZSTD, "ZSTD"),
    "SNAPPY": (pb.SNAPPY, "SNAPPY"),
}


class ScriptedBroker:
    """Just enough of a broker for one producer or consumer; records frames it gets."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.sends: queue.Queue[Frame] = queue.Queue()
        self.flows: queue.Queue[tuple[socket.socket, int]] = queue.Queue()
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._closing = False
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        decoder = FrameDecoder(verify_checksums=False)
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                for frame in decoder.feed(data):
                    reply = self._answer(conn, frame)
                    if reply is not None:
                        conn.sendall(encode_command(reply))
        except (OSError, ProtocolError) as exc:
            if not self._closing:
                self.errors.append(exc)

    def _answer(self, conn: socket.socket, frame: Frame) -> pb.BaseCommand | None:
        cmd = frame.command
        t = pb.BaseCommand
        if cmd.type == t.CONNECT:
            return command("CONNECTED", server_version="scripted", protocol_version=PROTOCOL_VERSION,
                           max_message_size=5 * 1024 * 1024)
        if cmd.type == t.PARTITIONED_METADATA:
            return command("PARTITIONED_METADATA_RESPONSE", request_id=cmd.partitionMetadata.request_id,
                           partitions=0, response=pb.CommandPartitionedTopicMetadataResponse.Success)
        if cmd.type == t.LOOKUP:
            return command("LOOKUP_RESPONSE", request_id=cmd.lookupTopic.request_id, brokerServiceUrl=self.url,
                           response=pb.CommandLookupTopicResponse.Connect, authoritative=True)
        if cmd.type == t.PRODUCER:
            return command("PRODUCER_SUCCESS", request_id=cmd.producer.request_id, producer_name="scripted-0",
                           last_sequence_id=-1)
        if cmd.type == t.SEND:
            self.sends.put(frame)
            return command("SEND_RECEIPT", producer_id=cmd.send.producer_id, sequence_id=cmd.send.sequence_id,
                           message_id=message_id(7, self.sends.qsize()))
        if cmd.type == t.SUBSCRIBE:
            return command("SUCCESS", request_id=cmd.subscribe.request_id)
        if cmd.type == t.FLOW:
            self.flows.put((conn, cmd.flow.consumer_id))
            return None
        if cmd.type == t.PING:
            return command("PONG")
        if cmd.type in (t.CLOSE_PRODUCER, t.CLOSE_CONSUMER, t.UNSUBSCRIBE):
            body = {t.CLOSE_PRODUCER: cmd.close_producer, t.CLOSE_CONSUMER: cmd.close_consumer,
                    t.UNSUBSCRIBE: cmd.unsubscribe}[cmd.type]
            return command("SUCCESS", request_id=body.request_id)
        return None  # acks, redelivery requests, ...

    def close(self) -> None:
        self._closing = True
        self.sock.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    b = ScriptedBroker()
    yield b
    b.close()
    assert not b.errors, b.errors


def _client(broker: ScriptedBroker) -> pulsar.Client:
    return pulsar.Client(broker.url, operation_timeout_seconds=10, logger=_quiet_logger())


def _quiet_logger() -> object:
    import logging

    log = logging.getLogger("pulsar-client")
    log.setLevel(logging.ERROR)
    return log


@pytest.mark.parametrize("codec", list(CODECS))
def test_official_producer_batch_decodes(broker: ScriptedBroker, codec: str) -> None:
    ours, theirs = CODECS[codec]
    client = _client(broker)
    try:
        producer = client.create_producer(
            "persistent://public/default/interop",
            compression_type=getattr(pulsar.CompressionType, theirs),
            batching_enabled=True,
            batching_max_messages=3,
            batching_max_publish_delay_ms=60_000,
        )
        values = [b"first " * 50, b"second", b"\x00\xffthird" * 30]
        for i, value in enumerate(values):
            producer.send_async(value, None, partition_key=f"k{i}", properties={"n": str(i)})
        producer.flush()
        frame = broker.sends.get(timeout=10)
        producer.close()
    finally:
        client.close()

    assert verify_checksum(frame.payload_part)
    meta, payload = parse_payload_part(frame.payload_part)
    assert meta.num_messages_in_batch == 3
    assert frame.command.send.num_messages == 3
    assert meta.compression == ours
    raw = decompress(meta.compression, payload, meta.uncompressed_size)
    batch = decode_batch(raw, meta.num_messages_in_batch)
    assert [p for _, p in batch] == values
    assert [m.partition_key for m, _ in batch] == ["k0", "k1", "k2"]
    assert [dict((kv.key, kv.value) for kv in m.properties) for m, _ in batch] == [
        {"n": "0"}, {"n": "1"}, {"n": "2"},
    ]


def test_official_producer_single_message(broker: ScriptedBroker) -> None:
    client = _client(broker)
    try:
        producer = client.create_producer("persistent://public/default/single", batching_enabled=False)
        producer.send(b"alone", partition_key="key")
        frame = broker.sends.get(timeout=10)
        producer.close()
    finally:
        client.close()
    meta, payload = parse_payload_part(frame.payload_part)
    assert payload == b"alone"
    assert meta.partition_key == "key"
    assert not meta.HasField("num_messages_in_batch")


@pytest.mark.parametrize("codec", list(CODECS))
def test_official_consumer_reads_our_batches(broker: ScriptedBroker, codec: str) -> None:
    ours, _ = CODECS[codec]
    client = _client(broker)
    try:
        consumer = client.subscribe("persistent://public/default/interop-c", "sub",
                                    consumer_type=pulsar.ConsumerType.Shared)
        conn, consumer_id = broker.flows.get(timeout=10)
        values = [b"alpha" * 40, b"", b"gamma\x00\x01"]
        raw = encode_batch([
            (pb.SingleMessageMetadata(partition_key=f"k{i}", properties=[pb.KeyValue(key="i", value=str(i))]), v)
            for i, v in enumerate(values)
        ])
        meta = pb.MessageMetadata(producer_name="ours", sequence_id=0, publish_time=1_700_000_000_000,
                                  num_messages_in_batch=3, compression=ours, uncompressed_size=len(raw))
        part = build_payload_part(meta, compress(ours, raw))
        msg = command("MESSAGE", consumer_id=consumer_id, message_id=message_id(9, 1))
        conn.sendall(encode_payload_command(msg, part))
        got = [consumer.receive(timeout_millis=10_000) for _ in values]
        assert [m.data() for m in got] == values
        assert [m.partition_key() for m in got] == ["k0", "k1", "k2"]
        assert [m.properties() for m in got] == [{"i": "0"}, {"i": "1"}, {"i": "2"}]
        consumer.close()
    finally:
        client.close()
