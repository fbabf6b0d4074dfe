"""Transactions, the participant side: broker CPU per message of messages sent in
transactions (each of ``--per-txn`` messages of ``--size`` bytes, then committed) against
the same messages sent without a transaction, and the commit latency (EndTxn to its
answer: the coordinator's record changes plus the topic's marker append).

Both phases use Magnetar's asyncio client with batching off and every message of a
transaction (or of a group of the same size) in flight at once (``send_async``), against a
``magnetar standalone`` started here; the broker's CPU is utime + stime from
``/proc/PID/stat`` around each phase. The phases alternate ``--rounds`` times, and each
round uses a fresh topic, so that a slow moment of a shared machine hits both alike.

    python bench/txn_bench.py --txns 100 --per-txn 100 --size 1024 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid

import magnetar
from magnetar.testing import standalone


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def phase(url: str, pid: int, groups: int, per_group: int, size: int,
                in_txn: bool) -> tuple[float, list[float]]:
    """(broker CPU µs per message, commit latencies in ms) of one phase."""
    topic = f"persistent://public/default/txn-bench-{uuid.uuid4().hex[:8]}"
    payload = b"x" * size
    commits: list[float] = []
    async with magnetar.Client(url, enable_transaction=True) as client:
        producer = await client.create_producer(topic)
        await producer.send(payload)  # topic loaded, producer ready: not measured
        before = cpu_seconds(pid)
        for _ in range(groups):
            txn = await client.new_transaction(timeout_ms=60_000) if in_txn else None
            futures = [await producer.send_async(payload, txn=txn) for _ in range(per_group)]
            await asyncio.gather(*futures)
            if txn is not None:
                started = time.perf_counter()
                await txn.commit()
                commits.append((time.perf_counter() - started) * 1000)
        used = cpu_seconds(pid) - before
    return used / (groups * per_group) * 1e6, commits


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--txns", type=int, default=100, help="transactions per phase")
    parser.add_argument("--per-txn", type=int, default=100, help="messages per transaction")
    parser.add_argument("--size", type=int, default=1024, help="bytes per message")
    parser.add_argument("--rounds", type=int, default=2, help="plain/txn phase pairs")
    args = parser.parse_args()
    plain: list[float] = []
    txn: list[float] = []
    commits: list[float] = []
    with standalone() as broker:
        pid = broker.process.pid
        for _ in range(args.rounds):
            cpu, _ = asyncio.run(phase(broker.service_url, pid, args.txns, args.per_txn,
                                       args.size, False))
            plain.append(cpu)
            cpu, lat = asyncio.run(phase(broker.service_url, pid, args.txns, args.per_txn,
                                         args.size, True))
            txn.append(cpu)
            commits += lat
    ratio = statistics.median(txn) / statistics.median(plain)
    print(f"{args.txns} transactions x {args.per_txn} messages of {args.size} B, "
          f"{args.rounds} rounds")
    print(f"broker CPU per message, no transaction: {statistics.median(plain):.1f} us "
          f"(rounds: {', '.join(f'{v:.1f}' for v in plain)})")
    print(f"broker CPU per message, in transactions: {statistics.median(txn):.1f} us "
          f"(rounds: {', '.join(f'{v:.1f}' for v in txn)}); ratio {ratio:.2f}x "
          "(the transactions' NewTxn, AddPartitionToTxn and EndTxn included)")
    print(f"commit latency: p50 {pct(commits, 0.5):.1f} ms, p99 {pct(commits, 0.99):.1f} ms "
          f"({len(commits)} commits, one at a time)")


if __name__ == "__main__":
    main()
