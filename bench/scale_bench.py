#!/usr/bin/env python3
"""Scale benchmark: many topics and subscriptions on one `magnetar standalone` broker.

Starts the broker as a subprocess, creates --topics topics (one message each) and
--subscriptions durable subscriptions with the official client, and reports what the
broker process pays for them: open file descriptors, resident memory per topic, creation
time; then restarts the broker on the same data and checks that the topics, their
messages and the subscriptions are all still there. Run with ``--help`` for details.
"""

from __future__ import annotations

import argparse
import atexit
import concurrent.futures
import contextlib
import json
import logging
import os
import random
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

DESCRIPTION = """\
Measure how one Magnetar broker copes with many topics and subscriptions.

What it does, in order (each phase has a count and the whole run a time limit):

  1. start   `magnetar standalone --data-dir TMP/data --port FREE --http-port 0
             --config TMP/broker.conf` (the conf only holds the options you set
             below) and wait until it accepts TCP connections. Baseline: the
             broker's open descriptors (entries of /proc/PID/fd) and resident
             memory (VmRSS in /proc/PID/status) before any topic exists.
  2. topics  for each of --topics topics persistent://NAMESPACE/scale-N: create a
             producer (batching off), send one message ("scale message N"), close
             the producer. One pulsar.Client is shared; --concurrency threads run
             these in parallel (the client's calls release the GIL). Progress on
             stderr every few seconds: topics done, rate, broker fds and RSS.
  3. subs    --subscriptions durable subscriptions "scale-sub-J", spread evenly
             over the topics (initial position Earliest, so each has the topic's
             message in its backlog), each subscribed and closed at once.
  4. loaded  broker fds and RSS right after; RSS per topic = (RSS - baseline) / topics.
  5. idle    with --idle-wait S, wait up to S seconds (polling fds/RSS every second)
             to let an idle-unload policy (magnetarTopicUnloadIdleSeconds, set with
             --unload-idle) act, then measure again.
     With --second-wave, then create as many NEW topics again (scale-w2-N) and
             report the RSS growth per new topic: after unloading, Python keeps the
             freed memory for reuse rather than returning it to the OS, so this
             growth (not the RSS after the idle wait) shows what unloading saved.
  6. restart stop the broker with SIGTERM (shutdown time), start it again on the same
             data dir (startup time = process start to accepting connections), then
             on --samples random topics subscribe a NEW subscription from Earliest and
             check the topic's message arrives (first-use latency of a stored topic),
             and on --samples random stored subscriptions re-subscribe by name with
             initial position Latest: the message still arrives only because the
             subscription's durable cursor survived (a new one would start after it).
             Then fds/RSS once more, and, after the final stop, the number of topics
             and cursors found in the data dir's SQLite stores.

Figures: creation time and rate for topics and subscriptions; fds and RSS at baseline,
loaded, idle and after restart; RSS per topic; shutdown, startup and first-use times;
sample results. --json FILE also writes them as JSON.

Examples:
  python bench/scale_bench.py                          # 10,000 topics, 2,000 subs
  python bench/scale_bench.py --topics 1000 --subscriptions 200
  python bench/scale_bench.py --max-open-files 64 --unload-idle 5 --idle-wait 30
  python bench/scale_bench.py --magnetar-arg=--fsync=never

The broker is stopped on exit, Ctrl-C, error or when --timeout runs out; its log is
TMP/broker.log (kept with --keep-data, like the data dir).
"""


# ---------------------------------------------------------------------------
# the broker process


class Broker:
    """One `magnetar standalone` subprocess in its own process group."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.conf = workdir / "broker.conf"
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        lines = ["# written by bench/scale_bench.py"]
        if args.max_open_files is not None:
            lines.append(f"magnetarMaxOpenFiles={args.max_open_files}")
        if args.unload_idle is not None:
            lines.append(f"magnetarTopicUnloadIdleSeconds={args.unload_idle}")
        self.conf.write_text("\n".join(lines) + "\n")

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def argv(self) -> tuple[list[str], dict[str, str]]:
        env = dict(os.environ)
        if self.args.magnetar_cmd:
            base = shlex.split(self.args.magnetar_cmd)
        elif shutil.which("magnetar"):
            base = [shutil.which("magnetar") or "magnetar"]
        else:  # not installed: this checkout's code with the current interpreter
            base = [sys.executable, "-c",
                    "import sys; from magnetar.cli.main import main; sys.exit(main())"]
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(REPO / "src"), env.get("PYTHONPATH", "")) if p)
        argv = [*base, "standalone", "--data-dir", str(self.data_dir), "--port",
                str(self.port), "--http-port", "0", "--bind-address", "127.0.0.1",
                "--config", str(self.conf), *self.args.magnetar_arg]
        return argv, env

    def start(self) -> float:
        """Start and wait until it accepts connections; returns the seconds that took."""
        argv, env = self.argv()
        log(f"starting: {shlex.join(argv)}")
        t0 = time.monotonic()
        with open(self.workdir / "broker.log", "ab") as out:
            self.proc = subprocess.Popen(argv, cwd=self.workdir, env=env,
                                         stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        _LIVE.append(self)
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"broker exited with code {self.proc.returncode} before "
                                 f"accepting connections; log:\n{self.log_tail()}")
            if _tcp_ready(self.port):
                took = time.monotonic() - t0
                log(f"broker pid {self.proc.pid} accepts connections after {took:.2f}s")
                return took
            if time.monotonic() - t0 > self.args.ready_timeout:
                self.stop()
                raise SystemExit(f"broker did not accept connections within "
                                 f"{self.args.ready_timeout}s; log:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> float:
        """SIGTERM (then SIGKILL after 60 s); returns the seconds until it exited."""
        proc = self.proc
        t0 = time.monotonic()
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    log(f"broker did not exit {wait}s after signal {sig}")
        if self in _LIVE:
            _LIVE.remove(self)
        return time.monotonic() - t0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def fds(self) -> int:
        assert self.proc is not None
        try:
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except OSError:
            return -1

    def fd_kinds(self) -> dict[str, int]:
        """Open descriptors by kind: segment files, sqlite, sockets, other."""
        assert self.proc is not None
        kinds: dict[str, int] = {}
        fd_dir = f"/proc/{self.proc.pid}/fd"
        with contextlib.suppress(OSError):
            for name in os.listdir(fd_dir):
                try:
                    target = os.readlink(f"{fd_dir}/{name}")
                except OSError:
                    continue
                if target.endswith((".seg", ".idx")):
                    kind = "segments"
                elif ".db" in target:
                    kind = "sqlite"
                elif target.startswith("socket:"):
                    kind = "sockets"
                else:
                    kind = "other"
                kinds[kind] = kinds.get(kind, 0) + 1
        return kinds

    def rss_mib(self) -> float:
        assert self.proc is not None
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return -1.0

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = (self.workdir / "broker.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join("  | " + line for line in text[-lines:])


_LIVE: list[Broker] = []


def _stop_all() -> None:
    for broker in list(_LIVE):
        broker.stop()


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


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# client work


def make_client(url: str, args: argparse.Namespace) -> Any:
    import pulsar

    logger = logging.getLogger("pulsar")
    logger.setLevel(logging.WARNING)
    return pulsar.Client(url, operation_timeout_seconds=args.op_timeout,
                         io_threads=2, logger=logger)


def run_parallel(label: str, items: list[Any], work: Callable[[Any], None],
                 args: argparse.Namespace, broker: Broker) -> tuple[float, int]:
    """Run ``work`` on every item with --concurrency threads, with progress lines.
    Returns (seconds, failures); stops early when the deadline passes."""
    done = failed = 0
    first_error = ""
    lock = threading.Lock()
    t0 = time.monotonic()

    def wrapped(item: Any) -> None:
        nonlocal done, failed, first_error
        try:
            work(item)
            ok = True
        except Exception as exc:  # counted and reported, the run goes on
            ok = False
            err = f"{type(exc).__name__}: {exc}"
        with lock:
            done += 1
            if not ok:
                failed += 1
                if not first_error:
                    first_error = err
                    log(f"{label}: first failure on {item!r}: {err}")

    it = iter(items)
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        running: set[concurrent.futures.Future[None]] = set()
        next_report = t0 + args.progress
        exhausted = False
        while running or not exhausted:
            while not exhausted and len(running) < args.concurrency * 2:
                item = next(it, None)
                if item is None:
                    exhausted = True
                    break
                running.add(pool.submit(wrapped, item))
            if running:
                _, running = concurrent.futures.wait(
                    running, timeout=0.5, return_when=concurrent.futures.FIRST_COMPLETED)
            now = time.monotonic()
            if now >= next_report:
                next_report = now + args.progress
                rate = done / (now - t0)
                log(f"{label}: {done}/{len(items)} ({rate:.0f}/s, {failed} failed), "
                    f"broker fds {broker.fds()}, RSS {broker.rss_mib():.0f} MiB")
            if now > DEADLINE[0]:
                log(f"{label}: --timeout reached, stopping this phase")
                exhausted = True
                for fut in running:
                    fut.cancel()
                concurrent.futures.wait(running, timeout=args.op_timeout * 3)
                running = set()
            if not broker.alive():
                raise SystemExit(f"broker died during {label}; log:\n{broker.log_tail()}")
    took = time.monotonic() - t0
    log(f"{label}: {done}/{len(items)} in {took:.1f}s ({done / took:.0f}/s), {failed} failed")
    return took, failed


def topic_name(args: argparse.Namespace, i: int) -> str:
    return f"persistent://{args.namespace}/scale-{i}"


def payload(i: int) -> bytes:
    return b"scale message %d" % i


def sub_topic(args: argparse.Namespace, j: int) -> int:
    """The topic index subscription j lives on (spread evenly over the topics)."""
    return (j * args.topics) // max(1, args.subscriptions) if args.subscriptions <= args.topics \
        else j % args.topics


def check_topics(client: Any, args: argparse.Namespace, indexes: Iterable[int]) -> dict[str, Any]:
    """Read each sampled topic's message with a fresh Earliest subscription."""
    import pulsar

    ok = 0
    worst = 0.0
    failures = []
    for i in indexes:
        t0 = time.monotonic()
        try:
            consumer = client.subscribe(topic_name(args, i), f"scale-check-{i}",
                                        initial_position=pulsar.InitialPosition.Earliest)
            try:
                msg = consumer.receive(timeout_millis=args.op_timeout * 1000)
                if msg.data() != payload(i):
                    raise ValueError(f"got {msg.data()!r}")
                consumer.acknowledge(msg)
            finally:
                consumer.unsubscribe()
                consumer.close()
            ok += 1
        except Exception as exc:
            failures.append(f"topic {i}: {type(exc).__name__}: {exc}")
        worst = max(worst, time.monotonic() - t0)
    return {"checked": ok + len(failures), "ok": ok, "failures": failures[:5],
            "slowest_s": round(worst, 3)}


def check_subscriptions(client: Any, args: argparse.Namespace,
                        subs: Iterable[int]) -> dict[str, Any]:
    """Re-subscribe stored subscriptions from Latest: their backlog must still be there."""
    import pulsar

    ok = 0
    failures = []
    for j in subs:
        i = sub_topic(args, j)
        try:
            consumer = client.subscribe(topic_name(args, i), f"scale-sub-{j}",
                                        initial_position=pulsar.InitialPosition.Latest)
            try:
                msg = consumer.receive(timeout_millis=args.op_timeout * 1000)
                if msg.data() != payload(i):
                    raise ValueError(f"got {msg.data()!r}")
            finally:
                consumer.close()
            ok += 1
        except Exception as exc:
            failures.append(f"subscription {j} on topic {i}: {type(exc).__name__}: {exc}")
    return {"checked": ok + len(failures), "ok": ok, "failures": failures[:5]}


def stored_counts(data_dir: Path) -> dict[str, int]:
    """Topics and cursors recorded in the (stopped) broker's SQLite stores."""
    out: dict[str, int] = {}
    for db, key, prefix in (("metadata.db", "topics", "topics/"),
                            ("storage.db", "ledgers", "ledger/"),
                            ("storage.db", "cursors", "cursor/")):
        path = data_dir / db
        if not path.exists():
            continue
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
                (n,) = con.execute("SELECT count(*) FROM kv WHERE key >= ? AND key < ?",
                                   (prefix, prefix + "\U0010ffff")).fetchone()
            out[key] = int(n)
        except sqlite3.Error as exc:
            log(f"could not count {key} in {path}: {exc}")
    return out


def snapshot(broker: Broker, baseline: dict[str, float], topics: int) -> dict[str, Any]:
    fds, rss = broker.fds(), broker.rss_mib()
    per_topic_kib = (rss - baseline["rss_mib"]) * 1024 / topics if topics else 0.0
    return {"fds": fds, "fd_kinds": broker.fd_kinds(), "rss_mib": round(rss, 1),
            "rss_per_topic_kib": round(per_topic_kib, 2)}


# ---------------------------------------------------------------------------
# the run

DEADLINE = [float("inf")]


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import pulsar

    rng = random.Random(args.seed)
    result: dict[str, Any] = {"topics": args.topics, "subscriptions": args.subscriptions,
                              "concurrency": args.concurrency,
                              "max_open_files": args.max_open_files,
                              "unload_idle_s": args.unload_idle}
    broker = Broker(args, workdir)
    result["startup_s"] = round(broker.start(), 3)
    baseline = {"fds": broker.fds(), "rss_mib": broker.rss_mib()}
    result["baseline"] = {"fds": baseline["fds"], "rss_mib": round(baseline["rss_mib"], 1),
                          "fd_kinds": broker.fd_kinds()}
    log(f"baseline: {baseline['fds']} fds, RSS {baseline['rss_mib']:.1f} MiB")

    client = make_client(broker.url, args)
    try:
        def make_topic(i: int) -> None:
            producer = client.create_producer(topic_name(args, i), batching_enabled=False,
                                              send_timeout_millis=args.op_timeout * 1000)
            try:
                producer.send(payload(i))
            finally:
                producer.close()

        took, failed = run_parallel("topics", list(range(args.topics)), make_topic, args, broker)
        result["create_topics"] = {"seconds": round(took, 2), "failed": failed,
                                   "per_second": round(args.topics / took, 1)}

        def make_sub(j: int) -> None:
            consumer = client.subscribe(topic_name(args, sub_topic(args, j)), f"scale-sub-{j}",
                                        initial_position=pulsar.InitialPosition.Earliest,
                                        receiver_queue_size=1)
            consumer.close()

        took, failed = run_parallel("subscriptions", list(range(args.subscriptions)),
                                    make_sub, args, broker)
        result["create_subscriptions"] = {
            "seconds": round(took, 2), "failed": failed,
            "per_second": round(args.subscriptions / took, 1) if took else 0.0}
    finally:
        client.close()

    result["loaded"] = snapshot(broker, baseline, args.topics)
    log(f"after creation: {result['loaded']}")
    if args.idle_wait > 0:
        log(f"waiting up to {args.idle_wait}s for idle topics to be unloaded")
        end = time.monotonic() + args.idle_wait
        fds = broker.fds()
        while time.monotonic() < end:
            time.sleep(1.0)
            now_fds = broker.fds()
            if args.unload_idle is not None and now_fds <= baseline["fds"] + 2 and now_fds == fds:
                break
            fds = now_fds
        result["idle"] = snapshot(broker, baseline, args.topics)
        log(f"idle: {result['idle']}")
    if args.second_wave:
        # as many new topics again: how much more memory do they take than the first wave?
        client = make_client(broker.url, args)
        try:
            def make_topic2(i: int) -> None:
                producer = client.create_producer(f"persistent://{args.namespace}/scale-w2-{i}",
                                                  batching_enabled=False)
                try:
                    producer.send(b"second wave %d" % i)
                finally:
                    producer.close()

            took, failed = run_parallel("second wave", list(range(args.topics)), make_topic2,
                                        args, broker)
        finally:
            client.close()
        wave = snapshot(broker, baseline, args.topics)
        before = result.get("idle", result["loaded"])["rss_mib"]
        wave["seconds"] = round(took, 2)
        wave["failed"] = failed
        wave["growth_per_topic_kib"] = round((wave["rss_mib"] - before) * 1024 / args.topics, 2)
        result["second_wave"] = wave
        log(f"second wave: {wave}")

    # restart
    result["shutdown_s"] = round(broker.stop(), 3)
    log(f"broker stopped in {result['shutdown_s']:.2f}s; restarting on the same data")
    result["restart_startup_s"] = round(broker.start(), 3)
    result["restart_baseline"] = snapshot(broker, baseline, 0)
    client = make_client(broker.url, args)
    try:
        samples = min(args.samples, args.topics)
        t0 = time.monotonic()
        result["restart_topics"] = check_topics(client, args,
                                                rng.sample(range(args.topics), samples))
        result["restart_topics"]["seconds"] = round(time.monotonic() - t0, 3)
        subs = min(args.samples, args.subscriptions)
        t0 = time.monotonic()
        result["restart_subscriptions"] = check_subscriptions(
            client, args, rng.sample(range(args.subscriptions), subs))
        result["restart_subscriptions"]["seconds"] = round(time.monotonic() - t0, 3)
    finally:
        client.close()
    result["after_restart"] = snapshot(broker, baseline, 0)
    broker.stop()
    result["stored"] = stored_counts(broker.data_dir)
    return result


def report(result: dict[str, Any]) -> None:
    def line(label: str, value: Any) -> None:
        print(f"  {label:<44} {value}")

    print()
    print(f"Magnetar scale run: {result['topics']} topics, {result['subscriptions']} "
          f"subscriptions (concurrency {result['concurrency']}, magnetarMaxOpenFiles "
          f"{result['max_open_files'] or 'default'}, magnetarTopicUnloadIdleSeconds "
          f"{result['unload_idle_s'] if result['unload_idle_s'] is not None else 'default'})")
    b = result["baseline"]
    line("baseline fds / RSS", f"{b['fds']} / {b['rss_mib']} MiB  {b['fd_kinds']}")
    ct = result["create_topics"]
    line("create topics (producer+send+close)",
         f"{ct['seconds']} s ({ct['per_second']}/s, {ct['failed']} failed)")
    cs = result["create_subscriptions"]
    line("create subscriptions (subscribe+close)",
         f"{cs['seconds']} s ({cs['per_second']}/s, {cs['failed']} failed)")
    for key, label in (("loaded", "after creation"), ("idle", "after the idle wait")):
        if key in result:
            s = result[key]
            line(f"{label}: fds", f"{s['fds']}  {s['fd_kinds']}")
            line(f"{label}: RSS (per topic over baseline)",
                 f"{s['rss_mib']} MiB ({s['rss_per_topic_kib']} KiB/topic)")
    if "second_wave" in result:
        w = result["second_wave"]
        line("second wave: create as many new topics", f"{w['seconds']} s ({w['failed']} failed)")
        line("second wave: fds", f"{w['fds']}  {w['fd_kinds']}")
        line("second wave: RSS (growth per new topic)",
             f"{w['rss_mib']} MiB ({w['growth_per_topic_kib']} KiB/topic)")
    line("shutdown (SIGTERM to exit)", f"{result['shutdown_s']} s")
    line("restart: start to accepting connections", f"{result['restart_startup_s']} s")
    rb = result["restart_baseline"]
    line("restart: fds / RSS before any use", f"{rb['fds']} / {rb['rss_mib']} MiB")
    rt, rs = result["restart_topics"], result["restart_subscriptions"]
    line("restart: sampled topics readable",
         f"{rt['ok']}/{rt['checked']} in {rt['seconds']} s (slowest {rt['slowest_s']} s)")
    line("restart: sampled subscriptions kept backlog",
         f"{rs['ok']}/{rs['checked']} in {rs['seconds']} s")
    for failure in rt["failures"] + rs["failures"]:
        line("  failure", failure)
    ar = result["after_restart"]
    line("restart: fds / RSS after the samples", f"{ar['fds']} / {ar['rss_mib']} MiB")
    line("stored in the data dir", result.get("stored", {}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scale_bench.py", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=10_000, help="topics to create (10000)")
    parser.add_argument("--subscriptions", type=int, default=2_000,
                        help="durable subscriptions, spread over the topics (2000)")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="client threads creating topics/subscriptions in parallel (32)")
    parser.add_argument("--namespace", default="public/default", help="tenant/namespace")
    parser.add_argument("--max-open-files", type=int, default=None, metavar="N",
                        help="magnetarMaxOpenFiles for the broker (default: its own, 512)")
    parser.add_argument("--unload-idle", type=int, default=None, metavar="S",
                        help="magnetarTopicUnloadIdleSeconds for the broker (default: its own)")
    parser.add_argument("--idle-wait", type=float, default=0.0, metavar="S",
                        help="after creation, wait up to S s and measure again (0: skip)")
    parser.add_argument("--second-wave", action="store_true",
                        help="after the idle wait, create as many new topics again and report "
                             "the RSS growth they cause (memory reuse after unloading)")
    parser.add_argument("--samples", type=int, default=20,
                        help="random topics and subscriptions checked after the restart (20)")
    parser.add_argument("--op-timeout", type=int, default=30,
                        help="client operation/receive timeout in seconds (30)")
    parser.add_argument("--progress", type=float, default=5.0, help="seconds between progress lines")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="limit for the whole run in seconds (1800)")
    parser.add_argument("--ready-timeout", type=float, default=120.0,
                        help="seconds to wait for the broker to accept connections (120)")
    parser.add_argument("--seed", type=int, default=1, help="random seed for the samples")
    parser.add_argument("--magnetar-cmd", default="",
                        help="command to run instead of `magnetar` (e.g. 'python -m ...')")
    parser.add_argument("--magnetar-arg", action="append", default=[],
                        help="extra argument for `magnetar standalone` (repeatable; write "
                             "flags as --magnetar-arg=--fsync=never)")
    parser.add_argument("--workdir", default=None, help="parent of the temp dir (default: system)")
    parser.add_argument("--keep-data", action="store_true", help="keep the temp dir and log")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write figures as JSON")
    args = parser.parse_args(argv)
    if args.topics < 1 or args.subscriptions < 0 or args.concurrency < 1:
        parser.error("--topics and --concurrency must be >= 1, --subscriptions >= 0")

    DEADLINE[0] = time.monotonic() + args.timeout
    atexit.register(_stop_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    def watchdog() -> None:
        log(f"--timeout {args.timeout}s reached: stopping the broker and exiting")
        _stop_all()
        os._exit(3)

    timer = threading.Timer(args.timeout + 120, watchdog)  # phases stop at the deadline first
    timer.daemon = True
    timer.start()

    workdir = Path(tempfile.mkdtemp(prefix="magnetar-scale-", dir=args.workdir))
    log(f"work dir {workdir}")
    try:
        result = run(args, workdir)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        _stop_all()
        timer.cancel()
        if not args.keep_data:
            shutil.rmtree(workdir, ignore_errors=True)
    report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    ok = (result["restart_topics"]["ok"] == result["restart_topics"]["checked"]
          and result["restart_subscriptions"]["ok"] == result["restart_subscriptions"]["checked"]
          and result["create_topics"]["failed"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
