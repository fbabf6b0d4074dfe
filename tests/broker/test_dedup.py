"""Message deduplication (brokerDeduplicationEnabled=true) with the official client: a resent
sequence id is stored once, the state survives graceful restarts and kill -9 (snapshot plus
replay of the ledger tail), chunked messages pass, and it costs no metadata write per message.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import Any

import pulsar

from .brokerproc import SILENT, BrokerProcess, KillLoop, mid_tuple, new_topic, read_all
from .conftest import QUIET, ThreadedBroker, start_broker

DEDUP = {"brokerDeduplicationEnabled": True}


def contents(client: pulsar.Client, topic: str) -> list[bytes]:
    return [data for _, data in read_all(client, topic)]


def test_resent_sequence_id_is_stored_once(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, **DEDUP)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        topic = new_topic()
        producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
        assert producer.last_sequence_id() == -1
        # (the Python client ignores sequence_id=0, a falsy value: ids start at 1 here)
        first = producer.send(b"a", sequence_id=1)
        producer.send(b"b", sequence_id=2)
        older = producer.send(b"a again", sequence_id=1)
        dup = producer.send(b"b again", sequence_id=2)
        producer.send(b"c", sequence_id=3)
        assert mid_tuple(first)[:2] != (-1, -1)
        # Pulsar acknowledges a duplicate without storing it: message id -1:-1
        assert mid_tuple(dup)[:2] == (-1, -1)
        assert mid_tuple(older)[:2] == (-1, -1)
        assert producer.last_sequence_id() == 3
        assert contents(client, topic) == [b"a", b"b", b"c"]
        # another producer name has its own sequence
        other = client.create_producer(topic, producer_name="p2", batching_enabled=False)
        other.send(b"p2-1", sequence_id=1)
        assert contents(client, topic) == [b"a", b"b", b"c", b"p2-1"]
        client.close()
    finally:
        broker.stop()


def test_without_dedup_a_resent_sequence_id_is_stored_twice(tmp_path: Path) -> None:
    """The control: the assertions above depend on the setting."""
    broker = start_broker(tmp_path)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        topic = new_topic()
        producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
        producer.send(b"a", sequence_id=1)
        producer.send(b"a again", sequence_id=1)
        assert contents(client, topic) == [b"a", b"a again"]
        client.close()
    finally:
        broker.stop()


def test_dedup_state_survives_a_restart(tmp_path: Path) -> None:
    topic = new_topic()
    broker = start_broker(tmp_path, **DEDUP)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
        for seq in range(1, 6):
            producer.send(b"m%d" % seq, sequence_id=seq)
        client.close()
    finally:
        broker.stop()
    broker = start_broker(tmp_path, **DEDUP)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
        assert producer.last_sequence_id() == 5
        assert mid_tuple(producer.send(b"m3 again", sequence_id=3))[:2] == (-1, -1)
        assert mid_tuple(producer.send(b"m5 again", sequence_id=5))[:2] == (-1, -1)
        producer.send(b"m6")  # the client numbers on from last_sequence_id: 6
        assert producer.last_sequence_id() == 6
        assert contents(client, topic) == [b"m%d" % i for i in range(1, 7)]
        client.close()
    finally:
        broker.stop()


def test_dedup_state_survives_kill9(tmp_path: Path) -> None:
    """After kill -9 the state is rebuilt from the last snapshot plus the entries after it:
    110 entries with a snapshot every 64, so the last 46 come from the replayed ledger
    tail. A batch counts as its last sequence id, as the C++ client counts it."""
    broker = BrokerProcess(
        tmp_path, {"brokerDeduplicationEnabled": "true", "brokerDeduplicationEntriesInterval": "64"}
    )
    broker.start()
    try:
        topic = new_topic()
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=SILENT)
        unbatched = client.create_producer(topic, producer_name="solo", batching_enabled=False)
        for seq in range(100):
            unbatched.send_async(b"solo-%d" % seq, None)
        unbatched.flush()
        batched = client.create_producer(
            topic, producer_name="batcher", batching_enabled=True, batching_max_messages=20,
            batching_max_publish_delay_ms=50,
        )
        for seq in range(200):
            batched.send_async(b"batch-%d" % seq, None)
        batched.flush()
        assert (unbatched.last_sequence_id(), batched.last_sequence_id()) == (99, 199)
        broker.kill9()
        with contextlib.suppress(pulsar.PulsarException):  # (its producers cannot close: gone)
            client.close()

        broker.start()
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=SILENT)
        unbatched = client.create_producer(topic, producer_name="solo", batching_enabled=False)
        batched = client.create_producer(topic, producer_name="batcher", batching_enabled=False)
        assert unbatched.last_sequence_id() == 99
        assert batched.last_sequence_id() == 199
        for seq in (1, 50, 99):
            assert mid_tuple(unbatched.send(b"again", sequence_id=seq))[:2] == (-1, -1)
        assert mid_tuple(batched.send(b"again", sequence_id=150))[:2] == (-1, -1)
        unbatched.send(b"solo-100")  # numbering continues after last_sequence_id
        batched.send(b"batch-200", sequence_id=200)
        stored = contents(client, topic)
        client.close()
    finally:
        broker.stop()
    assert sorted(stored) == sorted(
        [b"solo-%d" % i for i in range(101)] + [b"batch-%d" % i for i in range(201)]
    )


def test_snapshots_are_batched_not_per_message(tmp_path: Path) -> None:
    """The dedup state is written every brokerDeduplicationEntriesInterval entries, never
    once per message (that halved unbatched throughput)."""
    broker = start_broker(tmp_path, brokerDeduplicationEntriesInterval=100, **DEDUP)
    try:
        writes: list[str] = []
        metadata = broker.service.metadata  # type: ignore[union-attr]
        original_put = metadata.put

        def counting_put(key: str, value: Any) -> None:
            writes.append(key)
            original_put(key, value)

        metadata.put = counting_put  # type: ignore[method-assign]
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        topic = new_topic()
        producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
        for _ in range(500):
            producer.send_async(b"x", None)
        producer.flush()
        client.close()
        # snapshots are written off the loop: wait for those in flight (every save was
        # asked for before the receipt of its entry went out)
        broker.call(broker.service.dedup_snapshots.flush)
        stored = broker.call(metadata.get, f"dedup/{topic}")
        # one at creation, then one per 100 entries; a save asked for while the previous
        # one is still being written is taken when that one lands, so an interval costs
        # at most two writes (not 100), and the last one lags the end by < 100 entries
        dedup_writes = [k for k in writes if k.startswith("dedup/")]
        assert 2 <= len(dedup_writes) <= 1 + 2 * 5 + 1, dedup_writes
        assert 499 - 100 < stored["producers"]["p"] <= 499, stored
    finally:
        broker.stop()


def test_chunked_messages_with_dedup(tmp_path: Path) -> None:
    """Every chunk of a message carries the message's sequence id: only the last chunk
    counts for dedup, so chunked messages are stored whole, and a resent one is dropped."""
    broker = start_broker(tmp_path, maxMessageSize=64 * 1024, **DEDUP)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        topic = new_topic()
        consumer = client.subscribe(topic, "chunks")
        producer = client.create_producer(
            topic, producer_name="chunky", chunking_enabled=True, batching_enabled=False
        )
        big = bytes(range(256)) * 1200  # about five chunks
        producer.send(big, sequence_id=7)
        producer.send(b"small", sequence_id=8)
        assert consumer.receive(10000).data() == big
        assert consumer.receive(10000).data() == b"small"
        assert producer.last_sequence_id() == 8
        producer.send(big, sequence_id=7)  # a resend of the whole chunked message
        producer.send(b"after", sequence_id=9)
        assert consumer.receive(10000).data() == b"after"
        client.close()
    finally:
        broker.stop()


def test_deleting_a_topic_forgets_its_dedup_state(tmp_path: Path) -> None:
    broker: ThreadedBroker = start_broker(tmp_path, **DEDUP)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        topic = new_topic()
        producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
        producer.send(b"old", sequence_id=41)
        producer.close()
        broker.call(broker.service.delete_topic, topic)  # type: ignore[union-attr]
        producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
        assert producer.last_sequence_id() == -1
        producer.send(b"new", sequence_id=1)
        assert contents(client, topic) == [b"new"]
        client.close()
    finally:
        broker.stop()


def test_kill9_loop_with_dedup_stores_each_message_exactly_once(tmp_path: Path) -> None:
    """Producers with fixed names publish while the broker is killed and restarted four
    times. The client resends what has no receipt yet; entries that did reach the disk
    before the kill must be recognised as duplicates (from the snapshot plus the replayed
    ledger tail), so every message ends up stored once, in send order."""
    seed = random.randrange(2**32)
    broker = BrokerProcess(
        tmp_path, {"brokerDeduplicationEnabled": "true", "brokerDeduplicationEntriesInterval": "200"}
    )
    broker.start()
    topic = new_topic()
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=SILENT)
    loop = KillLoop(broker, client, topic, seed)
    try:
        for name, batching in (("dd-batched", True), ("dd-single", False)):
            producer = client.create_producer(
                topic, producer_name=name, batching_enabled=batching,
                batching_max_publish_delay_ms=2, batching_max_messages=50,
                block_if_queue_full=True, max_pending_messages=300, send_timeout_millis=120_000,
            )
            loop.run(producer, kills=2, max_receipts_between=2000 if batching else 600)
            producer.close()
        assert not loop.failed, f"sends failed (seed {seed}): {loop.failed[:5]}"
        stored = contents(client, topic)
    finally:
        client.close()
        broker.stop()
    assert len(loop.acked) == loop.sent
    expected = [b"%d" % i for i in range(loop.sent)]
    duplicates = len(stored) - len(set(stored))
    assert duplicates == 0, f"{duplicates} messages stored twice (seed {seed})"
    assert stored == expected, f"lost or out of order (seed {seed})"
