"""Metadata stores side by side in one run: the embedded SQLite store and ZooKeeper.

Three parts; the first and the last run both backends in alternation (``--rounds``):

1. **attach**: 1,000 producers (``--producers``) over 100 topics (``--topics``) of
   ``public/default``, created one after the other with the official ``pulsar-client`` on a
   broker child process: ``magnetar standalone`` (metadata in its data directory's SQLite)
   and ``magnetar broker`` with ``metadataStoreUrl=zk:...`` (a real ZooKeeper started here).
   Each round uses fresh topic names, so every topic is created (lookup, namespace and
   policy checks, topic creation) once and then attached to 9 more times. Figure: producers
   per second, wall time from the first ``create_producer`` to the last; the ratio is
   ZooKeeper / SQLite time; which broker goes first alternates between rounds. In cluster
   mode every metadata read of an attach is answered from the broker's in-memory mirror
   of the store (kept current by notifications); standalone reads its partitioned-topic
   keys from SQLite on each lookup. What bounds both is the broker's attach path (topic
   creation: a ledger directory and a SQLite key per new topic) and the client; the
   machine's other load moves the wall times, so the broker's own CPU time per attach
   (utime + stime from ``/proc/PID/stat``) is reported beside them.
2. **propagate**: two ``magnetar broker`` processes on the ZooKeeper; 50 times
   (``--changes``), a namespace's message TTL is set through A's admin API and B's admin
   API is polled (every 2 ms) until it answers the new value. Figure: the time from A's
   answer to B's, median and max. What bounds it: ZooKeeper's notification to B, B's
   re-read of the node, and the polling HTTP requests themselves.
3. **store**: 10,000 metadata operations through the store API (``--ops``): writes
   (``put`` of 1 KB JSON values over 1,000 keys), reads (``get``), and reads through a warm
   `MetadataCache`, each in windows of 100 concurrent requests (``--window``). Figure:
   operations per second. What bounds them: ZooKeeper's round trip and its fsync of each
   write (one per transaction, group-committed by the server) plus a hop to kazoo's thread
   per request; SQLite's commits (WAL, ``synchronous=NORMAL``: no fsync per commit) on one
   thread; cached reads, neither (a dict lookup on the loop).

    python bench/metadata_bench.py                 # every part, 6 rounds
    python bench/metadata_bench.py --parts store --ops 20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from magnetar.metadata import MetadataCache, create_metadata_store  # noqa: E402
from tests.cluster.brokers import BrokerProc, initialize  # noqa: E402
from tests.zkserver import ZooKeeperServer, zk_missing_reason  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (/proc/PID/stat)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def attach(service_url: str, producers: int, topics: int) -> float:
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    run = uuid.uuid4().hex[:8]
    names = [f"persistent://public/default/bench-{run}-{i % topics}" for i in range(producers)]
    started = time.perf_counter()
    made = [client.create_producer(name) for name in names]
    elapsed = time.perf_counter() - started
    for producer in made:
        producer.close()
    client.close()
    return elapsed


def http(base: str, method: str, path: str, body: object = None) -> object:
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        raw = resp.read()
        return json.loads(raw) if raw else None


def propagate(a: BrokerProc, b: BrokerProc, changes: int) -> list[float]:
    path = "/admin/v2/namespaces/public/default/messageTTL"
    out = []
    for i in range(changes):
        http(a.web_url, "POST", path, 1000 + i)
        started = time.perf_counter()
        while http(b.web_url, "GET", path) != 1000 + i:
            if time.perf_counter() - started > 30:
                raise RuntimeError("a change made through A did not reach B in 30 s")
            time.sleep(0.002)
        out.append(time.perf_counter() - started)
    return out


async def store_ops(url: str, ops: int, window: int) -> dict[str, float]:
    store = await create_metadata_store(url)
    value = json.dumps({"payload": "x" * 1000}).encode()
    keys = [f"/bench/{uuid.uuid4().hex[:6]}/k{i}" for i in range(1000)]
    out: dict[str, float] = {}
    try:
        async def windows(make: object) -> float:
            started = time.perf_counter()
            for start in range(0, ops, window):
                await asyncio.gather(*(make(i) for i in range(start, min(start + window, ops))))  # type: ignore[operator]
            return time.perf_counter() - started

        out["write"] = ops / await windows(lambda i: store.put(keys[i % len(keys)], value))
        out["read"] = ops / await windows(lambda i: store.get(keys[i % len(keys)]))
        cache: MetadataCache[object] = MetadataCache(store)
        for key in keys:
            await cache.get(key)
        out["cached read"] = ops / await windows(lambda i: cache.get(keys[i % len(keys)]))
    finally:
        await store.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="attach,propagate,store")
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--producers", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=100)
    args = parser.parse_args()
    reason = zk_missing_reason()
    if reason:
        print(f"metadata_bench: {reason}", file=sys.stderr)
        return 1
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory(prefix="metadata-bench-") as tmp:
        root = Path(tmp)
        zk = ZooKeeperServer(root / "zk")
        zk.start()
        try:
            if "attach" in parts:
                url = zk.url("/bench")
                initialize(url, "bench")
                brokers = {"sqlite": BrokerProc(root / "sqlite", None, "bench").start(),
                           "zookeeper": BrokerProc(root / "zk-broker", url, "bench").start()}
                times: dict[str, list[float]] = {name: [] for name in brokers}
                cpu: dict[str, list[float]] = {name: [] for name in brokers}
                try:
                    for round_ in range(args.rounds):  # who goes first alternates
                        order = list(brokers.items())[::1 if round_ % 2 == 0 else -1]
                        for name, broker in order:
                            assert broker.proc is not None
                            before = cpu_seconds(broker.proc.pid)
                            times[name].append(attach(broker.service_url, args.producers,
                                                      args.topics))
                            cpu[name].append(cpu_seconds(broker.proc.pid) - before)
                finally:
                    for broker in brokers.values():
                        broker.stop()
                print(f"attach: {args.producers} producers over {args.topics} topics, "
                      f"{args.rounds} rounds (producers/s per round)")
                for name, values in times.items():
                    rates = ", ".join(f"{args.producers / t:,.0f}" for t in values)
                    print(f"  {name:10s} {rates}   median {statistics.median(values):.2f} s")
                ratios = [z / s for z, s in zip(times["zookeeper"], times["sqlite"], strict=True)]
                print("  zookeeper/sqlite time per round: "
                      + ", ".join(f"{r:.2f}x" for r in ratios)
                      + f"   median {statistics.median(ratios):.2f}x")
                for name, values in cpu.items():
                    per = ", ".join(f"{v / args.producers * 1e6:,.0f}" for v in values)
                    print(f"  {name:10s} broker CPU us per attach: {per}   "
                          f"median {statistics.median(values) / args.producers * 1e6:,.0f}")
                cpu_ratios = [z / s for z, s in zip(cpu["zookeeper"], cpu["sqlite"], strict=True)]
                print("  zookeeper/sqlite broker CPU per round: "
                      + ", ".join(f"{r:.2f}x" for r in cpu_ratios)
                      + f"   median {statistics.median(cpu_ratios):.2f}x")
            if "propagate" in parts:
                url = zk.url("/bench-propagate")
                initialize(url, "bench")
                a = BrokerProc(root / "pa", url, "bench").start()
                b = BrokerProc(root / "pb", url, "bench").start()
                try:
                    delays = propagate(a, b, args.changes)
                finally:
                    a.stop()
                    b.stop()
                print(f"propagate: {args.changes} message-TTL changes through A, seen through B "
                      f"after median {statistics.median(delays) * 1000:.1f} ms, "
                      f"max {max(delays) * 1000:.1f} ms")
            if "store" in parts:
                rows: dict[str, list[dict[str, float]]] = {"sqlite": [], "zookeeper": []}
                for _ in range(args.rounds):
                    rows["sqlite"].append(asyncio.run(store_ops(
                        f"sqlite:{root / 'store.db'}", args.ops, args.window)))
                    rows["zookeeper"].append(asyncio.run(store_ops(
                        zk.url("/store-bench"), args.ops, args.window)))
                print(f"store: {args.ops} operations each, windows of {args.window} "
                      f"(ops/s, median of {args.rounds} rounds)")
                print(f"  {'':12s} {'sqlite':>12s} {'zookeeper':>12s} {'zk/sqlite':>10s}")
                for op in ("write", "read", "cached read"):
                    s = statistics.median(r[op] for r in rows["sqlite"])
                    z = statistics.median(r[op] for r in rows["zookeeper"])
                    print(f"  {op:12s} {s:12,.0f} {z:12,.0f} {z / s:9.2f}x")
        finally:
            zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
