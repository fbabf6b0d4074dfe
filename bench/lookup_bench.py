#!/usr/bin/env python3
"""Lookup stress: how many hops a lookup takes on a fresh two-broker cluster.

For each of ``--clusters`` fresh clusters (default 20; each two brokers, ``magnetar
standalone`` on one real ZooKeeper under a chroot of its own, sharing a data directory):
a fresh namespace is created at one broker, partitioned topics of 8, 16 and 32 partitions
at alternating brokers, and then, all at once, every partition is looked up

- over the binary protocol at both brokers, following each ``Redirect`` by hand (a raw
  lookup per hop, ``authoritative`` as the answer says), and
- over HTTP at both brokers (``/lookup/v2/topic/...``), following each 307 by hand,

while the official client and Magnetar's own subscribe to every topic through either
broker. Reported: the worst hop count of a lookup (1: answered where asked; 2: one
redirect), the hop histogram, and every error. A lookup that takes more than 8 hops is
counted as an error (the official client gives up after 20).

Usage: PYTHONPATH=src python3 bench/lookup_bench.py [--clusters 20] [--json out.json]
(needs ZooKeeper: Debian's zookeeper package, as the tests do).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from magnetar.client.connection import Connection  # noqa: E402
from magnetar.protocol import pb  # noqa: E402
from tests.cluster.brokers import (  # noqa: E402
    Cluster,
    fresh_partitioned_topics,
    http_lookup_hops,
    lookup_hops,
    magnetar_subscribe,
    official_subscribe,
)
from tests.zkserver import ZooKeeperServer, zk_missing_reason  # noqa: E402

R = pb.CommandLookupTopicResponse
T = pb.BaseCommand
PARTITIONS = (8, 16, 32)


def one_cluster(root: Path, zk: ZooKeeperServer, index: int) -> dict[str, Any]:
    cluster = Cluster(root / f"c{index}", zk, 2, shared=True).start()
    try:
        topics = fresh_partitioned_topics(cluster, f"public/fresh{index}", PARTITIONS,
                                          accept=(204, 409))
        return asyncio.run(_look_up_all(cluster, topics))
    finally:
        cluster.stop()


async def _look_up_all(cluster: Cluster, topics: list[tuple[str, int]]) -> dict[str, Any]:
    a, b = cluster.brokers
    hops: collections.Counter[str] = collections.Counter()
    errors: list[str] = []
    owners: dict[str, str] = {}

    async def binary(port: int, part: str) -> None:
        try:
            hops[f"binary {(await lookup_hops(port, part))[0]}"] += 1
        except Exception as exc:
            errors.append(f"binary {part} at {port}: {exc}")

    async def http(web: str, part: str) -> None:
        try:
            hops[f"http {await asyncio.to_thread(http_lookup_hops, web, part)}"] += 1
        except Exception as exc:
            errors.append(f"http {part} at {web}: {exc}")

    async def official(url: str, topic: str) -> None:
        try:
            await asyncio.to_thread(official_subscribe, url, topic, "bench")
        except Exception as exc:
            errors.append(f"official client {topic} at {url}: {exc}")

    async def ours(url: str, topic: str) -> None:
        try:
            await asyncio.wait_for(magnetar_subscribe(url, topic, "bench-m"), 60)
        except Exception as exc:
            errors.append(f"magnetar client {topic} at {url}: {exc!r}")

    work = []
    for k, (topic, n) in enumerate(topics):
        for i in range(n):
            part = f"{topic}-partition-{i}"
            first, second = (a, b) if i % 2 else (b, a)
            work += [binary(first.port, part), http(second.web_url, part)]
        work += [official((a, b)[k % 2].url, topic), ours((b, a)[k % 2].url, topic)]
    await asyncio.gather(*work)
    # where the partitions went: each partition's owner, as a lookup at A says
    for topic, n in topics:
        for i in range(n):
            part = f"{topic}-partition-{i}"
            cnx = await Connection.open("127.0.0.1", a.port, address=a.url)
            try:
                resp = await cnx.request(T.LOOKUP, timeout=30, topic=part)
                owners[part] = a.url if resp.response == R.Connect else resp.brokerServiceUrl
            finally:
                cnx.close()
    spread = collections.Counter(owners.values())
    worst = max((int(k.split()[1]) for k in hops), default=0)
    return {"hops": dict(hops), "worst_hops": worst, "errors": errors,
            "partitions_per_broker": sorted(spread.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    missing = zk_missing_reason()
    if missing:
        sys.exit(f"lookup_bench: {missing}")
    with tempfile.TemporaryDirectory(prefix="lookup-bench-") as tmp:
        root = Path(tmp)
        zk = ZooKeeperServer(root / "zookeeper")
        zk.start()
        try:
            runs = []
            started = time.monotonic()
            for i in range(args.clusters):
                try:
                    run = one_cluster(root, zk, i)
                except Exception as exc:
                    run = {"hops": {}, "worst_hops": 0, "errors": [f"cluster: {exc}"],
                           "partitions_per_broker": []}
                runs.append(run)
                print(f"cluster {i + 1}/{args.clusters}: worst {run['worst_hops']} hops, "
                      f"{len(run['errors'])} errors, partitions per broker "
                      f"{run['partitions_per_broker']}, {run['hops']}", flush=True)
                for error in run["errors"][:5]:
                    print("   ", error, flush=True)
        finally:
            zk.stop()
    total: collections.Counter[str] = collections.Counter()
    for run in runs:
        total.update(run["hops"])
    summary = {
        "clusters": args.clusters,
        "lookups": sum(total.values()),
        "worst_hops": max(run["worst_hops"] for run in runs),
        "hops": dict(sorted(total.items())),
        "errors": sum(len(run["errors"]) for run in runs),
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
