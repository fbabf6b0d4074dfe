"""``magnetar cluster up --brokers 2``: ZooKeeper and two brokers from one command, their URLs
printed, usable through a multi-host service URL by the official client, and everything
stopped on Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pulsar
import pytest

from tests.zkserver import zk_missing_reason

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
SRC = Path(__file__).resolve().parents[2] / "src"


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def free_pair() -> int:
    """A free port whose next one is free too, below the kernel's ephemeral range: the
    brokers bind them seconds later (after ZooKeeper started), and a port from that range
    can be taken meanwhile by any outgoing connection (it happened: broker-1 found its
    port in use)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(max(1024, low - 12000), low - 2)
        if bindable(port) and bindable(port + 1):
            return port
    raise RuntimeError("no two consecutive free ports below the ephemeral range")


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
    port = free_pair()
    http_port = free_pair()
    while http_port in (port - 1, port, port + 1):
        http_port = free_pair()
    proc = subprocess.Popen(
        [sys.executable, "-m", "magnetar.cli.main", "cluster", "up", "--brokers", "2",
         "--port", str(port), "--http-port", str(http_port), "--dir", str(tmp_path),
         "--advertised-address", "127.0.0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, PYTHONPATH=str(SRC)))
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for x in proc.stdout or []:
            lines.put(x)
        lines.put(None)  # the command ended

    threading.Thread(target=read, daemon=True).start()
    out: list[str] = []
    try:
        while True:  # bounded: each line within 300 s (a loaded machine starts Java slowly)
            line = lines.get(timeout=300)
            assert line is not None, "cluster up ended before it served:\n" + "".join(out)
            out.append(line)
            if line.startswith("metadata store:"):
                break
        service = next(x for x in out if x.startswith("service URL:")).split(": ", 1)[1].strip()
        # a short ZooKeeper session, said and given to every broker (failover in seconds)
        assert "session timeout 6 s" in out[-1], out[-1]
        for i in (0, 1):
            conf = (tmp_path / f"broker-{i}" / "broker.conf").read_text().splitlines()
            assert "metadataStoreSessionTimeoutMillis=6000" in conf
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
