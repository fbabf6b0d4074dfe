"""Transaction coordinators' recovery after kill -9: ``--txns`` open transactions (each with
a partition added), the broker killed (SIGKILL) and started again on the same data
directory; measured: the time from the new process's start to its binary port accepting
connections, to a NewTxn answered on every coordinator, and to every open transaction
back (the coordinators' ``ongoingTxnSize`` summing to ``--txns``).

    python bench/txn_recovery_bench.py --txns 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import tempfile
import time
import urllib.request
from pathlib import Path

import magnetar
from magnetar.testing import standalone


async def open_transactions(url: str, count: int) -> None:
    async with magnetar.Client(url, enable_transaction=True) as client:
        for i in range(count):
            txn = await client.new_transaction(timeout_ms=3_600_000)
            await txn._add_partition(f"persistent://public/default/recovery-{i % 16}")


def ongoing(web_url: str) -> int:
    with urllib.request.urlopen(f"{web_url}/admin/v3/transactions/coordinatorStats",
                                timeout=30) as answer:
        stats = json.loads(answer.read())
    return sum(int(s["ongoingTxnSize"]) for s in stats.values())


async def every_coordinator_answers(url: str) -> None:
    async with magnetar.Client(url, enable_transaction=True) as client:
        for _ in range(16):
            await client.new_transaction(timeout_ms=60_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--txns", type=int, default=1000, help="open transactions at the kill")
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="txn-recovery-")) / "data"
    with standalone(data_dir=data) as broker:
        asyncio.run(open_transactions(broker.service_url, args.txns))
        port = int(broker.service_url.rsplit(":", 1)[1])
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait()
    started = time.monotonic()
    with standalone(data_dir=data, broker_port=port) as broker:
        listening = time.monotonic() - started
        asyncio.run(every_coordinator_answers(broker.service_url))
        answered = time.monotonic() - started
        while ongoing(broker.web_service_url) < args.txns:
            time.sleep(0.01)  # a benchmark's poll
        recovered = time.monotonic() - started
    print(f"{args.txns} open transactions: listening after {listening:.2f} s, NewTxn answered "
          f"on every coordinator after {answered:.2f} s, all open transactions back after "
          f"{recovered:.2f} s (from the new process's start)")


if __name__ == "__main__":
    main()
