"""Topic kinds and topic-level features with the official client: partitions, regex
subscriptions, non-persistent topics, schemas, delayed delivery, chunking, termination,
producer names and access modes."""

from __future__ import annotations

import re
import socket
import time
import uuid

import pulsar
import pytest
from pulsar.schema import AvroSchema, JsonSchema, Record, String, StringSchema

from magnetar.protocol import Frame, FrameDecoder, command, encode_command, pb

from .conftest import QUIET, ThreadedBroker, start_broker


def test_partitioned_topic_auto_created(tmp_path, topic: str) -> None:
    b = start_broker(tmp_path, allowAutoTopicCreationType="partitioned", defaultNumPartitions=3)
    try:
        client = pulsar.Client(b.url, logger=QUIET)
        assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(30):
            producer.send(f"p-{i}".encode(), partition_key=f"k{i}")
        got = {consumer.receive(5000).data() for _ in range(30)}
        assert got == {f"p-{i}".encode() for i in range(30)}
        stats = b.call(lambda: {p: b.service.topics[f"{topic}-partition-{p}"].msg_in for p in range(3)})
        assert sum(stats.values()) == 30 and all(v > 0 for v in stats.values())
        client.close()
    finally:
        b.stop()


def test_regex_subscription(client: pulsar.Client) -> None:
    prefix = f"rx-{uuid.uuid4().hex[:6]}"
    names = [f"persistent://public/default/{prefix}-{i}" for i in range(3)]
    for name in names:
        client.create_producer(name).close()
    consumer = client.subscribe(
        re.compile(f"persistent://public/default/{prefix}-.*"), "rx",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    for name in names:
        p = client.create_producer(name)
        p.send(name.encode())
        p.close()
    got = {consumer.receive(5000).data() for _ in range(3)}
    assert got == {n.encode() for n in names}


def test_non_persistent_topic_dispatch_or_drop(client: pulsar.Client, broker: ThreadedBroker) -> None:
    name = f"non-persistent://public/default/np-{uuid.uuid4().hex[:6]}"
    producer = client.create_producer(name, batching_enabled=False)
    producer.send(b"nobody-listens")  # dropped: no subscription yet
    consumer = client.subscribe(name, "np")
    producer.send(b"delivered")
    assert consumer.receive(5000).data() == b"delivered"
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)
    assert broker.call(lambda: name in broker.service.topics and not broker.service.topics[name].persistent)


class Point(Record):
    x = String()
    y = String()


@pytest.mark.parametrize("schema", [StringSchema(), JsonSchema(Point), AvroSchema(Point)],
                         ids=["string", "json", "avro"])
def test_schemas_round_trip(client: pulsar.Client, topic: str, schema) -> None:
    consumer = client.subscribe(topic, "schema", schema=schema)
    producer = client.create_producer(topic, schema=schema)
    value = "hello" if isinstance(schema, StringSchema) else Point(x="1", y="2")
    producer.send(value)
    got = consumer.receive(5000).value()
    if isinstance(schema, StringSchema):
        assert got == "hello"
    else:
        assert (got.x, got.y) == ("1", "2")


def test_schema_versions_kept_per_topic(client: pulsar.Client, broker: ThreadedBroker, topic: str) -> None:
    client.create_producer(topic, schema=JsonSchema(Point)).close()

    class Other(Record):  # a FULL-compatible evolution: the new field has a default
        x = String()
        y = String()
        z = String(required_default=True)

    client.create_producer(topic, schema=JsonSchema(Other)).close()
    client.create_producer(topic, schema=JsonSchema(Point)).close()
    base = topic.split("://")[1]
    assert broker.call(broker.service.schemas.versions, base) == [0, 1]


def test_delayed_delivery_in_shared_subscription(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "delay", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    sent_at = time.time()
    producer.send(b"later", deliver_after=__import__("datetime").timedelta(milliseconds=1200))
    producer.send(b"now")
    assert consumer.receive(5000).data() == b"now"
    msg = consumer.receive(5000)
    assert msg.data() == b"later"
    assert time.time() - sent_at >= 1.1


def test_chunked_message_delivered_intact(tmp_path, topic: str) -> None:
    b = start_broker(tmp_path, maxMessageSize=64 * 1024)
    try:
        client = pulsar.Client(b.url, logger=QUIET)
        consumer = client.subscribe(topic, "chunks")
        producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
        payload = bytes(range(256)) * 1200  # 300 KiB: about five chunks
        producer.send(payload)
        msg = consumer.receive(10000)
        assert msg.data() == payload
        assert b.call(lambda: b.service.topics[topic].ledger.entry_count()) >= 5
        client.close()
    finally:
        b.stop()


def test_broker_entry_metadata(tmp_path, topic: str) -> None:
    b = start_broker(
        tmp_path,
        brokerEntryMetadataInterceptors="org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor",
        exposingBrokerEntryMetadataToClientEnabled=True,
    )
    try:
        client = pulsar.Client(b.url, logger=QUIET)
        consumer = client.subscribe(topic, "bem")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(f"e-{i}".encode())
        assert [consumer.receive(5000).data() for _ in range(3)] == [b"e-0", b"e-1", b"e-2"]
        from magnetar.broker.entries import split_entry
        from magnetar.protocol import pb

        def indexes() -> list[int]:
            ledger = b.service.topics[topic].ledger
            first, last = ledger.first_position(), ledger.last_confirmed()
            return [pb.BrokerEntryMetadata.FromString(split_entry(d)[0]).index
                    for _, d in ledger.read_range(first, last)]

        assert b.call(indexes) == [0, 1, 2]
        client.close()
    finally:
        b.stop()


def test_terminated_topic(client: pulsar.Client, broker: ThreadedBroker, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"last")
    sock, decoder = _raw_subscribe(broker, topic)
    broker.call(broker.service.terminate_topic, topic)
    # Pulsar announces the end only once everything is acknowledged: a Pong answered after
    # the termination comes with the message, and without ReachedEndOfTopic
    sock.sendall(encode_command(command("PING")))
    frames = _read_frames(sock, decoder, until=pb.BaseCommand.PONG)
    kinds = [f.command.type for f in frames]
    assert pb.BaseCommand.MESSAGE in kinds and pb.BaseCommand.REACHED_END_OF_TOPIC not in kinds
    message = next(f.command.message for f in frames if f.command.type == pb.BaseCommand.MESSAGE)
    sock.sendall(encode_command(command(
        "ACK", consumer_id=1, ack_type=pb.CommandAck.Individual, message_id=[message.message_id])))
    _read_frames(sock, decoder, until=pb.BaseCommand.REACHED_END_OF_TOPIC)
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    sock.close()


def test_official_reader_reads_a_terminated_topic_to_its_end(
    client: pulsar.Client, broker: ThreadedBroker, topic: str
) -> None:
    """pulsar-client 3.13 (C++ 4.2) drops the connection on ReachedEndOfTopic, so the
    broker leaves it out for that client: the reader stays connected after the last message."""
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(b"%d" % i)
    broker.call(broker.service.terminate_topic, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    connections = broker.call(lambda: set(broker.service.connections))  # type: ignore[union-attr]
    assert [reader.read_next(5000).data() for _ in range(3)] == [b"0", b"1", b"2"]
    assert reader.has_message_available() is False  # a GetLastMessageId round trip
    assert broker.call(lambda: set(broker.service.connections)) == connections  # type: ignore[union-attr]
    reader.close()


def _raw_subscribe(broker: ThreadedBroker, topic: str) -> tuple[socket.socket, FrameDecoder]:
    """A bare protocol client: Connect, Subscribe from Earliest, Flow."""
    sock = socket.create_connection(("127.0.0.1", broker.service.port), timeout=5)
    decoder = FrameDecoder()
    sock.sendall(encode_command(command("CONNECT", client_version="raw", protocol_version=21)))
    _read_frames(sock, decoder, until=pb.BaseCommand.CONNECTED)
    sock.sendall(encode_command(command(
        "SUBSCRIBE", topic=topic, subscription="raw", subType=pb.CommandSubscribe.Exclusive,
        consumer_id=1, request_id=1, initialPosition=pb.CommandSubscribe.Earliest)))
    _read_frames(sock, decoder, until=pb.BaseCommand.SUCCESS)
    sock.sendall(encode_command(command("FLOW", consumer_id=1, messagePermits=100)))
    return sock, decoder


def _read_frames(sock: socket.socket, decoder: FrameDecoder, until: int) -> list[Frame]:
    """Frames up to and including the first of type ``until`` (later ones in the same read
    are kept for the next call)."""
    frames: list[Frame] = list(_PENDING.pop(id(decoder), []))
    deadline = time.time() + 5
    while True:
        for i, frame in enumerate(frames):
            if frame.command.type == until:
                _PENDING[id(decoder)] = frames[i + 1:]
                return frames[: i + 1]
        if time.time() > deadline:
            kinds = [pb.BaseCommand.Type.Name(f.command.type) for f in frames]
            raise AssertionError(f"no {pb.BaseCommand.Type.Name(until)} within 5 s; got {kinds}")
        data = sock.recv(65536)
        assert data, "connection closed"
        frames.extend(decoder.feed(data))


_PENDING: dict[int, list[Frame]] = {}


def test_producer_names_and_exclusive_access(client: pulsar.Client, topic: str) -> None:
    p1 = client.create_producer(topic)
    p2 = client.create_producer(topic)
    assert p1.producer_name() != p2.producer_name()
    named = client.create_producer(topic, producer_name="my-producer")
    assert named.producer_name() == "my-producer"
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="my-producer")
    for p in (p1, p2, named):
        p.close()
    exclusive = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(Exception):  # noqa: B017 - the client names it ProducerFenced or ProducerBusy
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    exclusive.close()


def test_wait_for_exclusive_producer(client: pulsar.Client, topic: str) -> None:
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    import threading

    created: list[pulsar.Producer] = []
    t = threading.Thread(target=lambda: created.append(
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive)))
    t.start()
    t.join(0.5)
    assert not created, "WaitForExclusive must wait while another producer holds the topic"
    first.close()
    t.join(10)
    assert created
    created[0].send(b"mine now")


def test_exclusive_with_fencing_takes_the_topic_from_other_producers(
    client: pulsar.Client, topic: str
) -> None:
    shared = client.create_producer(topic, send_timeout_millis=2000)
    shared.send(b"before")
    fencing = client.create_producer(
        topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    fencing.send(b"fencer")
    # closed by the broker; its reconnects are refused (ProducerBusy) until its send times out
    with pytest.raises(pulsar.Timeout):
        shared.send(b"fenced out")
    with pytest.raises(pulsar.ProducerBusy):  # the topic is held
        client.create_producer(topic)
    newest = client.create_producer(
        topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    newest.send(b"newest")  # the newest fencing producer wins
    with pytest.raises(pulsar.ProducerFenced):  # its epoch is older than the topic's
        fencing.send(b"fenced too")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(timeout_millis=5000).data() for _ in range(3)]
    assert got == [b"before", b"fencer", b"newest"]
    with pytest.raises(pulsar.Timeout):
        reader.read_next(timeout_millis=300)


def test_exclusive_with_fencing_fails_waiting_producers_and_keeps_working_after(
    client: pulsar.Client, topic: str
) -> None:
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    import threading

    outcome: list[object] = []

    def wait_for_it() -> None:
        try:
            outcome.append(client.create_producer(
                topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive))
        except Exception as exc:  # the outcome under test
            outcome.append(exc)

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    waiter.join(0.5)
    assert not outcome  # waiting for the exclusive producer to go
    fencing = client.create_producer(
        topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    waiter.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], pulsar.ProducerFenced)
    with pytest.raises(pulsar.ProducerFenced):
        first.send(b"stale")
    fencing.send(b"kept")
    fencing.close()
    after = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    after.send(b"next holder")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(timeout_millis=5000).data() for _ in range(2)] == [
        b"kept", b"next holder"]


def test_consumer_stats_and_get_schema(client: pulsar.Client, broker: ThreadedBroker, topic: str) -> None:
    producer = client.create_producer(topic, schema=JsonSchema(Point))
    for _ in range(3):
        producer.send(Point(x="a", y="b"))
    sock, decoder = _raw_subscribe(broker, topic)
    _read_frames(sock, decoder, until=pb.BaseCommand.MESSAGE)
    sock.sendall(encode_command(command("CONSUMER_STATS", request_id=7, consumer_id=1)))
    frames = _read_frames(sock, decoder, until=pb.BaseCommand.CONSUMER_STATS_RESPONSE)
    stats = frames[-1].command.consumerStatsResponse
    assert stats.request_id == 7 and not stats.HasField("error_code")
    assert stats.msgBacklog == 3 and stats.type == "Exclusive"
    sock.sendall(encode_command(command("GET_SCHEMA", request_id=8, topic=topic)))
    frames = _read_frames(sock, decoder, until=pb.BaseCommand.GET_SCHEMA_RESPONSE)
    resp = frames[-1].command.getSchemaResponse
    assert resp.schema.type == pb.Schema.Json and b'"Point"' in resp.schema.schema_data
    assert resp.schema_version == (0).to_bytes(8, "big")
    sock.close()



def test_topic_epoch_survives_a_restart(tmp_path) -> None:
    """The exclusive producers' epoch is stored with the ledger before a producer is told
    it: after a restart the next one gets a newer epoch, and a producer holding one of the
    fenced epochs is still fenced."""
    from tests.broker.rawclient import RawClient

    topic = f"persistent://public/default/epoch-{uuid.uuid4().hex[:8]}"
    fencing = pb.ProducerAccessMode.ExclusiveWithFencing
    broker = start_broker(tmp_path)
    try:
        with RawClient.for_url(broker.url) as raw:
            raw.connect()
            epochs = []
            for producer_id in (1, 2, 3):
                answer = raw.create_producer(topic, producer_id, producer_access_mode=fencing)
                while answer.type == pb.BaseCommand.CLOSE_PRODUCER:  # the fenced one before
                    answer = raw.read_reply()
                assert answer.type == pb.BaseCommand.PRODUCER_SUCCESS, answer
                epochs.append(answer.producer_success.topic_epoch)
            assert epochs == [0, 1, 2]
    finally:
        broker.stop()
    broker = ThreadedBroker(tmp_path / "data").start()
    try:
        with RawClient.for_url(broker.url) as raw:
            raw.connect()
            stale = raw.create_producer(topic, 1, producer_access_mode=fencing, topic_epoch=1)
            assert stale.type == pb.BaseCommand.ERROR
            assert stale.error.error == pb.ProducerFenced
            answer = raw.create_producer(topic, 2, producer_access_mode=fencing)
            assert answer.producer_success.topic_epoch == 3
    finally:
        broker.stop()
