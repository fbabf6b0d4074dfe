"""Reads that miss the read cache outside the dispatch of new entries run on the storage's
reader threads too (issue 9): a redelivery's re-read, the Key_Shared key of a replayed
entry, the message count of a batch entry acknowledged by a consumer it was not sent to,
GetLastMessageId's last entry, and these same reads through a compacted view. While such a
read stalls on one topic's disk, another topic keeps its latency; once it is released the
stalled operation completes as it would have (order, redelivery counts, ack effects)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pulsar
import pytest

from magnetar.protocol import pb
from magnetar.protocol.frames import parse_payload_part
from magnetar.storage import ManagedLedger, Position
from magnetar.storage import segment as segment_module
from magnetar.storage.ledger import reads as ledger_module

from . import rawconsumer as rc
from .conftest import QUIET, ThreadedBroker
from .test_acks import nothing_more
from .test_slow_disk import SLOW, StalledPuts, _compact_slow_topic, served_elsewhere, wait_for
from .test_unreadable_entries import corrupt_entry


@dataclass
class Stall:
    """Reads of files under ``dirs`` (of entries ``entries`` says, when set: ``(first,
    last) -> bool``) wait for ``release`` (30 s at most), on a reader thread or on the
    event loop alike; ``stuck`` lists the (first, last) entry ids of each that waited."""

    dirs: set[str] = field(default_factory=set)
    entries: Callable[[int, int], bool] | None = None
    release: threading.Event = field(default_factory=threading.Event)
    stuck: list[tuple[int, int]] = field(default_factory=list)

    def wait_if_slow(self, path: str, first: int, last: int) -> None:
        """Called by every read of entries ``first..last`` of the file ``path``."""
        if any(path.startswith(d) for d in self.dirs) and (
                self.entries is None or self.entries(first, last)):
            self.stuck.append((first, last))
            self.release.wait(30)

    def wait_stuck(self, reads: int = 1) -> None:
        """Until ``reads`` reads wait (10 s at most)."""
        wait_for(lambda: len(self.stuck) >= reads, f"{reads} stalled reads")


@pytest.fixture
def stall(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stall]:
    """A `Stall` over the storage's two ways of reading records (released at teardown)."""
    state = Stall()
    real_span = ledger_module.read_span
    real_records = segment_module.Segment.read_records

    def slow_span(span: segment_module.ColdSpan, views: bool = False) -> Any:
        state.wait_if_slow(span.path, span.first, span.first + len(span.offsets) - 2)
        return real_span(span, views)

    def slow_records(self: segment_module.Segment, first: int, last: int) -> list[bytes]:
        state.wait_if_slow(self.path, first, last)
        return real_records(self, first, last)

    monkeypatch.setattr(ledger_module, "read_span", slow_span)
    monkeypatch.setattr(segment_module.Segment, "read_records", slow_records)
    yield state
    state.release.set()


def _slow_dir(broker: ThreadedBroker) -> str:
    """The directory of the slow topic's ledger."""
    service = broker.service
    assert service is not None
    return str(broker.call(lambda: service.topics[SLOW].ledger.directory))


def test_a_stalled_redelivery_read_delays_only_its_subscription(
    make_broker: Callable[..., ThreadedBroker], stall: Stall,
) -> None:
    """Redelivered entries the read cache lacks are re-read on the reader threads: while
    that read stalls, clients of other topics are served as usual; afterwards every
    message comes again, in order, with its redelivery count."""
    broker = make_broker(managedLedgerCacheSizeMB=0)  # every read goes to the disk
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = client.subscribe(SLOW, "s", consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(SLOW, batching_enabled=False)
        for i in range(10):
            producer.send(b"slow-%d" % i)
        got = [consumer.receive(timeout_millis=5000) for _ in range(10)]
        assert [m.data() for m in got] == [b"slow-%d" % i for i in range(10)]
        assert {m.redelivery_count() for m in got} == {0}
        stall.dirs.add(_slow_dir(broker))

        consumer.redeliver_unacknowledged_messages()  # the re-read is stuck on the disk
        stall.wait_stuck()
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=200)

        served_elsewhere(client)
        assert not stall.release.is_set()

        stall.release.set()
        again = [consumer.receive(timeout_millis=10_000) for _ in range(10)]
        assert [m.data() for m in again] == [b"slow-%d" % i for i in range(10)]
        assert [m.redelivery_count() for m in again] == [1] * 10
        assert [m.message_id() for m in again] == [m.message_id() for m in got]
    finally:
        stall.release.set()
        client.close()


def test_a_stalled_key_read_of_a_replayed_entry_keeps_key_order(
    make_broker: Callable[..., ThreadedBroker], stall: Stall,
) -> None:
    """A Key_Shared dispatcher holds new entries back while entries of their key wait in
    the replay set; the key of a replayed entry it has not seen is read on the reader
    threads, and new entries wait meanwhile. While that read stalls, clients of other
    topics are served as usual; afterwards every message arrives in order: the
    redelivered ones (redelivery count 1), then the new ones. (The consumer is a raw one:
    the test needs new entries to wait in the ledger, for want of permits, while the
    consumer holds the first ones; the official client's own Flows decide otherwise.)"""
    broker = make_broker(managedLedgerCacheSizeMB=0, dispatcherMaxReadBatchSize=5)
    service = broker.service
    assert service is not None
    raw = rc.connected(broker.url)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        subscribed = rc.subscribe(raw, SLOW, "ks", 3, rc.Sub.Key_Shared, earliest=True)
        assert subscribed.type == pb.BaseCommand.SUCCESS
        producer = client.create_producer(SLOW, batching_enabled=False)
        for i in range(20):
            producer.send(b"old-%d" % i, partition_key=f"k{i % 4}")
        rc.flow(raw, 3, 20)
        first = [_received(raw, 3) for _ in range(20)]
        assert first == [(b"old-%d" % i, 0) for i in range(20)]
        for i in range(8):  # no permits left: these wait in the ledger
            producer.send(b"new-%d" % i, partition_key=f"k{i % 4}")
        # Replays are re-read 5 at a time (dispatcherMaxReadBatchSize); when the new entries
        # come up, the keys of the replayed entries 10-19 are not known yet: that read stalls.
        stall.entries = lambda first, last: first <= 19 and last >= 10
        stall.dirs.add(_slow_dir(broker))

        raw.send("REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=3)
        rc.flow(raw, 3, 100)
        stall.wait_stuck()
        served_elsewhere(client)
        assert stall.stuck == [(10, 19)]  # the keys of 10-19, in one read off the loop
        assert not stall.release.is_set()
        dispatcher = broker.call(lambda: service.topics[SLOW].subscriptions["ks"].dispatcher)
        replay = broker.call(lambda: [p[1] for p in dispatcher.replay])
        assert set(range(10, 20)) <= set(replay)  # the stalled key read's entries wait

        stall.release.set()
        got = [_received(raw, 3) for _ in range(28)]
        assert got == ([(b"old-%d" % i, 1) for i in range(20)]
                       + [(b"new-%d" % i, 0) for i in range(8)])
        assert rc.message(raw, 3, 0.2) is None
    finally:
        stall.release.set()
        client.close()
        raw.close()


def _received(raw: rc.RawClient, consumer_id: int) -> tuple[bytes, int]:
    """The payload and redelivery count of the next message to ``consumer_id``."""
    frame = rc.message(raw, consumer_id, 10)
    assert frame is not None and frame.payload_part is not None
    _, payload = parse_payload_part(frame.payload_part)
    return payload, frame.command.message.redelivery_count


def test_a_stalled_batch_ack_count_read_delays_only_that_consumers_acks(
    make_broker: Callable[..., ThreadedBroker], stall: Stall,
) -> None:
    """A batch-index ack of an entry the consumer was not sent needs the entry's message
    count: it is read on the reader threads. While that read stalls, clients of other
    topics are served as usual and the consumer's later acks wait behind it; afterwards
    both take effect and are answered, in order."""
    broker = make_broker(managedLedgerCacheSizeMB=0)
    service = broker.service
    assert service is not None
    raw = rc.connected(broker.url)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        raw.create_producer(SLOW)
        receipts = [rc.publish_batch(raw, 1, i, [b"m%d-%d" % (i, j) for j in range(10)])
                    for i in range(3)]
        ids = [(r.send_receipt.message_id.ledgerId, r.send_receipt.message_id.entryId)
               for r in receipts]
        assert rc.subscribe(raw, SLOW, "acks", 7, rc.Sub.Shared, earliest=True).type == pb.BaseCommand.SUCCESS
        stall.dirs.add(_slow_dir(broker))

        # consumer 7 was sent nothing (no permits): acks of entries it never received
        first, second = raw.next_request_id(), raw.next_request_id()
        (lid0, eid0), (lid1, eid1) = ids[0], ids[1]
        raw.send("ACK", consumer_id=7, ack_type=pb.CommandAck.Individual, request_id=first,
                 message_id=[pb.MessageIdData(ledgerId=lid0, entryId=eid0, ack_set=[-1 ^ 0b101] * 4)])
        raw.send("ACK", consumer_id=7, ack_type=pb.CommandAck.Individual, request_id=second,
                 message_id=[pb.MessageIdData(ledgerId=lid1, entryId=eid1)])
        stall.wait_stuck()

        served_elsewhere(client)
        assert rc.poll(raw, lambda f: f.command.type == pb.BaseCommand.ACK_RESPONSE, 0.2) is None
        cursor = broker.call(lambda: service.topics[SLOW].subscriptions["acks"].cursor)
        assert broker.call(lambda: (dict(cursor.batch_ack_sets), cursor.is_deleted(Position(*ids[1])))) == ({}, False)

        stall.release.set()
        answers = [rc.expect(raw, lambda f: f.command.type == pb.BaseCommand.ACK_RESPONSE, 10).command
                   for _ in range(2)]
        assert [a.ackResponse.request_id for a in answers] == [first, second]
        assert not any(a.ackResponse.HasField("error") for a in answers)
        # the 10-message batch keeps one word (not 4), with indexes 0 and 2 acknowledged
        assert broker.call(lambda: dict(cursor.batch_ack_sets)) == {Position(*ids[0]): [-1 ^ 0b101]}
        assert broker.call(cursor.is_deleted, Position(*ids[1]))
        assert not broker.call(cursor.is_deleted, Position(*ids[2]))
    finally:
        stall.release.set()
        client.close()
        raw.close()


def test_a_stalled_last_entry_read_delays_only_get_last_message_id(
    make_broker: Callable[..., ThreadedBroker], stall: Stall,
) -> None:
    """GetLastMessageId reads the last entry (the index of its last message, for a batch)
    on the reader threads when the read cache does not hold it: while that read stalls,
    clients of other topics are served as usual; then it answers the right id."""
    broker = make_broker(managedLedgerCacheSizeMB=0)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = client.subscribe(SLOW, "last", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(SLOW, batching_enabled=True, batching_max_messages=3,
                                          batching_max_publish_delay_ms=60_000)
        sent: list[pulsar.MessageId] = []
        for i in range(3):
            producer.send_async(b"b-%d" % i, lambda _res, mid: sent.append(mid))
        producer.flush()
        assert [consumer.receive(timeout_millis=5000).data() for _ in range(3)] == [
            b"b-%d" % i for i in range(3)]
        stall.dirs.add(_slow_dir(broker))

        answers: list[pulsar.MessageId] = []
        asking = threading.Thread(target=lambda: answers.append(consumer.get_last_message_id()))
        asking.start()  # its read of the last entry is stuck on the disk
        stall.wait_stuck()

        served_elsewhere(client)
        assert asking.is_alive() and not answers and not stall.release.is_set()

        stall.release.set()
        asking.join(20)
        assert answers
        last = max(sent, key=lambda m: m.batch_index())
        assert (answers[0].ledger_id(), answers[0].entry_id(), answers[0].batch_index()) == (
            last.ledger_id(), last.entry_id(), 2)
    finally:
        stall.release.set()
        client.close()


def test_a_stalled_compacted_view_re_read_delays_only_its_subscriber(
    make_broker: Callable[..., ThreadedBroker], stall: Stall,
) -> None:
    """Through a compacted view, GetLastMessageId's read of the last entry (and a
    redelivery's re-read: a rewind, for the Exclusive subscriptions official clients
    allow with read_compacted) read the compacted ledger on the reader threads: while
    those reads stall, clients of other topics are served as usual; then the compacted
    messages come again (redelivery count 1) and the last id is answered."""
    broker = make_broker(managedLedgerCacheSizeMB=0)
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        _compact_slow_topic(broker, client, StalledPuts())
        broker.call(lambda: service.unload_topic(service.topics[SLOW]))
        topic = broker.call(lambda: service.load_topic(SLOW))
        view = broker.call(lambda: service.compactor.view_async(topic))
        assert view is not None
        kept = view.kept_positions()
        subscriber = client.subscribe(SLOW, "compacted", is_read_compacted=True,
                                      initial_position=pulsar.InitialPosition.Earliest)
        got = [subscriber.receive(timeout_millis=10_000) for _ in range(2)]
        assert [m.data() for m in got] == [b"v4", b"v5"]
        stall.dirs.add(view.compacted.directory)

        subscriber.redeliver_unacknowledged_messages()
        answers: list[pulsar.MessageId] = []
        asking = threading.Thread(target=lambda: answers.append(subscriber.get_last_message_id()))
        asking.start()
        stall.wait_stuck(2)  # the re-read and the read of the last entry

        served_elsewhere(client)
        assert asking.is_alive() and not answers and not stall.release.is_set()

        stall.release.set()
        again = [subscriber.receive(timeout_millis=10_000) for _ in range(2)]
        assert [(m.data(), m.redelivery_count()) for m in again] == [(b"v4", 1), (b"v5", 1)]
        asking.join(20)
        assert answers and (answers[0].ledger_id(), answers[0].entry_id()) == tuple(kept[-1])
    finally:
        stall.release.set()
        client.close()


def test_a_redelivered_entry_that_cannot_be_read_leaves_the_replay_set(
    make_broker: Callable[..., ThreadedBroker], caplog: pytest.LogCaptureFixture,
) -> None:
    """As before the re-read moved off the loop: an entry that fails its checksum when
    re-read is dropped from the replay set with a warning; the others come again."""
    broker = make_broker(managedLedgerCacheSizeMB=0)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = client.subscribe(SLOW, "s", consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(SLOW, batching_enabled=False)
        for i in range(5):
            producer.send(b"slow-%d" % i)
        assert [consumer.receive(timeout_millis=5000).data() for _ in range(5)] == [
            b"slow-%d" % i for i in range(5)]
        corrupt_entry(broker, SLOW, 2)
        consumer.redeliver_unacknowledged_messages()
        again = [consumer.receive(timeout_millis=5000) for _ in range(4)]
        assert [(m.data(), m.redelivery_count()) for m in again] == [
            (b"slow-%d" % i, 1) for i in (0, 1, 3, 4)]
        assert nothing_more(consumer)
        warnings = [r.getMessage() for r in caplog.records
                    if r.levelno == logging.WARNING and "cannot re-read" in r.getMessage()]
        assert len(warnings) == 1 and "fails its checksum" in warnings[0]
    finally:
        client.close()


def test_cache_hits_never_go_to_the_reader_threads(
    make_broker: Callable[..., ThreadedBroker], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the entries in the read cache, redeliveries (Shared and Key_Shared), a
    batch-index ack of an entry the consumer was not sent and GetLastMessageId are served
    at once on the loop: no read of positions is ever planned."""
    planned: list[list[Position]] = []
    real = ManagedLedger.read_positions_cold

    def counted(self: Any, positions: list[Position], max_bytes: int | None = None) -> Any:
        planned.append(list(positions))
        return real(self, positions, max_bytes)

    monkeypatch.setattr(ManagedLedger, "read_positions_cold", counted)
    broker = make_broker()
    service = broker.service
    assert service is not None
    raw = rc.connected(broker.url)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        shared = client.subscribe(SLOW, "shared", consumer_type=pulsar.ConsumerType.Shared,
                                  initial_position=pulsar.InitialPosition.Earliest)
        keyed = client.subscribe(SLOW, "keyed", consumer_type=pulsar.ConsumerType.KeyShared,
                                 initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(SLOW, batching_enabled=False)
        for i in range(6):
            producer.send(b"m-%d" % i, partition_key=f"k{i % 2}")
        for consumer in (shared, keyed):
            assert [consumer.receive(timeout_millis=5000).data() for _ in range(6)] == [
                b"m-%d" % i for i in range(6)]
            consumer.redeliver_unacknowledged_messages()
            again = [consumer.receive(timeout_millis=5000) for _ in range(6)]
            assert [(m.data(), m.redelivery_count()) for m in again] == [
                (b"m-%d" % i, 1) for i in range(6)]
        last = shared.get_last_message_id()
        assert (last.ledger_id(), last.entry_id()) == (
            again[-1].message_id().ledger_id(), again[-1].message_id().entry_id())

        raw.create_producer(SLOW)
        receipt = rc.publish_batch(raw, 1, 100, [b"b%d" % j for j in range(3)])
        lid, eid = receipt.send_receipt.message_id.ledgerId, receipt.send_receipt.message_id.entryId
        assert rc.subscribe(raw, SLOW, "acks", 7, rc.Sub.Shared, earliest=True).type == pb.BaseCommand.SUCCESS
        request_id = raw.next_request_id()
        raw.send("ACK", consumer_id=7, ack_type=pb.CommandAck.Individual, request_id=request_id,
                 message_id=[pb.MessageIdData(ledgerId=lid, entryId=eid, ack_set=[-1 ^ 1, -1])])
        assert not rc.reply_to(raw, request_id).ackResponse.HasField("error")
        sets = broker.call(lambda: dict(service.topics[SLOW].subscriptions["acks"].cursor.batch_ack_sets))
        assert sets == {Position(lid, eid): [-1 ^ 1]}
        assert planned == []
    finally:
        client.close()
        raw.close()
