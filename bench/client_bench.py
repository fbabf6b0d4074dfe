#!/usr/bin/env python3
"""Client benchmark: Magnetar's asyncio client against the official client, same broker,
same run.

  produce   batched 1 KB messages, like for like: both clients without a per-message
            callback (official ``send_async(payload, None)``; ours ``await send_async``,
            whose future nobody waits on), and both with a counting callback (official
            callback; ours ``add_done_callback``); all then flush
  consume   Exclusive subscription from Earliest over a pre-filled topic: ``receive``
            every message, ``acknowledge_cumulative`` every 1,000th (and the last)

Each figure is messages per second over the whole phase (the best of ``--rounds``); the
ratio is ours / official. The broker is started on a free port with a fresh data dir
(``--broker magnetar`` by default, or ``pulsar-lite``), or given with ``--url``.

  python bench/client_bench.py [--messages 200000] [--broker magnetar] [--url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import pulsar  # noqa: E402

from magnetar.client import Client, InitialPosition  # noqa: E402

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
ACK_EVERY = 1000
PRODUCER_KW = dict(batching_enabled=True, batching_max_messages=1000,
                   batching_max_publish_delay_ms=10, max_pending_messages=10000,
                   block_if_queue_full=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(kind: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    tmp = Path(tempfile.mkdtemp(prefix="client-bench-"))
    port = free_port()
    if kind == "magnetar":
        cmd = [sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir",
               str(tmp / "data"), "--port", str(port), "--http-port", "0",
               "--bind-address", "127.0.0.1"]
    else:
        import pulsar_lite

        conf = tmp / "pulsar-lite.toml"
        conf.write_text("[metrics]\nenabled = false\n")
        cmd = [str(Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"), "--config",
               str(conf), "--addr", f"127.0.0.1:{port}", "--db-path", str(tmp / "db"),
               "--log-level", "error"]
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"pulsar://127.0.0.1:{port}", tmp
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{kind} did not start")


def machine() -> str:
    """Cores, CPU model, Python and client versions, for the line printed with the figures."""
    import platform
    from importlib import metadata

    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return (f"{os.cpu_count()} x {model}, Python {platform.python_version()}, "
            f"pulsar-client {metadata.version('pulsar-client')}")


def topic_name(tag: str) -> str:
    return f"persistent://public/default/bench-{tag}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------ official client
def official_produce(url: str, n: int, payload: bytes, with_callback: bool) -> float:
    """``send_async`` with a counting callback, or with ``None`` (then only ``flush``
    tells that everything was acknowledged; the Python callback is the costly part)."""
    client = pulsar.Client(url, logger=QUIET)
    producer = client.create_producer(topic_name("op"), **PRODUCER_KW)
    done = [0]

    def count(res: object, mid: object) -> None:
        done[0] += 1

    cb = count if with_callback else None
    start = time.perf_counter()
    for _ in range(n):
        producer.send_async(payload, cb)
    producer.flush()
    elapsed = time.perf_counter() - start
    client.close()
    assert done[0] == (n if with_callback else 0), done[0]
    return n / elapsed


def official_fill(url: str, topic: str, n: int, payload: bytes) -> None:
    client = pulsar.Client(url, logger=QUIET)
    producer = client.create_producer(topic, **PRODUCER_KW)
    for _ in range(n):
        producer.send_async(payload, None)
    producer.flush()
    client.close()


def official_consume(url: str, topic: str, n: int) -> float:
    client = pulsar.Client(url, logger=QUIET)
    consumer = client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest)
    start = time.perf_counter()
    for i in range(1, n + 1):
        msg = consumer.receive()
        if i % ACK_EVERY == 0 or i == n:
            consumer.acknowledge_cumulative(msg)
    elapsed = time.perf_counter() - start
    client.close()
    return n / elapsed


# ----------------------------------------------------------------------- our client
async def magnetar_produce(url: str, n: int, payload: bytes, with_callback: bool) -> float:
    async with Client(url) as client:
        producer = await client.create_producer(topic_name("mp"), **PRODUCER_KW)
        done = [0]

        def count(fut: object) -> None:
            done[0] += 1

        start = time.perf_counter()
        send = producer.send_async
        for _ in range(n):
            fut = await send(payload)
            if with_callback:
                fut.add_done_callback(count)
        await producer.flush()
        await asyncio.sleep(0)  # done-callbacks run on the next loop turn
        elapsed = time.perf_counter() - start
        assert fut.done() and fut.exception() is None
        assert done[0] == (n if with_callback else 0), done[0]
    return n / elapsed


async def magnetar_consume(url: str, topic: str, n: int) -> float:
    async with Client(url) as client:
        consumer = await client.subscribe(topic, "bench",
                                          initial_position=InitialPosition.Earliest)
        start = time.perf_counter()
        receive = consumer.receive
        for i in range(1, n + 1):
            msg = await receive()
            if i % ACK_EVERY == 0 or i == n:
                await consumer.acknowledge_cumulative(msg)
        elapsed = time.perf_counter() - start
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--broker", choices=("pulsar-lite", "magnetar"), default="magnetar")
    ap.add_argument("--url", help="use a running broker instead of starting one")
    ap.add_argument("--uvloop", action="store_true", help="run our client on uvloop")
    args = ap.parse_args()
    if args.uvloop:
        import uvloop

        uvloop.install()
    payload = os.urandom(args.size)
    proc = tmp = None
    url = args.url
    if url is None:
        proc, url, tmp = start_broker(args.broker)
    try:
        results: dict[str, list[float]] = {
            k: [] for k in ("op", "opn", "mp", "mpn", "oc", "mc")}
        for _ in range(args.rounds):
            results["opn"].append(official_produce(url, args.messages, payload, False))
            results["mpn"].append(asyncio.run(
                magnetar_produce(url, args.messages, payload, False)))
            results["op"].append(official_produce(url, args.messages, payload, True))
            results["mp"].append(asyncio.run(magnetar_produce(url, args.messages, payload, True)))
            t1, t2 = topic_name("c1"), topic_name("c2")
            official_fill(url, t1, args.messages, payload)
            official_fill(url, t2, args.messages, payload)
            results["oc"].append(official_consume(url, t1, args.messages))
            results["mc"].append(asyncio.run(magnetar_consume(url, t2, args.messages)))
        best = {k: max(v) for k, v in results.items()}
        where = args.url or args.broker
        loop = "uvloop" if args.uvloop else "asyncio"
        print(f"broker: {where}; {args.messages} x {args.size} B messages, batched; "
              f"best of {args.rounds}; our loop: {loop}; {machine()}")
        print(f"{'phase':<30}{'official msg/s':>16}{'magnetar msg/s':>16}{'ratio':>8}")
        rows = (("produce, no callbacks", "opn", "mpn"),
                ("produce, counting callbacks", "op", "mp"),
                (f"consume (cumulative ack /{ACK_EVERY})", "oc", "mc"))
        for phase, o, m in rows:
            print(f"{phase:<30}{best[o]:>16,.0f}{best[m]:>16,.0f}{best[m] / best[o]:>8.2f}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
