"""A restarted cluster broker serves the clients that arrive the moment its port opens: it
accepts connections only once it has joined the cluster (issue 38, item 0). Before, the
binary port opened ~0.1 s before the join, and a subscribe arriving then was told its
bundle is not owned here; the official client gave up at its operation timeout."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.cluster.brokers import QUIET, Cluster, ClusterBroker
from tests.zkserver import ZooKeeperServer

RESTARTS = 5
OPEN_S = 60.0  # bound on the wait for the restarted broker's port to open


@pytest.fixture
def lone(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[ClusterBroker]:
    """One broker of a cluster on a shared data directory (a client names only it)."""
    cluster = Cluster(tmp_path_factory.mktemp("first"), zookeeper, 1, shared=True).start()
    try:
        yield cluster.brokers[0]
    finally:
        cluster.stop()


def _restart_without_waiting(broker: ClusterBroker) -> None:
    """Stop ``broker`` and start it again, not waiting for it to be ready."""
    broker.stop()
    broker.ready.unlink(missing_ok=True)
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    with open(broker.log_path, "ab") as out:
        broker.proc = subprocess.Popen(broker.command, stdout=out, stderr=out, env=env)


def _wait_open(broker: ClusterBroker, port: int) -> None:
    """Return the moment ``port`` accepts a TCP connection (bounded poll)."""
    deadline = time.monotonic() + OPEN_S
    while True:
        assert broker.proc is not None and broker.proc.poll() is None, \
            broker.log_path.read_text(errors="replace")[-3000:]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"port {port} never opened"
            time.sleep(0.002)


def test_a_client_arriving_as_the_port_opens_is_served(lone: ClusterBroker) -> None:
    """Over repeated restarts, an official-client subscribe made as soon as the binary port
    opens succeeds (and produce/consume work through it)."""
    for i in range(RESTARTS):
        _restart_without_waiting(lone)
        _wait_open(lone, lone.port)
        topic = f"persistent://public/default/first-{i}"
        client = pulsar.Client(lone.url, operation_timeout_seconds=30, logger=QUIET)
        try:
            consumer = client.subscribe(topic, "s")  # raises on Timeout / refusal
            producer = client.create_producer(topic)
            producer.send(f"m{i}".encode())
            assert consumer.receive(timeout_millis=20_000).data() == f"m{i}".encode()
        finally:
            client.close()


def test_an_http_lookup_arriving_as_the_port_opens_is_answered(lone: ClusterBroker) -> None:
    """The web port, too, opens only once the broker can answer a lookup."""
    for i in range(2):
        _restart_without_waiting(lone)
        _wait_open(lone, lone.http_port)
        url = f"{lone.web_url}/lookup/v2/topic/persistent/public/default/http-first-{i}"
        with urllib.request.urlopen(url, timeout=30) as resp:
            assert resp.status == 200
            assert f":{lone.port}" in resp.read().decode()


@pytest.mark.slow
def test_a_rolling_restart_under_load_fails_no_send(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """Three brokers restarted one after the other while an official-client producer sends:
    the load goes on after each restart, no send fails, every one is stored once."""
    cluster = Cluster(tmp_path, zookeeper, 3, {"brokerDeduplicationEnabled": "true"},
                      shared=True).start()
    topic = "persistent://public/default/rolling"
    acked: list[bytes] = []
    failed: list[str] = []
    stop = threading.Event()
    done = threading.Event()

    def send() -> None:
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=30, logger=QUIET)
        try:
            # no send timeout: a loaded machine must not turn a slow send into a failure;
            # a send the restarts lose for good stalls the load, which wait_acks reports
            producer = client.create_producer(topic, producer_name="rolling",
                                              batching_enabled=False, block_if_queue_full=True,
                                              send_timeout_millis=0)
            i = 0
            while not stop.is_set():
                payload = f"m{i}".encode()
                i += 1

                def answered(res: pulsar.Result, _mid: object, p: bytes = payload) -> None:
                    if res == pulsar.Result.Ok:
                        acked.append(p)
                    else:
                        failed.append(str(res))
                producer.send_async(payload, answered)
                stop.wait(0.01)
            producer.flush()
        except Exception as exc:  # reported below
            failed.append(repr(exc))
        finally:
            client.close()
            done.set()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        def wait_acks(n: int) -> None:
            deadline = time.monotonic() + 120
            start = len(acked)
            while len(acked) < start + n:
                assert not failed and time.monotonic() < deadline, failed[:3]
                time.sleep(0.05)

        wait_acks(50)
        for broker in cluster.brokers:
            broker.stop()
            broker.start()
            wait_acks(50)
        stop.set()
        assert done.wait(120), "the producer did not finish"
        assert not failed, failed[:5]
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=30, logger=QUIET)
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            stored = []
            while reader.has_message_available():
                stored.append(reader.read_next(30_000).data())
        finally:
            client.close()
        assert sorted(stored) == sorted(acked) and len(set(stored)) == len(stored)
    finally:
        stop.set()
        done.wait(60)
        cluster.stop()
