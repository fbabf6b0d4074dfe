"""The console's costs, measured in headless Chromium against a standalone broker:

- page load times (from navigation start to the page's data drawn, the page's own
  ``performance.now()``): the overview, a namespace of ``--topics`` (10,000) topics, a
  topic page;
- the broker CPU an open topic page costs: utime + stime of the broker process
  (``/proc/PID/stat``) over ``--seconds`` (60) with the topic page open, minus the same
  span with the browser on ``about:blank``, while a producer sends ``--rate`` msg/s; and,
  below that difference's noise, counted per call: the broker CPU of 300 forwarded stats
  calls, times the page's 20 a minute.

    python bench/console_bench.py [--topics 10000] [--seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from magnetar.testing import standalone
from tests.console.browser import chromium, ready

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def create_topics(base: str, ns: str, n: int) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.put(f"{base}/admin/v2/namespaces/{ns}") as r:
            assert r.status in (204, 409), await r.text()
        sem = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            async with sem, s.put(f"{base}/admin/v2/persistent/{ns}/topic-{i:05d}") as r:
                assert r.status in (204, 409), await r.text()

        await asyncio.gather(*(one(i) for i in range(n)))


async def _calls(url: str, n: int) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(n):
            async with s.get(url) as r:
                assert r.status == 200, await r.text()
                await r.read()


def load_ms(driver: Any, url: str) -> float:
    driver.get(url)
    ready(driver, timeout=120)
    return float(driver.execute_script("return Number(document.body.dataset.readyAt)"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=100.0)
    args = parser.parse_args()
    with standalone() as broker, chromium() as driver:
        pid = broker.process.pid
        base = broker.web_service_url
        t0 = time.monotonic()
        asyncio.run(create_topics(base, "public/wide", args.topics))
        print(f"created {args.topics} topics in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        topic = "persistent://public/default/console-bench"
        client = pulsar.Client(broker.service_url,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        client.subscribe(topic, "bench").close()
        producer = client.create_producer(topic)
        stop = threading.Event()

        def produce() -> None:
            while not stop.is_set():
                producer.send_async(b'{"n": 1}', None)
                stop.wait(1.0 / args.rate)

        sender = threading.Thread(target=produce, daemon=True)
        sender.start()
        topic_url = f"{base}/console/topics/persistent/public/default/console-bench"
        figures = {}
        for name, url in (("overview", f"{base}/console/"),
                          (f"namespace of {args.topics} topics", f"{base}/console/namespaces/public/wide"),
                          ("topic page", topic_url)):
            load_ms(driver, url)  # warm: the module files cached, the topic loaded
            figures[name] = min(load_ms(driver, url) for _ in range(3))
        driver.get("about:blank")
        before = cpu_seconds(pid)
        time.sleep(args.seconds)
        idle = cpu_seconds(pid) - before
        driver.get(topic_url)
        ready(driver)
        before = cpu_seconds(pid)
        time.sleep(args.seconds)
        open_page = cpu_seconds(pid) - before
        # the same cost counted per call: what one forwarded stats call costs the broker,
        # times the page's 20 calls a minute (one every 3 s)
        stats_url = f"{base}/console/api/admin/v2/persistent/public/default/console-bench/stats"
        calls = 300
        before = cpu_seconds(pid)
        asyncio.run(_calls(stats_url, calls))
        per_call = (cpu_seconds(pid) - before) / calls
        stop.set()
        sender.join()
        producer.close()
        client.close()
    for name, ms in figures.items():
        print(f"{name:32s} {ms:8.0f} ms to drawn (best of 3)")
    print(f"broker CPU, producer at {args.rate:.0f} msg/s, browser on about:blank: "
          f"{100 * idle / args.seconds:.2f} % of a core")
    print(f"broker CPU, same, topic page open:          {100 * open_page / args.seconds:.2f} % of a core")
    print(f"the open topic page's cost:                 {100 * (open_page - idle) / args.seconds:.2f} % of a core")
    print(f"one forwarded stats call: {1000 * per_call:.2f} ms of broker CPU; 20 a minute: "
          f"{100 * per_call * 20 / 60:.3f} % of a core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
