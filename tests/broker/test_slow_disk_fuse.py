"""A slow disk made of real parts (issue 31): the data directory on a pass-through FUSE file
system whose every fsync waits 200 ms (tests/broker/fusedelay.py, mfusepy over libfuse 3).

Receipts slow down, but the broker stays responsive (admin, lookups and metrics answer
while producers wait for their receipts), group commit covers many entries with each
fdatasync, the publish buffer and pending sends stay within their limits, and every
acknowledged message is in the files (read back by a second broker straight from the
backing directory). The rates, fsyncs and entries per fsync are printed (what bounds
throughput on such a disk), not asserted. The other slow-disk tests stall storage calls
in-process; this one slows the kernel's fsync itself.
"""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.admin.server import AdminServer
from magnetar.storage import metrics as storage_metrics

from .conftest import QUIET, ThreadedBroker
from .fusedelay import mounted, unavailable

DELAY_MS = 200
MESSAGES = 1500


@pytest.fixture
def slow_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory whose fsyncs take DELAY_MS more (the backing directory is beside it)."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"FUSE is not available: {reason}")
    try:
        with mounted(tmp_path / "backing", tmp_path / "slow", DELAY_MS):
            yield tmp_path / "slow"
    except RuntimeError as exc:
        if "did not mount" in str(exc):
            pytest.skip(f"FUSE cannot mount here: {exc}")
        raise


def _timed_get(url: str) -> float:
    began = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as resp:
        resp.read()
        assert resp.status == 200
    return time.monotonic() - began


class Load:
    """``count`` sends on each topic from one producer each (send_async, unbatched,
    blocking when 1000 are pending); the acknowledged payloads, from the callbacks."""

    def __init__(self, client: pulsar.Client, topics: list[str], count: int) -> None:
        self.producers = [client.create_producer(
            t, batching_enabled=False, block_if_queue_full=True, max_pending_messages=1000,
            send_timeout_millis=0) for t in topics]
        self.count = count
        self.acked: dict[str, list[bytes]] = {t: [] for t in topics}
        self.failed: list[str] = []
        self.done = threading.Event()
        self._left = count * len(topics)
        self._lock = threading.Lock()

    def _callback(self, topic: str, payload: bytes) -> Any:
        def done(res: pulsar.Result, _mid: pulsar.MessageId) -> None:
            with self._lock:
                if res == pulsar.Result.Ok:
                    self.acked[topic].append(payload)
                else:
                    self.failed.append(str(res))
                self._left -= 1
                if self._left == 0:
                    self.done.set()
        return done

    def run(self) -> None:
        for i in range(self.count):
            for producer in self.producers:
                payload = b"%06d-" % i + b"x" * 1000
                producer.send_async(payload, self._callback(producer.topic(), payload))


def _fsyncs() -> tuple[int, float]:
    """(fdatasyncs so far, their seconds) in this process (the broker's storage)."""
    buckets, total = storage_metrics.fsync_seconds.snapshot()
    return int(buckets[-1][1]), total


def _run_load(broker: ThreadedBroker, admin: str, client: pulsar.Client,
              looker: pulsar.Client, topics: list[str], count: int) -> dict[str, Any]:
    """Publish ``count`` messages on each of ``topics`` through ``client``, and meanwhile
    time admin calls, scrapes and lookups (through ``looker``: a connection of its own,
    as the producers' connection is paused while it has 1000 sends pending)."""
    service = broker.service
    assert service is not None
    load = Load(client, topics, count)
    syncs_before, seconds_before = _fsyncs()
    began = time.monotonic()
    sender = threading.Thread(target=load.run)
    sender.start()
    worst = {"admin": 0.0, "lookup": 0.0, "metrics": 0.0}
    most_buffered = most_pending = 0
    other = f"persistent://public/default/elsewhere-{uuid.uuid4().hex[:6]}"
    while not load.done.wait(0.1):
        assert time.monotonic() - began < 240, "the load did not finish within 240 s"
        worst["admin"] = max(worst["admin"], _timed_get(f"{admin}/admin/v2/namespaces/public"))
        t = time.monotonic()
        assert looker.get_topic_partitions(other) == [other]
        worst["lookup"] = max(worst["lookup"], time.monotonic() - t)
        worst["metrics"] = max(worst["metrics"], _timed_get(f"{admin}/metrics"))
        most_buffered = max(most_buffered, service.publish_buffer.bytes)
        most_pending = max(most_pending, max((c.pending_sends for c in service.connections),
                                             default=0))
    elapsed = time.monotonic() - began
    sender.join(timeout=30)
    syncs_after, seconds_after = _fsyncs()
    syncs = syncs_after - syncs_before
    acked = sum(len(v) for v in load.acked.values())
    figures = {
        "topics": len(topics), "acked": acked, "failed": len(load.failed),
        "seconds": elapsed, "rate": acked / elapsed, "fsyncs": syncs,
        "entries_per_fsync": acked / max(1, syncs),
        "mean_fsync_ms": 1000 * (seconds_after - seconds_before) / max(1, syncs),
        "most_buffered": most_buffered, "most_pending": most_pending, "worst": worst,
        "load": load,
    }
    for producer in load.producers:
        producer.close()
    print(f"\n{len(topics)} topic(s), fsync +{DELAY_MS} ms: {acked} acked in {elapsed:.1f} s "
          f"= {figures['rate']:.0f} msg/s; {syncs} fdatasyncs (mean "
          f"{figures['mean_fsync_ms']:.0f} ms), {figures['entries_per_fsync']:.1f} entries "
          f"each; most pending sends on a connection {most_pending}, publish buffer at most "
          f"{most_buffered / 1e6:.1f} MB; slowest admin {worst['admin'] * 1000:.0f} ms, "
          f"lookup {worst['lookup'] * 1000:.0f} ms, metrics {worst['metrics'] * 1000:.0f} ms")
    return figures


def _read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=30000).data())
    reader.close()
    return got


@pytest.mark.slow
def test_a_disk_with_slow_fsyncs_slows_receipts_not_the_broker(
        slow_disk: Path, tmp_path: Path) -> None:
    broker = ThreadedBroker(slow_disk / "data").start()
    service = broker.service
    assert service is not None
    server = AdminServer(service, "127.0.0.1", 0)
    broker.call_async(server.start)
    admin = f"http://127.0.0.1:{server.port}"
    one = [f"persistent://public/default/slow-{uuid.uuid4().hex[:6]}"]
    four = [f"persistent://public/default/slow4-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    acked: dict[str, list[bytes]] = {}
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=60, logger=QUIET)
        looker = pulsar.Client(broker.url, operation_timeout_seconds=60, logger=QUIET)
        try:
            runs = [_run_load(broker, admin, client, looker, one, MESSAGES),
                    _run_load(broker, admin, client, looker, four, MESSAGES // 4)]
        finally:
            client.close()
            looker.close()
        for run in runs:
            assert run["failed"] == 0
            assert run["acked"] == MESSAGES
            acked.update(run["load"].acked)
            # receipts waited for the slow fsyncs...
            assert run["mean_fsync_ms"] >= DELAY_MS * 0.9
            # ...each covering many entries (one per entry would take MESSAGES * 0.2 s)
            assert run["entries_per_fsync"] >= 10
            # the broker answered meanwhile: each call within a few fsyncs, not a backlog's
            assert max(run["worst"].values()) < 2.0, run["worst"]
            # memory stays bounded: the connection stops reading at 1000 pending sends (what
            # it read before it stopped comes in too), whatever the clients would queue
            assert run["most_pending"] <= 2 * service.config.maxPendingPublishRequestsPerConnection
            assert run["most_buffered"] <= service.publish_buffer.limit
    finally:
        with contextlib.suppress(Exception):
            broker.call_async(server.stop)
        broker.stop()

    # every acknowledged message is in the files: a broker on the backing directory (no
    # FUSE in between) reads them back, in order
    again = ThreadedBroker(tmp_path / "backing" / "data").start()
    try:
        client = pulsar.Client(again.url, operation_timeout_seconds=30, logger=QUIET)
        try:
            for topic, payloads in acked.items():
                assert _read_all(client, topic) == sorted(payloads)
        finally:
            client.close()
    finally:
        again.stop()
