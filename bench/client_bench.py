#!/usr/bin/env python3
"""Client benchmark: Magnetar's asyncio client against the official client, same broker,
same run.

  produce   batched 1 KB messages, like for like: both clients without a per-message
            callback (official ``send_async(payload, None)``; ours ``await send_async``,
            whose future nobody waits on), and both with a counting callback (official
            callback; ours ``add_done_callback``); all then flush
  consume   Exclusive subscription from Earliest over a pre-filled topic: ``receive``
            every message, ``acknowledge_cumulative`` every 1,000th (and the last); ours
            twice: the asyncio client, and the blocking facade ``magnetar.sync`` (which,
            like the official client, runs its I/O on a thread of its own, on uvloop)

Each figure is messages per second over the whole phase (the best of ``--rounds``); the
ratio is ours / official. Beside each figure, what bounds it: the CPU this process spent
over the phase (all its threads, the official client's C++ threads too) and the CPU the
broker spent, each as a share of one core over the phase's wall time. A client near 100%
is CPU-bound on its own Python work; a broker near 100% bounds the row instead. The broker
is started on a free port with a fresh data dir (``--broker magnetar`` by default, or
``pulsar-lite``), or given with ``--url`` (then its CPU is not shown).

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
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import pulsar  # noqa: E402

from magnetar.client import Client, InitialPosition  # noqa: E402
from magnetar.sync import Client as SyncClient  # noqa: E402

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
ACK_EVERY = 1000
PRODUCER_KW = dict(batching_enabled=True, batching_max_messages=1000,
                   batching_max_publish_delay_ms=10, max_pending_messages=10000,
                   block_if_queue_full=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(kind: str, size: int = 1024,
                 batched: bool = True) -> tuple[subprocess.Popen[bytes], str, Path]:
    tmp = Path(tempfile.mkdtemp(prefix="client-bench-"))
    port = free_port()
    if kind == "replay":
        cmd = [sys.executable, str(REPO / "bench" / "replay_broker.py"), str(port),
               "--size", str(size), *(() if batched else ("--unbatched",))]
    elif kind == "magnetar":
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


class Window:
    """Wall time, this process's CPU time and the broker's CPU time over one phase."""

    broker_pid: int | None = None

    @staticmethod
    def broker_cpu() -> float:
        if Window.broker_pid is None:
            return float("nan")
        fields = Path(f"/proc/{Window.broker_pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> Window:
        self.b0 = self.broker_cpu()
        self.c0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.c0
        self.broker = self.broker_cpu() - self.b0

    def figure(self, n: int) -> Figure:
        return Figure(n / self.elapsed, self.cpu / self.elapsed, self.broker / self.elapsed)


class Figure(NamedTuple):
    rate: float  # messages per second
    client: float  # CPU of this process, share of one core
    broker: float  # CPU of the broker, share of one core

    def cell(self) -> str:
        broker = "-" if self.broker != self.broker else f"{self.broker:.0%}"
        return f"{self.rate:>10,.0f}{self.client:>7.0%}{broker:>7}"


def topic_name(tag: str) -> str:
    return f"persistent://public/default/bench-{tag}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------ official client
def official_produce(url: str, n: int, payload: bytes, with_callback: bool) -> Figure:
    """``send_async`` with a counting callback, or with ``None`` (then only ``flush``
    tells that everything was acknowledged; the Python callback is the costly part)."""
    client = pulsar.Client(url, logger=QUIET)
    producer = client.create_producer(topic_name("op"), **PRODUCER_KW)
    done = [0]

    def count(res: object, mid: object) -> None:
        done[0] += 1

    cb = count if with_callback else None
    with Window() as w:
        for _ in range(n):
            producer.send_async(payload, cb)
        producer.flush()
    client.close()
    assert done[0] == (n if with_callback else 0), done[0]
    return w.figure(n)


def official_fill(url: str, topic: str, n: int, payload: bytes) -> None:
    client = pulsar.Client(url, logger=QUIET)
    producer = client.create_producer(topic, **PRODUCER_KW)
    for _ in range(n):
        producer.send_async(payload, None)
    producer.flush()
    client.close()


def official_consume(url: str, topic: str, n: int) -> Figure:
    client = pulsar.Client(url, logger=QUIET)
    consumer = client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest)
    with Window() as w:
        for i in range(1, n + 1):
            msg = consumer.receive()
            if i % ACK_EVERY == 0 or i == n:
                consumer.acknowledge_cumulative(msg)
    client.close()
    return w.figure(n)


# ----------------------------------------------------------------------- our client
async def magnetar_produce(url: str, n: int, payload: bytes, with_callback: bool) -> Figure:
    async with Client(url) as client:
        producer = await client.create_producer(topic_name("mp"), **PRODUCER_KW)
        done = [0]

        def count(fut: object) -> None:
            done[0] += 1

        send = producer.send_async
        with Window() as w:
            for _ in range(n):
                fut = await send(payload)
                if with_callback:
                    fut.add_done_callback(count)
            await producer.flush()
            await asyncio.sleep(0)  # done-callbacks run on the next loop turn
        assert fut.done() and fut.exception() is None
        assert done[0] == (n if with_callback else 0), done[0]
    return w.figure(n)


async def magnetar_consume(url: str, topic: str, n: int) -> Figure:
    async with Client(url) as client:
        consumer = await client.subscribe(topic, "bench",
                                          initial_position=InitialPosition.Earliest)
        receive = consumer.receive
        with Window() as w:
            for i in range(1, n + 1):
                msg = await receive()
                if i % ACK_EVERY == 0 or i == n:
                    await consumer.acknowledge_cumulative(msg)
    return w.figure(n)


def magnetar_sync_consume(url: str, topic: str, n: int) -> Figure:
    """The blocking facade, called exactly like the official client."""
    with SyncClient(url) as client:
        consumer = client.subscribe(topic, "bench", initial_position=InitialPosition.Earliest)
        with Window() as w:
            for i in range(1, n + 1):
                msg = consumer.receive()
                if i % ACK_EVERY == 0 or i == n:
                    consumer.acknowledge_cumulative(msg)
    return w.figure(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--broker", choices=("pulsar-lite", "magnetar", "replay"),
                    default="magnetar",
                    help="replay: bench/replay_broker.py, a stand-in that serves prebuilt "
                         "entries at no cost, so the consume rows measure the clients "
                         "alone (no produce rows then)")
    ap.add_argument("--url", help="use a running broker instead of starting one")
    ap.add_argument("--uvloop", action="store_true", help="run our client on uvloop")
    ap.add_argument("--unbatched", action="store_true",
                    help="both producers without batching (one message per entry)")
    args = ap.parse_args()
    if args.unbatched:
        PRODUCER_KW["batching_enabled"] = False
    if args.uvloop:
        import uvloop

        uvloop.install()
    payload = os.urandom(args.size)
    proc = tmp = None
    url = args.url
    if url is None:
        proc, url, tmp = start_broker(args.broker, args.size, not args.unbatched)
    if proc is not None:
        Window.broker_pid = proc.pid
    try:
        results: dict[str, list[Figure]] = {
            k: [] for k in ("op", "opn", "mp", "mpn", "oc", "mc", "ms")}
        replay = args.broker == "replay" and args.url is None
        for _ in range(args.rounds):
            t1, t2, t3 = topic_name("c1"), topic_name("c2"), topic_name("c3")
            if not replay:
                results["opn"].append(official_produce(url, args.messages, payload, False))
                results["mpn"].append(asyncio.run(
                    magnetar_produce(url, args.messages, payload, False)))
                results["op"].append(official_produce(url, args.messages, payload, True))
                results["mp"].append(asyncio.run(
                    magnetar_produce(url, args.messages, payload, True)))
                for t in (t1, t2, t3):
                    official_fill(url, t, args.messages, payload)
            results["oc"].append(official_consume(url, t1, args.messages))
            results["mc"].append(asyncio.run(magnetar_consume(url, t2, args.messages)))
            results["ms"].append(magnetar_sync_consume(url, t3, args.messages))
        best = {k: max(v) for k, v in results.items() if v}
        where = args.url or args.broker
        loop = "uvloop" if args.uvloop else "asyncio"
        batching = "not batched" if args.unbatched else "batched"
        print(f"broker: {where}; {args.messages} x {args.size} B messages, {batching}; "
              f"best of {args.rounds}; our loop: {loop}; {machine()}")
        for k in ("oc", "mc", "ms"):
            print(f"  all rounds {k}: " + ", ".join(f"{f.rate:,.0f}" for f in results[k]))
        print("client / broker: CPU of this process / of the broker over the phase, "
              "as a share of one core")
        print(f"{'':<34}{'official':>26}{'magnetar':>26}")
        head = f"{'msg/s':>10}{'client':>7}{'broker':>7}"
        print(f"{'phase':<34}{head:>26}{head:>26}{'ratio':>7}")
        rows = (("produce, no callbacks", "opn", "mpn"),
                ("produce, counting callbacks", "op", "mp"),
                (f"consume (cumulative ack /{ACK_EVERY})", "oc", "mc"),
                ("consume, magnetar.sync", "oc", "ms"))
        for phase, o, m in rows:
            if o not in best:
                continue
            print(f"{phase:<34}{best[o].cell():>26}{best[m].cell():>26}"
                  f"{best[m].rate / best[o].rate:>7.2f}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
