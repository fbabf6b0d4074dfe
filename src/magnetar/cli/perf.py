"""``magnetar perf produce|consume``: load generation and measurement like pulsar-perf,
over Magnetar's asyncio client. A line every ``--stats-interval`` seconds (msg/s, MB/s,
latency percentiles: send-to-receipt for producers, publish-to-receive for consumers) and
a summary at the end (after ``-m`` messages, ``--time`` seconds, or Ctrl-C)."""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import functools
import json
import logging
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from magnetar.cli.output import add_late_options
from magnetar.cli.values import finite, int32, utf8
from magnetar.protocol.naming import TopicName

log = logging.getLogger(__name__)

EXAMPLES = """Examples:
  magnetar perf produce my-topic --rate 1000 --size 1024 --time 30
  magnetar perf produce t1 t2 --rate 0 -m 100000 --batch-max-messages 500
  magnetar perf consume my-topic -s perf --time 30
  magnetar perf produce my-topic --time 10 --output json"""

# log-spaced latency buckets (ms): 1 µs .. ~17 min, 2% apart
_BOUNDS = [0.001 * 1.02**i for i in range(1000)]


@dataclass
class Histogram:
    """Latency percentiles in constant memory (2% buckets)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(_BOUNDS) + 1))
    n: int = 0
    total: float = 0.0
    peak: float = 0.0

    def record(self, ms: float) -> None:
        self.counts[bisect.bisect_left(_BOUNDS, ms)] += 1
        self.n += 1
        self.total += ms
        self.peak = max(self.peak, ms)

    def percentile(self, q: float) -> float:
        if not self.n:
            return 0.0
        rank = math.ceil(q * self.n)
        seen = 0
        for i, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return min(_BOUNDS[min(i, len(_BOUNDS) - 1)], self.peak)
        return self.peak

    def summary(self) -> dict[str, float]:
        return {"mean": self.total / self.n if self.n else 0.0, "p50": self.percentile(0.5),
                "p95": self.percentile(0.95), "p99": self.percentile(0.99),
                "p999": self.percentile(0.999), "max": self.peak}


@dataclass
class Meter:
    """Messages, bytes and latencies of one interval and of the whole run."""

    kind: str
    output: str
    started: float = field(default_factory=time.monotonic)
    interval_start: float = field(default_factory=time.monotonic)
    msgs: int = 0
    size: int = 0
    total_msgs: int = 0
    total_size: int = 0
    errors: int = 0
    window: Histogram = field(default_factory=Histogram)
    overall: Histogram = field(default_factory=Histogram)

    def record(self, size: int, latency_ms: float | None) -> None:
        self.msgs += 1
        self.size += size
        self.total_msgs += 1
        self.total_size += size
        if latency_ms is not None:
            self.window.record(latency_ms)
            self.overall.record(latency_ms)

    def line(self) -> None:
        now = time.monotonic()
        elapsed = max(now - self.interval_start, 1e-9)
        self._print(self.msgs / elapsed, self.size / elapsed, self.window, final=False)
        self.msgs = self.size = 0
        self.window = Histogram()
        self.interval_start = now

    def final(self) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        self._print(self.total_msgs / elapsed, self.total_size / elapsed, self.overall, final=True,
                    extra={"messages": self.total_msgs, "seconds": round(elapsed, 3),
                           "errors": self.errors})

    def _print(self, rate: float, bps: float, hist: Histogram, final: bool,
               extra: dict[str, Any] | None = None) -> None:
        lat = hist.summary()
        if self.output == "json":
            doc = {"type": "summary" if final else "interval", "msgPerSec": round(rate, 1),
                   "MBPerSec": round(bps / 1e6, 3),
                   "latencyMs": {k: round(v, 3) for k, v in lat.items()}, **(extra or {})}
            print(json.dumps(doc), flush=True)
            return
        head = "Aggregated" if final else "Throughput"
        what = "produced" if self.kind == "produce" else "received"
        print(f"{head} {what}: {rate:10,.1f} msg/s --- {bps / 1e6:8.3f} MB/s --- Latency ms: "
              f"mean {lat['mean']:7.3f} - med {lat['p50']:7.3f} - 95pct {lat['p95']:7.3f} - "
              f"99pct {lat['p99']:7.3f} - 99.9pct {lat['p999']:7.3f} - max {lat['max']:7.3f}"
              + (f"  ({self.total_msgs} messages, {self.errors} errors)" if final else ""),
              flush=True)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               common: list[argparse.ArgumentParser]) -> None:
    perf = sub.add_parser("perf", parents=common, help="measure throughput and latency (like pulsar-perf)",
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          description="Produce or consume at a rate and report msg/s, MB/s and "
                                      "latency percentiles.\n\n" + EXAMPLES)
    perf.add_argument("--url", default=os.environ.get("MAGNETAR_SERVICE_URL", "pulsar://localhost:6650"),
                      help="service URL (default $MAGNETAR_SERVICE_URL, else pulsar://localhost:6650)")
    cmds = perf.add_subparsers(dest="perf_command", metavar="COMMAND")
    cmds.required = True
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("topics", nargs="+", metavar="TOPIC")
    shared.add_argument("-m", "--num-messages", type=int32, default=0, help="stop after N messages (0: no limit)")
    shared.add_argument("--time", type=finite, default=0, help="stop after N seconds (0: no limit)")
    shared.add_argument("-i", "--stats-interval", type=finite, default=5.0, help="seconds between lines (default 5)")
    produce = cmds.add_parser("produce", parents=[shared], help="publish at a rate",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              description="Publish messages and measure send-to-receipt latency.\n\n"
                                          "Examples:\n  magnetar perf produce my-topic --rate 1000 --size 1024 --time 30\n"
                                          "  magnetar perf produce my-topic --rate 0 -m 100000   # as fast as possible")
    produce.add_argument("-r", "--rate", type=finite, default=100, help="messages/s over all topics (0: unbounded; default 100)")
    produce.add_argument("-s", "--size", type=int32, default=1024, help="payload bytes (default 1024)")
    produce.add_argument("--batch-max-messages", type=int32, default=1000, help="messages per batch at most")
    produce.add_argument("--batch-max-delay-ms", type=finite, default=1.0, help="batching delay (default 1 ms)")
    produce.add_argument("--disable-batching", action="store_true")
    produce.add_argument("--max-pending", type=int32, default=1000, help="messages in flight per producer")
    consume = cmds.add_parser("consume", parents=[shared], help="receive and measure",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              description="Receive and acknowledge messages, measuring publish-to-receive latency.\n\n"
                                          "Examples:\n  magnetar perf consume my-topic -s perf --time 30\n"
                                          "  magnetar perf consume t1 t2 -s perf -t Shared")
    for leaf in (produce, consume):
        add_late_options(leaf, "--url", "service URL")
    consume.add_argument("-s", "--subscription", default="perf-sub", type=utf8)
    consume.add_argument("-t", "--subscription-type", default="Exclusive",
                         choices=["Exclusive", "Shared", "Failover", "Key_Shared"])
    consume.add_argument("-q", "--receiver-queue-size", type=int32, default=1000)


def run(args: argparse.Namespace) -> int:
    """Run the load: 0, or a one-line error on stderr (2: bad arguments, before connecting)."""
    problem = _check_arguments(args)
    if problem:
        print(f"magnetar perf: {problem}", file=sys.stderr)
        return 2
    from magnetar.client.errors import PulsarException  # the client: only once used

    meter = Meter(args.perf_command, args.output)
    body = _produce(args, meter) if args.perf_command == "produce" else _consume(args, meter)
    try:
        asyncio.run(body)
    except KeyboardInterrupt:
        pass
    except (PulsarException, ValueError) as exc:
        print(f"magnetar perf: {exc}", file=sys.stderr)
        meter.final()
        return 1
    except Exception as exc:
        log.debug("perf failed", exc_info=True)
        print(f"magnetar perf: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        meter.final()
        return 1
    meter.final()
    return 0


def _check_arguments(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments (None: nothing), found before connecting."""
    from magnetar.client.pool import check_service_url

    try:
        check_service_url(args.url)
        for topic in args.topics:
            TopicName.parse(topic)
    except ValueError as exc:
        return str(exc)
    floors = [("num_messages", "--num-messages", 0), ("time", "--time", 0),
              ("rate", "--rate", 0), ("size", "--size", 0), ("batch_max_messages",
              "--batch-max-messages", 1), ("batch_max_delay_ms", "--batch-max-delay-ms", 0),
              ("max_pending", "--max-pending", 1), ("receiver_queue_size",
              "--receiver-queue-size", 1)]
    for dest, flag, floor in floors:
        value = getattr(args, dest, None)
        if value is not None and value < floor:
            return f"{flag} must be at least {floor}, not {value:g}"
    if args.stats_interval <= 0:
        return f"--stats-interval must be positive, not {args.stats_interval:g}"
    if args.perf_command == "consume" and not args.subscription:
        return "the subscription name is empty"
    return None


async def _until_done(args: argparse.Namespace, meter: Meter, stop: asyncio.Event) -> None:
    """Print a line every interval; set ``stop`` at the time limit or on a signal."""
    meter.started = meter.interval_start = time.monotonic()  # the load starts now
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    deadline = meter.started + args.time if args.time > 0 else math.inf
    while not stop.is_set():
        timeout = min(args.stats_interval, max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout)
        if time.monotonic() >= deadline:
            stop.set()
        if not stop.is_set() or meter.msgs:
            meter.line()


async def _produce(args: argparse.Namespace, meter: Meter) -> None:
    from magnetar.client import Client

    payload = b"x" * args.size
    stop = asyncio.Event()
    async with Client(args.url) as client:
        producers = [await client.create_producer(
            t, batching_enabled=not args.disable_batching,
            batching_max_messages=args.batch_max_messages,
            batching_max_publish_delay_ms=args.batch_max_delay_ms,
            max_pending_messages=args.max_pending, block_if_queue_full=True) for t in args.topics]
        reporter = asyncio.create_task(_until_done(args, meter, stop))
        pending: set[asyncio.Future[Any]] = set()

        def done(fut: asyncio.Future[Any], t0: float) -> None:
            pending.discard(fut)
            if fut.cancelled() or fut.exception() is not None:
                meter.errors += 1
            else:
                meter.record(args.size, (time.perf_counter() - t0) * 1000)
            if args.num_messages and meter.total_msgs + meter.errors >= args.num_messages:
                stop.set()

        sent = 0
        start = time.monotonic()
        while not stop.is_set() and (not args.num_messages or sent < args.num_messages):
            producer = producers[sent % len(producers)]
            t0 = time.perf_counter()
            fut = await producer.send_async(payload)
            pending.add(fut)
            fut.add_done_callback(functools.partial(done, t0=t0))
            sent += 1
            if args.rate > 0:
                ahead = start + sent / args.rate - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
            elif sent % 500 == 0:
                await asyncio.sleep(0)
        for producer in producers:
            await producer.flush()
        if pending:
            await asyncio.wait(list(pending), timeout=30)
        stop.set()
        await reporter
        for producer in producers:
            await producer.close()


async def _consume(args: argparse.Namespace, meter: Meter) -> None:
    from magnetar.client import Client, ConsumerType

    stop = asyncio.Event()
    async with Client(args.url) as client:
        consumer = await client.subscribe(
            args.topics if len(args.topics) > 1 else args.topics[0], args.subscription,
            consumer_type=ConsumerType[args.subscription_type.replace("_", "")],
            receiver_queue_size=args.receiver_queue_size)
        reporter = asyncio.create_task(_until_done(args, meter, stop))
        receiving = asyncio.ensure_future(_receive_loop(consumer, args, meter, stop))
        await stop.wait()
        receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await receiving
        await reporter
        await consumer.close()


async def _receive_loop(consumer: Any, args: argparse.Namespace, meter: Meter,
                        stop: asyncio.Event) -> None:
    while not stop.is_set():
        msg = await consumer.receive()
        latency = time.time() * 1000 - msg.publish_timestamp()
        meter.record(len(msg.data()), max(0.0, latency))
        await consumer.acknowledge(msg)
        if args.num_messages and meter.total_msgs >= args.num_messages:
            stop.set()
