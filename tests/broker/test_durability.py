"""Durability end to end: kill -9 of a real ``magnetar standalone`` process, restarts on the
same data directory, and what must survive them (acknowledged messages with their ids,
subscription positions, terminated flags); topic deletion; I/O errors while appending.

The kill tests run the broker as a subprocess (``magnetar standalone``) and drive it with the
official client, whose producers reconnect and resend on their own across the restarts.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from .brokerproc import SILENT, BrokerProcess, MsgId, mid_tuple, new_topic, read_all, wait_until


@pytest.fixture
def broker_proc(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path)
    proc.start()
    yield proc
    proc.stop()


# ---------------------------------------------------------------------------------- kill -9


def test_kill9_keeps_every_acknowledged_message(broker_proc: BrokerProcess) -> None:
    """Producers (batched, then unbatched) publish continuously while the broker is killed
    with SIGKILL at random moments and restarted on the same data directory, six times.
    Every message whose SendReceipt reached the client must afterwards be stored at the
    message id of that receipt, and receipts must follow send order. (Messages without a
    receipt may be missing or stored twice: the client resends them after reconnecting and
    deduplication is off here.)"""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    topic = new_topic()
    acked: dict[int, MsgId] = {}
    failed: list[tuple[int, str]] = []
    lock = threading.Lock()
    client = pulsar.Client(broker_proc.url, operation_timeout_seconds=30, logger=SILENT)
    counter = iter(range(10**9))

    def on_sent(i: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def callback(res: pulsar.Result, mid: pulsar.MessageId) -> None:
            with lock:
                if res == pulsar.Result.Ok:
                    acked[i] = mid_tuple(mid)
                else:
                    failed.append((i, str(res)))

        return callback

    try:
        for batching in (True, False):
            producer = client.create_producer(
                topic, batching_enabled=batching, batching_max_publish_delay_ms=2,
                batching_max_messages=100, block_if_queue_full=True, max_pending_messages=500,
                send_timeout_millis=120_000,
            )
            for _ in range(3):
                stop = threading.Event()

                def pump(producer: pulsar.Producer = producer, stop: threading.Event = stop) -> None:
                    while not stop.is_set():
                        i = next(counter)
                        producer.send_async(b"%d" % i, on_sent(i))

                pumper = threading.Thread(target=pump, daemon=True)
                pumper.start()
                # kill at a random moment: after a random number of further receipts
                target = len(acked) + rng.randint(20, 3000 if batching else 800)
                wait_until(lambda t=target: len(acked) >= t, 60, f"{target} receipts (seed {seed})")
                broker_proc.kill9()
                before_restart = len(acked)
                broker_proc.start()
                # the producer reconnects by itself and its resent messages get receipts
                wait_until(lambda b=before_restart: len(acked) > b + 50, 60,
                           f"receipts after restart #{broker_proc.starts} (seed {seed})")
                stop.set()
                pumper.join(timeout=30)
                assert not pumper.is_alive()
            producer.flush()
            producer.close()
        assert broker_proc.starts == 7
        assert not failed, f"sends failed (seed {seed}): {failed[:5]}"

        stored = read_all(client, topic)
    finally:
        client.close()
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
    client.close()

    broker_proc.start()
    client = pulsar.Client(broker_proc.url, operation_timeout_seconds=10, logger=SILENT)
    try:
        consumer = client.subscribe(topic, "resume")
        got = []
        while True:
            try:
                msg = consumer.receive(timeout_millis=3000 if not got else 1000)
            except pulsar.Timeout:
                break
            got.append(int(msg.data()))
            consumer.acknowledge(msg)
    finally:
        client.close()
    assert got, "nothing redelivered after the restart"
    first = got[0]
    assert k <= first <= k + m, f"resumed at {first}, expected within [{k}, {k + m}]"
    assert got == list(range(first, total))
