"""The produce path checks a SEND's CRC32C once (issue 9): the broker stores the payload
part as a *part record* carrying the producer's checked CRC (`magnetar.storage.record`),
unless broker entry metadata goes in front of the part. Messages stored that way, batched
and not, come back intact after a restart, also when the segments must be rescanned."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import pulsar
import pytest

from magnetar.storage import record
from magnetar.storage.ledger import append as ledger
from magnetar.storage.segment import FILE_HEADER

from .conftest import QUIET, ThreadedBroker, start_broker

ENTRY_METADATA = {
    "brokerEntryMetadataInterceptors": "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
}


def record_words(path: str) -> list[int]:
    """The length word of every record in a segment file."""
    data = Path(path).read_bytes()
    words = []
    off = FILE_HEADER.size
    while off < len(data):
        (word,) = struct.unpack_from("<I", data, off)
        words.append(word)
        off += record.HEADER_SIZE + (word & record.LENGTH_MASK)
    assert off == len(data)
    return words


def segment_paths(broker: ThreadedBroker, topic: str) -> list[str]:
    service = broker.service
    assert service is not None
    return broker.call(lambda: [s.path for s in service.topics[topic].ledger._segments])


def produce(client: pulsar.Client, topic: str) -> list[bytes]:
    """30 unbatched messages, then 200 in batches of up to 16, then 5 large unbatched ones
    (frames the broker reads into buffers of their own); returns what was sent, in order."""
    sent = []
    single = client.create_producer(topic, batching_enabled=False)
    for i in range(30):
        sent.append(b"single-%d" % i)
        single.send(sent[-1], properties={"i": str(i)})
    single.flush()
    batched = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=16,
        batching_max_publish_delay_ms=20, block_if_queue_full=True,
    )
    for i in range(200):
        sent.append(b"batched-%d" % i)
        batched.send_async(sent[-1], None, partition_key=f"k{i % 7}")
    batched.flush()
    for i in range(5):
        sent.append(bytes([i]) * 100_000)
        single.send(sent[-1])
    single.close()
    batched.close()
    return sent


def consume_all(client: pulsar.Client, topic: str, n: int) -> list[pulsar.Message]:
    consumer = client.subscribe(
        topic, "all", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=50
    )
    got = [consumer.receive(10_000) for _ in range(n)]
    for message in got:
        consumer.acknowledge(message)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(200)
    consumer.close()
    return got


@pytest.mark.parametrize("rescan", [False, True], ids=["sealed", "rescanned"])
def test_sends_are_stored_with_their_checked_crc_and_read_back_after_a_restart(
    tmp_path: Path, rescan: bool
) -> None:
    topic = f"persistent://public/default/crc-once-{uuid.uuid4().hex[:8]}"
    broker = start_broker(tmp_path, managedLedgerMaxEntriesPerLedger=40)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        sent = produce(client, topic)
        client.close()
        paths = segment_paths(broker, topic)
    finally:
        broker.stop()
    words = [w for p in paths for w in record_words(p)]
    assert len(paths) > 1 and len(words) < len(sent)  # some entries are batches
    assert all(w & record.PART_FLAG for w in words)  # every entry a part record
    if rescan:  # as after kill -9: no sidecar, every segment goes through recovery
        for p in paths:
            Path(p[:-4] + ".idx").unlink()
    broker = start_broker(tmp_path)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        got = consume_all(client, topic, len(sent))
        assert [m.data() for m in got] == sent
        assert [m.properties() for m in got[:30]] == [{"i": str(i)} for i in range(30)]
        assert [m.partition_key() for m in got[30:230]] == [f"k{i % 7}" for i in range(200)]
        client.close()
    finally:
        broker.stop()
    assert [w for p in paths for w in record_words(p)] == words  # nothing was cut


def test_entries_with_broker_entry_metadata_keep_a_crc_of_their_own(tmp_path: Path) -> None:
    """With broker entry metadata the entry no longer starts with the part: the record is
    a seeded one, as before; it reads back after a restart all the same."""
    topic = f"persistent://public/default/crc-bem-{uuid.uuid4().hex[:8]}"
    broker = start_broker(tmp_path, **ENTRY_METADATA)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        sent = produce(client, topic)
        client.close()
        paths = segment_paths(broker, topic)
    finally:
        broker.stop()
    words = [w for p in paths for w in record_words(p)]
    assert words and not any(w & record.PART_FLAG for w in words)
    for p in paths:
        Path(p[:-4] + ".idx").unlink()
    broker = start_broker(tmp_path, **ENTRY_METADATA)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        assert [m.data() for m in consume_all(client, topic, len(sent))] == sent
        client.close()
    finally:
        broker.stop()


def test_storage_computes_no_crc_of_its_own_for_a_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ledger._crc
    calls: list[int] = []

    def counting(data: bytes, *seed: int) -> int:
        calls.append(len(data))
        return int(real(data, *seed))

    monkeypatch.setattr(ledger, "_crc", counting)
    topic = f"persistent://public/default/crc-count-{uuid.uuid4().hex[:8]}"
    broker = start_broker(tmp_path)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            producer.send(b"m%d" % i)
        client.close()
    finally:
        broker.stop()
    assert calls == []
