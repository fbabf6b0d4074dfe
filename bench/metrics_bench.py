#!/usr/bin/env python3
"""What a /metrics scrape costs a broker with many topics loaded (issue 31 item 2).

For each source tree given (``--src NAME=PATH``, e.g. main's and a branch's ``src``), and
each exposition level (``topic``; ``namespace``: ``exposeTopicLevelMetricsInPrometheus=false``),
this starts ``magnetar standalone`` from that tree (PYTHONPATH) with the per-topic cache off
(``magnetarMetricsCacheSeconds=0``: every scrape builds it, the worst case), loads
``--topics`` topics (one producer and one message each, topics kept loaded), then runs one
producer sending without pause (official client, synchronous sends, so each latency is one
round trip) and scrapes ``--scrapes`` times, each after a pause of twice the last scrape's
time plus 0.4 s (at least 1 s). It reports per run: the scrape's size and time (median,
max); the broker's CPU time per scrape (utime + stime over the scrape, all threads, the
probe's sends included: a figure a busy machine inflates less than the wall-clock ones);
where the tree exposes them, the broker's own account of the build (median loop-thread
CPU, and the longest hold of the event loop, wall and CPU: wall minus CPU is the time the
broker waited for a core); and the producer's send latency during scrapes (count,
p50/p99/max), in control windows (one per scrape, as long as it, halfway to the next
scrape: what the machine alone does to a window of that size; sends are quicker there, so
there are more of them), and in all the time between scrapes; and the median over windows
of the slowest send overlapping each scrape window and each control window (``worst``,
``ctl``: like against like, one figure per window), split at the response's headers into
the build (``to hdr``: until the broker answers) and the transfer of the body (JSON only). The
row's bottleneck is the broker's event loop: the producer and scraper are one client each,
far from saturating it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pulsar

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(src: str, root: Path, settings: dict[str, Any]) -> tuple[subprocess.Popen[bytes], str, str]:
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    port, http = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": src}
    log = open(root / "broker.log", "wb")  # noqa: SIM115 - the child's output for its life
    proc = subprocess.Popen(
        [sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir", str(root / "data"),
         "--port", str(port), "--http-port", str(http), "--bind-address", "127.0.0.1",
         "--config", str(conf)], stdout=log, stderr=log, env=env)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", http), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"broker from {src} did not start") from None
            time.sleep(0.1)
    return proc, f"pulsar://127.0.0.1:{port}", f"http://127.0.0.1:{http}"


def load_topics(url: str, count: int, threads: int) -> float:
    started = time.monotonic()
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=QUIET, io_threads=4)

    def one(i: int) -> None:
        ns = "public/default" if i % 2 else "public/other"
        producer = client.create_producer(f"persistent://{ns}/scrape-{i}", batching_enabled=False)
        producer.send(b"x" * 100)
        producer.close()

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))
    client.close()
    return time.monotonic() - started


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds(pid: int) -> float:
    """utime + stime of the broker process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


BUILD_GAUGES = ("magnetar_metrics_build_cpu_seconds", "magnetar_metrics_longest_slice_seconds",
                "magnetar_metrics_longest_slice_cpu_seconds")


def build_gauges(text: bytes) -> dict[str, float]:
    """The broker's own account of the build (trees that expose it), from the scrape's tail."""
    out = {}
    for line in text[-65536:].decode(errors="replace").splitlines():  # (the tail grew past 8 KB)
        name = line.split("{", 1)[0]
        if name in BUILD_GAUGES:
            out[name] = float(line.rsplit(" ", 1)[1])
    return out


def latencies(sends: list[tuple[float, float]], windows: list[tuple[float, float]]) -> list[float]:
    """Latencies of the sends that overlap one of ``windows``."""
    return [lat for start, lat in sends
            if any(start < end and start + lat > begin for begin, end in windows)]


def worst_per_window(sends: list[tuple[float, float]],
                     windows: list[tuple[float, float]]) -> list[float]:
    """For each window, the slowest send that overlaps it (0 if none)."""
    return [max((lat for start, lat in sends if start < end and start + lat > begin), default=0.0)
            for begin, end in windows]


def measure(url: str, web: str, scrapes: int, pid: int) -> dict[str, Any]:
    client = pulsar.Client(url, logger=QUIET)
    producer = client.create_producer("persistent://public/default/latency-probe",
                                      batching_enabled=False)
    sends: list[tuple[float, float]] = []  # (start, latency) in seconds
    stop = threading.Event()

    def send_loop() -> None:
        while not stop.is_set():
            t = time.monotonic()
            producer.send(b"p" * 100)
            sends.append((t, time.monotonic() - t))

    sender = threading.Thread(target=send_loop)
    sender.start()
    time.sleep(2.0)  # a baseline before the first scrape
    windows: list[tuple[float, float]] = []
    controls: list[tuple[float, float]] = []  # as long as a scrape, halfway to the next one
    sizes: list[int] = []
    cpu: list[float] = []
    gauges: list[dict[str, float]] = []
    phases: list[tuple[float, float, float]] = []  # start, headers received, end
    for _ in range(scrapes):
        t = time.monotonic()
        before = cpu_seconds(pid)
        with urllib.request.urlopen(web + "/metrics", timeout=120) as reply:
            headers = time.monotonic()  # the broker answers once the per-topic part is built
            body = reply.read()
        end = time.monotonic()
        phases.append((t, headers, end))
        cpu.append(cpu_seconds(pid) - before)
        sizes.append(len(body))
        gauges.append(build_gauges(body))
        windows.append((t, end))
        gap = max(1.0, 2 * (end - t) + 0.4)
        controls.append((end + (gap - (end - t)) / 2, end + (gap + (end - t)) / 2))
        time.sleep(gap)
    stop.set()
    sender.join()
    client.close()

    inside = latencies(sends, windows)
    control = latencies(sends, controls)
    outside = latencies(sends, [(w[1], nxt[0]) for w, nxt in itertools.pairwise(windows)])
    durations = [end - begin for begin, end in windows]
    worst, worst_control = worst_per_window(sends, windows), worst_per_window(sends, controls)
    worst_build = worst_per_window(sends, [(a, b) for a, b, _ in phases])
    worst_transfer = worst_per_window(sends, [(b, c) for _, b, c in phases])
    row = {
        "scrape_bytes": statistics.median(sizes),
        "scrape_s_median": statistics.median(durations),
        "scrape_s_max": max(durations),
        "scrape_cpu_s_median": statistics.median(cpu),
        "sends_during": len(inside),
        "p50_during_ms": 1000 * pct(inside, 0.50),
        "p99_during_ms": 1000 * pct(inside, 0.99),
        "max_during_ms": 1000 * max(inside, default=float("nan")),
        "sends_control": len(control),
        "p99_control_ms": 1000 * pct(control, 0.99),
        "max_control_ms": 1000 * max(control, default=float("nan")),
        "p99_outside_ms": 1000 * pct(outside, 0.99),
        "worst_ms_median": 1000 * statistics.median(worst),
        "worst_control_ms_median": 1000 * statistics.median(worst_control),
        "build_phase_s_median": statistics.median(b - a for a, b, _ in phases),
        "worst_build_ms_median": 1000 * statistics.median(worst_build),
        "worst_transfer_ms_median": 1000 * statistics.median(worst_transfer),
    }
    for name in BUILD_GAUGES:
        values = [g[name] for g in gauges if name in g]
        row[name.replace("magnetar_metrics_", "build_")] = (
            statistics.median(values) if values else float("nan"))
        row[name.replace("magnetar_metrics_", "build_") + "_max"] = max(values, default=float("nan"))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", required=True,
                        help="NAME=PATH of a source tree's src directory (repeat to compare)")
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=15)
    parser.add_argument("--threads", type=int, default=32, help="threads creating topics")
    parser.add_argument("--levels", default="topic,namespace")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="metrics-bench-") as tmp:
        for spec in args.src:
            name, src = spec.split("=", 1)
            for level in args.levels.split(","):
                settings = {"magnetarTopicUnloadIdleSeconds": 0, "statsUpdateFrequencyInSecs": 5,
                            "magnetarMetricsCacheSeconds": 0,
                            "exposeTopicLevelMetricsInPrometheus": str(level == "topic").lower()}
                root = Path(tmp) / f"{name}-{level}"
                proc, url, web = start_broker(src, root, settings)
                try:
                    admin = urllib.request.Request(web + "/admin/v2/namespaces/public/other",
                                                   method="PUT")
                    urllib.request.urlopen(admin, timeout=30).close()
                    created = load_topics(url, args.topics, args.threads)
                    row = {"tree": name, "level": level, "topics": args.topics,
                           "create_s": round(created, 1), **measure(url, web, args.scrapes, proc.pid)}
                finally:
                    proc.terminate()
                    proc.wait(timeout=60)
                results.append(row)
                print(json.dumps(row), flush=True)
    print()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'tree':<8} {'level':<9} {'bytes':>10} {'scrape s':>8} {'max s':>6} {'cpu s':>5} "
          f"{'build cpu':>9} {'slice ms':>8} {'cpu':>5} {'sends':>5} {'p50':>5} {'p99':>6} "
          f"{'max':>6} {'ctl p99':>7} {'ctl max':>7} {'base p99':>8} {'worst':>6} {'ctl':>6}")
    for r in results:
        print(f"{r['tree']:<8} {r['level']:<9} {r['scrape_bytes']:>10.0f} "
              f"{r['scrape_s_median']:>8.3f} {r['scrape_s_max']:>6.3f} "
              f"{r['scrape_cpu_s_median']:>5.2f} {r['build_build_cpu_seconds']:>9.3f} "
              f"{1000 * r['build_longest_slice_seconds']:>8.1f} "
              f"{1000 * r['build_longest_slice_cpu_seconds']:>5.1f} {r['sends_during']:>5} "
              f"{r['p50_during_ms']:>5.1f} {r['p99_during_ms']:>6.1f} {r['max_during_ms']:>6.1f} "
              f"{r['p99_control_ms']:>7.1f} {r['max_control_ms']:>7.1f} {r['p99_outside_ms']:>8.1f} "
              f"{r['worst_ms_median']:>6.1f} {r['worst_control_ms_median']:>6.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
