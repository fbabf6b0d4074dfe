#!/usr/bin/env python3
"""Cluster benchmark: Magnetar brokers sharing one data directory, ZooKeeper, the official
client. One run, three figures (docs/cluster.md, README "Benchmarks"):

  throughput   aggregate produce + consume msgs/s on a 4-partition topic (1 KB messages),
               with 1 broker and with 2 (``magnetar cluster up --brokers N``; with
               ``--standalone`` also ``magnetar standalone`` first): ``--producers``
               processes each sending batched ``send_async`` on the whole topic, one
               consumer process draining it at the same time (``batch_receive``, one
               cumulative ack per batch and partition); every message sent must be
               consumed. Besides the rates: CPU time per 1,000 end-to-end messages of
               the brokers (b), the generator processes (c) and ZooKeeper, read from
               /proc/<pid>/stat (robust on a shared machine, unlike msgs/s), and the
               ceiling 2b/(b+c) those costs put on the 2-to-1 ratio on 2 cores
  unload pause a producer sending 1 KB messages one at a time (unbatched ``send``) while
               its bundle is unloaded ``--unloads`` times (each time handed to the other
               broker): the longest gap between two acknowledged sends, per unload
  failover     kill -9 of the broker owning a topic while a producer (given both brokers'
               URLs) sends and a consumer reads: seconds from the kill to the first
               message received that was sent after it; the brokers' metadata session
               timeout is ``--session-ms``

Every figure also says what bounds it. On 2 cores shared by the generator, ZooKeeper and
the brokers, one broker can use at most one core, and all processes together two: one
broker carries min(1/b, 2/(b+c)) messages per second, two brokers 2/(b+c), so the ratio
is at most max(1, 2b/(b+c)). When the generator costs more per message than the brokers
(c > b) the 2-to-1 ratio measures the machine's spare CPU, not how the broker scales.
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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

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
        seen: list[str] = []
        try:  # cluster up allows ZooKeeper and each broker 120 s (a loaded machine)
            while True:
                line = lines.get(timeout=120 * (brokers + 1) + 30)
                seen.append(line)
                if line.startswith("service URL:"):
                    self.service_url = line.split(": ", 1)[1].strip()
                if line.startswith("metadata store:"):
                    break
        except queue.Empty:
            self.stop()
            raise RuntimeError("magnetar cluster up did not start: " + "".join(seen)) from None
        self.n = brokers

    def web(self, i: int) -> str:
        return f"http://127.0.0.1:{self.http + i}"

    def pid(self, i: int) -> int:
        return int(json.loads((self.root / f"broker-{i}" / "ready.json").read_text())["pid"])

    def zk_pids(self) -> list[int]:
        """The ZooKeeper server's processes (their command line names its zoo.cfg)."""
        cfg = str(self.root / "zookeeper" / "zoo.cfg").encode()
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError), open(f"/proc/{entry}/cmdline", "rb") as f:
                    if cfg in f.read():
                        pids.append(int(entry))
        return pids

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class StandaloneUp(ClusterUp):
    """``magnetar standalone`` (no ZooKeeper, no shared-storage fencing) in the same shape,
    for the cluster's overhead per message next to it."""

    def __init__(self, root: Path) -> None:  # its own start, not ClusterUp's
        self.root = root
        self.port, self.http = free_pair(), free_pair()
        conf = root / "extra.conf"
        conf.write_text("allowAutoTopicCreationType=partitioned\ndefaultNumPartitions=4\n")
        ready = root / "broker-0" / "ready.json"
        ready.parent.mkdir()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir",
             str(root / "data"), "--port", str(self.port), "--http-port", str(self.http),
             "--config", str(conf), "--ready-file", str(ready)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=dict(os.environ, PYTHONPATH=str(SRC)))
        deadline = time.monotonic() + 120
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("magnetar standalone did not start")
            time.sleep(0.1)
        self.service_url = f"pulsar://127.0.0.1:{self.port}"
        self.n = 1

    def zk_pids(self) -> list[int]:
        return []


def lookup_port(cluster: ClusterUp, topic: str) -> int:
    path = "/lookup/v2/topic/" + topic.replace("://", "/")
    with urllib.request.urlopen(cluster.web(0) + path, timeout=30) as resp:
        return int(json.load(resp)["brokerUrl"].rsplit(":", 1)[1])


CLK = os.sysconf("SC_CLK_TCK")
PRODUCER_SETTINGS = dict(batching_enabled=True, block_if_queue_full=True,
                         max_pending_messages=10000, batching_max_publish_delay_ms=5)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (every thread), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def _produce(url: str, topic: str, seconds: float, batched: bool = True) -> None:
    """Generator process: one batched producer on the partitioned topic, ``send_async`` as
    fast as the client's queue allows (``block_if_queue_full``) for ``seconds``, then
    ``flush``. No callback (``None``): a callback runs once per message on the client's
    I/O thread, taking the GIL from the sending thread; a Python function there triples
    the producer's CPU per message (a C function that ignores its arguments still costs
    60 to 110% more). Delivery is checked end to end instead: the consumers must receive every
    message sent (a send that failed is never received)."""
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=QUIET)
    settings = dict(PRODUCER_SETTINGS, batching_enabled=batched)
    producer = client.create_producer(topic, **settings)  # type: ignore[arg-type]
    payload = b"x" * 1024
    done = None
    send = producer.send_async
    print("ready", flush=True)
    sys.stdin.readline()  # "go"
    start = time.monotonic()
    print(f"start {start}", flush=True)
    sent = 0
    deadline = start + seconds
    while time.monotonic() < deadline:
        for _ in range(100):
            send(payload, done)
        sent += 100
    producer.flush()
    end = time.monotonic()
    print("end " + json.dumps({"start": start, "end": end, "sent": sent}), flush=True)
    sys.stdin.readline()  # "close": the parent has read the CPU counters
    client.close()


def _consume(url: str, topic: str, partitions: int) -> None:
    """Generator process 2: one Exclusive consumer per partition, each on its own thread
    (the client releases the GIL while waiting), taking ``batch_receive`` batches (up to
    1,000 messages or 10 ms) and acknowledging each batch with one cumulative ack of its
    last message. Prints ``(monotonic time, messages consumed)`` every 0.1 s until the
    parent writes the number to wait for on stdin, and exits when it is reached (or
    after 30 s without a message)."""
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=QUIET)
    policy = pulsar.ConsumerBatchReceivePolicy(1000, 4 << 20, 10)
    consumers = [client.subscribe(f"{topic}-partition-{i}", "s",
                                  consumer_type=pulsar.ConsumerType.Exclusive,
                                  receiver_queue_size=5000, batch_receive_policy=policy)
                 for i in range(partitions)]
    counts = [0] * partitions
    stop = threading.Event()

    def drain(i: int) -> None:
        consumer = consumers[i]
        while not stop.is_set():
            msgs = consumer.batch_receive()
            if msgs:
                consumer.acknowledge_cumulative(msgs[-1])
                counts[i] += len(msgs)

    threads = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(partitions)]
    for t in threads:
        t.start()
    target: list[int] = []
    threading.Thread(target=lambda: target.append(int(sys.stdin.readline())),
                     daemon=True).start()
    print("ready", flush=True)
    last = (time.monotonic(), -1)
    while True:
        total, now = sum(counts), time.monotonic()
        print(f"{now} {total}", flush=True)
        if target and total >= target[0]:
            break
        if total != last[1]:
            last = (now, total)
        elif target and now - last[0] > 30:  # no progress: the rest is lost
            break
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(5)
    client.close()


def _generator(role: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, role, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(SRC)))


def throughput(cluster: ClusterUp, seconds: float, partitions: int = 4,
               producers: int = 1, batched: bool = True) -> dict[str, Any]:
    """Produce and consume at once for ``seconds`` (``producers`` producer processes and
    one consumer process); rates over the producers' window (first send to last flush),
    CPU seconds per 1,000 end-to-end messages of the brokers, the generator and ZooKeeper
    over that window, and the ceiling those costs put on the 2-to-1 ratio. Raises if a
    message sent was never consumed."""
    topic = f"persistent://public/default/tput-{time.time_ns()}"
    admin = urllib.request.Request(
        f"{cluster.web(0)}/admin/v2/persistent/{topic.split('://', 1)[1]}/partitions",
        method="PUT", data=str(partitions).encode(), headers={"Content-Type": "application/json"})
    urllib.request.urlopen(admin, timeout=60).close()
    cons = _generator("_consume", cluster.service_url, topic, str(partitions))
    assert cons.stdin and cons.stdout
    if cons.stdout.readline().strip() != "ready":
        raise RuntimeError("consumer process failed")
    samples: list[tuple[float, int]] = []

    def read_samples() -> None:
        assert cons.stdout
        for line in cons.stdout:
            t, n = line.split()
            samples.append((float(t), int(n)))

    reader = threading.Thread(target=read_samples, daemon=True)
    reader.start()
    prods = [_generator("_produce", cluster.service_url, topic, str(seconds),
                        "batched" if batched else "unbatched")
             for _ in range(producers)]
    for prod in prods:
        assert prod.stdin and prod.stdout
        if prod.stdout.readline().strip() != "ready":
            raise RuntimeError("producer process failed")
    pids = {"brokers": [cluster.pid(i) for i in range(cluster.n)],
            "producer": [p.pid for p in prods], "consumer": [cons.pid],
            "zookeeper": cluster.zk_pids()}

    def cpu() -> dict[str, float]:
        return {k: sum(cpu_seconds(p) for p in v) for k, v in pids.items()}

    for prod in prods:
        prod.stdin.write("go\n")  # type: ignore[union-attr]
        prod.stdin.flush()  # type: ignore[union-attr]
    for prod in prods:
        prod.stdout.readline()  # type: ignore[union-attr]  # "start ..."
    cpu0 = cpu()
    ends = [json.loads(p.stdout.readline().split(" ", 1)[1]) for p in prods]  # type: ignore[union-attr]
    cpu1 = cpu()
    window = {"start": min(e["start"] for e in ends), "end": max(e["end"] for e in ends),
              "sent": sum(e["sent"] for e in ends)}
    for prod in prods:
        prod.stdin.write("close\n")  # type: ignore[union-attr]
        prod.stdin.flush()  # type: ignore[union-attr]
        prod.wait(60)
    cons.stdin.write(f"{window['sent']}\n")
    cons.stdin.flush()
    cons.wait(120)
    reader.join(5)
    if samples[-1][1] < window["sent"]:
        raise RuntimeError(f"{window['sent'] - samples[-1][1]} of {window['sent']} messages "
                           "sent were never consumed")
    elapsed = window["end"] - window["start"]
    owners = [lookup_port(cluster, f"{topic}-partition-{i}") for i in range(partitions)]
    consumed_by_end = max((n for t, n in samples if t <= window["end"]), default=0)
    consumed_at_start = max((n for t, n in samples if t <= window["start"]), default=0)
    consumed = consumed_by_end - consumed_at_start
    msgs = (window["sent"] + consumed) / 2  # end-to-end messages in the window
    per_k = {k: (cpu1[k] - cpu0[k]) / msgs * 1000 for k in cpu0}
    b, c = per_k["brokers"], per_k["producer"] + per_k["consumer"]
    return {"produce msg/s": window["sent"] / elapsed, "consume msg/s": consumed / elapsed,
            "backlog at end": window["sent"] - consumed_by_end,
            "broker cpu s/1k": b, "generator cpu s/1k": c, "producer cpu s/1k": per_k["producer"],
            "consumer cpu s/1k": per_k["consumer"], "zookeeper cpu s/1k":
            per_k["zookeeper"], "broker cores": (cpu1["brokers"] - cpu0["brokers"]) / elapsed,
            "generator cores": c * msgs / 1000 / elapsed,
            "ceiling 2b/(b+c)": 2 * b / (b + c),
            "partitions per broker": [owners.count(cluster.port + i) for i in range(cluster.n)]}


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


def _label(n: int) -> str:
    return f"{n} broker(s)" if n else "standalone"


def _measure(n: int, args: argparse.Namespace) -> dict[str, Any]:
    """One throughput figure: a fresh cluster of ``n`` brokers (0: a standalone broker)."""
    with tempfile.TemporaryDirectory(prefix=f"cluster-bench-{n}-") as d:
        cluster = ClusterUp(n, Path(d), args.session_ms) if n else StandaloneUp(Path(d))
        try:
            r = throughput(cluster, args.seconds, args.partitions, args.producers,
                           not args.unbatched)
        finally:
            cluster.stop()
    print(f"{_label(n)} (load average {os.getloadavg()[0]:.2f}): produce "
          f"{r['produce msg/s']:,.0f} + consume {r['consume msg/s']:,.0f} msg/s; "
          f"partitions per broker {r['partitions per broker']}, backlog at the end "
          f"{r['backlog at end']:,.0f}, every message sent consumed\n"
          f"  CPU ms per 1,000 messages: brokers b = {r['broker cpu s/1k'] * 1e3:.2f} "
          f"({r['broker cores']:.2f} cores), generator c = "
          f"{r['generator cpu s/1k'] * 1e3:.2f} ({r['generator cores']:.2f} cores: "
          f"producers {r['producer cpu s/1k'] * 1e3:.2f}, consumer "
          f"{r['consumer cpu s/1k'] * 1e3:.2f}), ZooKeeper "
          f"{r['zookeeper cpu s/1k'] * 1e3:.2f}; ceiling 2b/(b+c) = "
          f"{r['ceiling 2b/(b+c)']:.2f}", flush=True)
    return r


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
    if len(sys.argv) > 1 and sys.argv[1] == "_produce":
        return _produce(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5] == "batched")
    if len(sys.argv) > 1 and sys.argv[1] == "_consume":
        return _consume(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="throughput phase length")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--producers", type=int, default=2,
                    help="producer processes (each one batched producer on the whole topic)")
    ap.add_argument("--unloads", type=int, default=5)
    ap.add_argument("--session-ms", type=int, default=6000,
                    help="metadataStoreSessionTimeoutMillis of the brokers")
    ap.add_argument("--rounds", type=int, default=1,
                    help="throughput rounds, alternating the order of the configurations")
    ap.add_argument("--standalone", action="store_true",
                    help="measure a standalone broker first (no ZooKeeper, no fencing)")
    ap.add_argument("--unbatched", action="store_true",
                    help="producers send one message per entry (not the issue's setting: "
                         "shows the ratio when the brokers, not the generator, are the bound)")
    ap.add_argument("--throughput-only", action="store_true",
                    help="skip the unload and failover figures")
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
          f"{platform.python_version()}, pulsar-client {pulsar.__version__}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}\nthroughput: {args.partitions} "
          f"partitions, 1 KB messages, {args.producers} producer process(es) "
          f"({'UNBATCHED' if args.unbatched else 'batched'} send_async: "
          f"{dict(PRODUCER_SETTINGS, batching_enabled=not args.unbatched)}), one consumer process (an Exclusive consumer per "
          f"partition, batch_receive, one cumulative ack per batch), {args.seconds:.0f} s")
    results: dict[str, Any] = {}
    kinds = ([0] if args.standalone else []) + [1, 2]
    for rnd in range(args.rounds):  # alternate the order: the machine's load drifts
        for n in kinds if rnd % 2 == 0 else kinds[::-1]:
            r = _measure(n, args)
            results.setdefault(_label(n), []).append(
                {k: round(v, 5) if isinstance(v, float) else v for k, v in r.items()})
        rates = {n: [x["produce msg/s"] + x["consume msg/s"] for x in results[_label(n)]]
                 for n in (1, 2)}
        print(f"round {rnd + 1}: 2 brokers / 1 = {rates[2][-1] / rates[1][-1]:.2f}x", flush=True)
    ratios = [two / one for one, two in zip(rates[1], rates[2], strict=True)]
    results["ratio per round"] = [round(x, 3) for x in ratios]
    med = {n: {k: statistics.median(x[k] for x in results[_label(n)])
               for k in ("broker cpu s/1k", "generator cpu s/1k")} for n in kinds}
    print(f"2 brokers / 1 (produce + consume msg/s): median {statistics.median(ratios):.2f}x "
          f"over {args.rounds} round(s); median CPU ms per 1,000 messages: " + "; ".join(
              f"{_label(n)} b = {m['broker cpu s/1k'] * 1e3:.2f}, c = "
              f"{m['generator cpu s/1k'] * 1e3:.2f}" for n, m in med.items()), flush=True)
    if not args.throughput_only:
        with tempfile.TemporaryDirectory(prefix="cluster-bench-moves-") as d:
            cluster = ClusterUp(2, Path(d), args.session_ms)
            try:
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
