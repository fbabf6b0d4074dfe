"""``magnetar cluster up --brokers 2``: ZooKeeper and two brokers from one command, their URLs
printed, usable through a multi-host service URL by the official client, and everything
stopped on Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pulsar
import pytest

from tests.zkserver import free_port, zk_missing_reason

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
SRC = Path(__file__).resolve().parents[2] / "src"


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# ZooKeeper and two brokers start one after another (each may take up to 120 s on a loaded
# machine, as `cluster up` allows): more than the suite's 120 s per test
@pytest.mark.timeout(600)
def test_cluster_up_serves_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    reason = zk_missing_reason()
    if reason:
        import pytest

        pytest.skip(reason)
    port, http_port = free_port(), free_port()
    while listening(port + 1) or listening(http_port + 1):  # the next ports must be free too
        port, http_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "magnetar.cli.main", "cluster", "up", "--brokers", "2",
         "--port", str(port), "--http-port", str(http_port), "--dir", str(tmp_path),
         "--advertised-address", "127.0.0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, PYTHONPATH=str(SRC)))
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or []],
                     daemon=True).start()
    out = []
    try:
        while True:  # bounded: each line within 300 s (a loaded machine starts Java slowly)
            line = lines.get(timeout=300)
            out.append(line)
            if line.startswith("metadata store:"):
                break
        service = next(x for x in out if x.startswith("service URL:")).split(": ", 1)[1].strip()
        assert service == f"pulsar://127.0.0.1:{port},127.0.0.1:{port + 1}"
        assert any(f"http://127.0.0.1:{http_port + 1}" in x for x in out)
        client = pulsar.Client(service, operation_timeout_seconds=30, logger=QUIET)
        try:
            topic = "persistent://public/default/cluster-up"
            consumer = client.subscribe(topic, "s")
            client.create_producer(topic).send(b"hello cluster")
            assert consumer.receive(20_000).data() == b"hello cluster"
        finally:
            client.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, "".join(out)
        assert not listening(port) and not listening(port + 1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
