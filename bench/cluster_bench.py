#!/usr/bin/env python3
"""Cluster benchmark: Magnetar brokers sharing one data directory, ZooKeeper, the official
client. One run, three figures (docs/cluster.md, README "Benchmarks"):

  throughput   aggregate produce + consume msgs/s on a 4-partition topic (1 KB messages,
               batched ``send_async``, one Shared consumer draining it at the same time),
               with 1 broker and with 2 (``magnetar cluster up --brokers N``)
  unload pause a producer sending 1 KB messages one at a time (unbatched ``send``) while
               its bundle is unloaded ``--unloads`` times (each time handed to the other
               broker): the longest gap between two acknowledged sends, per unload
  failover     kill -9 of the broker owning a topic while a producer (given both brokers'
               URLs) sends and a consumer reads: seconds from the kill to the first
               message received that was sent after it; the brokers' metadata session
               timeout is ``--session-ms``

Every figure also says what bounds it: on a 2-core machine the load generator (the
official client's Python callbacks), ZooKeeper and the brokers share the cores, so the
1-to-2 broker ratio measures how much CPU there is to give, not how the broker scales.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pulsar

SRC = Path(__file__).resolve().parents[1] / "src"
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_pair() -> int:
    """A port whose next port is free too (brokers take consecutive ports)."""
    while True:
        p = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 1))
                return p
            except OSError:
                continue


class ClusterUp:
    """``magnetar cluster up`` as a child process; its URLs and broker pids."""

    def __init__(self, brokers: int, root: Path, session_ms: int, extra: str = "") -> None:
        self.root = root
        conf = root / "extra.conf"
        conf.write_text(f"metadataStoreSessionTimeoutMillis={session_ms}\n"
                        "allowAutoTopicCreationType=partitioned\ndefaultNumPartitions=4\n"
                        + extra)
        self.port, self.http = free_pair(), free_pair()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "magnetar.cli.main", "cluster", "up", "--brokers", str(brokers),
             "--port", str(self.port), "--http-port", str(self.http), "--dir", str(root),
             "--advertised-address", "127.0.0.1", "--config", str(conf)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=dict(os.environ, PYTHONPATH=str(SRC)))
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in self.proc.stdout or []],
                         daemon=True).start()
        while True:
            line = lines.get(timeout=120)
            if line.startswith("service URL:"):
                self.service_url = line.split(": ", 1)[1].strip()
            if line.startswith("metadata store:"):
                break
        self.n = brokers

    def web(self, i: int) -> str:
        return f"http://127.0.0.1:{self.http + i}"

    def pid(self, i: int) -> int:
        return int(json.loads((self.root / f"broker-{i}" / "ready.json").read_text())["pid"])

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def lookup_port(cluster: ClusterUp, topic: str) -> int:
    path = "/lookup/v2/topic/" + topic.replace("://", "/")
    with urllib.request.urlopen(cluster.web(0) + path, timeout=30) as resp:
        return int(json.load(resp)["brokerUrl"].rsplit(":", 1)[1])


def throughput(cluster: ClusterUp, seconds: float) -> tuple[float, float]:
    topic = f"persistent://public/default/tput-{time.time_ns()}"
    client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60, logger=QUIET)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                receiver_queue_size=5000)
    producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True,
                                      max_pending_messages=10000,
                                      batching_max_publish_delay_ms=5)
    payload = b"x" * 1024
    acked = [0]
    received = [0]
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            try:
                msg = consumer.receive(1000)
            except pulsar.Timeout:
                continue
            consumer.acknowledge(msg)
            received[0] += 1

    def done(res: pulsar.Result, _mid: object) -> None:
        if res == pulsar.Result.Ok:
            acked[0] += 1

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        producer.send_async(payload, done)
    producer.flush()
    elapsed = time.monotonic() - start
    produced, consumed = acked[0] / elapsed, received[0] / elapsed
    stop.set()
    t.join(5)
    client.close()
    return produced, consumed


def unload_pauses(cluster: ClusterUp, unloads: int) -> list[float]:
    topic = f"persistent://public/default/pause-{time.time_ns()}-partition-0"
    client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60, logger=QUIET)
    producer = client.create_producer(topic, batching_enabled=False)
    times: list[float] = []
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            producer.send(b"x" * 1024)
            times.append(time.monotonic())

    t = threading.Thread(target=send, daemon=True)
    t.start()
    while len(times) < 50:
        time.sleep(0.01)
    from magnetar.broker.cluster.bundles import NamespaceBundles

    bundle = NamespaceBundles.evenly(4).bundle_of(topic)
    pauses = []
    for _ in range(unloads):
        owner = lookup_port(cluster, topic) - cluster.port
        before = len(times)
        req = urllib.request.Request(
            f"{cluster.web(owner)}/admin/v2/namespaces/public/default/{bundle}/unload",
            method="PUT", data=b"")
        urllib.request.urlopen(req, timeout=60).close()
        while len(times) < before + 50:
            time.sleep(0.01)
        window = times[max(before - 5, 1):before + 50]
        pauses.append(max(b - a for a, b in itertools.pairwise(window)))
    stop.set()
    t.join(30)
    client.close()
    return pauses


def failover(cluster: ClusterUp) -> float:
    topic = f"persistent://public/default/failover-{time.time_ns()}-partition-0"
    client = pulsar.Client(cluster.service_url, operation_timeout_seconds=120, logger=QUIET)
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=120_000)
    for _ in range(20):
        producer.send(b"before")
    owner = lookup_port(cluster, topic) - cluster.port
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):  # refused while the owner is gone: again
                producer.send(b"after")

    killed = time.monotonic()
    os.kill(cluster.pid(owner), signal.SIGKILL)
    t = threading.Thread(target=send, daemon=True)
    t.start()
    while True:
        msg = consumer.receive(180_000)
        consumer.acknowledge(msg)
        if msg.data() == b"after":
            took = time.monotonic() - killed
            break
    stop.set()
    t.join(150)
    client.close()
    return took


def failover_only(session_ms: int, runs: int) -> None:
    """``--only failover``: the failover figure alone, ``runs`` times on fresh clusters,
    alternating the brokers' default (lookups at the survivor wait for a dead owner's
    session to expire) with ``magnetarDeadOwnerLookupWaitMillis=0`` (they redirect to the
    dead owner, as before), with the machine's load average before each run."""
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, pulsar-client {pulsar.__version__}")
    took: dict[str, list[float]] = {"wait": [], "no wait": []}
    for _ in range(max(runs, 1)):
        for mode, extra in (("wait", ""), ("no wait", "magnetarDeadOwnerLookupWaitMillis=0\n")):
            with tempfile.TemporaryDirectory(prefix="cluster-bench-failover-") as d:
                cluster = ClusterUp(2, Path(d), session_ms, extra)
                try:
                    load = os.getloadavg()[0]
                    took[mode].append(failover(cluster))
                    print(f"failover ({mode}): first message from the new owner "
                          f"{took[mode][-1]:.2f} s after kill -9 (session timeout "
                          f"{session_ms / 1000:.1f} s, load average {load:.1f})", flush=True)
                finally:
                    cluster.stop()
    print(json.dumps({f"failover s ({mode})": [round(t, 2) for t in times]
                      for mode, times in took.items()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="throughput phase length")
    ap.add_argument("--unloads", type=int, default=5)
    ap.add_argument("--session-ms", type=int, default=6000,
                    help="metadataStoreSessionTimeoutMillis of the brokers")
    ap.add_argument("--only", choices=["failover"],
                    help="run only this part (failover: a fresh 2-broker cluster per run)")
    ap.add_argument("--failovers", type=int, default=1,
                    help="with --only failover: runs of each mode (waiting lookups, and "
                         "magnetarDeadOwnerLookupWaitMillis=0), each on a fresh cluster")
    args = ap.parse_args()
    if args.only == "failover":
        failover_only(args.session_ms, args.failovers)
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, pulsar-client {pulsar.__version__}")
    results: dict[str, object] = {}
    for n in (1, 2):
        with tempfile.TemporaryDirectory(prefix=f"cluster-bench-{n}-") as d:
            cluster = ClusterUp(n, Path(d), args.session_ms)
            try:
                produced, consumed = throughput(cluster, args.seconds)
                results[f"{n} broker(s)"] = {"produce msg/s": round(produced),
                                             "consume msg/s": round(consumed)}
                print(f"{n} broker(s): produce {produced:,.0f} msg/s, consume {consumed:,.0f} "
                      "msg/s (4 partitions, 1 KB, batched)", flush=True)
                if n == 2:
                    pauses = unload_pauses(cluster, args.unloads)
                    results["unload pauses s"] = [round(p, 3) for p in pauses]
                    print(f"unload: longest send pause per unload {[f'{p:.3f}' for p in pauses]} s",
                          flush=True)
                    took = failover(cluster)
                    results["failover s"] = round(took, 2)
                    print(f"failover: first message from the new owner {took:.2f} s after "
                          f"kill -9 (session timeout {args.session_ms / 1000:.1f} s)", flush=True)
            finally:
                cluster.stop()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
