"""An entry that fails its checksum on read (issue 7): by default the subscription retries it
with a back-off and logs once, never in a busy loop; with ``autoSkipNonRecoverableData`` it
is skipped with one error log and counted. Either way other topics are served."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

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
