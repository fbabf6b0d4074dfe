"""Broker limits, each as Pulsar applies it, driven by the official client over TCP.

- ``maxUnackedMessagesPerConsumer``: a Shared or Key_Shared consumer holding that many
  unacknowledged messages gets no more until acks bring it to half (or it asks for a
  redelivery); ConsumerStats reports ``blockedConsumerOnUnackedMsgs``.
- ``dispatcherMaxReadSizeBytes``: no dispatch read returns more bytes (but one entry).
- ``maxPendingPublishRequestsPerConnection`` and ``maxMessagePublishBufferSizeInMB``: the
  broker stops reading producer connections while too many sends (per connection) or too
  many bytes (broker-wide) wait for storage, and reads again below half.
- ``isAllowAutoUpdateSchemaEnabled=false``: no schema is registered by producers or
  consumers; only already stored schemas are accepted.

Storage is made to wait where a test needs sends to stay pending: the topic's
``ledger.append`` is replaced (on the broker's loop) by one that holds the entries until the
test releases them to the real append.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pulsar.schema import Integer, JsonSchema, Record, String

from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.protocol import pb

from . import rawconsumer as rc
from .conftest import QUIET, ThreadedBroker, start_broker

T = pb.BaseCommand
Sub = pb.CommandSubscribe


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``predicate`` (bounded) until it holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def new_topic() -> str:
    return f"persistent://public/default/lim-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[Callable[..., ThreadedBroker]]:
    started: list[ThreadedBroker] = []

    def make(**settings: Any) -> ThreadedBroker:
        b = start_broker(tmp_path, **settings)
        started.append(b)
        return b

    yield make
    for b in started:
        b.stop()


def client_of(broker: ThreadedBroker) -> pulsar.Client:
    return pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)


def broker_consumer(broker: ThreadedBroker, topic: str, subscription: str) -> Any:
    """The broker's Consumer object of the only consumer on ``topic``/``subscription``."""
    service = broker.service
    assert service is not None

    def find() -> Any:
        sub = service.topics[topic].subscriptions[subscription]
        assert len(sub.consumers) == 1
        return sub.consumers[0]

    return broker.call(find)


# ---------------------------------------------------------------- maxUnackedMessagesPerConsumer


def _state(broker: ThreadedBroker, consumer: Any) -> tuple[int, int, bool]:
    return broker.call(lambda: (consumer.msg_out, consumer.unacked_messages, consumer.blocked_on_unacked))


def _settle(broker: ThreadedBroker, consumer: Any) -> tuple[int, int, bool]:
    """The consumer's (sent, unacked, blocked) after one more dispatch pass has run."""
    dispatcher = broker.call(lambda: consumer.subscription.dispatcher)
    broker.call(dispatcher.dispatch)
    return _state(broker, consumer)


@pytest.mark.parametrize("kind", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared])
def test_consumer_blocked_at_max_unacked_until_acks_reach_half(
    make_broker: Callable[..., ThreadedBroker], kind: pulsar.ConsumerType
) -> None:
    broker = make_broker(maxUnackedMessagesPerConsumer=10)
    topic = new_topic()
    client = client_of(broker)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=kind)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(30):
            producer.send(f"m{i}".encode(), partition_key=f"k{i % 3}")
        bc = broker_consumer(broker, topic, "s")

        got = [consumer.receive(timeout_millis=5000) for _ in range(10)]
        wait_until(lambda: _state(broker, bc)[2], what="the consumer to be blocked")
        # permits remain (receiver queue of 1000) but nothing more goes out
        assert broker.call(lambda: bc.permits) > 0
        assert _settle(broker, bc) == (10, 10, True)

        for msg in got[:4]:
            consumer.acknowledge(msg)
        wait_until(lambda: _state(broker, bc)[1] == 6, what="4 acks")
        assert _settle(broker, bc) == (10, 6, True)  # 6 > 10 // 2: still blocked

        consumer.acknowledge(got[4])  # 5 left: half the limit, dispatch resumes up to 10
        wait_until(lambda: _state(broker, bc) == (15, 10, True), what="5 more messages")
        got += [consumer.receive(timeout_millis=5000) for _ in range(5)]

        # acking everything received lets the rest through, at most 10 at a time
        received, to_ack = list(got), got[5:]
        while len(received) < 30:
            for msg in to_ack:
                consumer.acknowledge(msg)
            batch = [consumer.receive(timeout_millis=5000) for _ in range(min(10, 30 - len(received)))]
            received += batch
            to_ack = batch
        assert sorted(int(m.data()[1:]) for m in received) == list(range(30))
        assert len({m.message_id().serialize() for m in received}) == 30
    finally:
        client.close()


def test_redelivery_request_unblocks(make_broker: Callable[..., ThreadedBroker]) -> None:
    """As in Pulsar, asking for a redelivery lifts the block even above half the limit."""
    broker = make_broker(maxUnackedMessagesPerConsumer=4)
    topic = new_topic()
    client = client_of(broker)
    try:
        consumer = client.subscribe(
            topic, "s", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=50
        )
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(10):
            producer.send(f"m{i}".encode())
        bc = broker_consumer(broker, topic, "s")
        got = [consumer.receive(timeout_millis=5000) for _ in range(4)]
        wait_until(lambda: _state(broker, bc) == (4, 4, True), what="the consumer to be blocked")
        # one message back (3 unacked, above 4 // 2): it goes out again, then the limit holds
        consumer.negative_acknowledge(got[0])
        wait_until(lambda: _state(broker, bc) == (5, 4, True), what="the redelivery")
        again = consumer.receive(timeout_millis=5000)
        assert again.data() == got[0].data() and again.redelivery_count() == 1
        # the whole set back: 4 go out again
        consumer.redeliver_unacknowledged_messages()
        wait_until(lambda: _state(broker, bc) == (9, 4, True), what="redelivery of all")
    finally:
        client.close()


@pytest.mark.parametrize(
    ("limit", "kind"),
    [
        (0, pulsar.ConsumerType.Shared),  # 0: no limit
        (5, pulsar.ConsumerType.Exclusive),  # as in Pulsar: individual-ack types only
        (5, pulsar.ConsumerType.Failover),
    ],
)
def test_no_unacked_limit(
    make_broker: Callable[..., ThreadedBroker], limit: int, kind: pulsar.ConsumerType
) -> None:
    broker = make_broker(maxUnackedMessagesPerConsumer=limit)
    topic = new_topic()
    client = client_of(broker)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=kind)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            producer.send(f"m{i}".encode())
        got = [consumer.receive(timeout_millis=5000).data() for _ in range(20)]
        assert got == [f"m{i}".encode() for i in range(20)]
        bc = broker_consumer(broker, topic, "s")
        assert _state(broker, bc) == (20, 20, False)
    finally:
        client.close()


def test_consumer_stats_report_the_block(make_broker: Callable[..., ThreadedBroker]) -> None:
    broker = make_broker(maxUnackedMessagesPerConsumer=3)
    topic = new_topic()
    client = client_of(broker)
    raw = rc.connected(broker.url)
    try:
        assert rc.subscribe(raw, topic, "s", 1, Sub.Shared).type == T.SUCCESS
        rc.flow(raw, 1, 100)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(6):
            producer.send(f"m{i}".encode())
        ids = []
        for _ in range(3):
            frame = rc.message(raw, 1)
            assert frame is not None
            ids.append(frame.command.message.message_id)

        def stats() -> pb.CommandConsumerStatsResponse:
            rid = raw.next_request_id()
            raw.send("CONSUMER_STATS", request_id=rid, consumer_id=1)
            return rc.reply_to(raw, rid).consumerStatsResponse

        first = stats()
        assert first.blockedConsumerOnUnackedMsgs is True
        assert first.unackedMessages == 3
        assert first.availablePermits == 97
        assert rc.message(raw, 1, timeout=0.2) is None  # nothing beyond the limit

        # acks down to 1 (<= 3 // 2): unblocked, two more messages come
        raw.send("ACK", consumer_id=1, ack_type=pb.CommandAck.Individual, message_id=ids[:2])
        for _ in range(2):
            assert rc.message(raw, 1) is not None
        second = stats()
        assert second.unackedMessages == 3
        assert second.blockedConsumerOnUnackedMsgs is True
    finally:
        raw.close()
        client.close()


# ---------------------------------------------------------------- dispatcherMaxReadSizeBytes


def test_dispatch_reads_stay_within_max_read_size(make_broker: Callable[..., ThreadedBroker]) -> None:
    limit = 10_000
    broker = make_broker(dispatcherMaxReadSizeBytes=limit)
    topic = new_topic()
    client = client_of(broker)
    try:
        # the subscription (and its dispatcher) exist before the backlog is written
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared).close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(40):
            producer.send(bytes([i]) * 3000)
        producer.send(b"x" * 25_000)  # larger than the limit: read alone
        service = broker.service
        assert service is not None
        reads: list[tuple[int, int]] = []  # (entries, bytes) of each read

        def record() -> None:
            dispatcher = service.topics[topic].subscriptions["s"].dispatcher
            for name in ("read_new", "read_replay"):
                original = getattr(dispatcher, name)

                def wrapped(max_entries: int, _original: Any = original) -> Any:
                    out = _original(max_entries)
                    if out:
                        reads.append((len(out), sum(len(data) for _, data in out)))
                    return out

                setattr(dispatcher, name, wrapped)

        broker.call(record)
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        got = [consumer.receive(timeout_millis=5000) for _ in range(41)]
        assert [m.data()[:1] for m in got[:40]] == [bytes([i]) for i in range(40)]
        consumer.redeliver_unacknowledged_messages()  # replay reads follow the same limit
        again = [consumer.receive(timeout_millis=5000) for _ in range(41)]
        assert sorted(m.data()[:1] for m in again) == sorted(m.data()[:1] for m in got)
        snapshot = broker.call(lambda: list(reads))
        assert sum(n for n, _ in snapshot) >= 82
        for n, size in snapshot:
            assert size <= limit or n == 1, snapshot
        assert max(n for n, _ in snapshot) > 1  # several entries per read when they fit
        assert (1, max(size for _, size in snapshot)) in snapshot  # the big one, alone
    finally:
        client.close()


# ---------------------------------------------------------------- publish backpressure


class HeldAppends:
    """Replaces a topic's ``ledger.append_then`` so that entries wait until released."""

    def __init__(self, broker: ThreadedBroker, topic: str) -> None:
        self.broker = broker
        service = broker.service
        assert service is not None
        self.ledger = broker.call(lambda: service.topics[topic].ledger)
        self.original = self.ledger.append_then
        self.held: list[tuple[bytes, Any, int | None]] = []
        self.holding = True

        def append_then(data: bytes, on_done: Any, part_crc: int | None = None) -> None:
            if not self.holding:
                self.original(data, on_done, part_crc)
                return
            self.held.append((data, on_done, part_crc))

        broker.call(setattr, self.ledger, "append_then", append_then)

    def count(self) -> int:
        return self.broker.call(lambda: len(self.held))

    def _release(self, n: int | None) -> None:
        batch = self.held[: len(self.held) if n is None else n]
        del self.held[: len(batch)]
        for data, on_done, part_crc in batch:
            self.original(data, on_done, part_crc)

    def release(self, n: int | None = None) -> None:
        """Hand the first ``n`` held entries (all: None) to the real append, in order."""
        self.broker.call(self._release, n)

    def stop_holding(self) -> None:
        """Release everything and let later entries through (order kept)."""

        def go() -> None:
            self.holding = False
            self._release(None)

        self.broker.call(go)


def producer_cnx(broker: ThreadedBroker, topic: str) -> Any:
    service = broker.service
    assert service is not None
    return broker.call(
        lambda: next(
            c for c in service.connections if any(p.topic.name == topic for p in c.producers.values())
        )
    )


def record_answers(broker: ThreadedBroker, cnx: Any, probe: Callable[[], Any]) -> list[Any]:
    """After each answered send on ``cnx``, ``probe()`` (run on the broker loop) is recorded."""
    seen: list[Any] = []
    original = cnx.on_send_done

    def on_send_done(size: int) -> None:
        original(size)
        seen.append(probe())

    broker.call(setattr, cnx, "on_send_done", on_send_done)
    return seen


class Sends:
    """send_async bookkeeping: results arrive on the client's thread."""

    def __init__(self, total: int) -> None:
        self.results: list[pulsar.Result] = []
        self.total = total
        self.done = threading.Event()
        self.lock = threading.Lock()

    def callback(self, result: pulsar.Result, msg_id: Any) -> None:
        with self.lock:
            self.results.append(result)
            if len(self.results) == self.total:
                self.done.set()

    def wait_all_ok(self) -> None:
        assert self.done.wait(20), f"{len(self.results)} of {self.total} sends answered"
        assert all(r == pulsar.Result.Ok for r in self.results), self.results


def test_max_pending_publish_requests_per_connection(make_broker: Callable[..., ThreadedBroker]) -> None:
    broker = make_broker(maxPendingPublishRequestsPerConnection=6)
    topic = new_topic()
    client = client_of(broker)
    try:
        producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=100)
        held = HeldAppends(broker, topic)
        cnx = producer_cnx(broker, topic)
        answers = record_answers(broker, cnx, lambda: (cnx.pending_sends, cnx.reading_paused))
        sends = Sends(60)
        for i in range(60):  # 20 kB each: a socket read holds a dozen at most
            producer.send_async(bytes([i]) * 20_000, sends.callback)
        wait_until(lambda: broker.call(lambda: cnx.reading_paused), what="reading to pause")
        assert not broker.call(cnx.transport.is_reading)
        # reading stopped at 6 pending sends (plus the rest of the read that crossed it)
        assert 6 <= held.count() < 60
        assert broker.call(lambda: cnx.pending_sends) == held.count()
        held.stop_holding()
        sends.wait_all_ok()
        # it read again once half of them were answered, not before
        seen = broker.call(lambda: list(answers))
        first_resume = next(i for i, (_, paused) in enumerate(seen) if not paused)
        assert seen[first_resume][0] == 3
        assert all(paused for pending, paused in seen[:first_resume])
    finally:
        client.close()


def test_max_pending_publish_requests_zero_means_no_limit(
    make_broker: Callable[..., ThreadedBroker],
) -> None:
    broker = make_broker(maxPendingPublishRequestsPerConnection=0)
    topic = new_topic()
    client = client_of(broker)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        held = HeldAppends(broker, topic)
        cnx = producer_cnx(broker, topic)
        sends = Sends(50)
        for i in range(50):
            producer.send_async(f"m{i}".encode(), sends.callback)
        wait_until(lambda: held.count() == 50, what="all 50 sends to be read")
        assert not broker.call(lambda: cnx.reading_paused)
        held.stop_holding()
        sends.wait_all_ok()
    finally:
        client.close()


def test_publish_buffer_pauses_every_producer_connection(
    make_broker: Callable[..., ThreadedBroker],
) -> None:
    broker = make_broker(maxMessagePublishBufferSizeInMB=1)
    limit = 1024 * 1024
    service = broker.service
    assert service is not None
    buffer = service.publish_buffer
    topic, other_topic = new_topic(), new_topic()
    client = client_of(broker)
    other_client = client_of(broker)  # a second connection, producing to another topic
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        other = other_client.create_producer(other_topic, batching_enabled=False)
        held = HeldAppends(broker, topic)
        cnx, other_cnx = producer_cnx(broker, topic), producer_cnx(broker, other_topic)
        assert cnx is not other_cnx
        answers = record_answers(
            broker, cnx, lambda: (buffer.bytes, cnx.buffer_paused, other_cnx.buffer_paused)
        )
        sends = Sends(30)
        for i in range(30):
            producer.send_async(bytes([i]) * 100_000, sends.callback)

        wait_until(lambda: broker.call(lambda: cnx.buffer_paused), what="the buffer to fill")
        pending = broker.call(lambda: buffer.bytes)
        assert limit <= pending < limit + 512 * 1024  # reading stopped once it was full
        assert held.count() < 30
        # broker-wide: every connection with producers stops reading
        assert broker.call(lambda: other_cnx.buffer_paused)
        assert not broker.call(cnx.transport.is_reading)
        assert not broker.call(other_cnx.transport.is_reading)
        assert not broker.call(lambda: cnx.reading_paused)  # not the per-connection limit

        held.stop_holding()  # storage catches up
        sends.wait_all_ok()
        other.send(b"after")  # the other connection is read again
        assert broker.call(lambda: buffer.bytes) == 0
        # reading resumed only once the pending bytes fell below half the buffer
        seen = broker.call(lambda: list(answers))
        first_resume = next(i for i, (_, paused, _o) in enumerate(seen) if not paused)
        assert limit // 2 - 100_100 < seen[first_resume][0] < limit // 2
        assert not seen[first_resume][2]
        assert all(b >= limit // 2 and p and o for b, p, o in seen[:first_resume])

        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        got = [consumer.receive(timeout_millis=5000).data()[:1] for _ in range(30)]
        assert got == [bytes([i]) for i in range(30)]
    finally:
        other_client.close()
        client.close()


# ---------------------------------------------------------------- isAllowAutoUpdateSchemaEnabled


class V1(Record):
    a = Integer()


class V2(Record):
    a = Integer()
    b = String(required_default=True)  # FULL-compatible with V1


class V1Text(Record):
    a = String()


def test_schema_auto_update_disabled(tmp_path: Path) -> None:
    topic, fresh = new_topic(), new_topic()
    broker = start_broker(tmp_path)  # auto-update on: the first producer registers V1
    try:
        client = client_of(broker)
        client.create_producer(topic, schema=JsonSchema(V1)).send(V1(a=1))
        client.close()
    finally:
        broker.stop()

    broker = start_broker(tmp_path, isAllowAutoUpdateSchemaEnabled=False)
    service = broker.service
    assert service is not None
    base = topic.removeprefix("persistent://")
    try:
        client = client_of(broker)
        # the stored schema is accepted
        producer = client.create_producer(topic, schema=JsonSchema(V1))
        producer.send(V1(a=2))
        # a new version is not registered
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=JsonSchema(V2))
        # nor is a first schema (Pulsar: "Schema not found and schema auto updating is disabled")
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(fresh, schema=JsonSchema(V1))
        # a consumer's schema is only checked against a topic that has one (FULL: it must
        # read the latest version), not stored
        consumer = client.subscribe(
            topic, "s", schema=JsonSchema(V2), initial_position=pulsar.InitialPosition.Earliest
        )
        assert b'"a"' in consumer.receive(timeout_millis=5000).data()  # V1's JSON
        with pytest.raises(pulsar.IncompatibleSchema):
            client.subscribe(topic, "t", schema=JsonSchema(V1Text))
        # on an idle topic without a schema it would have to be registered: refused
        with pytest.raises(pulsar.IncompatibleSchema):
            client.subscribe(fresh, "s", schema=JsonSchema(V1))
        assert broker.call(service.schemas.versions, base) == [0]
        assert broker.call(service.schemas.versions, fresh.removeprefix("persistent://")) == []
        client.close()
    finally:
        broker.stop()


# ---------------------------------------------------------------- brokerDeleteInactiveTopicsEnabled


def test_inactive_topic_deletion_keys_are_read(tmp_path: Path) -> None:
    """Implemented now (namespaces/inactivity.py): the keys are read, a bad mode refused."""
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerDeleteInactiveTopicsEnabled=true\nmaxUnackedMessagesPerConsumer=7\n"
                    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds=600\n")
    config = BrokerConfig.load(conf)
    assert config.unknown_keys == []
    assert config.brokerDeleteInactiveTopicsEnabled is True
    assert config.inactive_topic_max_seconds() == 600
    assert config.maxUnackedMessagesPerConsumer == 7
    conf.write_text("brokerDeleteInactiveTopicsMode=delete_everything\n")
    with pytest.raises(ConfigError, match="brokerDeleteInactiveTopicsMode"):
        BrokerConfig.load(conf)
