"""The connection life cycle: Connect/Connected, Ping/Pong both ways, keep-alive, size limit."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.protocol import pb
from magnetar.protocol.version import PROTOCOL_VERSION

from .conftest import QUIET, ThreadedBroker, start_broker
from .rawclient import RawClient

T = pb.BaseCommand
CNX_LOGGER = "magnetar.broker.connection.server_cnx"


def round_trip(client: pulsar.Client, topic: str, payload: bytes = b"still-serving") -> None:
    """Produce and consume one message: the broker serves this connection."""
    consumer = client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(payload)
    assert consumer.receive(timeout_millis=5000).data() == payload
    producer.close()
    consumer.close()


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == CNX_LOGGER and text in r.getMessage()]


@pytest.mark.parametrize(
    ("theirs", "expected"),
    [(PROTOCOL_VERSION, PROTOCOL_VERSION), (6, 6), (PROTOCOL_VERSION + 40, PROTOCOL_VERSION)],
)
def test_connected_negotiates_protocol_version(broker: ThreadedBroker, theirs: int, expected: int) -> None:
    with RawClient.for_url(broker.url) as raw:
        connected = raw.connect(protocol_version=theirs)
        assert connected.protocol_version == expected
        assert connected.server_version
        assert connected.max_message_size == broker.config.maxMessageSize
        assert raw.is_alive()


def test_command_before_connect_closes(
    broker: ThreadedBroker, client: pulsar.Client, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=CNX_LOGGER)
    with RawClient.for_url(broker.url) as raw:
        raw.send("LOOKUP", topic=topic, request_id=1)
        assert raw.wait_closed(5)
    assert len(warnings_about(caplog, "LOOKUP before Connect")) == 1
    round_trip(client, topic)


def test_second_connect_closes(
    broker: ThreadedBroker, client: pulsar.Client, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=CNX_LOGGER)
    with RawClient.for_url(broker.url) as raw:
        raw.connect()
        raw.send("CONNECT", client_version="again", protocol_version=PROTOCOL_VERSION)
        assert raw.wait_closed(5)
    assert len(warnings_about(caplog, "second Connect")) == 1
    round_trip(client, topic)


def test_broker_answers_ping(broker: ThreadedBroker) -> None:
    with RawClient.for_url(broker.url) as raw:
        raw.connect()
        for _ in range(3):
            raw.send("PING")
            assert raw.read_reply().type == T.PONG


def _server_connections(broker: ThreadedBroker) -> set[object]:
    assert broker.service is not None
    service = broker.service
    return broker.call(lambda: {c for c in service.connections if not c.closed})


def test_keepalive_pings_idle_peers_and_drops_silent_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=CNX_LOGGER)
    broker = start_broker(tmp_path, keepAliveIntervalSeconds=1)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        topic = "persistent://public/default/keepalive"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        official = _server_connections(broker)
        assert len(official) == 1

        silent = RawClient.for_url(broker.url)
        never_connected = RawClient.for_url(broker.url)
        silent.connect()
        started = time.monotonic()
        # The broker pings an idle connection within one interval...
        first = silent.read(3)
        assert first is not None and first.command.type == T.PING
        # ...and hangs up on a peer that never answers, within about two intervals.
        assert silent.wait_closed(5)
        assert time.monotonic() - started < 5
        assert never_connected.wait_closed(5)
        silent.close()
        never_connected.close()
        assert len(warnings_about(caplog, "did not answer Ping")) == 1
        assert len(warnings_about(caplog, "no Connect")) == 1

        # The official client answered every Ping: same connection, still serving.
        producer.send(b"after-pings")
        assert consumer.receive(timeout_millis=5000).data() == b"after-pings"
        assert official <= _server_connections(broker)
    finally:
        client.close()
        broker.stop()


def test_peer_that_answers_pings_stays_connected(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, keepAliveIntervalSeconds=1)
    try:
        with RawClient.for_url(broker.url) as raw:
            raw.connect()
            for _ in range(3):  # three intervals, each Ping answered at once
                assert raw.expect(T.PING, timeout=3, answer_pings=False)
                raw.send("PONG")
            assert raw.is_alive()
    finally:
        broker.stop()


def _cnx_of(broker: ThreadedBroker, raw: RawClient) -> Any:
    host, port = raw.sock.getsockname()[:2]
    peer = f"{host}:{port}"
    assert broker.service is not None
    service = broker.service
    return broker.call(lambda: next(c for c in service.connections if c.peer == peer))


def test_no_keepalive_drop_while_the_broker_is_not_reading(tmp_path: Path) -> None:
    """Backpressure stops reading a connection: its Pong may be unread, so it is not dropped."""
    broker = start_broker(tmp_path, keepAliveIntervalSeconds=1)
    try:
        with RawClient.for_url(broker.url) as raw:
            raw.connect()
            cnx = _cnx_of(broker, raw)

            def pause() -> None:
                cnx.reading_paused = True
                cnx.transport.pause_reading()

            def resume() -> None:
                cnx.reading_paused = False
                cnx.transport.resume_reading()

            broker.call(pause)
            # three unanswered Pings: the third proves the second tick did not hang up
            for _ in range(3):
                assert raw.expect(T.PING, timeout=3, answer_pings=False)
            broker.call(resume)
            raw.send("PONG")
            assert raw.is_alive()
    finally:
        broker.stop()


def test_max_message_size_is_announced_and_enforced_by_the_client(tmp_path: Path) -> None:
    limit = 64 * 1024
    broker = start_broker(tmp_path, maxMessageSize=limit)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        with RawClient.for_url(broker.url) as raw:
            assert raw.connect().max_message_size == limit
        topic = "persistent://public/default/max-size"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=False)
        with pytest.raises(pulsar.MessageTooBig):
            producer.send(b"x" * (limit + 1))
        fits = b"y" * (limit - 1024)
        producer.send(fits)
        assert consumer.receive(timeout_millis=5000).data() == fits
    finally:
        client.close()
        broker.stop()
