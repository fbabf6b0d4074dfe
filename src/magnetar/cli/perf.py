"""``magnetar perf produce|consume``: load generation and measurement like pulsar-perf,
over Magnetar's asyncio client. A line every ``--stats-interval`` seconds (msg/s, MB/s,
latency percentiles: send-to-receipt for producers, publish-to-receive for consumers) and
a summary at the end (after ``-m`` messages, ``--time`` seconds, or Ctrl-C). With
``-txn`` (pulsar-perf's ``--txn-enable``, ``-nmt``, ``-tto``, ``-abort``) the messages are
sent, or acknowledged, in transactions of ``-nmt`` each, committed (or aborted), and the
lines count the transactions ended and failed too. ``magnetar perf transaction``
(pulsar-perf's command of that name: receive, acknowledge and send in one transaction,
over and over) is `perf_txn.py`."""

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
from collections.abc import Coroutine
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
  magnetar perf produce my-topic --time 10 --output json
  magnetar perf produce my-topic --rate 0 -m 100000 -txn -nmt 100   # in transactions of 100
  magnetar perf consume my-topic -s perf -txn -nmt 50               # acknowledged in them
  magnetar perf transaction --topics-c in --topics-p out -nmc 10 -nmp 10"""

#: pulsar-perf's defaults for ``-nmt`` and ``-tto``
TXN_MESSAGES = 50
TXN_TIMEOUT_S = 10.0

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
    #: whether the load runs in transactions (the lines count them)
    txn: bool = False
    txn_ended: int = 0
    txn_failed: int = 0
    txn_window: int = 0

    def ended_txn(self, ok: bool) -> None:
        """One transaction ended: committed (or aborted, with ``-abort``) if ``ok``, else
        its end failed."""
        if ok:
            self.txn_ended += 1
            self.txn_window += 1
        else:
            self.txn_failed += 1

    def record(self, size: int, latency_ms: float | None) -> None:
        self.msgs += 1
        self.size += size
        self.total_msgs += 1
        self.total_size += size
        if latency_ms is not None:
            self.record_latency(latency_ms)

    def record_latency(self, latency_ms: float) -> None:
        """A latency without a message of its own (a transaction's, opened to ended)."""
        self.window.record(latency_ms)
        self.overall.record(latency_ms)

    def line(self) -> None:
        now = time.monotonic()
        elapsed = max(now - self.interval_start, 1e-9)
        self._print(self.msgs / elapsed, self.size / elapsed, self.window, final=False,
                    txn_rate=self.txn_window / elapsed)
        self.msgs = self.size = self.txn_window = 0
        self.window = Histogram()
        self.interval_start = now

    def final(self) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        extra: dict[str, Any] = {"messages": self.total_msgs, "seconds": round(elapsed, 3),
                                 "errors": self.errors}
        if self.txn:
            extra |= {"txnEnded": self.txn_ended, "txnFailed": self.txn_failed}
        self._print(self.total_msgs / elapsed, self.total_size / elapsed, self.overall, final=True,
                    extra=extra, txn_rate=self.txn_ended / elapsed)

    def _print(self, rate: float, bps: float, hist: Histogram, final: bool,
               extra: dict[str, Any] | None = None, txn_rate: float = 0.0) -> None:
        lat = hist.summary()
        if self.output == "json":
            doc = {"type": "summary" if final else "interval", "msgPerSec": round(rate, 1),
                   "MBPerSec": round(bps / 1e6, 3),
                   "latencyMs": {k: round(v, 3) for k, v in lat.items()}, **(extra or {})}
            if self.txn:
                doc["txnPerSec"] = round(txn_rate, 1)
            print(json.dumps(doc), flush=True)
            return
        head = "Aggregated" if final else "Throughput"
        what = {"produce": "produced", "consume": "received"}.get(self.kind,
                                                                  "received and sent")
        txns = ""
        if self.txn:
            txns = (f" --- Transactions: {txn_rate:8,.1f} txn/s, {self.txn_ended} ended, "
                    f"{self.txn_failed} failed")
        print(f"{head} {what}: {rate:10,.1f} msg/s --- {bps / 1e6:8.3f} MB/s --- Latency ms: "
              f"mean {lat['mean']:7.3f} - med {lat['p50']:7.3f} - 95pct {lat['p95']:7.3f} - "
              f"99pct {lat['p99']:7.3f} - 99.9pct {lat['p999']:7.3f} - max {lat['max']:7.3f}"
              + txns + (f"  ({self.total_msgs} messages, {self.errors} errors)" if final else ""),
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
    shared.add_argument("-txn", "--txn-enable", action="store_true",
                        help="send (produce) or acknowledge (consume) in transactions, as "
                             "pulsar-perf does; the lines count them")
    shared.add_argument("-nmt", "--numMessage-perTransaction", dest="txn_messages", type=int32,
                        default=None, metavar="N",
                        help=f"messages a transaction (with -txn; default {TXN_MESSAGES})")
    shared.add_argument("-tto", "--txn-timeout", type=finite, default=None, metavar="SECONDS",
                        help="the coordinator aborts a transaction not ended this long after "
                             f"it opened (with -txn; default {TXN_TIMEOUT_S:g})")
    shared.add_argument("-abort", action="store_true",
                        help="abort each transaction instead of committing it (with -txn): "
                             "what it sent never becomes visible, what it acknowledged is "
                             "left unacknowledged")
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
    from magnetar.cli import perf_txn  # (it uses this module's Meter: imported once it is whole)

    perf_txn.add_parser(cmds)
    consume.add_argument("-s", "--subscription", default="perf-sub", type=utf8)
    consume.add_argument("-t", "--subscription-type", default="Exclusive",
                         choices=["Exclusive", "Shared", "Failover", "Key_Shared"])
    consume.add_argument("-q", "--receiver-queue-size", type=int32, default=1000)


def run(args: argparse.Namespace) -> int:
    """Run the load: 0, or a one-line error on stderr (2: bad arguments, before connecting)."""
    if args.perf_command == "transaction":
        from magnetar.cli import perf_txn

        return perf_txn.run(args)
    problem = _check_arguments(args)
    if problem:
        print(f"magnetar perf: {problem}", file=sys.stderr)
        return 2
    meter = Meter(args.perf_command, args.output, txn=args.txn_enable)
    return run_load(_produce(args, meter) if args.perf_command == "produce"
                    else _consume(args, meter), meter)


def run_load(body: Coroutine[Any, Any, None], meter: Meter) -> int:
    """Run the load ``body``, then print ``meter``'s summary: 0, or 1 with a one-line
    error on stderr."""
    from magnetar.client.errors import PulsarException  # the client: only once used

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


def check_common(args: argparse.Namespace, topics: list[str],
                 floors: list[tuple[str, str, float]]) -> str | None:
    """What is wrong with the service URL, a topic name, an option below its floor
    (``floors``: attribute, flag, least value; an option not given is not checked) or the
    stats interval (None: nothing)."""
    from magnetar.client.pool import check_service_url

    try:
        check_service_url(args.url)
        for topic in topics:
            TopicName.parse(topic)
    except ValueError as exc:
        return str(exc)
    for dest, flag, floor in floors:
        value = getattr(args, dest, None)
        if value is not None and value < floor:
            return f"{flag} must be at least {floor}, not {value:g}"
    if args.stats_interval <= 0:
        return f"--stats-interval must be positive, not {args.stats_interval:g}"
    return None


def check_txn_timeout(seconds: float) -> str | None:
    """What is wrong with ``-tto`` (None: nothing): at least a millisecond."""
    if not 1 <= seconds * 1000 < 2**63:
        return f"-tto must be at least 0.001 seconds, not {seconds:g}"
    return None


def _check_arguments(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments (None: nothing), found before connecting."""
    problem = check_common(args, args.topics, [
        ("num_messages", "--num-messages", 0), ("time", "--time", 0), ("rate", "--rate", 0),
        ("size", "--size", 0), ("batch_max_messages", "--batch-max-messages", 1),
        ("batch_max_delay_ms", "--batch-max-delay-ms", 0), ("max_pending", "--max-pending", 1),
        ("receiver_queue_size", "--receiver-queue-size", 1)])
    if problem:
        return problem
    if not args.txn_enable:
        for flag, given in (("-nmt", args.txn_messages is not None),
                            ("-tto", args.txn_timeout is not None), ("-abort", args.abort)):
            if given:
                return f"{flag} is an option of transactions: add -txn (--txn-enable)"
    else:
        if args.txn_messages is None:
            args.txn_messages = TXN_MESSAGES
        if args.txn_timeout is None:
            args.txn_timeout = TXN_TIMEOUT_S
        if args.txn_messages < 1:
            return f"-nmt must be at least 1, not {args.txn_messages}"
        problem = check_txn_timeout(args.txn_timeout)
        if problem:
            return problem
    if args.perf_command == "consume" and not args.subscription:
        return "the subscription name is empty"
    return None


class TxnRounds:
    """The transactions of a load run with ``-txn``: the open one takes the messages
    (sent or acknowledged in it) until it has ``-nmt`` of them; then it is ended, committed
    or aborted (``-abort``), in a task of its own while the next one takes the load (as
    pulsar-perf does), and counted in the meter when its end is answered. Acknowledgements
    are not awaited one by one (pulsar-perf's ``acknowledgeAsync``): a transaction's end
    waits for its own, and one that failed has the transaction aborted and counted as
    failed (its sends the client's transaction waits for itself)."""

    def __init__(self, client: Any, args: argparse.Namespace, meter: Meter) -> None:
        self.client = client
        self.per_txn: int = args.txn_messages
        self.timeout_ms = int(args.txn_timeout * 1000)
        self.abort: bool = args.abort
        self.meter = meter
        self.current: Any = None
        self.taken = 0  # messages in ``current``
        self.ops: list[asyncio.Future[Any]] = []  # its acknowledgements under way
        self.ending: set[asyncio.Future[None]] = set()

    async def open(self) -> Any:
        """The transaction the next message goes in (opened if there is none)."""
        if self.current is None:
            self.current = await self.client.new_transaction(timeout_ms=self.timeout_ms)
            self.taken = 0
        return self.current

    def took(self, op: asyncio.Future[Any] | None = None) -> None:
        """One more message in the open transaction (``op``: its acknowledgement under
        way): ended once it has ``-nmt``."""
        if op is not None:
            self.ops.append(op)
        self.taken += 1
        if self.taken >= self.per_txn:
            self._end()

    def _end(self) -> None:
        txn, self.current = self.current, None
        ops, self.ops = self.ops, []
        if txn is not None:
            ending = asyncio.ensure_future(self._ended(txn, ops))
            self.ending.add(ending)
            ending.add_done_callback(self.ending.discard)

    async def _ended(self, txn: Any, ops: list[asyncio.Future[Any]]) -> None:
        failed = [r for r in await asyncio.gather(*ops, return_exceptions=True)
                  if isinstance(r, BaseException)]
        try:
            if failed:
                log.info("transaction %s: %d of its acknowledgements failed (%s): aborted",
                         txn.id, len(failed), failed[0])
                await txn.abort()
            else:
                await (txn.abort() if self.abort else txn.commit())
        except Exception as exc:  # the client's error (a refused send, a timeout, ...)
            log.info("transaction %s did not end: %s", txn.id, exc)
            failed.append(exc)
        self.meter.ended_txn(not failed)

    async def finish(self) -> None:
        """End the open transaction (one with no message is aborted, not counted), then
        wait for the ends under way."""
        if self.current is not None and self.taken:
            self._end()
        elif self.current is not None:
            txn, self.current = self.current, None
            with contextlib.suppress(Exception):
                await txn.abort()
        if self.ending:
            await asyncio.wait(list(self.ending), timeout=30)


async def until_done(args: argparse.Namespace, meter: Meter, stop: asyncio.Event) -> None:
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
    async with Client(args.url, enable_transaction=args.txn_enable) as client:
        rounds = TxnRounds(client, args, meter) if args.txn_enable else None
        producers = [await client.create_producer(
            t, batching_enabled=not args.disable_batching,
            batching_max_messages=args.batch_max_messages,
            batching_max_publish_delay_ms=args.batch_max_delay_ms,
            max_pending_messages=args.max_pending, block_if_queue_full=True) for t in args.topics]
        reporter = asyncio.create_task(until_done(args, meter, stop))
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
            txn = None if rounds is None else await rounds.open()
            t0 = time.perf_counter()
            fut = await producer.send_async(payload, txn=txn)
            pending.add(fut)
            fut.add_done_callback(functools.partial(done, t0=t0))
            sent += 1
            if rounds is not None:
                rounds.took()
            if args.rate > 0:
                ahead = start + sent / args.rate - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
            elif sent % 500 == 0:
                await asyncio.sleep(0)
        for producer in producers:
            await producer.flush()
        if rounds is not None:
            await rounds.finish()
        if pending:
            await asyncio.wait(list(pending), timeout=30)
        stop.set()
        await reporter
        for producer in producers:
            await producer.close()


async def _consume(args: argparse.Namespace, meter: Meter) -> None:
    from magnetar.client import Client, ConsumerType

    stop = asyncio.Event()
    async with Client(args.url, enable_transaction=args.txn_enable) as client:
        rounds = TxnRounds(client, args, meter) if args.txn_enable else None
        consumer = await client.subscribe(
            args.topics if len(args.topics) > 1 else args.topics[0], args.subscription,
            consumer_type=ConsumerType[args.subscription_type.replace("_", "")],
            receiver_queue_size=args.receiver_queue_size)
        reporter = asyncio.create_task(until_done(args, meter, stop))
        receiving = asyncio.ensure_future(_receive_loop(consumer, args, meter, stop, rounds))
        await stop.wait()
        receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await receiving
        if rounds is not None:
            await rounds.finish()
        await reporter
        await consumer.close()


async def _receive_loop(consumer: Any, args: argparse.Namespace, meter: Meter,
                        stop: asyncio.Event, rounds: TxnRounds | None = None) -> None:
    while not stop.is_set():
        msg = await consumer.receive()
        latency = time.time() * 1000 - msg.publish_timestamp()
        meter.record(len(msg.data()), max(0.0, latency))
        if rounds is None:
            await consumer.acknowledge(msg)
        else:
            txn = await rounds.open()
            rounds.took(asyncio.ensure_future(consumer.acknowledge(msg, txn=txn)))
        if args.num_messages and meter.total_msgs >= args.num_messages:
            stop.set()
