"""Durability end to end: kill -9 of a real ``magnetar standalone`` process, restarts on the
same data directory, and what must survive them (acknowledged messages with their ids,
subscription positions, terminated flags); topic deletion; I/O errors while appending.

The kill tests run the broker as a subprocess (``magnetar standalone``) and drive it with the
official client, whose producers reconnect and resend on their own across the restarts.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.broker.errors import BrokerError
from magnetar.protocol import pb
from magnetar.storage.segment import Segment

from .brokerproc import SILENT, BrokerProcess, KillLoop, new_topic, read_all, wait_until
from .conftest import QUIET, start_broker


@pytest.fixture
def broker_proc(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path)
    proc.start()
    yield proc
    proc.stop()


# ---------------------------------------------------------------------------------- kill -9


def test_kill9_keeps_every_acknowledged_message(broker_proc: BrokerProcess) -> None:
    """Producers (batched, then unbatched) publish continuously while the broker is killed
    with SIGKILL at random moments and restarted on the same data directory, eight times.
    Every message whose SendReceipt reached the client must afterwards be stored at the
    message id of that receipt, and receipts must follow send order. (Messages without a
    receipt may be missing or stored twice: the client resends them after reconnecting and
    deduplication is off here.)"""
    seed = random.randrange(2**32)
    topic = new_topic()
    client = pulsar.Client(broker_proc.url, operation_timeout_seconds=30, logger=SILENT)
    loop = KillLoop(broker_proc, client, topic, seed)
    try:
        for batching in (True, False):
            producer = client.create_producer(
                topic, batching_enabled=batching, batching_max_publish_delay_ms=2,
                batching_max_messages=100, block_if_queue_full=True, max_pending_messages=500,
                send_timeout_millis=120_000,
            )
            loop.run(producer, kills=4, max_receipts_between=3000 if batching else 800)
            producer.close()
        assert broker_proc.starts == 9
        assert not loop.failed, f"sends failed (seed {seed}): {loop.failed[:5]}"
        stored = read_all(client, topic)
    finally:
        client.close()
    acked = loop.acked
    by_id = dict(stored)
    assert len(by_id) == len(stored), "two stored messages share a message id"
    missing = [(i, mid) for i, mid in sorted(acked.items()) if by_id.get(mid) != b"%d" % i]
    assert not missing, f"{len(missing)} acknowledged messages lost or moved (seed {seed}): {missing[:5]}"
    ids_in_send_order = [acked[i] for i in sorted(acked)]
    assert ids_in_send_order == sorted(ids_in_send_order), f"receipts out of order (seed {seed})"
    # the stored order is the message id order, and the acknowledged ones keep send order
    positions = {mid: k for k, (mid, _) in enumerate(stored)}
    order = [positions[mid] for mid in ids_in_send_order]
    assert order == sorted(order)
    assert any(mid[2] >= 0 for mid in ids_in_send_order), "the batched phase produced no batches"
    assert any(mid[2] < 0 for mid in ids_in_send_order), "the unbatched phase produced batches"


def _persisted_mark_delete(data_dir: Path, subscription: str) -> tuple[int, int] | None:
    """The subscription's mark-delete position as last written to storage.db (read-only)."""
    db = sqlite3.connect(f"file:{data_dir / 'storage.db'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT key, value FROM kv WHERE key LIKE 'cursor/%'").fetchall()
    finally:
        db.close()
    for key, value in rows:
        if key.endswith("\x1f" + subscription):
            md = json.loads(value)["md"]
            return int(md[0]), int(md[1])
    return None


def test_kill9_subscription_resumes_after_its_acknowledgements(broker_proc: BrokerProcess) -> None:
    """A consumer acknowledges a prefix of the stream; after kill -9 and restart the
    subscription resumes right after it, with no gap.

    Bound (at-least-once): acknowledgements reach storage at most
    ``managedLedgerCursorPositionFlushSeconds`` (1 s) after the broker gets them (the
    client itself groups acks for 100 ms), so only the acks of that last window may be
    lost and redelivered. Here the first K acks are known durable (we poll storage.db)
    and M more are sent right before the kill: redelivery must start somewhere in
    [K, K + M] and continue without a gap to the end."""
    total, k, m = 300, 120, 60
    topic = new_topic()
    client = pulsar.Client(broker_proc.url, operation_timeout_seconds=10, logger=SILENT)
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, "resume", initial_position=pulsar.InitialPosition.Earliest)
    ids = [producer.send(b"%d" % i) for i in range(total)]
    for i in range(k):
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"%d" % i
        consumer.acknowledge(msg)
    last_durable = (ids[k - 1].ledger_id(), ids[k - 1].entry_id())
    wait_until(
        lambda: (_persisted_mark_delete(broker_proc.data_dir, "resume") or (-1, -1)) >= last_durable,
        10, "the first acknowledgements to reach storage.db",
    )
    for i in range(k, k + m):
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"%d" % i
        consumer.acknowledge(msg)
    for _ in range(20):  # delivered but never acknowledged: must come back
        consumer.receive(timeout_millis=5000)
    broker_proc.kill9()
    with contextlib.suppress(pulsar.PulsarException):  # (its producers cannot close: gone)
        client.close()

    broker_proc.start()
    client = pulsar.Client(broker_proc.url, operation_timeout_seconds=10, logger=SILENT)
    try:
        consumer = client.subscribe(topic, "resume")
        got: list[int] = []
        while not got or got[-1] != total - 1:
            msg = consumer.receive(timeout_millis=5000)
            got.append(int(msg.data()))
            consumer.acknowledge(msg)
    finally:
        client.close()
    first = got[0]
    assert k <= first <= k + m, f"resumed at {first}, expected within [{k}, {k + m}]"
    assert got == list(range(first, total))


# ------------------------------------------------------------------ restarts (in process)


def test_stored_subscription_without_consumer_does_not_stall_others(tmp_path: Path) -> None:
    """After a restart a stored subscription nobody has joined yet has no dispatcher; a
    publish must still reach the consumers of the other subscriptions."""
    topic = new_topic()
    broker = start_broker(tmp_path)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        client.subscribe(topic, "dormant").close()
        client.create_producer(topic).send(b"before")
        client.close()
    finally:
        broker.stop()
    broker = start_broker(tmp_path)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        active = client.subscribe(topic, "active")
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(b"after-%d" % i)
        assert [active.receive(timeout_millis=5000).data() for _ in range(3)] == [
            b"after-0", b"after-1", b"after-2"
        ]
        dormant = client.subscribe(topic, "dormant")
        assert [dormant.receive(timeout_millis=5000).data() for _ in range(4)] == [
            b"before", b"after-0", b"after-1", b"after-2"
        ]
        client.close()
    finally:
        broker.stop()


def test_terminated_topic_stays_terminated_after_restart(tmp_path: Path) -> None:
    topic = new_topic()
    broker = start_broker(tmp_path)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(b"%d" % i)
        last = broker.call(broker.service.terminate_topic, topic)  # type: ignore[union-attr]
        assert last is not None
        with pytest.raises((pulsar.TopicTerminated, pulsar.AlreadyClosed)):
            producer.send(b"refused")  # the broker closed it; reconnecting met the termination
        with contextlib.suppress(pulsar.AlreadyClosed):  # the client's view of that producer
            client.close()
    finally:
        broker.stop()
    broker = start_broker(tmp_path)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(topic)
        # what was stored before stays readable
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert [reader.read_next(5000).data() for _ in range(3)] == [b"0", b"1", b"2"]
        assert not reader.has_message_available()
        client.close()
    finally:
        broker.stop()


# -------------------------------------------------------------------------- topic deletion


def test_deleting_a_topic_deletes_its_data(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, managedLedgerMaxEntriesPerLedger=5)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        topic, other = new_topic(), new_topic()
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(12):
            producer.send(b"%d" % i)
        client.create_producer(other).send(b"unrelated")
        directory = Path(broker.call(lambda: broker.service.topics[topic].ledger.directory))  # type: ignore[union-attr]
        assert len(list(directory.glob("*.seg"))) == 3
        producer.close()
        consumer.close()

        broker.call(broker.service.delete_topic, topic)  # type: ignore[union-attr]
        assert not directory.exists()
        metadata = broker.service.metadata  # type: ignore[union-attr]
        assert broker.call(metadata.get, f"topics/{topic}") is None

        # the name starts over: an empty topic without the old subscription
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"fresh")
        assert [data for _, data in read_all(client, topic)] == [b"fresh"]
        stats = broker.call(broker.service.topic_stats, topic)  # type: ignore[union-attr]
        assert "sub" not in stats["subscriptions"]
        assert stats["entryCount"] == 1
        assert [data for _, data in read_all(client, other)] == [b"unrelated"]
        client.close()
    finally:
        broker.stop()
    broker = start_broker(tmp_path)  # and the deletion holds across a restart
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        assert [data for _, data in read_all(client, topic)] == [b"fresh"]
        client.close()
    finally:
        broker.stop()


# ------------------------------------------------------------------------- disk full / EIO


def test_full_disk_fails_sends_but_topic_stays_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: segment writes raise ENOSPC while ``disk_full`` is set (the real
    disk has room). Sends fail (the ENOSPC turns the broker read-only for a check interval:
    the client's reconnection is refused with ProducerBlockedQuotaExceededException, which
    fails the send at once; a reconnection after it meets the next ENOSPC, or the send
    timeout), nothing half-written becomes visible, earlier messages stay readable, the
    broker keeps serving, and once space is back publishing resumes (tests/broker/
    test_full_disk.py has a really full disk)."""
    disk_full = threading.Event()
    real_write = Segment.write

    def write(self: Segment, bufs: list[bytes], offset: int) -> None:
        if disk_full.is_set():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(self, bufs, offset)

    monkeypatch.setattr(Segment, "write", write)
    broker = start_broker(tmp_path)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=SILENT)
        # the consumer has its own connection: a SendError makes the client drop its own
        readers = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=SILENT)
        topic = new_topic()
        consumer = readers.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=1500)
        for i in range(5):
            producer.send(b"ok-%d" % i)
        for i in range(5):
            msg = consumer.receive(timeout_millis=5000)
            assert msg.data() == b"ok-%d" % i
            consumer.acknowledge(msg)

        disk_full.set()
        with pytest.raises((pulsar.ProducerBlockedQuotaExceededException, pulsar.Timeout)):
            producer.send(b"lost")
        # still serving: new connections, readers of what was stored
        other = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=SILENT)
        assert [data for _, data in read_all(other, topic)] == [b"ok-%d" % i for i in range(5)]
        other.close()
        error = broker.call(lambda: broker.service.topics[topic].last_publish_error)  # type: ignore[union-attr]
        assert error is not None and "No space left" in error

        disk_full.clear()
        # read-only until the next check finds room: creating a producer is refused at
        # once (ProducerBlockedQuotaExceededException) until then, and the first producer
        # gets through again as well
        made: list[pulsar.Producer] = []

        def created() -> bool:
            try:
                made.append(client.create_producer(topic, batching_enabled=False))
            except pulsar.ProducerBlockedQuotaExceededException:
                return False
            return True

        wait_until(created, 10, "a new producer")
        made[0].send(b"ok-5")

        def first_producer_sends() -> bool:
            try:
                producer.send(b"ok-6")
                return True
            except (pulsar.Timeout, pulsar.ProducerBlockedQuotaExceededException):
                return False

        wait_until(first_producer_sends, 30, "the first producer to publish again")
        assert consumer.receive(timeout_millis=5000).data() == b"ok-5"
        assert consumer.receive(timeout_millis=5000).data() == b"ok-6"
        assert [data for _, data in read_all(client, topic)] == [b"ok-%d" % i for i in range(7)]
        readers.close()
        client.close()
    finally:
        broker.stop()


def test_deleting_a_partitioned_topic_deletes_every_partition(tmp_path: Path) -> None:
    broker = start_broker(tmp_path)
    service = broker.service
    assert service is not None
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
        topic = new_topic()
        broker.call(service.create_partitioned_topic, topic, 3)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(9):
            producer.send(b"%d" % i)
        producer.close()
        partitions = [f"{topic}-partition-{i}" for i in range(3)]
        assert all(broker.call(lambda p=p: service.topics[p].ledger.entry_count()) for p in partitions)
        broker.call(service.delete_topic, topic)
        assert broker.call(service.partitioned_metadata, topic) == 0
        assert not any(p in service.topics for p in partitions)
        assert not list(Path(broker.config.magnetarDataDir, "ledgers").glob("*/*.seg"))
        with pytest.raises(BrokerError) as info:
            broker.call(service.delete_topic, topic)
        assert info.value.code == pb.TopicNotFound
        client.close()
    finally:
        broker.stop()
