#!/usr/bin/env python3
"""100,000 topics on one broker (issue 40): stalls, memory, and operations at that size.

For each source tree given (``--src NAME=PATH``, e.g. ``base=/tmp/scale-base/src`` from
``git archive main src`` and ``new=src``), one after the other on the same machine, this
starts ``magnetar standalone`` from that tree (PYTHONPATH) with topics kept loaded
(``magnetarTopicUnloadIdleSeconds=0``), topic-level metrics and no metrics cache
(``magnetarMetricsCacheSeconds=0``: every scrape builds the exposition, the worst case), and
runs, with a live producer sending 1 KB unbatched every 5 ms (official client, synchronous
sends: each latency is one round trip) from start to stop:

  before   ``--window`` seconds with no other topic loaded;
  create   ``--topics`` topics in steps of ``--step`` (each: a producer, one message, close;
           ``--threads`` threads share one client): time and broker RSS per step;
  idle     ``--window`` seconds with every topic loaded;
  scrape   ``--scrapes`` scrapes of /metrics, a pause of twice the scrape's time after each;
  ops      producer creations on new topics and HTTP lookups of loaded topics (``--ops``
           each, one at a time), compared with the same at 100 topics; the namespace's
           topic list (``GET /admin/v2/persistent/public/default``, what ``pulsar-admin
           topics list`` asks), whole and paged (where the tree pages it);
  unload   ``--unloads`` topics unloaded through the admin API (4 threads);
  stop     SIGTERM, until the process exits.

The live producer runs in its own process (the creators' and the scraper's threads would
otherwise hold its GIL: the bench's own contention counted as send latency); its latencies
are reported per phase (count, p50, p99, p999, max, and the 10 slowest sends with their
start in seconds from the phase's start, to correlate a stall with a probe). With
``--levels`` holding ``namespace``, a second broker per tree with
``exposeTopicLevelMetricsInPrometheus=false`` is loaded the same way and only scraped.
The broker is the bottleneck of every figure here except the creation rate, which the
clients' round trips bound as much as the broker (so it is a like-for-like ratio only).

``--pin``: the broker on the machine's last CPU, this process and its children (the 16
creator threads, the scraper, the unloaders, the live producer) on the others, so that the
broker's event loop never waits for a core behind the bench's own clients. On a 2-core
machine unpinned, the loop's busy stretches at the scrapes and unloads were 15-30 % of
their time runnable but not running (session 26's flight recorder): the bench's load,
counted as the broker's latency. A real deployment does not run 16 load generators on its
broker's cores; a Python broker uses about one core (the GIL), so one core is its share.
The live producer then runs at nice -10 (as root): it shares the other core with the
bench's creators, scraper and list reader, and a send's answer waited for that core behind
them (a 133 MB scrape body read, a 100,000-name list parsed: the bench's own work counted
as the broker's stall).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pulsar
from metrics_bench import QUIET, pct, start_broker

NS = "persistent://public/default"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _live_sends(url: str, stop: Any, out: Any, nice: int = 0) -> None:
    """The live producer's process: 1 KB unbatched every 5 ms until ``stop`` is set, then
    the (start, latency) pairs through ``out``. Its own process, so that the bench's other
    threads (creators, scraper) do not hold its GIL: a latency is the broker's and the
    client's, not the bench's. ``nice`` (``--pin``: -10) is set before the client starts
    its threads, which inherit it: on the core it shares with the bench's creators and
    scraper the probe runs first when its answer comes (needs root; else left as it is)."""
    if nice:
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    client = pulsar.Client(url, logger=QUIET, operation_timeout_seconds=120)
    sends: list[tuple[float, float]] = []
    try:
        producer = client.create_producer(f"{NS}/live-probe", batching_enabled=False)
        out.send("ready")
        payload = b"p" * 1024
        tick = time.monotonic()
        while not stop.is_set():
            t = time.monotonic()
            try:
                producer.send(payload)
            except Exception:  # the broker stopping under it
                break
            sends.append((t, time.monotonic() - t))
            tick += 0.005
            delay = tick - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                tick = time.monotonic()
    finally:
        out.send(sends)
        out.close()
        client.close()


class LiveProducer:
    """Sends 1 KB unbatched every 5 ms on its own topic from a child process; keeps
    (start, latency) pairs (``time.monotonic``: one clock for every process here)."""

    def __init__(self, url: str, nice: int = 0) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self._conn, child = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_live_sends, args=(url, self.stop, child, nice),
                                   daemon=True)
        self.process.start()
        child.close()
        if not self._conn.poll(120) or self._conn.recv() != "ready":
            raise RuntimeError("the live producer did not start")
        self.sends: list[tuple[float, float]] = []

    def close(self) -> None:
        """Stop the sends and take their records (again: nothing more)."""
        if self._conn.closed:
            return
        self.stop.set()
        try:
            if self._conn.poll(60):
                self.sends = self._conn.recv()
        except EOFError:
            raise RuntimeError("the live producer ended without its records") from None
        finally:
            self._conn.close()
            self.process.join(timeout=30)
            if self.process.is_alive():
                self.process.kill()

    def summary(self, begin: float, end: float) -> dict[str, Any]:
        """Percentiles of the sends started in [begin, end), and the 10 slowest as
        (seconds from ``begin``, ms)."""
        window = [(t, latency) for t, latency in self.sends if begin <= t < end]
        lat = [latency for _, latency in window]
        slowest = sorted(window, key=lambda pair: pair[1], reverse=True)[:10]
        return {"sends": len(lat), "p50_ms": 1000 * pct(lat, 0.5), "p99_ms": 1000 * pct(lat, 0.99),
                "p999_ms": 1000 * pct(lat, 0.999), "max_ms": 1000 * max(lat, default=float("nan")),
                "slowest": [(round(t - begin, 3), round(1000 * latency, 1)) for t, latency in slowest]}


def create_topics(client: pulsar.Client, first: int, count: int, threads: int) -> None:
    def one(i: int) -> None:
        producer = client.create_producer(f"{NS}/scale-{i}", batching_enabled=False)
        producer.send(b"scale message %d" % i)
        producer.close()

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(first, first + count)))


def timed_ops(url: str, web: str, tag: str, loaded: int, count: int) -> dict[str, float]:
    """Median and max of ``count`` producer creations on new topics and of as many HTTP
    lookups of loaded topics, one at a time."""
    client = pulsar.Client(url, logger=QUIET)
    create: list[float] = []
    for i in range(count):
        t = time.monotonic()
        client.create_producer(f"{NS}/ops-{tag}-{i}", batching_enabled=False).close()
        create.append(time.monotonic() - t)
    client.close()
    lookup: list[float] = []
    step = max(1, loaded // count)
    for i in range(0, step * count, step):
        t = time.monotonic()
        urllib.request.urlopen(f"{web}/lookup/v2/topic/persistent/public/default/scale-{i}",
                               timeout=60).read()
        lookup.append(time.monotonic() - t)
    return {"create_ms_median": 1000 * statistics.median(create), "create_ms_max": 1000 * max(create),
            "lookup_ms_median": 1000 * statistics.median(lookup), "lookup_ms_max": 1000 * max(lookup)}


#: the broker's account of its last build (trees that expose it), read from each scrape's tail
BUILD_GAUGES = ("magnetar_metrics_build_seconds", "magnetar_metrics_build_cpu_seconds",
                "magnetar_metrics_longest_slice_seconds")
SCRAPE_LOG: list[dict[str, float]] = []  # per scrape: its seconds and `BUILD_GAUGES`


def scrape(web: str, count: int) -> list[tuple[float, int, float, float]]:
    """(seconds, bytes, start, end) of ``count`` scrapes, a pause after each; each one's
    seconds and build gauges are noted in `SCRAPE_LOG` too."""
    out = []
    SCRAPE_LOG.clear()
    for _ in range(count):
        t = time.monotonic()
        with urllib.request.urlopen(web + "/metrics", timeout=300) as reply:
            body = reply.read()
        end = time.monotonic()
        size = len(body)
        noted = {"s": round(end - t, 3)}
        for line in body[-65536:].decode(errors="replace").splitlines():
            if line.split("{", 1)[0] in BUILD_GAUGES:
                noted[line.split("{", 1)[0][len("magnetar_metrics_"):]] = float(line.rsplit(" ", 1)[1])
        del body
        SCRAPE_LOG.append(noted)
        out.append((end - t, size, t, end))
        time.sleep(max(1.0, 2 * (end - t)))
    return out


def listing(web: str) -> dict[str, Any]:
    t = time.monotonic()
    with urllib.request.urlopen(f"{web}/admin/v2/persistent/public/default", timeout=300) as reply:
        names = json.loads(reply.read())
    row: dict[str, Any] = {"list_s": time.monotonic() - t, "list_names": len(names)}
    t = time.monotonic()
    try:
        with urllib.request.urlopen(f"{web}/admin/v2/persistent/public/default?limit=1000",
                                    timeout=300) as reply:
            page = json.loads(reply.read())
        row["list_page_s"] = time.monotonic() - t
        row["list_page_names"] = len(page)
    except OSError:
        pass
    return row


def unload(web: str, first: int, count: int) -> float:
    def one(i: int) -> None:
        req = urllib.request.Request(f"{web}/admin/v2/persistent/public/default/scale-{i}/unload",
                                     method="PUT")
        urllib.request.urlopen(req, timeout=120).close()

    t = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(first, first + count)))
    return time.monotonic() - t


#: the live producer's nice value under ``--pin`` (`_live_sends`)
LIVE_NICE = -10


def rounds_within(row: dict[str, Any], phase: str) -> list[float]:
    """The 60-s marks since the broker was ready that fall in ``phase`` (seconds from
    its start): where its periodic rounds begin, within a second or so."""
    ready, span = row.get("ready_at"), row.get("phases", {}).get(phase)
    if ready is None or span is None:
        return []
    first = math.ceil((span[0] - ready) / 60.0)
    return [ready + 60.0 * k - span[0] for k in range(max(first, 1), 10_000)
            if ready + 60.0 * k <= span[1]]


def pin_process(pid: int, cpu: int) -> None:
    """The broker (each of its threads now; later ones inherit it) on ``cpu``, the last
    one; this process (its threads and children: the creators, the scraper, the live
    producer) is on the others (`main`): the broker's loop then never waits for a core
    behind the bench's own clients (a GIL-bound broker uses about one core)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), {cpu})


def settle_disk() -> None:
    """Wait for the machine's dirty pages to reach the disk: the tree measured before (or an
    earlier run's data directory, removed) leaves 100,000 ledger files' writes and their
    journal behind, and a broker started meanwhile waited behind them for its own syncs
    (sends of 50-160 ms in its first seconds, counted as its stalls)."""
    os.sync()


def run_tree(name: str, src: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    settings = {"magnetarTopicUnloadIdleSeconds": 0, "magnetarMetricsCacheSeconds": 0,
                "exposeTopicLevelMetricsInPrometheus": "true"}
    settle_disk()
    proc, url, web = start_broker(src, root, settings)
    if args.pin is not None:
        pin_process(proc.pid, args.pin)
    # the broker's 60-s rounds (housekeeping, rate sample, idle sweep, idle files) come
    # about every 60 s from here: each phase's summary names those within it
    row: dict[str, Any] = {"tree": name, "topics": args.topics, "ready_at": time.monotonic()}
    phases: dict[str, tuple[float, float]] = {}
    live = LiveProducer(url, LIVE_NICE if args.pin is not None else 0)
    try:
        row["rss_mb_start"] = rss_mb(proc.pid)
        t = time.monotonic()
        time.sleep(args.window)
        phases["before"] = (t, time.monotonic())
        client = pulsar.Client(url, logger=QUIET, operation_timeout_seconds=120, io_threads=4)
        create_topics(client, 0, 100, args.threads)
        if "ops" not in args.skip:
            row["ops_at_100"] = timed_ops(url, web, "a", 100, args.ops)
        steps = []
        t = time.monotonic()
        rss0 = rss_mb(proc.pid)
        done = 100
        while done < args.topics:
            n = min(args.step, args.topics - done)
            s0 = time.monotonic()
            create_topics(client, done, n, args.threads)
            done += n
            rss = rss_mb(proc.pid)
            steps.append({"topics": done, "s": round(time.monotonic() - s0, 1), "rss_mb": round(rss)})
            print(f"  {name}: {done} topics, {steps[-1]['s']} s for the last {n}, RSS {rss:.0f} MB",
                  file=sys.stderr, flush=True)
        client.close()
        phases["create"] = (t, time.monotonic())
        row["create_steps"] = steps
        row["create_s_per_10k"] = round(10_000 * (phases["create"][1] - t) / max(1, done - 100), 1)
        time.sleep(2)
        rss = rss_mb(proc.pid)
        row["rss_mb_loaded"] = round(rss)
        row["kb_per_topic"] = round(1024 * (rss - rss0) / max(1, done - 100), 2)
        t = time.monotonic()
        time.sleep(args.window)
        phases["idle"] = (t, time.monotonic())
        scrapes = scrape(web, args.scrapes)
        if scrapes:  # (``--scrapes 0``: the operations after the idle window, no scrape)
            phases["scrape"] = (scrapes[0][2], scrapes[-1][3])
            row["scrape_s_median"] = statistics.median(s[0] for s in scrapes)
            row["scrape_s_max"] = max(s[0] for s in scrapes)
            row["scrape_mb"] = round(scrapes[0][1] / 1e6, 1)
            row["scrapes"] = list(SCRAPE_LOG)
        row["scrape_load"] = round(os.getloadavg()[0], 1)
        if "ops" not in args.skip:
            if args.ops_settled:  # the creations' writes on disk first (`settle_disk`)
                t = time.monotonic()
                settle_disk()
                row["ops_settle_s"] = round(time.monotonic() - t, 2)
            row["ops_at_end"] = timed_ops(url, web, "b", done, args.ops)
            row.update(listing(web))
        if "unload" not in args.skip:
            t = time.monotonic()
            row["unload_s"] = unload(web, 100, args.unloads)
            phases["unload"] = (t, time.monotonic())
        t = time.monotonic()
        time.sleep(args.window / 2)
        phases["after"] = (t, time.monotonic())
        end = time.monotonic()
        live.close()
        row["latency"] = {phase: live.summary(*span) for phase, span in phases.items()}
        row["phases"] = phases  # time.monotonic() spans, to match a probe's records
        row["latency"]["all"] = live.summary(phases["before"][0], end)
    finally:
        try:
            live.close()
        finally:
            t = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=300)
            row["stop_s"] = time.monotonic() - t
    return row


def run_namespace_level(name: str, src: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    settings = {"magnetarTopicUnloadIdleSeconds": 0, "magnetarMetricsCacheSeconds": 0,
                "exposeTopicLevelMetricsInPrometheus": "false"}
    settle_disk()
    proc, url, web = start_broker(src, root, settings)
    try:
        client = pulsar.Client(url, logger=QUIET, operation_timeout_seconds=120, io_threads=4)
        create_topics(client, 0, args.topics, args.threads)
        client.close()
        live = LiveProducer(url, LIVE_NICE if args.pin is not None else 0)
        time.sleep(args.settle)
        scrapes = scrape(web, args.scrapes)
        live.close()
        return {"tree": name, "level": "namespace", "scrape_s_median": statistics.median(s[0] for s in scrapes),
                "scrape_s_max": max(s[0] for s in scrapes), "scrape_mb": round(scrapes[0][1] / 1e6, 2),
                "latency_scrape": live.summary(scrapes[0][2], scrapes[-1][3])}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", required=True,
                        help="NAME=PATH of a source tree's src directory (repeat to compare)")
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--step", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--window", type=float, default=20.0, help="seconds of each quiet phase")
    parser.add_argument("--scrapes", type=int, default=3)
    parser.add_argument("--ops", type=int, default=50)
    parser.add_argument("--ops-settled", action="store_true",
                        help="before the operations at the end, wait for the machine's dirty "
                        "pages (the creations' files and journal) to reach the disk")
    parser.add_argument("--unloads", type=int, default=5000)
    parser.add_argument("--levels", default="topic", help="topic,namespace")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--settle", type=float, default=1.0,
                        help="seconds between the namespace-level broker's last topic and its scrapes")
    parser.add_argument("--pin", action="store_true",
                        help="the broker on the last CPU, the bench's clients and the live "
                        "producer on the others")
    parser.add_argument("--skip", default="", help="phases left out: ops (creations, lookups, "
                        "listing), unload")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin and len(cpus) > 1:
        os.sched_setaffinity(0, set(cpus[:-1]))
        args.pin = cpus[-1]
    else:
        args.pin = None
    results = []
    with tempfile.TemporaryDirectory(prefix="many-topics-") as tmp:
        for spec in args.src:
            name, src = spec.split("=", 1)
            if "topic" in args.levels.split(","):
                results.append(run_tree(name, src, Path(tmp) / f"{name}-topic", args))
                print(json.dumps(results[-1]), flush=True)
            if "namespace" in args.levels.split(","):
                results.append(run_namespace_level(name, src, Path(tmp) / f"{name}-ns", args))
                print(json.dumps(results[-1]), flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for r in results:
        if "latency" not in r:
            print(f"{r['tree']:<6} namespace-level /metrics {r['scrape_s_median']:.3f} s "
                  f"(max {r['scrape_s_max']:.3f}), live max during {r['latency_scrape']['max_ms']:.1f} ms")
            continue
        print(f"{r['tree']:<6} {r['topics']} topics: {r['kb_per_topic']} KB/topic, "
              f"{r['create_s_per_10k']} s per 10k, /metrics {r.get('scrape_s_median', math.nan):.2f} s "
              f"({r.get('scrape_mb', '-')} MB), list {r.get('list_s', math.nan):.2f} s, "
              f"unload {r.get('unload_s', math.nan):.1f} s, stop {r['stop_s']:.2f} s")
        for k, noted in enumerate(r.get("scrapes", [])):
            print(f"   scrape {k}: {noted['s']:.3f} s, build {noted.get('build_seconds', math.nan):.3f} s "
                  f"(loop CPU {noted.get('build_cpu_seconds', math.nan):.3f} s), longest slice "
                  f"{1000 * noted.get('longest_slice_seconds', math.nan):.1f} ms "
                  f"(load average {r.get('scrape_load', math.nan)})")
        for phase, lat in r["latency"].items():
            print(f"   {phase:<7} {lat['sends']:>6} sends  p50 {lat['p50_ms']:6.2f}  p99 {lat['p99_ms']:6.2f}  "
                  f"p999 {lat['p999_ms']:7.2f}  max {lat['max_ms']:7.1f} ms")
            if phase != "all" and lat["slowest"]:
                print("           slowest (s from the phase's start: ms) "
                      + ", ".join(f"{at:.1f}: {ms:.0f}" for at, ms in lat["slowest"]))
                marks = rounds_within(r, phase)
                if marks:
                    print("           the broker's 60-s marks (s from the phase's start): "
                          + ", ".join(f"{m:.1f}" for m in marks))
        for when in ("ops_at_100", "ops_at_end"):
            if when not in r:
                continue
            o = r[when]
            print(f"   {when:<10} create producer {o['create_ms_median']:.1f} ms (max {o['create_ms_max']:.1f}), "
                  f"lookup {o['lookup_ms_median']:.1f} ms (max {o['lookup_ms_max']:.1f})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
