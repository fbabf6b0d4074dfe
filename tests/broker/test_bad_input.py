"""Bad input on one connection: answered or hung up on, logged once, never fatal to the broker.

Every case ends with ``round_trip``: the official client produces and consumes on another
connection of the same broker, which proves the broker kept serving.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterator

import pulsar
import pytest

from magnetar.protocol import pb
from magnetar.protocol.frames import FRAME_PADDING

from .conftest import ThreadedBroker
from .rawclient import RawClient

T = pb.BaseCommand
CNX_LOGGER = "magnetar.broker.connection.server_cnx"


@pytest.fixture
def raw(broker: ThreadedBroker) -> Iterator[RawClient]:
    r = RawClient.for_url(broker.url)
    r.connect()
    yield r
    r.close()


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="magnetar")


def round_trip(client: pulsar.Client, topic: str) -> None:
    """Produce and consume one message on the official client's own connection."""
    consumer = client.subscribe(topic, "check")  # from Latest: only what is sent below
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"still-serving")
    assert consumer.receive(timeout_millis=5000).data() == b"still-serving"
    producer.close()
    consumer.close()


def logged(caplog: pytest.LogCaptureFixture, text: str) -> int:
    """How many broker connection log records mention ``text``."""
    return sum(1 for r in caplog.records if r.name == CNX_LOGGER and text in r.getMessage())


# ---------------------------------------------------------------------- framing


def _open_connections(broker: ThreadedBroker) -> int:
    service = broker.service
    assert service is not None
    return broker.call(lambda: len(service.connections))


def test_truncated_frame_then_close(broker: ThreadedBroker, client: pulsar.Client, topic: str) -> None:
    baseline = _open_connections(broker)
    with RawClient.for_url(broker.url) as r:
        r.connect()
        # a frame announcing 100 bytes, of which only 10 arrive before the hang-up
        r.send_bytes(struct.pack(">II", 100, 96) + b"\x08" * 6)
    deadline = time.monotonic() + 5
    while _open_connections(broker) > baseline and time.monotonic() < deadline:
        time.sleep(0.01)  # bounded poll for the broker to notice the hang-up
    assert _open_connections(broker) == baseline
    round_trip(client, topic)


def test_oversize_frame_closes_with_a_log_line(
    broker: ThreadedBroker, client: pulsar.Client, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    limit = broker.config.maxMessageSize + FRAME_PADDING
    with RawClient.for_url(broker.url) as r:
        r.connect()
        r.send_bytes(struct.pack(">I", limit + 1))  # the size alone is enough to refuse it
        assert r.wait_closed(5)
    assert logged(caplog, "too large") == 1
    round_trip(client, topic)


def test_frame_at_the_limit_is_not_refused_for_its_size(broker: ThreadedBroker) -> None:
    limit = broker.config.maxMessageSize + FRAME_PADDING
    with RawClient.for_url(broker.url) as r:
        r.connect()
        # a Ping padded with an unknown protobuf field (1007, bytes) to exactly the limit
        body = T(type=T.PING, ping=pb.CommandPing()).SerializeToString()
        filler_size = limit - 4 - len(body) - 2 - 4
        body += b"\xfa\x3e" + _varint4(filler_size) + bytes(filler_size)
        assert 4 + len(body) == limit
        r.send_bytes(struct.pack(">II", 4 + len(body), len(body)) + body)
        assert r.read_reply().type == T.PONG


def _varint4(n: int) -> bytes:
    """``n`` as a varint padded to exactly four bytes."""
    return bytes([(n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, ((n >> 14) & 0x7F) | 0x80, n >> 21])


def test_garbage_protobuf_closes(
    broker: ThreadedBroker, client: pulsar.Client, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    with RawClient.for_url(broker.url) as r:
        r.connect()
        garbage = b"\xff\xff\xff\xff\xff\x01\x02\x03"
        r.send_bytes(struct.pack(">II", 4 + len(garbage), len(garbage)) + garbage)
        assert r.wait_closed(5)
    assert logged(caplog, "malformed frame") == 1
    round_trip(client, topic)


def test_command_type_outside_the_schema_closes(
    broker: ThreadedBroker, client: pulsar.Client, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    with RawClient.for_url(broker.url) as r:
        r.connect()
        body = b"\x08\xc8\x01"  # BaseCommand.type = 200: no such command
        r.send_bytes(struct.pack(">II", 4 + len(body), len(body)) + body)
        assert r.wait_closed(5)
    assert logged(caplog, "malformed frame") == 1
    round_trip(client, topic)


# ---------------------------------------------------------------------- producers


def test_bad_checksum_gets_a_send_error_and_the_connection_lives(
    raw: RawClient, client: pulsar.Client, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert raw.create_producer(topic, producer_id=1).type == T.PRODUCER_SUCCESS
    raw.send_message(1, 0, b"corrupted", corrupt_checksum=True)
    reply = raw.read_reply()
    assert reply.type == T.SEND_ERROR
    assert reply.send_error.error == pb.ChecksumError
    assert reply.send_error.sequence_id == 0
    raw.send_message(1, 1, b"good")
    reply = raw.read_reply()
    assert reply.type == T.SEND_RECEIPT
    assert reply.send_receipt.sequence_id == 1
    assert logged(caplog, "checksum") == 1
    # only the good message was stored
    consumer = client.subscribe(topic, "all", initial_position=pulsar.InitialPosition.Earliest)
    assert consumer.receive(timeout_millis=5000).data() == b"good"
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=200)
    round_trip(client, topic)


def test_send_for_unknown_producer_closes(
    raw: RawClient, client: pulsar.Client, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    raw.send_message(77, 0, b"who am I")
    assert raw.wait_closed(5)
    assert logged(caplog, "unknown producer id 77") == 1
    round_trip(client, topic)


def test_duplicate_producer_id_for_another_topic_is_an_error(
    raw: RawClient, client: pulsar.Client, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert raw.create_producer(topic, producer_id=5).type == T.PRODUCER_SUCCESS
    reply = raw.create_producer(topic + "-other", producer_id=5)
    assert reply.type == T.ERROR
    assert reply.error.request_id == 2
    assert logged(caplog, "producer id 5 is already in use") == 1
    # the first producer is untouched and the connection lives
    raw.send_message(5, 0, b"first")
    assert raw.read_reply().type == T.SEND_RECEIPT
    round_trip(client, topic)


def test_producer_name_already_connected_is_busy(
    client: pulsar.Client, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    first = client.create_producer(topic, producer_name="only-one")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="only-one")
    assert logged(caplog, "ProducerBusy") == 1
    first.send(b"first still works")
    first.close()
    # the name is free again once its producer is gone
    client.create_producer(topic, producer_name="only-one").close()
    round_trip(client, topic)


# ---------------------------------------------------------------------- consumers


def test_flow_and_ack_for_unknown_consumer(
    raw: RawClient, client: pulsar.Client, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    raw.send("FLOW", consumer_id=42, messagePermits=100)
    raw.send("ACK", consumer_id=42, ack_type=pb.CommandAck.Individual,
             message_id=[pb.MessageIdData(ledgerId=1, entryId=1)])
    assert raw.is_alive()  # both ignored, nothing sent back, connection open
    assert logged(caplog, "Flow for unknown consumer id 42") == 1
    assert logged(caplog, "Ack for unknown consumer id 42") == 1

    raw.send("ACK", consumer_id=42, ack_type=pb.CommandAck.Individual, request_id=9,
             message_id=[pb.MessageIdData(ledgerId=1, entryId=1)])
    reply = raw.read_reply()
    assert reply.type == T.ACK_RESPONSE
    assert reply.ackResponse.request_id == 9
    assert reply.ackResponse.error == pb.ConsumerNotFound
    round_trip(client, topic)


def test_consumer_stats_for_unknown_consumer_is_an_error(raw: RawClient) -> None:
    raw.send("CONSUMER_STATS", consumer_id=42, request_id=3)
    reply = raw.read_reply()
    assert reply.type == T.CONSUMER_STATS_RESPONSE
    assert reply.consumerStatsResponse.request_id == 3
    assert reply.consumerStatsResponse.error_code == pb.ConsumerNotFound
    assert raw.is_alive()


def test_second_exclusive_consumer_is_busy(
    client: pulsar.Client, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    first = client.subscribe(topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive)
    assert logged(caplog, "ConsumerBusy") == 1
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"to the first")
    assert first.receive(timeout_millis=5000).data() == b"to the first"
    round_trip(client, topic)


def test_second_exclusive_consumer_raw_gets_consumer_busy(
    raw: RawClient, client: pulsar.Client, topic: str
) -> None:
    first = client.subscribe(topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive)
    raw.send("SUBSCRIBE", topic=topic, subscription="excl", subType=pb.CommandSubscribe.Exclusive,
             consumer_id=1, request_id=4)
    reply = raw.read_reply()
    assert reply.type == T.ERROR
    assert reply.error.error == pb.ConsumerBusy
    assert reply.error.request_id == 4
    assert raw.is_alive()
    first.close()


# ---------------------------------------------------------------------- other commands


def test_unsupported_command_is_not_allowed_and_the_connection_lives(
    raw: RawClient, client: pulsar.Client, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    raw.send("WATCH_TOPIC_LIST", request_id=11, watcher_id=1, namespace="public/default",
             topics_pattern=".*")
    reply = raw.read_reply()
    assert reply.type == T.ERROR
    assert reply.error.request_id == 11
    assert reply.error.error == pb.NotAllowedError
    assert logged(caplog, "WATCH_TOPIC_LIST") == 1
    assert raw.is_alive()
    round_trip(client, topic)


@pytest.mark.parametrize(
    "bad_name",
    ["bad-domain://public/default/t", "persistent://public//t", "persistent://pub lic/default/t",
     "persistent://public/default/"],
)
def test_malformed_topic_name_in_lookup(
    raw: RawClient, bad_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    raw.send("LOOKUP", topic=bad_name, request_id=21)
    reply = raw.read_reply()
    assert logged(caplog, "InvalidTopicName") == 1
    # the official client matches a failed lookup only by a LookupResponse
    assert reply.type == T.LOOKUP_RESPONSE
    resp = reply.lookupTopicResponse
    assert resp.request_id == 21
    assert resp.response == pb.CommandLookupTopicResponse.Failed
    assert resp.error == pb.InvalidTopicName
    assert raw.is_alive()


@pytest.mark.parametrize("bad_name", ["bad-domain://public/default/t", "persistent://public//t"])
def test_malformed_topic_name_in_producer_and_subscribe(raw: RawClient, bad_name: str) -> None:
    reply = raw.create_producer(bad_name, producer_id=3)
    assert reply.type == T.ERROR
    assert reply.error.error == pb.InvalidTopicName
    raw.send("SUBSCRIBE", topic=bad_name, subscription="s", subType=pb.CommandSubscribe.Shared,
             consumer_id=3, request_id=40)
    reply = raw.read_reply()
    assert reply.type == T.ERROR
    assert (reply.error.request_id, reply.error.error) == (40, pb.InvalidTopicName)
    raw.send("PARTITIONED_METADATA", topic=bad_name, request_id=41)
    reply = raw.read_reply()
    assert reply.type == T.PARTITIONED_METADATA_RESPONSE
    assert reply.partitionMetadataResponse.error == pb.InvalidTopicName
    assert raw.is_alive()
