"""Hostile peers over real sockets: a fuzzer over every command handler, random bytes, lying
frame sizes, hundreds of connections that never speak. After each, a normal client works.

The fuzzer (hypothesis, bounded examples, no deadline) builds commands of every type the
broker handles with field values drawn at random (ids, names, flags, nested messages one
level deep), sends a few per connection after a valid Connect, and checks that the broker
keeps answering Ping on another connection and never logs an internal error ("failed to
handle"): a handler may refuse or hang up on garbage, never crash on it.
"""

from __future__ import annotations

import logging
import random
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.cli.tokens import create_token
from magnetar.protocol import pb
from tests.broker.brokerproc import wait_until
from tests.broker.conftest import ThreadedBroker, start_broker
from tests.broker.rawclient import RawClient

from .conftest import file_url, token_settings
from .test_authentication import round_trip

T = pb.BaseCommand
CNX_LOGGER = "magnetar.broker.connection.server_cnx"
HANDLED = [
    "LOOKUP", "PARTITIONED_METADATA", "PRODUCER", "SEND", "CLOSE_PRODUCER", "SUBSCRIBE", "FLOW",
    "ACK", "REDELIVER_UNACKNOWLEDGED_MESSAGES", "CLOSE_CONSUMER", "UNSUBSCRIBE", "SEEK",
    "GET_LAST_MESSAGE_ID", "CONSUMER_STATS", "GET_TOPICS_OF_NAMESPACE", "GET_SCHEMA",
    "GET_OR_CREATE_SCHEMA", "AUTH_RESPONSE", "PING", "PONG", "CONNECT",
]
TOPICS = ["persistent://public/default/fuzz", "non-persistent://public/default/fuzz",
          "fuzz", "persistent://public/default/fuzz-partition-1", "", "a/b/c/d://x"]


def _field_name_of(kind: str) -> str:
    """The BaseCommand field that carries a command of type ``kind``."""
    number = T.Type.Value(kind)
    for field in T.DESCRIPTOR.fields:
        if field.message_type is not None and field.number == number:
            return field.name
    raise KeyError(kind)


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    t = field.type
    if field.enum_type is not None:
        return st.sampled_from([v.number for v in field.enum_type.values])
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return st.one_of(st.integers(0, 10), st.integers(0, 2**64 - 1))
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return st.one_of(st.integers(0, 10), st.integers(0, 2**32 - 1))
    if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64,
             FieldDescriptor.TYPE_SFIXED64):
        return st.one_of(st.integers(-2, 10), st.integers(-(2**63), 2**63 - 1))
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32,
             FieldDescriptor.TYPE_SFIXED32):
        return st.one_of(st.integers(-2, 10), st.integers(-(2**31), 2**31 - 1))
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=False, width=32)
    if t == FieldDescriptor.TYPE_STRING:
        if field.name in ("topic", "namespace", "subscription"):
            return st.one_of(st.sampled_from([*TOPICS, "public/default"]), st.text(max_size=20))
        return st.text(max_size=20)
    return st.binary(max_size=40)


@st.composite
def fill(draw: Any, message: Any, depth: int = 0) -> Any:
    for field in message.DESCRIPTOR.fields:
        required = field.is_required
        if not required and not draw(st.booleans()):
            continue
        if field.message_type is not None:
            if depth >= 1:
                continue
            count = draw(st.integers(0, 2)) if field.is_repeated else 1
            for _ in range(count):
                target = (getattr(message, field.name).add()
                          if field.is_repeated
                          else getattr(message, field.name))
                draw(fill(target, depth + 1))
                if not field.is_repeated:
                    target.SetInParent()
            continue
        values = draw(st.lists(_scalar(field), min_size=1, max_size=3))
        if field.is_repeated:
            getattr(message, field.name).extend(values)
        else:
            setattr(message, field.name, values[0])
    return message


@st.composite
def commands(draw: Any) -> bytes:
    kind = draw(st.sampled_from(HANDLED))
    cmd = T(type=T.Type.Value(kind))
    inner = getattr(cmd, _field_name_of(kind))
    draw(fill(inner))
    inner.SetInParent()
    body = cmd.SerializePartialToString()
    if kind == "SEND":  # a payload part after the command: magic, checksum, metadata, payload
        tail = draw(st.binary(max_size=64))
        return struct.pack(">II", 4 + len(body) + len(tail), len(body)) + body + tail
    return struct.pack(">II", 4 + len(body), len(body)) + body


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedBroker]:
    b = start_broker(tmp_path_factory.mktemp("fuzz"), magnetarHandshakeTimeoutSeconds=2)
    yield b
    b.stop()


class InternalErrors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_fuzz_command_handlers(fuzz_broker: ThreadedBroker) -> None:
    fuzz(fuzz_broker, {}, 150)


def test_fuzz_command_handlers_with_token_auth(make_broker: Any, keys: dict[str, Path]) -> None:
    broker = make_broker(**token_settings(keys, authenticationRefreshCheckSeconds=1,
                                          authorizationEnabled=True, superUserRoles="fuzzer"))
    token = create_token("fuzzer", secret_key=file_url(keys["secret"]), expiry_seconds=3600)
    fuzz(broker, {"auth_method_name": "token", "auth_data": token.encode()}, 60)


def fuzz(broker: ThreadedBroker, connect: dict[str, Any], max_examples: int) -> None:
    """Send random commands on fresh connections; the broker must keep serving."""
    errors = InternalErrors()
    logging.getLogger("magnetar.broker").addHandler(errors)
    watcher = RawClient.for_url(broker.url, timeout=10)
    watcher.connect(**connect)
    examples = [0]

    @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(commands(), min_size=1, max_size=4))
    def run(frames: list[bytes]) -> None:
        examples[0] += 1
        with RawClient.for_url(broker.url, timeout=10) as raw:
            raw.connect(**connect)
            for frame in frames:
                try:
                    raw.send_bytes(frame)
                except OSError:  # the broker hung up on an earlier frame
                    break
            try:
                raw.send("PING")
            except OSError:
                return  # hung up on: allowed
            # answered, or hung up on: either way within a bound
            for _ in range(50):
                try:
                    got = raw.read(10)
                except OSError:
                    break
                if got is None or got.command.type == T.PONG:
                    break
        watcher.send("PING")
        watcher.expect(T.PONG)

    try:
        run()
    finally:
        logging.getLogger("magnetar.broker").removeHandler(errors)
        watcher.close()
    internal = [r.getMessage() for r in errors.records if "failed to handle" in r.getMessage()]
    assert not internal, internal[:5]
    assert examples[0] >= max_examples * 2 // 3
    if not connect:
        round_trip(broker.url, None)


def test_random_bytes_and_lying_sizes(fuzz_broker: ThreadedBroker) -> None:
    rng = random.Random(11)
    port = fuzz_broker.service.port
    payloads = [rng.randbytes(rng.randint(1, 4000)) for _ in range(30)]
    payloads += [
        struct.pack(">I", 0xFFFFFFF0) + b"x" * 64,  # total size far over the limit
        struct.pack(">II", 8, 200) + b"\x08\x02" * 4,  # command size beyond the frame
        struct.pack(">II", 3, 0),  # a frame too short for its own header
        struct.pack(">II", 100, 2) + b"\x08\x02",  # promises 100 bytes, sends 6, then closes
    ]
    for data in payloads:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(4096):
                    pass
            except OSError:
                pass  # reset by the broker: fine
    round_trip(fuzz_broker.url, None)


def test_half_open_connections_that_never_speak(fuzz_broker: ThreadedBroker) -> None:
    port = fuzz_broker.service.port
    limits = fuzz_broker.service.security.limits
    silent = []
    try:
        for _ in range(500):
            silent.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        start = time.monotonic()
        round_trip(fuzz_broker.url, None)  # served while 500 sockets sit idle
        assert time.monotonic() - start < 20
        # the handshake timeout (2 s here) closes every one of them
        wait_until(lambda: limits.total == 0, 60, "the silent connections to be closed")
        for sock in silent[:20]:
            assert sock.recv(1) == b""
    finally:
        for sock in silent:
            sock.close()
    round_trip(fuzz_broker.url, None)


def test_producer_that_never_reads_its_receipts(fuzz_broker: ThreadedBroker) -> None:
    """2000 sends without reading a byte back: others are served meanwhile, and every send
    gets its receipt once the producer reads."""
    topic = "persistent://public/default/never-reads"
    with RawClient.for_url(fuzz_broker.url, timeout=30) as raw:
        raw.connect()
        assert raw.create_producer(topic).type == T.PRODUCER_SUCCESS
        payload = b"x" * 1024
        for seq in range(2000):
            raw.send_message(1, seq, payload)
        start = time.monotonic()
        round_trip(fuzz_broker.url, None)
        assert time.monotonic() - start < 20  # latency for others stays bounded
        receipts = set()
        while len(receipts) < 2000:
            cmd = raw.read_reply(30)
            assert cmd.type == T.SEND_RECEIPT, cmd
            receipts.add(cmd.send_receipt.sequence_id)
        assert receipts == set(range(2000))
