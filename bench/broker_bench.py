#!/usr/bin/env python3
"""Broker benchmark: drive any Pulsar-protocol broker with the official client.

Three phases run against one broker (each on its own fresh topic, except that the
consume phase reads back the topic the produce phase wrote):

  latency   unbatched synchronous ``send`` of 1 KB messages, one at a time
  produce   batched ``send_async`` of 1 KB messages (no callback by default), then flush
  consume   Exclusive subscription from Earliest over the produced topic,
            ``receive`` + ``acknowledge`` for every message
  catchup   (opt-in, ``--catchup-bytes``) a backlog produced, made uncached (broker
            restarted on its data, page cache dropped), then consumed as above

Around each phase the broker's CPU time is read from ``/proc/<pid>/stat`` so the tool
can report broker CPU microseconds per message. ``--compare`` starts Magnetar and
pulsar-lite in turn on free ports with fresh data dirs and prints them side by side.
Run with ``--help`` for the meaning of every figure.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime
import json
import math
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import floors  # bench/floors.py, beside this script

REPO = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
BROKERS = ("magnetar", "pulsar-lite")
BATCH_BYTES = 128 * 1024  # the produce phase's batch size limit

DESCRIPTION = """\
Benchmark a Pulsar-protocol broker with the official pulsar-client (C++ core).

Three ways to run it:

  python bench/broker_bench.py --url pulsar://127.0.0.1:6650 --broker-pid PID
      an already running broker; PID is optional (without it no CPU figures)
  python bench/broker_bench.py --compare [--markdown]
      starts Magnetar, then pulsar-lite, each on a free port with a fresh temp data
      dir, runs the same phases against each and prints a side-by-side table
  python bench/broker_bench.py --broker pulsar-lite
      starts just one of them and benchmarks it

Phases, in the order they run, each on a fresh topic (latency first, on an idle
broker). All messages are --size bytes, 1 KB by default; the first 8 bytes carry a
sequence number that the consume phase checks:

  latency  A producer with batching DISABLED calls the blocking send() --latency-count
           times (after --latency-warmup untimed sends). Each call is timed on the
           client: it covers the client encoding, the broker persisting the message
           (whatever its durability policy is) and the SendReceipt coming back.
           Figures: p50 / p99 / max in milliseconds (nearest-rank percentiles).
  produce  A producer with batching ENABLED (up to 1000 messages or 128 KB per batch,
           10 ms max delay) calls send_async(), blocking when its --max-pending queue
           is full, for --messages messages or until --duration seconds have passed,
           whichever comes first; then flush(). With --produce-callback none (the
           default) no Python callback runs per message, so the client's own Python
           work does not cap the rate as much (with a callback the official client
           tops out near 20k msg/s on one core, far below either broker); figure:
           messages sent / seconds from the first send to the end of flush() (flush
           returns once every message is acknowledged). With --produce-callback count,
           acknowledged messages / seconds to the last acknowledgement.
  consume  Subscribes to the produce topic (Exclusive, initial position Earliest,
           receiver queue 1000) and loops receive() + acknowledge() until it has every
           message the produce phase got acked, or --consume-timeout. Figure: distinct
           messages received / seconds from subscribe to the last new one. Duplicate
           deliveries and out-of-order arrivals are acknowledged, not counted, and
           reported as notes.
  catchup  Only with --catchup-bytes (e.g. 1G; off by default, so the default run stays
           short), last, on its own topic: produces that many bytes of --size messages
           batched as in the produce phase (no callback, then flush()), then makes the
           backlog UNCACHED: the broker is stopped (SIGTERM, waiting for it to exit),
           every file under its data dir is fsync'ed and dropped from the OS page cache
           (os.sync(), then posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) on each file),
           and the broker is started again on the same data dir (Magnetar: --data-dir;
           pulsar-lite: --db-path), so neither its in-process caches nor the page cache
           hold the backlog. Then one consumer (new client; Exclusive, Earliest, receiver
           queue 1000) receives + acknowledges every message as the consume phase does
           (--catchup-timeout). Figures: distinct messages / seconds from subscribe to the
           last new one, MB/s of payload, broker CPU us/msg (from the restarted process,
           sampled after it accepts connections), and the bytes the broker read from the
           block device in the phase (read_bytes of /proc/PID/io: about the backlog's
           size when it really was uncached). Needs a broker this tool started.

Per phase, the broker's CPU is read from /proc/<pid>/stat (utime + stime, plus reaped
children's cutime + cstime, plus any live descendants) before and after, divided by
SC_CLK_TCK ({tck} ticks/s here):
  cpu us/msg   broker CPU microseconds spent per message of that phase; the 'after'
               reading is taken once the phase's work is acknowledged (after flush() for
               produce, after the consumer is closed so its acks are in), so deferred
               background work (compaction, syncing) can land in a later phase
  cores        broker CPU seconds / wall seconds: how many cores it kept busy
  peak RSS     VmHWM of the broker process at the end of the run (self-started or
               --broker-pid brokers only)
The client runs in this process and shares the machine: 'client cores' says how busy
it was, so you can tell when the client, not the broker, is the bottleneck.

Floors (--compare and --broker runs), measured on the machine and disk of the run before
the brokers start, so a figure can say what bounds it:
  fsync floor       one 1 KB write + fdatasync in a loop: the CPU of the sync alone
  request floors    bench/floors.py: a blocking one-thread server, no event loop, reads
                    fixed-size requests over loopback TCP into one reused buffer, appends
                    each to a file, fdatasyncs (or not) and sends a 48 B reply: the
                    unbatched send floor (1 KB requests, one in flight) and the batched
                    produce floor (128 KB requests, 4 in flight, with and without a sync
                    per request). Each broker's CPU per message is given as a multiple of
                    them; what a broker spends above a floor is its own work.

Ratios in --compare are magnetar / pulsar-lite: above 1 is better for msgs/s, below 1
is better for latency, CPU and memory.

Brokers started by --compare / --broker:
  magnetar     MAGNETAR_CMD standalone --data-dir DIR --port P --http-port 0 [--magnetar-arg ...]
               (the `magnetar` on PATH, else this checkout's src/ via the interpreter),
               with its default durability settings; give flags to change them as
               --magnetar-arg=--some-flag. Skipped with a message if it does not accept
               TCP connections within --ready-timeout seconds or exits early.
  pulsar-lite  its packaged binary with --config (metrics HTTP endpoint disabled, log level
               warn) --addr 127.0.0.1:P --db-path DIR/db. It has no fsync/durability
               setting: it appends entries to its log with write() and acknowledges
               without fsync (page-cache durability), so it is compared as it ships.
Readiness is a bounded poll of a TCP connect. Brokers are stopped (SIGTERM, then
SIGKILL) on exit, Ctrl-C or error, and their temp dirs removed (unless --keep-data).
Progress goes to stderr every --progress seconds; results go to stdout.
""".replace("{tck}", str(CLK_TCK))


# ---------------------------------------------------------------------------
# /proc probes


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    return data[data.rindex(b")") + 2 :].split()


def _descendants(pid: int) -> list[int]:
    """Live descendants of pid, by scanning /proc (only at phase boundaries)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is None:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out.extend(kids)
        todo.extend(kids)
    return out


class CpuProbe:
    """CPU seconds consumed so far by a broker process and its descendants."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid

    def sample(self) -> float | None:
        if self.pid is None:
            return None
        fields = _stat_fields(self.pid)
        if fields is None:
            return None
        # after the split, index 0 is field 3 (state): utime=14, stime=15,
        # cutime=16, cstime=17 are indexes 11..14.
        ticks = sum(int(x) for x in fields[11:15])
        for child in _descendants(self.pid):
            cf = _stat_fields(child)
            if cf is not None:
                ticks += int(cf[11]) + int(cf[12])
        return ticks / CLK_TCK

    def peak_rss_mib(self) -> float | None:
        if self.pid is None:
            return None
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None


def _client_cpu() -> float:
    t = os.times()
    return t.user + t.system


# ---------------------------------------------------------------------------
# results


@dataclass
class PhaseResult:
    phase: str
    topic: str = ""
    messages: int = 0
    seconds: float = 0.0
    rate: float | None = None
    broker_cpu_s: float | None = None
    cpu_us_per_msg: float | None = None
    broker_cores: float | None = None
    client_cores: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    failed: int = 0
    duplicates: int = 0
    mb_per_s: float | None = None
    disk_read_mib: float | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    def finish(self, n: int, secs: float, cpu0: float | None, cpu1: float | None,
               ccpu0: float, ccpu1: float) -> None:
        self.messages = n
        self.seconds = secs
        self.rate = n / secs if secs > 0 and n else None
        if cpu0 is not None and cpu1 is not None:
            self.broker_cpu_s = cpu1 - cpu0
            if n:
                self.cpu_us_per_msg = self.broker_cpu_s * 1e6 / n
            if secs > 0:
                self.broker_cores = self.broker_cpu_s / secs
        if secs > 0:
            self.client_cores = (ccpu1 - ccpu0) / secs
            if self.client_cores >= 0.9 and (self.broker_cores or 0) < 0.9:
                self.notes.append(
                    f"client-bound: this client kept {self.client_cores:.2f} cores busy "
                    "(its Python loop runs on one), the broker less")


@dataclass
class BrokerRun:
    name: str
    url: str = ""
    pid: int | None = None
    command: str = ""
    skipped: str | None = None
    phases: dict[str, PhaseResult] = field(default_factory=dict)
    peak_rss_mib: float | None = None


# ---------------------------------------------------------------------------
# progress


class Progress:
    def __init__(self, label: str, phase: str, interval: float) -> None:
        self.prefix = f"  [{label}] {phase:<8}"
        self.interval = interval
        self.t0 = time.perf_counter()
        self.next = self.t0 + interval

    def due(self, now: float) -> bool:
        if now >= self.next:
            self.next = now + self.interval
            return True
        return False

    def say(self, text: str) -> None:
        elapsed = time.perf_counter() - self.t0
        print(f"{self.prefix} {elapsed:6.1f}s  {text}", file=sys.stderr, flush=True)


def _fmt_int(x: float) -> str:
    return f"{x:,.0f}"


# ---------------------------------------------------------------------------
# phases


def _percentile(sorted_vals: list[int], pct: float) -> float:
    """Nearest-rank percentile of a sorted list."""
    idx = max(0, math.ceil(pct / 100 * len(sorted_vals)) - 1)
    return sorted_vals[idx]


def _payload(seq: int, filler: bytes) -> bytes:
    return seq.to_bytes(8, "big") + filler


def phase_latency(pulsar: Any, client: Any, topic: str, args: argparse.Namespace,
                  probe: CpuProbe, label: str) -> PhaseResult:
    res = PhaseResult("latency", topic)
    filler = os.urandom(args.size - 8)
    producer = client.create_producer(
        topic, batching_enabled=False, send_timeout_millis=args.send_timeout * 1000,
        block_if_queue_full=True)
    try:
        for i in range(args.latency_warmup):
            producer.send(_payload(i, filler))
        prog = Progress(label, "latency", args.progress)
        lat: list[int] = []
        consecutive_errors = 0
        cpu0, ccpu0 = probe.sample(), _client_cpu()
        t0 = time.perf_counter()
        deadline = t0 + args.latency_timeout
        for i in range(args.latency_count):
            start = time.perf_counter_ns()
            try:
                producer.send(_payload(i, filler))
            except Exception as exc:  # a pulsar.* error for this send
                res.failed += 1
                consecutive_errors += 1
                if consecutive_errors >= 10:
                    res.notes.append(f"stopped after 10 consecutive send errors ({exc!r})")
                    break
                continue
            consecutive_errors = 0
            lat.append(time.perf_counter_ns() - start)
            now = time.perf_counter()
            if now >= deadline:
                res.notes.append(f"stopped at --latency-timeout {args.latency_timeout}s")
                break
            if prog.due(now):
                s = sorted(lat)
                prog.say(f"sent {len(lat):,}  p50 {_percentile(s, 50) / 1e6:.3f} ms  "
                         f"p99 {_percentile(s, 99) / 1e6:.3f} ms")
        t1 = time.perf_counter()
        cpu1, ccpu1 = probe.sample(), _client_cpu()
        res.finish(len(lat), t1 - t0, cpu0, cpu1, ccpu0, ccpu1)
        if lat:
            s = sorted(lat)
            res.p50_ms = _percentile(s, 50) / 1e6
            res.p99_ms = _percentile(s, 99) / 1e6
            res.max_ms = s[-1] / 1e6
            prog.say(f"done: {len(lat):,} sends  p50 {res.p50_ms:.3f} ms  "
                     f"p99 {res.p99_ms:.3f} ms  max {res.max_ms:.3f} ms")
    finally:
        with contextlib.suppress(Exception):
            producer.close()
    return res


class _AckCounter:
    """send_async callback target. Must never raise: the client aborts the process if it does."""

    def __init__(self, ok_result: Any) -> None:
        self.ok_result = ok_result
        self.lock = threading.Lock()
        self.ok = 0
        self.failed = 0
        self.first_error: str | None = None
        self.last_ack = 0.0

    def __call__(self, result: Any, _msg_id: Any) -> None:
        try:
            now = time.perf_counter()
            with self.lock:
                if result == self.ok_result:
                    self.ok += 1
                else:
                    self.failed += 1
                    if self.first_error is None:
                        self.first_error = str(result)
                self.last_ack = now
        except BaseException:  # pragma: no cover - never let it reach the client
            pass

    @property
    def done(self) -> int:
        return self.ok + self.failed


def phase_produce(pulsar: Any, client: Any, topic: str, args: argparse.Namespace,
                  probe: CpuProbe, label: str) -> PhaseResult:
    res = PhaseResult("produce", topic)
    filler = os.urandom(args.size - 8)
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        batching_max_allowed_size_in_bytes=BATCH_BYTES,
        batching_max_publish_delay_ms=10,
        max_pending_messages=args.max_pending,
        block_if_queue_full=True,
        send_timeout_millis=args.send_timeout * 1000,
    )
    counting = args.produce_callback == "count"
    acks = _AckCounter(pulsar.Result.Ok)
    callback = acks if counting else None
    prog = Progress(label, "produce", args.progress)
    try:
        cpu0, ccpu0 = probe.sample(), _client_cpu()
        t0 = time.perf_counter()
        send_deadline = t0 + args.duration
        last_report, last_acked = t0, 0
        sent = 0
        while sent < args.messages:
            producer.send_async(_payload(sent, filler), callback)
            sent += 1
            if sent & 127 == 0:
                now = time.perf_counter()
                if now >= send_deadline:
                    res.notes.append(f"sending stopped at --duration {args.duration}s")
                    break
                if prog.due(now):
                    done = acks.ok if counting else sent
                    rate = (done - last_acked) / (now - last_report)
                    prog.say(f"sent {sent:,}  {'acked ' + format(done, ',') if counting else ''}"
                             f"  {_fmt_int(rate)} msg/s")
                    last_report, last_acked = now, done
        flushed = True
        try:
            producer.flush()
        except Exception as exc:
            flushed = False
            res.notes.append(f"flush: {exc!r}")
        if not counting:
            t1 = time.perf_counter()
            cpu1, ccpu1 = probe.sample(), _client_cpu()
            res.finish(sent if flushed else 0, t1 - t0, cpu0, cpu1, ccpu0, ccpu1)
            res.failed = 0 if flushed else sent
            prog.say(f"done: {sent:,} sent and flushed in {res.seconds:.2f}s  "
                     f"{_fmt_int(res.rate or 0)} msg/s")
            return res
        # flush() returns once everything is acknowledged; callbacks may trail a little.
        wait_deadline = time.perf_counter() + args.send_timeout + 5
        while acks.done < sent and time.perf_counter() < wait_deadline:
            time.sleep(0.01)
        t1 = acks.last_ack if acks.done else time.perf_counter()
        cpu1, ccpu1 = probe.sample(), _client_cpu()
        res.finish(acks.ok, t1 - t0, cpu0, cpu1, ccpu0, ccpu1)
        res.failed = acks.failed + (sent - acks.done)
        if acks.failed:
            res.notes.append(f"{acks.failed:,} sends failed, first: {acks.first_error}")
        if sent - acks.done:
            res.notes.append(f"{sent - acks.done:,} sends never called back")
        prog.say(f"done: {acks.ok:,} acked in {res.seconds:.2f}s  "
                 f"{_fmt_int(res.rate or 0)} msg/s")
    finally:
        with contextlib.suppress(Exception):
            producer.close()
    return res


def phase_consume(pulsar: Any, client: Any, topic: str, produced: PhaseResult,
                  args: argparse.Namespace, probe: CpuProbe, label: str,
                  name: str = "consume") -> PhaseResult:
    """Read back the produce topic until every acknowledged sequence number was seen once.

    The rate counts distinct messages; redeliveries are counted and reported apart.
    """
    expected = produced.messages
    sent = produced.messages + produced.failed  # sequence numbers handed out
    seen = bytearray(sent)
    res = PhaseResult(name, topic)
    prog = Progress(label, name, args.progress)
    cpu0, ccpu0 = probe.sample(), _client_cpu()
    t0 = time.perf_counter()
    consumer = client.subscribe(
        topic,
        f"bench-{uuid.uuid4().hex[:8]}",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=1000,
    )
    received = 0  # distinct messages
    duplicates = 0
    out_of_order = 0
    foreign = 0
    max_seq = -1
    deadline = t0 + args.consume_timeout
    last_report, last_received = t0, 0
    t1 = t0
    try:
        while received < expected:
            now = time.perf_counter()
            if now >= deadline:
                res.notes.append(f"stopped at --consume-timeout {args.consume_timeout}s "
                                 f"with {expected - received:,} messages missing")
                break
            if prog.due(now):
                rate = (received - last_received) / (now - last_report)
                prog.say(f"received {received:,}/{expected:,}  {_fmt_int(rate)} msg/s")
                last_report, last_received = now, received
            try:
                msg = consumer.receive(timeout_millis=int(min(1000, (deadline - now) * 1000)) + 1)
            except pulsar.Timeout:
                continue
            data = msg.data()
            consumer.acknowledge(msg)
            seq = int.from_bytes(data[:8], "big") if len(data) == args.size else -1
            if not 0 <= seq < sent:
                foreign += 1
                continue
            if seen[seq]:
                duplicates += 1
                continue
            seen[seq] = 1
            if seq < max_seq:
                out_of_order += 1
            else:
                max_seq = seq
            received += 1
            t1 = time.perf_counter()
    finally:
        with contextlib.suppress(Exception):
            consumer.close()  # also flushes the grouped acknowledgements
    cpu1, ccpu1 = probe.sample(), _client_cpu()
    res.finish(received, t1 - t0, cpu0, cpu1, ccpu0, ccpu1)
    res.failed = expected - received
    res.duplicates = duplicates
    if duplicates:
        res.notes.append(f"{duplicates:,} duplicate deliveries (redelivered messages, "
                         "not counted in the rate)")
        if res.broker_cpu_s is not None:
            res.notes.append(f"broker CPU per delivered message, duplicates included: "
                             f"{res.broker_cpu_s * 1e6 / (received + duplicates):.2f} us "
                             "(the row's figure divides by distinct messages)")
    if out_of_order:
        res.notes.append(f"{out_of_order:,} messages arrived after a later sequence number")
    if foreign:
        res.notes.append(f"{foreign:,} messages that the produce phase did not send")
    prog.say(f"done: {received:,} received in {res.seconds:.2f}s  "
             f"{_fmt_int(res.rate or 0)} msg/s")
    return res


def _read_bytes(pid: int | None) -> int | None:
    """Bytes the process (all its threads) had the block layer read for it so far."""
    if pid is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return None


def evict_page_cache(root: Path) -> tuple[int, int]:
    """Drop every file under ``root`` from the OS page cache: ``os.sync()``, then per file
    fsync and ``posix_fadvise(POSIX_FADV_DONTNEED)`` (clean pages only are dropped, hence
    the sync first). Returns (files, bytes). Call it while no process writes there."""
    os.sync()
    files = size = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                if not os.path.isfile(path):
                    continue
                with contextlib.suppress(OSError):
                    os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                files += 1
                size += os.fstat(fd).st_size
            finally:
                os.close(fd)
    return files, size


#: restart(evict) -> (url, pid) of the broker started again on the same data, or raises
Restarter = Any


def phase_catchup(pulsar: Any, run: BrokerRun, topic: str, args: argparse.Namespace,
                  restart: Restarter, log_file: Path) -> PhaseResult:
    """Produce --catchup-bytes, make them uncached (restart + page cache dropped), then
    consume them all with one consumer."""
    count = max(1, args.catchup_bytes // args.size)
    pargs = argparse.Namespace(**vars(args))
    pargs.messages, pargs.duration = count, 1e9
    cargs = argparse.Namespace(**vars(args))
    cargs.consume_timeout = args.catchup_timeout

    def new_client(url: str) -> Any:
        return pulsar.Client(url, operation_timeout_seconds=args.op_timeout,
                             connection_timeout_ms=10_000,
                             logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(log_file)))

    client = new_client(run.url)
    try:
        produced = phase_produce(pulsar, client, topic, pargs, CpuProbe(run.pid), run.name)
    finally:
        with contextlib.suppress(Exception):
            client.close()
    if not produced.messages:
        return PhaseResult("catchup", topic, error="the backlog could not be produced")
    if run.pid is not None:
        rss = CpuProbe(run.pid).peak_rss_mib()
        if rss is not None:
            run.peak_rss_mib = max(run.peak_rss_mib or 0.0, rss)
    t0 = time.perf_counter()
    url, pid, files, nbytes = restart()
    run.url, run.pid = url, pid
    print(f"  [{run.name}] catchup  backlog of {produced.messages:,} msgs made uncached: "
          f"{files} files / {nbytes / 2**20:,.0f} MiB evicted, broker restarted "
          f"(pid {pid}) in {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    probe = CpuProbe(pid)
    client = new_client(url)
    try:
        io0 = _read_bytes(pid)
        res = phase_consume(pulsar, client, topic, produced, cargs, probe, run.name, "catchup")
        io1 = _read_bytes(pid)
    finally:
        with contextlib.suppress(Exception):
            client.close()
    if res.rate:
        res.mb_per_s = res.rate * args.size / 1e6
    if io0 is not None and io1 is not None:
        res.disk_read_mib = (io1 - io0) / 2**20
        res.notes.append(f"broker read {res.disk_read_mib:,.0f} MiB from the block device "
                         f"in the phase (backlog: {produced.messages * args.size / 2**20:,.0f} "
                         "MiB of payload)")
    res.notes.append(f"backlog produced at {_fmt_int(produced.rate or 0)} msg/s "
                     f"({produced.messages:,} msgs); files evicted: {files}, "
                     f"{nbytes / 2**20:,.0f} MiB")
    return res


def run_suite(run: BrokerRun, args: argparse.Namespace, log_dir: Path,
              restart: Restarter | None = None) -> None:
    """Run the selected phases against run.url, filling run.phases."""
    import pulsar

    probe = CpuProbe(run.pid)
    log_file = log_dir / f"client-{run.name}.log"
    client = pulsar.Client(
        run.url,
        operation_timeout_seconds=args.op_timeout,
        connection_timeout_ms=10_000,
        logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(log_file)),
    )
    tag = f"{datetime.datetime.now():%H%M%S}-{uuid.uuid4().hex[:6]}"
    ns = args.namespace.strip("/")
    topic_lat = f"persistent://{ns}/bench-{tag}-latency"
    topic_prod = f"persistent://{ns}/bench-{tag}-produce"
    topic_catch = f"persistent://{ns}/bench-{tag}-catchup"

    def attempt(name: str, fn: Any, *fargs: Any) -> PhaseResult:
        try:
            return fn(pulsar, client, *fargs, args, probe, run.name)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            print(f"  [{run.name}] {name}: FAILED: {exc!r} (client log: {log_file})",
                  file=sys.stderr, flush=True)
            return PhaseResult(name, error=repr(exc))

    try:
        if "latency" in args.phases:
            run.phases["latency"] = attempt("latency", phase_latency, topic_lat)
        if "produce" in args.phases or "consume" in args.phases:
            prod = attempt("produce", phase_produce, topic_prod)
            run.phases["produce"] = prod
            if "consume" in args.phases:
                if prod.messages:
                    run.phases["consume"] = attempt("consume", phase_consume, topic_prod, prod)
                else:
                    run.phases["consume"] = PhaseResult("consume", error="nothing was produced")
    finally:
        run.peak_rss_mib = probe.peak_rss_mib()
        with contextlib.suppress(Exception):
            client.close()
    if "catchup" not in args.phases:
        return
    if restart is None:
        run.phases["catchup"] = PhaseResult(
            "catchup", error="needs a broker started by this tool (--compare / --broker)")
        return
    try:
        run.phases["catchup"] = phase_catchup(pulsar, run, topic_catch, args, restart, log_file)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        print(f"  [{run.name}] catchup: FAILED: {exc!r} (client log: {log_file})",
              file=sys.stderr, flush=True)
        run.phases["catchup"] = PhaseResult("catchup", error=repr(exc))
    rss = CpuProbe(run.pid).peak_rss_mib()
    if rss is not None:
        run.peak_rss_mib = max(run.peak_rss_mib or 0.0, rss)


# ---------------------------------------------------------------------------
# starting and stopping brokers

_LIVE: list[subprocess.Popen] = []


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the broker's process group (it leads its own session), then SIGKILL."""
    if proc.poll() is None:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    else:
        # the leader is gone; make sure nothing it spawned in its group lingers
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if proc in _LIVE:
        _LIVE.remove(proc)


def _stop_all() -> None:
    for proc in list(_LIVE):
        _stop(proc)


def _on_sigterm(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tcp_ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _log_tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return "\n".join("      | " + line for line in text)


def _launch(name: str, argv: list[str], workdir: Path, port: int, timeout: float,
            env: dict[str, str] | None = None) -> tuple[subprocess.Popen | None, str]:
    """Start a broker and poll a TCP connect until it listens. (proc, '') or (None, reason)."""
    log_path = workdir / "broker.log"
    print(f"[{name}] starting: {shlex.join(argv)}", file=sys.stderr, flush=True)
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except OSError as exc:
            return None, f"could not be started: {exc}"
    _LIVE.append(proc)
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            reason = f"exited with code {proc.returncode} before accepting connections"
            break
        if _tcp_ready(port):
            print(f"[{name}] accepting connections on port {port} after "
                  f"{time.monotonic() - t0:.2f}s (pid {proc.pid})", file=sys.stderr, flush=True)
            return proc, ""
        if time.monotonic() - t0 > timeout:
            reason = f"did not accept TCP connections on port {port} within {timeout:.0f}s"
            break
        time.sleep(0.1)
    _stop(proc)
    tail = _log_tail(log_path)
    return None, reason + (f"; last lines of its log:\n{tail}" if tail else "")


def _magnetar_argv(args: argparse.Namespace, data_dir: Path, port: int) -> tuple[list[str], dict]:
    env = dict(os.environ)
    if args.magnetar_cmd:
        base = shlex.split(args.magnetar_cmd)
    elif shutil.which("magnetar"):
        base = [shutil.which("magnetar") or "magnetar"]
    else:
        # not installed: run this checkout's code with the current interpreter
        base = [sys.executable, "-c",
                "import sys; from magnetar.cli.main import main; sys.exit(main())"]
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "src"), env.get("PYTHONPATH", "")) if p)
    argv = [*base, "standalone", "--data-dir", str(data_dir), "--port", str(port),
            "--http-port", "0", *args.magnetar_arg]
    return argv, env


def _pulsar_lite_binary(args: argparse.Namespace) -> str | None:
    if args.pulsar_lite_bin:
        return args.pulsar_lite_bin
    try:
        import pulsar_lite
    except ImportError:
        return shutil.which("pulsar-lite")
    binary = Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"
    return str(binary) if binary.is_file() else shutil.which("pulsar-lite")


PULSAR_LITE_TOML = """\
# written by bench/broker_bench.py
# pulsar-lite has no fsync/durability knob: it appends to its entry log with write()
# and acknowledges without fsync. Unknown or ill-typed keys make it silently fall back
# to its defaults, so keep this file minimal.
log_level = "warn"

[metrics]
# its default is an HTTP endpoint on 0.0.0.0:8080; the Magnetar side runs --http-port 0
enabled = false
"""


def start_broker(name: str, args: argparse.Namespace, workdir: Path
                 ) -> tuple[subprocess.Popen | None, str, str]:
    """Start a named broker in workdir. Returns (proc, url, skip_reason)."""
    port = _free_port()
    if name == "magnetar":
        data_dir = workdir / "data"
        data_dir.mkdir(exist_ok=True)  # exists when restarted on the same data
        argv, env = _magnetar_argv(args, data_dir, port)
    else:
        binary = _pulsar_lite_binary(args)
        if not binary:
            return None, "", "binary not found (pip install pulsar-lite, or --pulsar-lite-bin)"
        config = workdir / "pulsar-lite.toml"
        config.write_text(PULSAR_LITE_TOML)
        argv = [binary, "--config", str(config), "--addr", f"127.0.0.1:{port}",
                "--db-path", str(workdir / "db"), "--log-level", "warn"]
        env = None
    proc, reason = _launch(name, argv, workdir, port, args.ready_timeout, env)
    return proc, f"pulsar://127.0.0.1:{port}", reason


def bench_started_broker(name: str, args: argparse.Namespace, root: Path) -> BrokerRun:
    workdir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    run = BrokerRun(name)
    proc, url, reason = start_broker(name, args, workdir)
    if proc is None:
        run.skipped = reason
        print(f"[{name}] SKIPPED: {reason}", file=sys.stderr, flush=True)
        return run
    run.url, run.pid, run.command = url, proc.pid, shlex.join(proc.args)  # type: ignore[arg-type]

    def restart() -> tuple[str, int, int, int]:
        """Stop the broker, drop its data files from the page cache, start it again on the
        same data dir (a new free port)."""
        nonlocal proc
        assert proc is not None
        _stop(proc)
        files, nbytes = evict_page_cache(workdir / ("data" if name == "magnetar" else "db"))
        if name != "magnetar":  # pulsar-lite may keep siblings of its --db-path
            for sibling in workdir.glob("db.*"):
                f, b = evict_page_cache(sibling)
                files, nbytes = files + f, nbytes + b
        os.replace(workdir / "broker.log", workdir / "broker-before-restart.log")
        new, new_url, why = start_broker(name, args, workdir)
        if new is None:
            raise RuntimeError(f"restart failed: {why}")
        proc = new
        return new_url, new.pid, files, nbytes

    try:
        run_suite(run, args, workdir, restart)
    finally:
        if proc.poll() is not None:
            print(f"[{name}] broker exited with code {proc.returncode} during the run; "
                  f"log: {workdir / 'broker.log'}", file=sys.stderr, flush=True)
        _stop(proc)
        if not args.keep_data:
            shutil.rmtree(workdir / "data", ignore_errors=True)
            shutil.rmtree(workdir / "db", ignore_errors=True)
            shutil.rmtree(workdir / "db.rocksdb", ignore_errors=True)
    return run


# ---------------------------------------------------------------------------
# the floors (bench/floors.py)


def measure_request_floors(directory: Path, size: int) -> list[floors.RequestFloor]:
    """The blocking reference server (``floors.py``) with the latency phase's requests and
    with the produce phase's batches (with and without a sync per batch)."""
    per_batch = max(1, BATCH_BYTES // (size + 24))  # ~ messages per produce-phase batch
    return [
        floors.measure_request_floor(directory, "unbatched send floor", size + 60, 1000),
        floors.measure_request_floor(directory, "batched produce floor", BATCH_BYTES, 1500,
                                     per_batch, window=4),
        floors.measure_request_floor(directory, "batched produce floor without sync",
                                     BATCH_BYTES, 1500, per_batch, window=4, fsync=False),
    ]


def describe_request_floors(found: list[floors.RequestFloor], runs: list[BrokerRun]) -> str:
    lines = [floors.describe(f) for f in found]
    by_label = {f.label: f for f in found}
    for run in runs:
        for phase, label in (("latency", "unbatched send floor"), ("produce", "batched produce floor"),
                             ("produce", "batched produce floor without sync")):
            res = run.phases.get(phase)
            floor = by_label.get(label)
            if floor is None or res is None or res.error or not res.cpu_us_per_msg:
                continue
            lines.append(f"  {run.name} {phase} broker CPU per message = "
                         f"{res.cpu_us_per_msg / floor.cpu_us_per_msg:.2f}x the {label}")
    return "\n".join(lines)


def describe_floor(floor: floors.FsyncFloor, runs: list[BrokerRun]) -> str:
    line = (f"fsync floor: one {floor.size:,} B write + fdatasync in the data dirs' file system "
            f"costs {floor.cpu_us:.0f} us of CPU ({floor.wall_us:.0f} us wall, median of "
            f"{floor.count})")
    for run in runs:
        res = run.phases.get("latency")
        if run.name == "magnetar" and res is not None and not res.error and res.cpu_us_per_msg:
            line += (f"; magnetar's broker CPU per unbatched send is "
                     f"{res.cpu_us_per_msg / floor.cpu_us:.2f}x that floor")
    return line


# ---------------------------------------------------------------------------
# reporting

# (label, phase ("" = the run itself), attribute, number format)
ROWS: list[tuple[str, str, str, str]] = [
    ("produce msgs/s (batched async, 1 KB)", "produce", "rate", "int"),
    ("produce broker CPU us/msg", "produce", "cpu_us_per_msg", "f1"),
    ("consume msgs/s (receive + ack)", "consume", "rate", "int"),
    ("consume broker CPU us/msg", "consume", "cpu_us_per_msg", "f1"),
    ("consume duplicate deliveries", "consume", "duplicates", "int"),
    ("catch-up msgs/s (uncached backlog)", "catchup", "rate", "int"),
    ("catch-up MB/s (payload)", "catchup", "mb_per_s", "f1"),
    ("catch-up broker CPU us/msg", "catchup", "cpu_us_per_msg", "f2"),
    ("send latency p50 ms (unbatched, sync)", "latency", "p50_ms", "f3"),
    ("send latency p99 ms", "latency", "p99_ms", "f3"),
    ("latency broker CPU us/msg", "latency", "cpu_us_per_msg", "f1"),
    ("broker peak RSS MiB", "", "peak_rss_mib", "f1"),
]


def _value(run: BrokerRun, phase: str, attr: str) -> float | None:
    if run.skipped:
        return None
    if not phase:
        return getattr(run, attr)
    res = run.phases.get(phase)
    return None if res is None or res.error else getattr(res, attr)


def _fmt(v: float | None, kind: str) -> str:
    if v is None:
        return "n/a"
    if kind == "int":
        return _fmt_int(v)
    return f"{v:.{kind[1]}f}"


def _cell(run: BrokerRun, phase: str, attr: str, kind: str) -> str:
    if run.skipped:
        return "skipped"
    res = run.phases.get(phase) if phase else None
    if res is not None and res.error:
        return "failed"
    return _fmt(_value(run, phase, attr), kind)


def build_table(runs: list[BrokerRun]) -> tuple[list[str], list[list[str]]]:
    header = ["figure", *(r.name for r in runs)]
    ratio = len(runs) == 2
    if ratio:
        header.append(f"ratio {runs[0].name}/{runs[1].name}")
    rows = []
    for label, phase, attr, kind in ROWS:
        if phase and not any(phase in r.phases for r in runs):
            continue  # a phase this run left out (catchup without --catchup-bytes)
        row = [label, *(_cell(r, phase, attr, kind) for r in runs)]
        if ratio:
            a, b = (_value(r, phase, attr) for r in runs)
            row.append(f"{a / b:.2f}x" if a is not None and b else "n/a")
        rows.append(row)
    return header, rows


def render_plain(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for n, row in enumerate([header, *rows]):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:],
                                                                          strict=True)]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _versions() -> str:
    from importlib import metadata

    parts = []
    for dist in ("pulsar-client", "pulsar-lite"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            parts.append(f"{dist} {metadata.version(dist)}")
    return ", ".join(parts)


def _machine() -> str:
    model = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} x {model}, Python {platform.python_version()}, {_versions()}"


def describe_run(run: BrokerRun) -> str:
    if run.skipped:
        return f"{run.name}: skipped: {run.skipped}"
    out = [f"{run.name}: {run.url}" + (f" (pid {run.pid})" if run.pid else " (no pid: no CPU)")]
    if run.command:
        out.append(f"  command: {run.command}")
    for name in ("latency", "produce", "consume", "catchup"):
        res = run.phases.get(name)
        if res is None:
            continue
        if res.error:
            out.append(f"  {name:<8} FAILED: {res.error}")
            continue
        bits = [f"{res.messages:,} msgs in {res.seconds:.2f}s", f"{_fmt(res.rate, 'int')} msg/s",
                f"broker CPU {_fmt(res.cpu_us_per_msg, 'f1')} us/msg "
                f"({_fmt(res.broker_cores, 'f2')} cores)",
                f"client {_fmt(res.client_cores, 'f2')} cores"]
        if res.mb_per_s is not None:
            bits.insert(2, f"{res.mb_per_s:.1f} MB/s")
        if name == "latency":
            bits.insert(2, f"p50 {_fmt(res.p50_ms, 'f3')} / p99 {_fmt(res.p99_ms, 'f3')} / "
                           f"max {_fmt(res.max_ms, 'f3')} ms")
        out.append(f"  {name:<8} " + ", ".join(bits))
        out.extend(f"           note: {n}" for n in res.notes)
    return "\n".join(out)


def report(runs: list[BrokerRun], args: argparse.Namespace, floor: floors.FsyncFloor | None,
           request_floors: list[floors.RequestFloor] | None = None) -> None:
    header, rows = build_table(runs)
    print()
    for run in runs:
        print(describe_run(run))
    print()
    print(render_plain(header, rows))
    if floor is not None:
        print("\n" + describe_floor(floor, runs))
    if request_floors:
        print("\n" + describe_request_floors(request_floors, runs))
    fsync = "group (default)"
    for arg in args.magnetar_arg:
        if arg.startswith("--fsync"):
            fsync = arg.partition("=")[2] or arg
    setup = (f"{args.size} B messages; produce: up to {args.messages:,} msgs / {args.duration:g}s, "
             f"callback {args.produce_callback}; latency: {args.latency_count:,} sends; "
             f"magnetar fsync: {fsync}; machine: {_machine()}")
    if "catchup" in args.phases:
        setup += (f"; catch-up: {args.catchup_bytes / 2**20:,.0f} MiB backlog, broker restarted "
                  "and its data files dropped from the page cache before consuming")
    print(f"\n{setup}")
    if args.markdown:
        print("\n" + render_markdown(header, rows))
        extra = ""
        if any(r.name == "pulsar-lite" and not r.skipped for r in runs):
            extra = " pulsar-lite: no fsync (it has no setting for it); metrics endpoint off."
        print(f"\n<sub>{datetime.date.today().isoformat()}, {setup}.{extra}</sub>")
    if args.json:
        payload = {"setup": setup, "runs": [asdict(r) for r in runs],
                   "fsync_floor": asdict(floor) if floor is not None else None,
                   "request_floors": [asdict(f) for f in request_floors or []]}
        Path(args.json).write_text(json.dumps(payload, indent=2))
        print(f"\nresults written to {args.json}", file=sys.stderr)


# ---------------------------------------------------------------------------
# CLI


def _size(text: str) -> int:
    """A byte count: a number with an optional K, M or G suffix (powers of 1024)."""
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(value)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="broker_bench.py", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_argument_group("what to benchmark (default: --url)")
    mode.add_argument("--url", default="pulsar://127.0.0.1:6650",
                      help="broker service URL of a running broker (default %(default)s)")
    mode.add_argument("--broker-pid", type=int,
                      help="pid of that broker, for the CPU figures (from /proc/PID/stat)")
    mode.add_argument("--label", default="broker",
                      help="column name for that broker in the table (default %(default)s)")
    mode.add_argument("--compare", action="store_true",
                      help="start magnetar then pulsar-lite in turn and compare them")
    mode.add_argument("--broker", choices=BROKERS,
                      help="start just this broker (fresh temp dir, free port) and benchmark it")
    load = p.add_argument_group("load")
    load.add_argument("--messages", type=int, default=200_000,
                      help="produce phase: messages to send (default %(default)s)")
    load.add_argument("--duration", type=float, default=20.0,
                      help="produce phase: stop sending after this many seconds even if "
                           "--messages is not reached (default %(default)s)")
    load.add_argument("--size", type=int, default=1024,
                      help="message payload bytes, >= 8 (default %(default)s)")
    load.add_argument("--produce-callback", choices=("none", "count"), default="none",
                      help="produce phase: send_async with no callback (default; the "
                           "client is then less of a bottleneck) or with a counting one")
    load.add_argument("--max-pending", type=int, default=5000,
                      help="produce phase: producer max_pending_messages (default %(default)s)")
    load.add_argument("--consume-timeout", type=float, default=40.0,
                      help="consume phase: give up after this many seconds (default %(default)s)")
    load.add_argument("--catchup-bytes", type=_size, default=0, metavar="SIZE",
                      help="run the catchup phase with a backlog of SIZE bytes of "
                           "--size messages (e.g. 1G, 300M; default 0: no catchup phase)")
    load.add_argument("--catchup-timeout", type=float, default=600.0,
                      help="catchup phase: give up consuming after this many seconds "
                           "(default %(default)s)")
    load.add_argument("--phases", default="latency,produce,consume",
                      help="comma-separated phases to run, of latency, produce, consume "
                           "(consume implies produce) and catchup (default %(default)s; "
                           "--catchup-bytes adds catchup)")
    load.add_argument("--latency-count", type=int, default=2000,
                      help="latency phase: timed synchronous sends (default %(default)s)")
    load.add_argument("--latency-warmup", type=int, default=20,
                      help="latency phase: untimed sends first (default %(default)s)")
    load.add_argument("--latency-timeout", type=float, default=20.0,
                      help="latency phase: give up after this many seconds (default %(default)s)")
    load.add_argument("--send-timeout", type=int, default=30,
                      help="client send timeout in seconds (default %(default)s)")
    load.add_argument("--op-timeout", type=int, default=15,
                      help="client operation timeout (lookup, create producer/consumer) "
                           "in seconds (default %(default)s)")
    load.add_argument("--namespace", default="public/default",
                      help="namespace for the bench topics (default %(default)s)")
    brokers = p.add_argument_group("brokers started by --compare / --broker")
    brokers.add_argument("--ready-timeout", type=float, default=30.0,
                         help="seconds to wait for a started broker to accept TCP "
                              "connections before skipping it (default %(default)s)")
    brokers.add_argument("--magnetar-cmd",
                         help="command that runs magnetar (default: `magnetar` on PATH, "
                              "else this checkout's src/ with the current interpreter)")
    brokers.add_argument("--magnetar-arg", action="append", default=[], metavar="ARG",
                         help="extra argument for `magnetar standalone`, repeatable; write flags as "
                              "--magnetar-arg=--flag")
    brokers.add_argument("--pulsar-lite-bin",
                         help="pulsar-lite binary (default: the one in the pulsar_lite package)")
    brokers.add_argument("--keep-data", action="store_true",
                         help="keep the brokers' temp data dirs and logs")
    out = p.add_argument_group("output")
    out.add_argument("--markdown", action="store_true",
                     help="also print the table as Markdown, for the README")
    out.add_argument("--json", metavar="FILE", help="also write every figure as JSON to FILE")
    out.add_argument("--progress", type=float, default=3.0,
                     help="seconds between progress lines on stderr (default %(default)s)")
    args = p.parse_args(argv)
    phases = {x.strip() for x in args.phases.split(",") if x.strip()}
    unknown = phases - {"latency", "produce", "consume", "catchup"}
    if unknown:
        p.error(f"unknown phases: {', '.join(sorted(unknown))}")
    if args.catchup_bytes > 0:
        phases.add("catchup")
    elif "catchup" in phases:
        p.error("the catchup phase needs --catchup-bytes")
    args.phases = phases
    if args.size < 8:
        p.error("--size must be at least 8 (the sequence number)")
    if args.compare and args.broker:
        p.error("--compare and --broker are exclusive")
    if (args.compare or args.broker) and args.broker_pid:
        p.error("--broker-pid is for --url; started brokers are measured automatically")
    for name in ("messages", "latency_count", "max_pending"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import pulsar  # noqa: F401
    except ImportError:
        print("pulsar-client is not installed: pip install 'pulsar-client==3.13.0'",
              file=sys.stderr)
        return 2
    atexit.register(_stop_all)
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGHUP, _on_sigterm)
    root = Path(tempfile.mkdtemp(prefix="broker-bench-"))
    runs: list[BrokerRun] = []
    floor = None
    request_floors: list[floors.RequestFloor] = []
    try:
        if args.compare or args.broker:
            floor = floors.measure_fsync_floor(root, args.size + 100)  # ~ a 1 KB message's entry
            request_floors = measure_request_floors(root, args.size)
            for name in (BROKERS if args.compare else (args.broker,)):
                runs.append(bench_started_broker(name, args, root))
        else:
            if args.broker_pid and _stat_fields(args.broker_pid) is None:
                print(f"no process {args.broker_pid}", file=sys.stderr)
                return 2
            host_port = args.url.split("://", 1)[-1].rstrip("/")
            host, _, port = host_port.rpartition(":")
            try:
                socket.create_connection((host or "127.0.0.1", int(port or 6650)),
                                         timeout=5).close()
            except (OSError, ValueError) as exc:
                print(f"cannot connect to {args.url}: {exc}", file=sys.stderr)
                return 2
            run = BrokerRun(args.label, url=args.url, pid=args.broker_pid)
            run_suite(run, args, root)
            runs.append(run)
    except KeyboardInterrupt:
        print("\ninterrupted: stopping brokers", file=sys.stderr)
        _stop_all()
        return 130
    finally:
        _stop_all()
        broke = any(p.error for r in runs for p in r.phases.values())
        if args.keep_data or broke:
            print(f"client/broker logs kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    report(runs, args, floor, request_floors)
    ok = all(not r.skipped and all(not p.error for p in r.phases.values()) for r in runs)
    return 0 if ok or args.compare else 1


if __name__ == "__main__":
    sys.exit(main())
