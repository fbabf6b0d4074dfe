"""Transactions, the participant side: broker CPU per message of messages sent in
transactions (each of ``--per-txn`` messages of ``--size`` bytes, then committed) against
the same messages sent without a transaction, and the commit latency (EndTxn to its
answer: the coordinator's record changes plus the topic's marker append).

Both phases use Magnetar's asyncio client with batching off and every message of a
transaction (or of a group of the same size) in flight at once (``send_async``), against a
``magnetar standalone`` started here; the broker's CPU is its threads' time on a CPU
from ``/proc/PID/task/*/schedstat`` (nanoseconds) around each phase. The phases alternate ``--rounds`` times, and each
round uses a fresh topic, so that a slow moment of a shared machine hits both alike.

    python bench/txn_bench.py --txns 100 --per-txn 100 --size 1024 --rounds 2

``--src NAME=PATH`` (repeatable, cpu mode): run a standalone from each source tree's
``src`` directory (its PYTHONPATH; e.g. ``base=/tmp/txnperf-base/src`` from ``git archive
main src``, and ``new=src``), all started at once and measured in turn, the trees'
order alternating round by round, so that two versions are compared in one run on a
shared machine; the client is this tree's. ``--awaited-adds NAME`` (repeatable): against
that tree the client waits for each AddPartitionToTxn's answer before the transaction's
first send on the partition, as it did before it wrote that send right behind the add
(Magnetar brokers keep a connection's order), so that a base tree is measured with the
client's behaviour of its time; ``--awaited-ends NAME`` likewise has the commit wait for
the transaction's sends before its EndTxn (before the client wrote it behind them). A
transaction's sends are not awaited before its commit (the commit waits for them, or is
written behind them); a group without a transaction awaits its sends. ``--in-flight K``
(cpu mode): K producers of the topic, each sending its share of the groups in turn, so
that K transactions (or groups) are under way at once (1 by default). ``--pin``: the brokers on the last CPU and the client on
the others, so that neither migrates nor shares a CPU with the other (on 2 shared cores a
phase's CPU per message otherwise scatters up to 2x from round to round); the summary
gives the median of the rounds' own ratios too, each plain/transaction pair run back to
back.

``--mode commit-rate``: commit latency at a steady rate, open loop: a transaction starts
every ``1/--rate`` s (100/s) whether or not the earlier ones are done, sends ``--per-txn``
messages at once (5 by default in this mode), waits ``--hold-ms`` (0) and commits; p50/p99/max of
the commit (EndTxn to its answer) and the achieved rate, for ``--seconds`` per round.

``--mode reader``: a reader's publish-to-receive latency on non-transactional messages,
one every ``1/--plain-rate`` s, with no transactions running and, alternating round by
round, while a separate process commits transactions on the same topic at ``--rate``
and while it commits them on another topic, to tell the CPU the transactions take on this
small machine from what they hold back (open transactions hold back later messages: the
topic's max read position stops before the first open transaction's first entry until that
transaction ends).

    python bench/txn_bench.py --mode reader --rate 100 --per-txn 5 --seconds 20 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import magnetar
from magnetar.client.transaction import Transaction
from magnetar.testing import standalone, stop_process

if TYPE_CHECKING:
    from magnetar.client.producer import Producer


def cpu_seconds(pid: int) -> float:
    """The broker's CPU time: the sum of its threads' time on a CPU from
    ``/proc/PID/task/*/schedstat`` (nanoseconds, not 10 ms ticks; a thread that ended
    during a phase is missed, and the broker's threads live as long as it), else utime +
    stime from ``/proc/PID/stat``."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError), \
                    open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (FileNotFoundError, ValueError, IndexError):
        pass
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def adds_awaited(awaited: bool) -> Iterator[None]:
    """With ``awaited``, the client waits for each AddPartitionToTxn's answer before the
    first send behind it (`Transaction._join_now` never writes a send right behind it)."""
    if not awaited:
        yield
        return
    original = Transaction._join_now
    Transaction._join_now = lambda self, topic, cnx: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        Transaction._join_now = original  # type: ignore[method-assign]


@contextlib.contextmanager
def ends_awaited(awaited: bool) -> Iterator[None]:
    """With ``awaited``, the client's commit waits for the transaction's sends before it
    writes the EndTxn (`Transaction._ends_behind_sends` never writes it behind them)."""
    if not awaited:
        yield
        return
    original = Transaction._ends_behind_sends
    Transaction._ends_behind_sends = lambda self: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        Transaction._ends_behind_sends = original  # type: ignore[method-assign]


@contextlib.contextmanager
def client_of(name: str, args: argparse.Namespace) -> Iterator[None]:
    """The client's behaviour of tree ``name``'s time (``--awaited-adds``/``-ends``)."""
    with adds_awaited(name in args.awaited_adds), ends_awaited(name in args.awaited_ends):
        yield


async def phase(url: str, pid: int, groups: int, per_group: int, size: int,
                in_txn: bool, in_flight: int = 1,
                around: tuple[Callable[[], None], Callable[[], None]] | None = None,
                ) -> tuple[float, list[float]]:
    """(broker CPU µs per message, commit latencies in ms) of one phase. ``in_flight``:
    that many producers of the topic, each sending its share of the groups one after the
    other (so that many groups, or transactions, are under way at once). ``around``:
    called right before and right after what is measured (the client connected, the
    topic loaded and the coordinators connected before; its close after)."""
    topic = f"persistent://public/default/txn-bench-{uuid.uuid4().hex[:8]}"
    payload = b"x" * size
    commits: list[float] = []
    async with magnetar.Client(url, enable_transaction=True) as client:
        producers = [await client.create_producer(topic) for _ in range(in_flight)]
        for producer in producers:  # topic loaded, producers ready: not measured
            await producer.send(payload)
        if in_txn:  # the coordinators looked up and connected (once per client): not either
            coordinators = client._transactions()
            for tc in range(await coordinators.count()):
                await coordinators.connection(tc)

        async def send_groups(producer: Any, count: int) -> None:
            for _ in range(count):
                txn = await client.new_transaction(timeout_ms=60_000) if in_txn else None
                futures = [await producer.send_async(payload, txn=txn) for _ in range(per_group)]
                if txn is None:
                    await asyncio.gather(*futures)
                    continue
                started = time.perf_counter()
                await txn.commit()  # (which waits for the sends, or is written behind them)
                commits.append((time.perf_counter() - started) * 1000)
                if not all(f.done() and f.exception() is None for f in futures):
                    raise SystemExit("a transaction committed with a send not stored")

        shares = [groups // in_flight + (1 if i < groups % in_flight else 0)
                  for i in range(in_flight)]
        if around is not None:
            around[0]()
        before = cpu_seconds(pid)
        await asyncio.gather(*(send_groups(p, n) for p, n in zip(producers, shares, strict=True)))
        used = cpu_seconds(pid) - before
        if around is not None:
            around[1]()
    return used / (groups * per_group) * 1e6, commits


def phase_options(parser: argparse.ArgumentParser, groups: int = 50) -> None:
    """The options of a counted phase (`txn_instructions.py`, `txn_calls.py`): its
    groups, their messages and the messages' size."""
    parser.add_argument("--groups", type=int, default=groups,
                        help=f"transactions (or plain groups) a phase (default {groups})")
    parser.add_argument("--per-txn", type=int, default=100,
                        help="messages a transaction (default 100)")
    parser.add_argument("--size", type=int, default=1024, help="message size in bytes")


@contextlib.contextmanager
def tree_broker(src: str, cpu: int | None = None) -> Iterator[tuple[str, int]]:
    """A ``magnetar standalone`` run from the source tree ``src`` (its PYTHONPATH):
    ``(service URL, pid)``, stopped afterwards."""
    with tempfile.TemporaryDirectory(prefix="txn-bench-") as root:
        ready = os.path.join(root, "ready.json")
        env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
        with open(os.path.join(root, "broker.log"), "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir",
                 os.path.join(root, "data"), "--port", "0", "--http-port", "0",
                 "--bind-address", "127.0.0.1", "--ready-file", ready],
                stdout=log, stderr=log, env=env,
                preexec_fn=None if cpu is None else lambda: os.sched_setaffinity(0, {cpu}))
        try:
            deadline = time.monotonic() + 120
            while not os.path.exists(ready):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the broker from {src} did not start: see its log")
                time.sleep(0.05)
            with open(ready) as f:
                url = json.load(f)["brokerServiceUrl"].replace("localhost", "127.0.0.1")
            yield url, proc.pid
        finally:
            stop_process(proc)


def run_trees(args: argparse.Namespace) -> None:
    """cpu mode over several source trees, measured in turn in one run."""
    trees = [spec.split("=", 1) for spec in args.src]
    plain: dict[str, list[float]] = {name: [] for name, _ in trees}
    txn: dict[str, list[float]] = {name: [] for name, _ in trees}
    commits: dict[str, list[float]] = {name: [] for name, _ in trees}
    loads = []
    with contextlib.ExitStack() as stack:
        cpus = sorted(os.sched_getaffinity(0))
        broker_cpu = cpus[-1] if args.pin and len(cpus) > 1 else None
        if broker_cpu is not None:  # the client on the other CPUs: no migrations, no sharing
            os.sched_setaffinity(0, set(cpus[:-1]))
        brokers = {name: stack.enter_context(tree_broker(src, broker_cpu))
                   for name, src in trees}
        for name, (url, pid) in brokers.items():  # warm: topics, coordinators, code paths
            with client_of(name, args):
                asyncio.run(phase(url, pid, 5, args.per_txn, args.size, True))
        for i in range(args.rounds):
            order = trees if i % 2 == 0 else trees[::-1]
            for name, _ in order:
                url, pid = brokers[name]
                cpu, _ = asyncio.run(phase(url, pid, args.txns, args.per_txn, args.size, False,
                                               args.in_flight))
                plain[name].append(cpu)
                with client_of(name, args):
                    cpu, lat = asyncio.run(phase(url, pid, args.txns, args.per_txn, args.size,
                                                 True, args.in_flight))
                txn[name].append(cpu)
                commits[name] += lat
                print(f"round {i + 1} {name}: no transaction {plain[name][-1]:.1f} us/msg, "
                      f"in transactions {cpu:.1f} us/msg; load average {loadavg()}", flush=True)
                loads.append(loadavg().split()[0])
    print(f"{args.txns} transactions x {args.per_txn} messages of {args.size} B, "
          f"{args.rounds} rounds, load average (1 min) {min(loads)}-{max(loads)}")
    for name, _ in trees:
        base = statistics.median(plain[name])
        ratio = statistics.median(txn[name]) / base if base else float("nan")
        print(f"{name}: broker CPU per message, no transaction {base:.1f} us "
              f"({', '.join(f'{v:.1f}' for v in plain[name])}), in transactions "
              f"{statistics.median(txn[name]):.1f} us "
              f"({', '.join(f'{v:.1f}' for v in txn[name])}): ratio {ratio:.2f}x; "
              f"commit p50 {pct(commits[name], 0.5):.1f} ms, "
              f"p99 {pct(commits[name], 0.99):.1f} ms")
        ratios = [t / p for p, t in zip(plain[name], txn[name], strict=True) if p]
        if ratios:
            print(f"{name}: median of the rounds' own ratios (txn / plain, each pair run "
                  f"back to back) {statistics.median(ratios):.2f}x")
        extras = [t - p for p, t in zip(plain[name], txn[name], strict=True)]
        print(f"{name}: transactions' extra per message, median of the rounds' "
              f"(txn - plain) {statistics.median(extras):.1f} us "
              f"({statistics.median(extras) / base + 1:.2f}x of the plain median)")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values: list[float]) -> str:
    if not values:
        return "none"
    return (f"p50 {pct(values, 0.5):.1f} ms, p99 {pct(values, 0.99):.1f} ms, "
            f"max {max(values):.1f} ms ({len(values)})")


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


@dataclass
class RateResult:
    """What an open-loop run of transactions at a steady rate measured."""

    commits: list[float] = field(default_factory=list)  # EndTxn to its answer, ms
    lifetimes: list[float] = field(default_factory=list)  # NewTxn asked to commit done, ms
    started: int = 0
    failed: int = 0
    max_in_flight: int = 0
    elapsed: float = 0.0
    broker_cpu: float = 0.0
    client_cpu: float = 0.0  # this process's (the load's client)


async def txn_load(url: str, topic: str, rate: float, per_txn: int, size: int,
                   seconds: float, pid: int, hold_ms: float = 0.0) -> RateResult:
    """Start a transaction every ``1/rate`` s for ``seconds`` (open loop: late starts are
    not skipped, nothing waits for the earlier transactions), each sending ``per_txn``
    messages at once and committing (``hold_ms`` after its sends are acknowledged: an
    application's work between its sends and its commit)."""
    payload = b"t" * size
    out = RateResult()
    in_flight = 0

    async def one(client: magnetar.Client, producer: Producer) -> None:
        nonlocal in_flight
        in_flight += 1
        out.max_in_flight = max(out.max_in_flight, in_flight)
        opened = time.perf_counter()
        try:
            txn = await client.new_transaction(timeout_ms=60_000)
            futures = [await producer.send_async(payload, txn=txn) for _ in range(per_txn)]
            await asyncio.gather(*futures)
            if hold_ms:
                await asyncio.sleep(hold_ms / 1000)
            asked = time.perf_counter()
            await txn.commit()
            done = time.perf_counter()
            out.commits.append((done - asked) * 1000)
            out.lifetimes.append((done - opened) * 1000)
        except Exception:  # counted and reported: a bench keeps going
            out.failed += 1
        finally:
            in_flight -= 1

    async with magnetar.Client(url, enable_transaction=True) as client:
        producer = await client.create_producer(topic, max_pending_messages=100_000,
                                                block_if_queue_full=True)
        await producer.send(payload)  # topic loaded, producer ready: not measured
        warm = await client.new_transaction(timeout_ms=60_000)  # coordinators connected
        await warm.commit()
        tasks: set[asyncio.Task[None]] = set()
        before = cpu_seconds(pid)
        mine = time.process_time()
        start = time.perf_counter()
        interval = 1.0 / rate
        while True:
            due = start + out.started * interval
            if due - start >= seconds:
                break
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(client, producer))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            out.started += 1
        if tasks:
            await asyncio.gather(*tasks)
        out.elapsed = time.perf_counter() - start
        out.broker_cpu = cpu_seconds(pid) - before
        out.client_cpu = time.process_time() - mine
    return out


def print_rate(label: str, r: RateResult, rate: float, per_txn: int) -> None:
    done = len(r.commits)
    print(f"{label}: {r.started} transactions of {per_txn} started at {rate:.0f}/s, "
          f"{done} committed, {r.failed} failed in {r.elapsed:.1f} s "
          f"(achieved {done / r.elapsed:.1f} commits/s), at most {r.max_in_flight} in flight")
    print(f"  commit latency (EndTxn to answer): {summary(r.commits)}")
    print(f"  transaction lifetime (NewTxn to commit done): {summary(r.lifetimes)}")
    print(f"  broker CPU {r.broker_cpu / r.elapsed * 100:.0f}% of a core, the load's client "
          f"{r.client_cpu / r.elapsed * 100:.0f}%; load average {loadavg()}")


def run_commit_rate(args: argparse.Namespace) -> None:
    with standalone() as broker:
        for i in range(args.rounds):
            topic = f"persistent://public/default/txn-rate-{uuid.uuid4().hex[:8]}"
            r = asyncio.run(txn_load(broker.service_url, topic, args.rate, args.per_txn,
                                     args.size, args.seconds, broker.process.pid,
                                     args.hold_ms))
            print_rate(f"round {i + 1}", r, args.rate, args.per_txn)


def load_child(url: str, topic: str, rate: float, per_txn: int, size: int, seconds: float,
               pid: int, hold_ms: float, results: multiprocessing.Queue[RateResult]) -> None:
    results.put(asyncio.run(txn_load(url, topic, rate, per_txn, size, seconds, pid,
                                     hold_ms)))


STAMP = struct.Struct("<1sd")  # b"P", the send time (perf_counter)


async def reader_latency(url: str, topic: str, plain_rate: float, size: int, seconds: float,
                         ready: asyncio.Event | None = None,
                         go: asyncio.Future[None] | None = None) -> list[float]:
    """Publish one non-transactional message every ``1/plain_rate`` s (open loop), its
    send time inside; a reader on the same topic notes when each arrives (ms). The
    reader also receives the transactions' committed messages (on the same topic): it
    reads them and skips them."""
    latencies: list[float] = []
    pad = b"p" * max(0, size - STAMP.size)
    async with magnetar.Client(url) as client:
        producer = await client.create_producer(topic, max_pending_messages=100_000,
                                                block_if_queue_full=True)
        await producer.send(STAMP.pack(b"P", 0.0) + pad)  # topic loaded: not measured
        reader = await client.create_reader(topic, magnetar.MessageId.latest,
                                            receiver_queue_size=10_000)
        count = int(seconds * plain_rate)

        async def read() -> None:
            while len(latencies) < count:
                data = (await reader.read_next()).data()
                if data[:1] == b"P":
                    sent = STAMP.unpack_from(data)[1]
                    latencies.append((time.perf_counter() - sent) * 1000)

        reading = asyncio.create_task(read())
        start = time.perf_counter()
        sends = []
        for i in range(count):
            delay = start + i / plain_rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sends.append(await producer.send_async(STAMP.pack(b"P", time.perf_counter()) + pad))
        await asyncio.gather(*sends)
        try:
            await asyncio.wait_for(reading, timeout=120)
        except TimeoutError:
            print(f"  reader: {len(latencies)} of {count} received within 120 s")
    return latencies


def new_topic() -> str:
    return f"persistent://public/default/txn-reader-{uuid.uuid4().hex[:8]}"


VARIANTS = {
    "none": "no transactions",
    "other": "transactions on another topic",
    "same": "transactions on the reader's topic",
}


def run_reader(args: argparse.Namespace) -> None:
    """Per round, three phases on fresh topics: the plain stream and its reader alone;
    with the transactions on another topic (the same CPU load, nothing held back); with
    them on the reader's topic."""
    ctx = multiprocessing.get_context("spawn")
    lats: dict[str, list[float]] = {k: [] for k in VARIANTS}
    with standalone() as broker:
        url, pid = broker.service_url, broker.process.pid
        for i in range(args.rounds):
            for variant, label in VARIANTS.items():
                topic = new_topic()
                child = None
                if variant != "none":
                    results: multiprocessing.Queue[RateResult] = ctx.Queue()
                    # the transactions run on both sides of the plain stream
                    child = ctx.Process(target=load_child, args=(
                        url, topic if variant == "same" else new_topic(), args.rate,
                        args.per_txn, args.size, args.seconds + 5, pid, args.hold_ms,
                        results))
                    child.start()
                    time.sleep(2.5)  # the load's client connects and reaches its rate first
                lat = asyncio.run(reader_latency(url, topic, args.plain_rate, args.size,
                                                 args.seconds))
                lats[variant] += lat
                print(f"round {i + 1}, {label}: reader latency {summary(lat)}; "
                      f"load average {loadavg()}")
                if child is not None:
                    r = results.get(timeout=300)
                    child.join(timeout=60)
                    print_rate("  the transactions", r, args.rate, args.per_txn)
    print(f"reader publish-to-receive latency, {args.plain_rate:.0f} msg/s of {args.size} B, "
          f"{args.rounds} rounds, transactions of {args.per_txn} at {args.rate:.0f}/s"
          f"{f', held {args.hold_ms:.0f} ms before commit' if args.hold_ms else ''}:")
    for variant, label in VARIANTS.items():
        print(f"  {label + ':':36} {summary(lats[variant])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["cpu", "commit-rate", "reader"], default="cpu",
                        help="cpu: CPU per message and commits one at a time (default); "
                        "commit-rate: commit latency at --rate; reader: a reader's latency "
                        "with and without transactions at --rate on its topic")
    parser.add_argument("--txns", type=int, default=100, help="transactions per phase (cpu)")
    parser.add_argument("--per-txn", type=int, default=None,
                        help="messages per transaction (100 in cpu mode, else 5)")
    parser.add_argument("--size", type=int, default=1024, help="bytes per message")
    parser.add_argument("--in-flight", type=int, default=1, metavar="K",
                        help="cpu mode: K producers of the topic, each sending its share of "
                        "the groups in turn, so K groups (or transactions) are under way at "
                        "once (default 1: one at a time)")
    parser.add_argument("--rounds", type=int, default=2, help="plain/txn phase pairs")
    parser.add_argument("--rate", type=float, default=100.0,
                        help="transactions started per second (commit-rate, reader)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="seconds per round (commit-rate, reader)")
    parser.add_argument("--hold-ms", type=float, default=0.0,
                        help="ms a transaction waits between its sends and its commit "
                        "(commit-rate, reader)")
    parser.add_argument("--src", action="append", default=[],
                        help="NAME=PATH of a source tree's src directory to run the broker "
                        "from (repeat to compare trees in one run; cpu mode)")
    parser.add_argument("--pin", action="store_true",
                        help="with --src: the brokers on the last CPU, this process (the "
                        "client) on the others (less scatter from migrations and sharing)")
    parser.add_argument("--awaited-adds", action="append", default=[], metavar="NAME",
                        help="against tree NAME the client awaits each AddPartitionToTxn "
                        "before the send behind it (the client before it wrote the send "
                        "right behind the add); repeatable")
    parser.add_argument("--awaited-ends", action="append", default=[], metavar="NAME",
                        help="against tree NAME the client's commit waits for the "
                        "transaction's sends before its EndTxn (the client before it wrote "
                        "the commit right behind them); repeatable")
    parser.add_argument("--plain-rate", type=float, default=100.0,
                        help="non-transactional messages per second (reader)")
    args = parser.parse_args()
    if args.per_txn is None:
        args.per_txn = 100 if args.mode == "cpu" else 5
    if args.mode == "commit-rate":
        run_commit_rate(args)
        return
    if args.mode == "reader":
        run_reader(args)
        return
    if args.src:
        run_trees(args)
        return
    plain: list[float] = []
    txn: list[float] = []
    commits: list[float] = []
    with standalone() as broker:
        pid = broker.process.pid
        for _ in range(args.rounds):
            cpu, _ = asyncio.run(phase(broker.service_url, pid, args.txns, args.per_txn,
                                       args.size, False, args.in_flight))
            plain.append(cpu)
            cpu, lat = asyncio.run(phase(broker.service_url, pid, args.txns, args.per_txn,
                                         args.size, True, args.in_flight))
            txn.append(cpu)
            commits += lat
    base = statistics.median(plain)
    # a phase shorter than a clock tick (10 ms) may measure no CPU at all
    ratio = f"{statistics.median(txn) / base:.2f}x" if base else "n/a (phases too short)"
    print(f"{args.txns} transactions x {args.per_txn} messages of {args.size} B, "
          f"{args.rounds} rounds")
    print(f"broker CPU per message, no transaction: {statistics.median(plain):.1f} us "
          f"(rounds: {', '.join(f'{v:.1f}' for v in plain)})")
    print(f"broker CPU per message, in transactions: {statistics.median(txn):.1f} us "
          f"(rounds: {', '.join(f'{v:.1f}' for v in txn)}); ratio {ratio} "
          "(the transactions' NewTxn, AddPartitionToTxn and EndTxn included)")
    print(f"commit latency: p50 {pct(commits, 0.5):.1f} ms, p99 {pct(commits, 0.99):.1f} ms "
          f"({len(commits)} commits, {args.in_flight} under way at once)")


if __name__ == "__main__":
    main()
