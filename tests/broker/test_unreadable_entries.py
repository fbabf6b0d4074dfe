"""An entry that fails its checksum on read (issue 7): by default the subscription retries it
with a back-off and logs once, never in a busy loop; with ``autoSkipNonRecoverableData`` it
is skipped with one error log and counted. Either way other topics are served."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from .conftest import QUIET, ThreadedBroker
from .test_acks import nothing_more

TOPIC = "persistent://public/default/unreadable"


def corrupt_entry(broker: ThreadedBroker, topic: str, entry_id: int) -> None:
    """Flip a byte inside the stored record of ``entry_id`` (the read cache is off)."""
    service = broker.service
    assert service is not None

    def span() -> tuple[str, int]:
        segment = service.topics[topic].ledger._segments[0]
        start, _ = segment.entry_span(entry_id)
        return str(segment.path), start

    path, start = broker.call(span)
    with open(path, "r+b") as fh:
        fh.seek(start + 12)
        byte = fh.read(1)
        fh.seek(start + 12)
        fh.write(bytes([byte[0] ^ 0xFF]))


def produce_ten(client: pulsar.Client) -> None:
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(10):
        producer.send(b"m%d" % i)
    producer.close()


def unreadable_logs(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(1 for r in caplog.records if r.levelno == logging.ERROR and text in r.getMessage())


def test_unreadable_entry_is_retried_with_backoff_and_logged_once(
    make_broker: Callable[..., ThreadedBroker], caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_broker(managedLedgerCacheSizeMB=0)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        consumer = client.subscribe(TOPIC, "s")
        consumer.close()
        produce_ten(client)
        corrupt_entry(broker, TOPIC, 4)
        consumer = client.subscribe(TOPIC, "s")
        assert [consumer.receive(5000).data() for _ in range(4)] == [b"m0", b"m1", b"m2", b"m3"]
        service = broker.service
        assert service is not None

        def retry_delay() -> float:
            return float(service.topics[TOPIC].subscriptions["s"].dispatcher._retry_delay)

        deadline = time.monotonic() + 10
        while broker.call(retry_delay) < 0.8:  # the 4th retry or later
            assert time.monotonic() < deadline, "the unreadable entry was not retried"
            time.sleep(0.02)
        assert unreadable_logs(caplog, "cannot read the next entry") == 1
        assert nothing_more(consumer)
        # another topic is served meanwhile
        other = client.subscribe("persistent://public/default/readable", "s")
        producer = client.create_producer("persistent://public/default/readable")
        producer.send(b"fine")
        assert other.receive(5000).data() == b"fine"
    finally:
        client.close()


def test_unreadable_entry_is_skipped_with_auto_skip(
    make_broker: Callable[..., ThreadedBroker], caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_broker(managedLedgerCacheSizeMB=0, autoSkipNonRecoverableData=True)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        client.subscribe(TOPIC, "s").close()
        produce_ten(client)
        corrupt_entry(broker, TOPIC, 4)
        consumer = client.subscribe(TOPIC, "s")
        got = [consumer.receive(5000).data() for _ in range(9)]
        assert got == [b"m%d" % i for i in range(10) if i != 4]
        assert nothing_more(consumer)
        assert unreadable_logs(caplog, "skipping unreadable entry") == 1
        service = broker.service
        assert service is not None
        stats = broker.call(lambda: service.topics[TOPIC].subscriptions["s"].stats())
        assert stats["nonRecoverableEntriesSkipped"] == 1
    finally:
        client.close()


def first_segment_path(broker: ThreadedBroker, topic: str) -> str:
    service = broker.service
    assert service is not None
    return str(broker.call(lambda: service.topics[topic].ledger._segments[0].path))


@contextlib.contextmanager
def segment_unreadable(broker: ThreadedBroker, topic: str) -> Iterator[None]:
    """While inside, ``topic``'s first segment path is a directory: a read from disk opens
    it and gets an I/O error (EISDIR), as from a shared mount that drops for a moment."""
    path = first_segment_path(broker, topic)
    os.rename(path, path + ".away")
    os.mkdir(path)
    try:
        yield
    finally:
        os.rmdir(path)
        os.rename(path + ".away", path)


@contextlib.contextmanager
def segment_missing(broker: ThreadedBroker, topic: str) -> Iterator[None]:
    """While inside, ``topic``'s first segment file is not there (renamed away, the
    segment still the ledger's): as a data directory whose mount is missing, or a file
    removed by hand. A read of it is an I/O error (ENOENT), not the end of the entries."""
    path = first_segment_path(broker, topic)
    os.rename(path, path + ".away")
    try:
        yield
    finally:
        os.rename(path + ".away", path)


#: the two ways a segment file fails a read from disk: unreadable, and not there
STORAGE_FAULTS = pytest.mark.parametrize("fault", [segment_unreadable, segment_missing],
                                         ids=["unreadable", "missing"])


def wait_for_a_retry(broker: ThreadedBroker, topic: str, what: str) -> None:
    """Until subscription ``s`` of ``topic`` has a failed read due again (its back-off)."""
    service = broker.service
    assert service is not None

    def retry_delay() -> float:
        return float(service.topics[topic].subscriptions["s"].dispatcher._retry_delay)

    deadline = time.monotonic() + 10
    while broker.call(retry_delay) == 0.0:
        assert time.monotonic() < deadline, f"the failed {what} was not scheduled again"
        time.sleep(0.02)


TEN = [b"m%d" % i for i in range(10)]


def shared_and_received(client: pulsar.Client, topic: str,
                        payloads: list[bytes]) -> pulsar.Consumer:
    """A Shared consumer of subscription ``s`` of ``topic`` that received ``payloads``
    (sent to it once it was subscribed) and acknowledged none of them."""
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for data in payloads:
        producer.send(data)
    assert sorted(consumer.receive(5000).data() for _ in payloads) == sorted(payloads)
    return consumer


def subscribed_then_sent(client: pulsar.Client, topic: str, payloads: list[bytes]) -> None:
    """Subscription ``s`` of ``topic`` made (at its end), then ``payloads`` sent to it."""
    client.subscribe(topic, "s").close()
    producer = client.create_producer(topic, batching_enabled=False)
    for data in payloads:
        producer.send(data)


@STORAGE_FAULTS
def test_a_read_from_storage_that_fails_is_tried_again(
    make_broker: Callable[..., ThreadedBroker], caplog: pytest.LogCaptureFixture,
    fault: Callable[[ThreadedBroker, str], contextlib.AbstractContextManager[None]],
) -> None:
    """A read from disk that fails with an I/O error (`segment_unreadable`), or finds
    the file of a live segment missing (`segment_missing`: before, that read as no
    entries, and the subscription waited for ever), is tried again with the back-off,
    and the subscription gets its messages once the file is back, with nothing new
    published to wake it: the error did not leave it waiting for an event that would
    not come."""
    topic = "persistent://public/default/read-fails"
    broker = make_broker(managedLedgerCacheSizeMB=0)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        subscribed_then_sent(client, topic, TEN)
        with fault(broker, topic):
            consumer = client.subscribe(topic, "s")
            wait_for_a_retry(broker, topic, "read")
        assert [consumer.receive(10_000).data() for _ in range(10)] == TEN
        assert unreadable_logs(caplog, "reading from storage failed") == 1
    finally:
        client.close()


@STORAGE_FAULTS
def test_a_redelivery_read_that_fails_is_tried_again(
    make_broker: Callable[..., ThreadedBroker], caplog: pytest.LogCaptureFixture,
    fault: Callable[[ThreadedBroker, str], contextlib.AbstractContextManager[None]],
) -> None:
    """The same for messages to deliver again: a Shared consumer leaves with ten
    unacknowledged, the next one's read of them from disk fails with an I/O error (or
    finds the file missing), and they stay to be delivered (before, they left the
    redelivery set with a warning)."""
    topic = "persistent://public/default/reread-fails"
    broker = make_broker(managedLedgerCacheSizeMB=0)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        first = shared_and_received(client, topic, TEN)
        with fault(broker, topic):
            first.close()  # its ten go back to be delivered again
            second = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
            wait_for_a_retry(broker, topic, "re-read")
        assert sorted(second.receive(10_000).data() for _ in range(10)) == TEN
        assert unreadable_logs(caplog, "re-reading from storage failed") == 1
    finally:
        client.close()


def first_segment(broker: ThreadedBroker, topic: str) -> tuple[int, int]:
    """(id, entries) of ``topic``'s first segment."""
    service = broker.service
    assert service is not None

    def read() -> tuple[int, int]:
        segment = service.topics[topic].ledger._segments[0]
        return segment.ledger_id, segment.confirmed

    return broker.call(read)


def skipped_and_acknowledged(broker: ThreadedBroker, topic: str, segment: int,
                             count: int) -> bool:
    """Whether subscription ``s`` of ``topic`` counts ``count`` skipped entries, and the
    first ``count`` of ``segment`` are acknowledged by its cursor."""
    service = broker.service
    assert service is not None

    def check() -> bool:
        sub = service.topics[topic].subscriptions["s"]
        return (sub.stats()["nonRecoverableEntriesSkipped"] == count
                and all(sub.cursor.is_deleted((segment, i)) for i in range(count)))

    return broker.call(check)


FIFTEEN = [b"m%d" % i for i in range(15)]
SKIP_MISSING = {"managedLedgerCacheSizeMB": 0, "managedLedgerMaxEntriesPerLedger": 5,
                "autoSkipNonRecoverableData": True}


def test_a_missing_segment_is_skipped_with_auto_skip(
    make_broker: Callable[..., ThreadedBroker], caplog: pytest.LogCaptureFixture
) -> None:
    """With ``autoSkipNonRecoverableData``, a segment whose file is missing is skipped as
    Pulsar skips a ledger that no longer exists: the subscription gets the entries after
    it, the skipped ones are acknowledged and counted, with one error log; the file
    coming back brings none of them again. (Without the setting the read is tried again:
    `test_a_read_from_storage_that_fails_is_tried_again`.)"""
    topic = "persistent://public/default/missing-skipped"
    broker = make_broker(**SKIP_MISSING)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        subscribed_then_sent(client, topic, FIFTEEN)
        segment, count = first_segment(broker, topic)
        assert 0 < count < len(FIFTEEN)
        with segment_missing(broker, topic):
            consumer = client.subscribe(topic, "s")
            rest = len(FIFTEEN) - count
            assert [consumer.receive(10_000).data() for _ in range(rest)] == FIFTEEN[count:]
        assert nothing_more(consumer)
        assert skipped_and_acknowledged(broker, topic, segment, count)
        assert unreadable_logs(caplog, f"skipping {count} entries") == 1
        assert unreadable_logs(caplog, "reading from storage failed") == 0
    finally:
        client.close()


def test_a_redelivery_of_a_missing_segment_is_skipped_with_auto_skip(
    make_broker: Callable[..., ThreadedBroker], caplog: pytest.LogCaptureFixture
) -> None:
    """The same for messages to deliver again: a Shared consumer leaves with fifteen
    unacknowledged, the first segment's file is missing when they are read again, and
    the next consumer gets those of the other segments; the missing ones are skipped,
    acknowledged and counted."""
    topic = "persistent://public/default/missing-reread-skipped"
    broker = make_broker(**SKIP_MISSING)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        first = shared_and_received(client, topic, FIFTEEN)
        segment, count = first_segment(broker, topic)
        with segment_missing(broker, topic):
            first.close()  # its fifteen go back to be delivered again
            second = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
            rest = len(FIFTEEN) - count
            got = sorted(second.receive(10_000).data() for _ in range(rest))
            assert got == sorted(FIFTEEN[count:])
        assert nothing_more(second)
        assert skipped_and_acknowledged(broker, topic, segment, count)
        assert unreadable_logs(caplog, f"skipping {count} entries to deliver again") == 1
    finally:
        client.close()


@pytest.mark.parametrize("auto_skip", [False, True], ids=["waits", "skips"])
def test_a_segment_file_missing_at_start_keeps_its_entries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, auto_skip: bool,
) -> None:
    """A segment whose file is gone when the broker starts (removed or lost while it was
    down), its sidecar index still there, stays its topic's: without
    ``autoSkipNonRecoverableData`` the subscription waits at it, its read tried again,
    and gets all fifteen once the file is back; with it, the segment's entries are
    skipped, acknowledged and counted, as for a file gone while the broker runs. One
    error log names the file. Before, the topic opened without them, and the
    subscription went on past them without a word."""
    topic = "persistent://public/default/missing-at-start"
    settings = {**SKIP_MISSING, "autoSkipNonRecoverableData": auto_skip}
    data_dir = tmp_path / "data"
    broker = ThreadedBroker(data_dir, **settings).start()
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        subscribed_then_sent(client, topic, FIFTEEN)
        client.close()
        segment, count = first_segment(broker, topic)
        path = first_segment_path(broker, topic)
    finally:
        broker.stop()
    assert 0 < count < len(FIFTEEN) and os.path.exists(path[:-4] + ".idx")
    os.rename(path, path + ".away")
    broker = ThreadedBroker(data_dir, **settings).start()
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        consumer = client.subscribe(topic, "s")
        assert unreadable_logs(caplog, "is missing: its sidecar index says") == 1
        if auto_skip:
            rest = len(FIFTEEN) - count
            assert [consumer.receive(10_000).data() for _ in range(rest)] == FIFTEEN[count:]
            assert nothing_more(consumer)
            assert skipped_and_acknowledged(broker, topic, segment, count)
        else:
            wait_for_a_retry(broker, topic, "read")
            assert nothing_more(consumer)
            os.rename(path + ".away", path)
            assert [consumer.receive(10_000).data() for _ in FIFTEEN] == FIFTEEN
    finally:
        client.close()
        broker.stop()
