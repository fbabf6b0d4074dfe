"""A full disk (issue 31): the broker turns read-only as a BookKeeper bookie does.

The data directory is a small tmpfs (root only: the test skips elsewhere, CI runs it).
Past ``magnetarDiskUsageThreshold`` (or after a write the file system refused for want
of space) a send fails at once and so does a new producer (the official client's
``ProducerBlockedQuotaExceededException``: the one code on which it fails fast), with the
disk named in the broker's answer, health and metrics; reads and acknowledgements go on;
once space is freed, writes resume within a check interval (no growing refusal window);
nothing acknowledged is lost, and the topic counts only the messages it stored.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.admin.server import AdminServer

from .conftest import ThreadedBroker

MB = 1024 * 1024
DISK_MB = 48


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A DISK_MB tmpfs mounted for the test (unmounted after it)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def broker_on(small_disk: Path) -> Iterator[Callable[..., tuple[ThreadedBroker, str]]]:
    """``make(**settings)``: a broker whose data directory is on the small disk, with an
    admin server: (broker, the admin server's base URL)."""
    started: list[tuple[ThreadedBroker, AdminServer]] = []

    def make(**settings: Any) -> tuple[ThreadedBroker, str]:
        broker = ThreadedBroker(small_disk / "data", **settings).start()
        service = broker.service
        assert service is not None
        server = AdminServer(service, "127.0.0.1", 0)
        broker.call_async(server.start)
        started.append((broker, server))
        return broker, f"http://127.0.0.1:{server.port}"

    yield make
    for broker, server in started:
        with contextlib.suppress(Exception):
            broker.call_async(server.stop)
        broker.stop()


def _quiet(disk: Path) -> Any:
    """The client's log to a file beside the mount point: refusals are what it logs here."""
    return pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(disk.parent / "client.log"))


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _fill(disk: Path, leave: int) -> Path:
    """Write a filler file until about ``leave`` bytes are free on ``disk``."""
    filler = disk / "filler"
    st = os.statvfs(disk)
    size = st.f_bavail * st.f_frsize - leave
    with open(filler, "wb") as f:
        chunk = b"\0" * MB
        while size > 0:
            try:
                size -= f.write(chunk[: min(MB, size)])
            except OSError:
                break
    return filler


def _wait(condition: Callable[[], bool], what: str, timeout: float = 15.0) -> float:
    """Poll ``condition`` every 50 ms; the seconds it took (fails after ``timeout``)."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - began


def _topic_counter(broker: ThreadedBroker, topic: str) -> int:
    assert broker.service is not None
    return int(broker.call(lambda: broker.service.topics[topic].msg_in))  # type: ignore[union-attr]


def _read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=10000).data())
    reader.close()
    return got


def _create_or_error(client: pulsar.Client, topic: str) -> pulsar.Producer | Exception:
    try:
        return client.create_producer(topic, batching_enabled=False, send_timeout_millis=10000)
    except Exception as exc:
        return exc



def _free_and_write(client: pulsar.Client, topic: str, filler: Path) -> float:
    """Remove ``filler`` and wait until a new producer stores ``b"after-free"``; the seconds
    that took."""
    os.unlink(filler)
    freed = time.monotonic()

    def writable() -> bool:
        p = _create_or_error(client, topic)
        if isinstance(p, Exception):
            return False
        p.send(b"after-free")
        p.close()
        return True

    _wait(writable, "a new producer stores a message after space is freed")
    return time.monotonic() - freed


def test_past_the_threshold_writes_fail_at_once_and_resume_when_space_is_freed(
    broker_on: Callable[..., tuple[ThreadedBroker, str]], small_disk: Path,
) -> None:
    broker, http = broker_on(magnetarDiskUsageMinFreeMB=1, magnetarDiskUsageThreshold=0.95,
                             magnetarDiskUsageLwmThreshold=0.90,
                             magnetarDiskUsageWarnThreshold=0.90)
    topic = f"persistent://public/default/full-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=_quiet(small_disk))
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=10000)
        acked = []
        for i in range(50):
            producer.send(b"before-%d" % i)
            acked.append(b"before-%d" % i)
        assert _get(f"{http}/admin/v2/brokers/health") == (200, "ok")

        # past 95 % used, with 2 MB left: room for the cursors, none for new messages
        filler = _fill(small_disk, leave=2 * MB)
        _wait(lambda: _get(f"{http}/admin/v2/brokers/health")[0] == 503, "health says read-only")
        status, text = _get(f"{http}/admin/v2/brokers/health")
        assert status == 503 and "read-only" in text and str(small_disk / "data") in text and "MB free" in text, text
        metrics = _get(f"{http}/metrics")[1]
        assert "magnetar_disk_read_only{" in metrics
        assert next(line for line in metrics.splitlines()
                    if line.startswith("magnetar_disk_read_only{")).endswith(" 1.0")

        # a send fails at once (not after the 10 s send timeout), and so does a new producer
        began = time.monotonic()
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            producer.send(b"refused")
        send_failed_after = time.monotonic() - began
        began = time.monotonic()
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(topic, producer_name="new-while-full")
        create_failed_after = time.monotonic() - began
        print(f"\nread-only: send failed after {send_failed_after:.2f} s, "
              f"create_producer after {create_failed_after:.2f} s")
        assert send_failed_after < 5 and create_failed_after < 5

        # reads and acknowledgements go on
        for i in range(50):
            msg = consumer.receive(timeout_millis=10000)
            assert msg.data() == b"before-%d" % i
            consumer.acknowledge(msg)
        _wait(lambda: broker.call(lambda: broker.service.topics[topic]  # type: ignore[union-attr]
                                  .subscriptions["s"].backlog()) == 0, "the acks are applied")

        # space comes back: a new producer's send goes through within a check interval
        resumed_after = _free_and_write(client, topic, filler)
        acked.append(b"after-free")
        print(f"writes resumed {resumed_after:.2f} s after space was freed")
        assert resumed_after < 5, resumed_after
        assert _get(f"{http}/admin/v2/brokers/health") == (200, "ok")

        # the producer that was refused sends again too (once its client reconnects)
        def sent_again() -> bool:
            try:
                producer.send(b"again")
            except Exception:
                return False
            return True

        again_after = _wait(sent_again, "the refused producer sends again", timeout=60)
        print(f"the refused producer sent again {again_after:.2f} s later")
        acked.append(b"again")

        stored = _read_all(client, topic)
        assert set(acked) <= set(stored)
        assert b"refused" not in stored
        assert _topic_counter(broker, topic) == len(stored)
    finally:
        client.close()


def test_a_write_refused_for_want_of_space_turns_the_broker_read_only(
    broker_on: Callable[..., tuple[ThreadedBroker, str]], small_disk: Path,
) -> None:
    """Thresholds out of the way (1.0, no floor): the file system's ENOSPC itself makes
    the broker read-only, without a refusal window that grows: the sends behind the
    failed one fail fast, and writes resume once space is freed."""
    broker, http = broker_on(magnetarDiskUsageMinFreeMB=0, magnetarDiskUsageThreshold=1.0,
                             magnetarDiskUsageLwmThreshold=1.0, magnetarDiskUsageWarnThreshold=1.0)
    topic = f"persistent://public/default/enospc-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=_quiet(small_disk))
    try:
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=10000)
        producer.send(b"first")
        filler = _fill(small_disk, leave=0)
        payload = b"x" * 64 * 1024
        acked: list[bytes] = [b"first"]
        began = time.monotonic()
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            for i in range(4 * DISK_MB * 16):  # far more than fits
                producer.send(payload + b"%d" % i)
                acked.append(payload + b"%d" % i)
        failed_after = time.monotonic() - began
        print(f"\nENOSPC: the send failed {failed_after:.2f} s after the disk was filled")
        assert failed_after < 5
        assert broker.call(lambda: broker.service.disk.read_only)  # type: ignore[union-attr]
        status, text = _get(f"{http}/admin/v2/brokers/health")
        assert status == 503 and "full" in text, text

        resumed_after = _free_and_write(client, topic, filler)
        print(f"writes resumed {resumed_after:.2f} s after space was freed")
        assert resumed_after < 5
        acked.append(b"after-free")
        stored = _read_all(client, topic)
        assert set(acked) <= set(stored)
        assert _topic_counter(broker, topic) == len(stored)
    finally:
        client.close()
