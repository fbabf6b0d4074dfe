"""Metadata stores side by side in one run: the embedded SQLite store and ZooKeeper.

Two parts, each run on both backends in alternation (``--rounds``):

1. **attach**: 1,000 producers (``--producers``) over 100 topics (``--topics``) of
   ``public/default``, created one after the other with the official ``pulsar-client`` on a
   broker child process: ``magnetar standalone`` (metadata in its data directory's SQLite)
   and ``magnetar broker`` with ``metadataStoreUrl=zk:...`` (a real ZooKeeper started here).
   Each round uses fresh topic names, so every topic is created (lookup, namespace and
   policy checks, topic creation) once and then attached to 9 more times. Figure: producers
   per second, wall time from the first ``create_producer`` to the last; the ratio is
   ZooKeeper / SQLite time. In cluster mode every metadata read of an attach is answered
   from the broker's in-memory mirror of the store (kept current by notifications), so the
   expected ratio is about 1; what bounds both is the broker's attach path and the client.
2. **store**: 10,000 metadata operations through the store API (``--ops``): writes
   (``put`` of 1 KB JSON values over 1,000 keys), reads (``get``), and reads through a warm
   `MetadataCache`, each in windows of 100 concurrent requests (``--window``). Figure:
   operations per second. What bounds them: ZooKeeper's round trip and its fsync of each
   write (one per transaction, group-committed by the server) plus a hop to kazoo's thread
   per request; SQLite's commits (WAL, ``synchronous=NORMAL``: no fsync per commit) on one
   thread; cached reads, neither (a dict lookup on the loop).

    python bench/metadata_bench.py                 # both parts, 3 rounds
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
from tests.metadata.clusterproc import BrokerProc, initialize  # noqa: E402
from tests.zkserver import ZooKeeperServer, zk_missing_reason  # noqa: E402


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
    parser.add_argument("--parts", default="attach,store")
    parser.add_argument("--rounds", type=int, default=3)
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
                try:
                    for _ in range(args.rounds):
                        for name, broker in brokers.items():
                            times[name].append(attach(broker.service_url, args.producers,
                                                      args.topics))
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
                      + ", ".join(f"{r:.2f}x" for r in ratios))
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
