#!/usr/bin/env python3
"""Produce and consume over a local directory and over the replicated GlusterFS volume, in
one run, on the multi-host bed (tests/multihost.py: a ZooKeeper ensemble on three hosts,
three glusterd peers serving a replica-3 volume with its caches off, broker hosts each with
its own FUSE mount; the brokers configured by docs/deploy.md's broker.conf). Needs root,
FUSE, glusterfs-server and ZooKeeper, as the tests do.

For each storage, alternating over ``--rounds``: a fresh topic (one partition) on a broker
on ``b1`` whose data directory is either a local directory or a directory of the volume;
a producer on the client host sends ``--messages`` messages of ``--size`` bytes with
``send_async`` (batching on, blocking when its queue is full) while a consumer receives
them. Figures: produce msgs/s (first send to last acknowledgement), the p99 time from a
send to its acknowledgement, consume msgs/s (first to last message received) and the p99
time from a message's publish time to its receipt. Prints one JSON line per round and a
summary (medians).

    sudo PYTHONPATH=src python3 bench/multihost_bench.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pulsar

from tests.multihost import MultiHost, multihost_missing_reason
from tests.netbed import NetBed, NsBroker

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def one_run(url: str, topic: str, messages: int, size: int) -> dict[str, float]:
    """Produce ``messages`` while a consumer reads them (run inside the client host)."""
    client = pulsar.Client(url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Exclusive,
                                    initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, block_if_queue_full=True,
                                          batching_max_publish_delay_ms=1)
        received: list[float] = []
        e2e: list[float] = []

        def consume() -> None:
            while len(received) < messages:
                msg = consumer.receive(60_000)
                now = time.time()
                received.append(time.monotonic())
                e2e.append(now - msg.publish_timestamp() / 1000)
                consumer.acknowledge(msg)

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        payload = b"x" * size
        acks: list[float] = []
        lock = threading.Lock()
        done = threading.Event()
        start = time.monotonic()

        def sent(at: float, res: pulsar.Result, _mid: object) -> None:
            assert res == pulsar.Result.Ok, res
            with lock:
                acks.append(time.monotonic() - at)
                if len(acks) == messages:
                    done.set()

        for _ in range(messages):
            at = time.monotonic()
            producer.send_async(payload, lambda r, m, at=at: sent(at, r, m))
        if not done.wait(300):
            raise RuntimeError(f"only {len(acks)} of {messages} acknowledged in 300 s")
        produced = time.monotonic() - start
        reader.join(300)
        if len(received) < messages:
            raise RuntimeError(f"only {len(received)} of {messages} consumed")
        return {"produce_msgs_s": round(messages / produced),
                "produce_p99_ms": round(p99(acks) * 1000, 1),
                "consume_msgs_s": round(messages / (received[-1] - start)),
                "end_to_end_p99_ms": round(p99(e2e) * 1000, 1)}
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    reason = multihost_missing_reason()
    if reason:
        sys.exit(f"multihost_bench: {reason}")
    root = Path(tempfile.mkdtemp(prefix="multihost-bench-"))
    with NetBed(root) as bed:
        mh = MultiHost(bed, root, brokers=1)
        print(json.dumps({"setup_s": {k: round(v, 1) for k, v in mh.timings.items()}}))
        results: dict[str, list[dict[str, float]]] = {"local": [], "glusterfs": []}
        for r in range(args.rounds):
            for kind in ("local", "glusterfs"):
                chroot = f"bench{r}{kind}"
                broker: NsBroker = mh.start_brokers(chroot)[0]
                if kind == "local":  # the same broker over a local directory instead
                    broker.stop()
                    local = root / "local" / chroot
                    local.mkdir(parents=True)
                    i = broker.command.index("--data-dir")
                    broker.command[i + 1] = str(local)
                    broker.start(timeout=90)
                try:
                    figures = mh.client.call(one_run, broker.url,
                                             f"persistent://public/default/{chroot}",
                                             args.messages, args.size, timeout=600)
                finally:
                    mh.stop_brokers()
                results[kind].append(figures)
                print(json.dumps({"round": r, "storage": kind, **figures}), flush=True)
        summary = {kind: {key: statistics.median(run[key] for run in runs)
                          for key in runs[0]} for kind, runs in results.items()}
        print(json.dumps({"median": summary, "rounds": args.rounds,
                          "messages": args.messages, "size": args.size}))


if __name__ == "__main__":
    main()
