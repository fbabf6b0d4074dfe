"""Catch-up reads of a backlog that is no longer cached (issue 9 item 1): after a restart a
consumer reads everything from the segment files. Those reads hand the dispatcher views of
one read buffer per run of records, and each MESSAGE frame goes out as its head plus the
stored payload part, uncopied, in one ``writev`` per round. These tests check what that
must not change: every message exactly once and in order across several segments (with
and without broker entry metadata), and a stored entry that fails its checksum is still
caught by the storage layer's check and never delivered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulsar
import pytest

from .conftest import QUIET, ThreadedBroker
from .test_acks import nothing_more
from .test_unreadable_entries import unreadable_logs

TOPIC = "persistent://public/default/catchup"
#: small segments, so the backlog spans several of them; no read cache (every read is cold)
SETTINGS: dict[str, Any] = {"managedLedgerMaxEntriesPerLedger": 7, "managedLedgerCacheSizeMB": 0}
BEM = {
    "brokerEntryMetadataInterceptors": "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor",
    "exposingBrokerEntryMetadataToClientEnabled": True,
}


def produce_backlog(url: str, count: int, size: int = 1024) -> None:
    """``count`` messages of ``size`` bytes, the first 8 the sequence number, in batches
    (~16 KB each, so a dispatch round's output is far above the size that gets joined)
    and, every 100, an unbatched one."""
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=QUIET)
    try:
        batched = client.create_producer(
            TOPIC, batching_enabled=True, batching_max_messages=16,
            batching_max_publish_delay_ms=50, block_if_queue_full=True)
        single = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(count):
            body = i.to_bytes(8, "big") + bytes([i % 251]) * (size - 8)
            if i % 100 == 99:
                batched.flush()
                single.send(body)
            else:
                batched.send_async(body, None)
        batched.flush()
        batched.close()
        single.close()
    finally:
        client.close()


def subscribe_once(url: str) -> None:
    """Create the durable subscription before the backlog is written."""
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=QUIET)
    try:
        client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Exclusive).close()
    finally:
        client.close()


def restarted(broker: ThreadedBroker, data_dir: Path, **settings: Any) -> ThreadedBroker:
    """Stop ``broker`` and start a new one on the same data (nothing cached in memory)."""
    broker.stop()
    return ThreadedBroker(data_dir, **settings).start()


def segments_of(broker: ThreadedBroker) -> int:
    service = broker.service
    assert service is not None
    return broker.call(lambda: len(service.topics[TOPIC].ledger.segment_ids()))


@pytest.mark.parametrize("extra", [{}, BEM], ids=["plain", "entry-metadata"])
def test_catch_up_after_restart_gets_every_message_once_in_order(
    tmp_path: Path, extra: dict[str, Any]
) -> None:
    count = 1500
    data_dir = tmp_path / "data"
    broker = ThreadedBroker(data_dir, **SETTINGS, **extra).start()
    try:
        subscribe_once(broker.url)
        produce_backlog(broker.url, count)
        broker = restarted(broker, data_dir, **SETTINGS, **extra)
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        try:
            consumer = client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Exclusive,
                                        receiver_queue_size=1000)
            assert segments_of(broker) > 10
            seen = []
            for _ in range(count):
                msg = consumer.receive(10_000)
                body = msg.data()
                seq = int.from_bytes(body[:8], "big")
                assert body[8:] == bytes([seq % 251]) * (len(body) - 8)
                seen.append(seq)
                consumer.acknowledge(msg)
            assert seen == list(range(count))
            assert nothing_more(consumer)
        finally:
            client.close()
    finally:
        broker.stop()


def test_corrupt_entry_in_a_later_segment_is_caught_on_catch_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A byte flipped inside a stored batch (a payload byte: only the storage layer's
    record checksum can tell) in one of the later segments: after a restart the consumer
    gets every message before that entry, in order, and nothing of it or after it."""
    count = 600
    data_dir = tmp_path / "data"
    broker = ThreadedBroker(data_dir, **SETTINGS).start()
    try:
        subscribe_once(broker.url)
        produce_backlog(broker.url, count)
        service = broker.service
        assert service is not None

        def victim() -> tuple[str, int]:
            segment = service.topics[TOPIC].ledger._segments[3]
            return str(segment.path), segment.entry_span(2)[1]

        path, end = broker.call(victim)
        broker = restarted(broker, data_dir, **SETTINGS)
        with open(path, "r+b") as fh:  # the last byte of the entry: payload, not metadata
            fh.seek(end - 1)
            byte = fh.read(1)
            fh.seek(end - 1)
            fh.write(bytes([byte[0] ^ 0xFF]))
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        try:
            consumer = client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Exclusive)
            seen = []
            while True:
                try:
                    msg = consumer.receive(2000)
                except pulsar.Timeout:
                    break
                seen.append(int.from_bytes(msg.data()[:8], "big"))
                consumer.acknowledge(msg)
            assert seen == list(range(len(seen)))
            assert 0 < len(seen) < count
            # it stopped exactly at the bad entry: the storage check caught it, logged once
            assert unreadable_logs(caplog, "fails its checksum") >= 1

            def dispatcher_position() -> tuple[int, int]:
                sub = service_after.topics[TOPIC].subscriptions["s"]
                return tuple(sub.dispatcher.read_position)  # type: ignore[return-value]

            service_after = broker.service
            assert service_after is not None
            ledger_id = int(Path(path).name.split(".")[0])
            assert broker.call(dispatcher_position) == (ledger_id, 2)
        finally:
            client.close()
    finally:
        broker.stop()
