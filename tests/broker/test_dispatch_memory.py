"""A consumer that asks for everything and never reads costs the broker a bounded amount of
memory, and other connections keep being served (issue 7, defect 4).

The broker runs as a child process so its resident memory can be read from /proc.
"""

from __future__ import annotations

import time
from pathlib import Path

import pulsar
import pytest

from magnetar.protocol import pb

from . import rawconsumer as rc
from .brokerproc import SILENT, BrokerProcess

MIB = 1024 * 1024
BACKLOG_MESSAGES = 240
MESSAGE_BYTES = 512 * 1024  # 120 MiB of backlog in all
#: What the flood may add to the broker's RSS: one dispatch read (5 MiB), one turn's output
#: buffer (1 MiB), the transport's buffer, allocator slack. Unbounded dispatch added the
#: whole backlog (and a copy of it).
ALLOWED_GROWTH = 48 * MIB


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc status")


@pytest.fixture
def broker(tmp_path: Path):
    # the read cache is what it is after producing; keep it out of the measurement
    b = BrokerProcess(tmp_path, {"managedLedgerCacheSizeMB": "8"})
    b.start()
    yield b
    b.stop()


def test_flow_flood_on_a_large_backlog_is_bounded(broker: BrokerProcess) -> None:
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=SILENT)
    try:
        flooded = "persistent://public/default/flooded"
        client.subscribe(flooded, "slow").close()  # the backlog is kept for this subscription
        producer = client.create_producer(flooded, batching_enabled=False)
        chunk = b"x" * MESSAGE_BYTES
        for _ in range(BACKLOG_MESSAGES):
            producer.send_async(chunk, None)
        producer.flush()
        producer.close()

        assert broker.proc is not None
        pid = broker.proc.pid
        before = rss(pid)
        raw = rc.connected(broker.url)
        try:
            reply = rc.subscribe(raw, flooded, "slow", 1)
            assert reply.type == pb.BaseCommand.SUCCESS
            rc.flow(raw, 1, 2**32 - 1)  # every permit there is; then never read

            # meanwhile another topic on another connection is served normally
            other = "persistent://public/default/other"
            consumer = client.subscribe(other, "s")
            quick = client.create_producer(other, batching_enabled=False)
            peak = before
            deadline = time.monotonic() + 3.0
            i = 0
            while time.monotonic() < deadline:
                quick.send(b"%d" % i)
                assert consumer.receive(timeout_millis=5000).data() == b"%d" % i
                i += 1
                peak = max(peak, rss(pid))
            assert i > 10
            growth = peak - before
            assert growth < ALLOWED_GROWTH, (
                f"broker RSS grew by {growth / MIB:.0f} MiB under a Flow flood "
                f"(allowed {ALLOWED_GROWTH / MIB:.0f} MiB; backlog "
                f"{BACKLOG_MESSAGES * MESSAGE_BYTES / MIB:.0f} MiB)"
            )
            # the flooded consumer still gets its messages once it reads
            frame = rc.message(raw, 1, timeout=10)
            assert frame is not None and frame.payload_part is not None
        finally:
            raw.close()
    finally:
        client.close()
