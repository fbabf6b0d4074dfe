"""Spark data source figures, on ``local[2]`` against a ``magnetar standalone`` child, each
side by side with what a user would write in ten minutes on the official client:

* batch read rows/s of N messages of 100 B on 4 partitions (produced batched): the naive
  source (a Python data source, one input partition per topic partition, the official
  ``Reader`` with ``receiver_queue_size=10000``, ``read_next`` in a loop yielding
  ``(value, key)`` tuples), the ``pulsar`` source with the same two columns
  (``.schema("value binary, __key string")``), and with all 9 default columns;
* batch write rows/s of N rows of 100 B: ``df.write.format("pulsar")`` against a naive
  ``foreachPartition`` writer on the official producer (``batching_enabled=True``,
  ``block_if_queue_full=True``, ``send_async`` per row, ``flush`` at the end);
* streaming latency: messages published at a steady rate (default 1,000 msg/s) by the
  official client, a query with ``trigger(processingTime="0 seconds")`` appending to a
  memory sink: publish to the commit of the row's micro-batch, p50/p99, the time from
  ``start()`` to the first micro-batch with rows, and Spark's phases of a micro-batch.

Reads and writes run in alternating rounds (``--rounds``, best of each kept). Each also
reports the CPU seconds it cost per million rows, per process group (the broker, the Spark
JVM, Spark's Python workers; from ``/proc``), against the wall time on the machine's cores,
so a figure says what bounds it even when other jobs share the machine (the load average
before and after is printed too).

    PYTHONPATH=src python bench/spark_bench.py [--messages 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pulsar
import pyarrow
import pyspark
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from tests.broker.brokerproc import BrokerProcess

BROKER_CONF = {"allowAutoTopicCreationType": "partitioned", "defaultNumPartitions": "4",
               "magnetarFsyncPolicy": "never", "brokerDeduplicationEnabled": "true"}
TWO = "value binary, __key string"


class NaiveSource(DataSource):
    """What a user writes first: the official Reader, one tuple per message."""

    @classmethod
    def name(cls) -> str:
        return "naive_pulsar"

    def schema(self) -> str:
        return TWO

    def reader(self, schema):  # type: ignore[no-untyped-def]
        return NaiveReader(self.options)


class NaiveReader(DataSourceReader):
    def __init__(self, options) -> None:  # type: ignore[no-untyped-def]
        self.url = options["service.url"]
        self.topic = options["topic"]
        self.parts = int(options["partitions"])

    def partitions(self):  # type: ignore[no-untyped-def]
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition):  # type: ignore[no-untyped-def]
        import pulsar as pc

        client = pc.Client(self.url, logger=pc.ConsoleLogger(pc.LoggerLevel.Error))
        topic = f"{self.topic}-partition-{partition.value}"
        reader = client.create_reader(topic, pc.MessageId.earliest, receiver_queue_size=10000)
        try:
            while reader.has_message_available():
                m = reader.read_next()
                yield (m.data(), m.partition_key() or None)
        finally:
            reader.close()
            client.close()


def naive_writer(url: str, topic: str) -> Callable[..., None]:
    """The function a user hands ``foreachPartition``: the official producer, batching on."""

    def write(rows) -> None:  # type: ignore[no-untyped-def]
        import pulsar as pc

        client = pc.Client(url, logger=pc.ConsoleLogger(pc.LoggerLevel.Error))
        producer = client.create_producer(topic, batching_enabled=True,
                                          block_if_queue_full=True)
        for r in rows:
            producer.send_async(r.value, None)
        producer.flush()
        client.close()

    return write


def produce(url: str, topic: str, n: int) -> None:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    p = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                               block_if_queue_full=True, max_pending_messages=20000,
                               message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    payload = b"x" * 100
    for _ in range(n):
        p.send_async(payload, None)
    p.flush()
    client.close()


# ------------------------------------------------------------------ CPU from /proc
def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (field 3 onwards)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cpu_seconds(fields: list[str] | None, children: bool = False) -> float:
    if fields is None:
        return 0.0
    used = int(fields[11]) + int(fields[12])
    if children:  # reaped children (Python workers that exited)
        used += int(fields[13]) + int(fields[14])
    return used / os.sysconf("SC_CLK_TCK")


def cpu_by_group(broker_pid: int) -> dict[str, float]:
    """CPU seconds used so far by the broker, and by this process's descendants: the
    Spark JVM and Spark's Python workers (other jobs on the machine do not count)."""
    parent: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            fields = _stat(d.name)
            if fields is not None:
                stats[int(d.name)] = fields
                parent[int(d.name)] = int(fields[1])
    me = os.getpid()

    def ours(pid: int) -> bool:
        while pid > 1:
            pid = parent.get(pid, 0)
            if pid == me:
                return True
        return False

    out = {"broker": _cpu_seconds(stats.get(broker_pid)), "jvm": 0.0, "python workers": 0.0}
    for pid, fields in stats.items():
        if pid == broker_pid or not ours(pid):
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"org.apache.spark" in cmd or b"spark-submit" in cmd:
            out["jvm"] += _cpu_seconds(fields)
        elif b"pyspark" in cmd:
            # workers, the daemon they fork from (its reaped children count too: workers
            # that ended) and the driver-side runners of a Python data source
            out["python workers"] += _cpu_seconds(fields, children=b"daemon" in cmd)
    return out


class Measured:
    """Best-of rounds of one figure, with the CPU it cost per million rows."""

    def __init__(self, label: str, rows: int) -> None:
        self.label = label
        self.rows = rows
        self.rates: list[float] = []
        self.cpu: list[dict[str, float]] = []

    def run(self, broker_pid: int, fn: Callable[[], None]) -> None:
        before = cpu_by_group(broker_pid)
        t = time.perf_counter()
        fn()
        wall = time.perf_counter() - t
        after = cpu_by_group(broker_pid)
        used = {k: (after[k] - before[k]) * 1e6 / self.rows for k in before}
        self.rates.append(self.rows / wall)
        self.cpu.append(used)
        cores = os.cpu_count() or 1
        parts = ", ".join(f"{k} {v:.1f}" for k, v in used.items())
        print(f"  {self.label}: {self.rows / wall:,.0f} rows/s in {wall:.2f}s; CPU s per M "
              f"rows: {parts}; total {sum(used.values()):.1f} of {wall * cores * 1e6 / self.rows:.1f}"
              " core-s per M rows that passed", flush=True)

    @property
    def best(self) -> float:
        return max(self.rates)

    def best_cpu(self) -> dict[str, float]:
        return self.cpu[self.rates.index(self.best)]


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def machine() -> str:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True,
                              timeout=30).stderr.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        java = "?"
    return (f"machine: {os.cpu_count()} cores, {model}; {platform.platform()}\n"
            f"versions: Python {platform.python_version()}, PySpark {pyspark.__version__}, "
            f"PyArrow {pyarrow.__version__}, pulsar-client {pulsar.__version__}, {java}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=1000, help="streaming publish rate, msg/s")
    ap.add_argument("--stream-seconds", type=float, default=20)
    ap.add_argument("--only", default="reads,writes,latency,eo-latency",
                    help="comma-separated parts to run")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    print(machine())
    print(f"settings: {args.messages:,} messages of 100 B, 4 partitions, local[2], "
          f"{args.rounds} alternating rounds (best kept); broker {BROKER_CONF}")
    print(f"load average before: {load_average()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp), BROKER_CONF)
        broker.start()
        try:
            assert broker.proc is not None
            run(broker.url, args, Path(tmp), broker.proc.pid)
        finally:
            broker.stop()
    print(f"load average after: {load_average()}")


def run(url: str, args: argparse.Namespace, tmp: Path, broker_pid: int) -> None:
    n = args.messages
    topic = "persistent://public/default/bench-read"
    t = time.perf_counter()
    produce(url, topic, n)
    print(f"produced {n:,} x 100 B on 4 partitions in {time.perf_counter() - t:.1f}s",
          flush=True)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.numRecentProgressUpdates", "10000").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(NaiveSource)

    def count(fmt: str, schema: str | None = None) -> Callable[[], None]:
        def go() -> None:
            df = spark.read.format(fmt).option("service.url", url).option("topic", topic)
            if fmt == "naive_pulsar":
                df = df.option("partitions", "4")
            if schema is not None:
                df = df.schema(schema)
            got = df.load().selectExpr("sum(length(value))").collect()[0][0]
            assert got == 100 * n, got
        return go

    parts = set(args.only.split(","))
    reads = [(Measured("naive official-Reader source, 2 columns", n), count("naive_pulsar")),
             (Measured(f"pulsar source, .schema({TWO!r})", n), count("pulsar", TWO)),
             (Measured("pulsar source, all 9 default columns", n), count("pulsar"))]
    if "reads" not in parts:
        reads = []
    for _, fn in reads:  # warm-up: Python workers started, classes loaded
        fn()
    print("batch read:")
    for _ in range(args.rounds):
        for m, fn in reads:
            m.run(broker_pid, fn)

    df = spark.range(n).selectExpr("unhex(repeat('78', 100)) AS value").repartition(2)
    df.cache().count()
    topics = iter(range(10**6))

    written: list[str] = []

    def sink() -> None:
        written.append(f"persistent://public/default/bench-write-{next(topics)}")
        df.write.format("pulsar").option("service.url", url).option("topic", written[-1]) \
            .mode("append").save()

    def naive_sink() -> None:
        written.append(f"persistent://public/default/bench-naive-write-{next(topics)}")
        df.foreachPartition(naive_writer(url, written[-1]))

    def eo_sink() -> None:
        written.append(f"persistent://public/default/bench-eo-write-{next(topics)}")
        df.write.format("pulsar").option("service.url", url).option("topic", written[-1]) \
            .option("deliveryGuarantee", "exactly-once").mode("append").save()

    writes = [(Measured("naive foreachPartition writer, official producer batching", n),
               naive_sink),
              (Measured('df.write.format("pulsar")', n), sink),
              (Measured('df.write.format("pulsar"), deliveryGuarantee=exactly-once', n),
               eo_sink)]
    if "writes" not in parts:
        writes = []
    print("batch write (each round to new 4-partition topics):")
    for _, fn in writes:  # warm-up
        fn()
    for _ in range(args.rounds):
        for m, fn in writes:
            m.run(broker_pid, fn)
    for t in written:  # every row arrived, once (after the timed writes)
        got = spark.read.format("pulsar").option("service.url", url).option("topic", t) \
            .schema(TWO).load().count()
        assert got == n, (t, got)
    print(f"  checked: each of the {len(written)} written topics holds {n:,} rows")

    latency = streaming_latency(spark, url, tmp, args.rate, args.stream_seconds, broker_pid) \
        if "latency" in parts else ""
    sink_latency = [sink_to_topic_latency(spark, url, tmp, args.rate, args.stream_seconds, g)
                    for g in ("at-least-once", "exactly-once")] if "eo-latency" in parts \
        else []
    spark.stop()

    print("\n| figure | rows/s | vs naive | CPU s per M rows (broker / JVM / Python workers) |")
    print("|---|---|---|---|")
    for group in (reads, writes):
        if not group:
            continue
        naive = group[0][0].best
        for m, _ in group:
            c = m.best_cpu()
            print(f"| {m.label} | {m.best:,.0f} | {m.best / naive:.2f} | "
                  f"{sum(c.values()):.1f} ({c['broker']:.1f} / {c['jvm']:.1f} / "
                  f"{c['python workers']:.1f}) |")
    if len(writes) == 3:
        print(f"exactly-once / at-least-once write throughput: "
              f"{writes[2][0].best / writes[1][0].best:.2f}x")
    print(latency)
    for line in sink_latency:
        print(line)


def sink_to_topic_latency(spark: SparkSession, url: str, tmp: Path, rate: int,
                          seconds: float, guarantee: str) -> str:
    """Publish at ``rate`` msg/s to a topic that a ``processingTime="0 seconds"`` query
    copies to another topic through the ``pulsar`` sink (each row's value: its original
    publish time); a consumer of the other topic notes when each row arrives (with
    exactly-once, when the micro-batch's transactions commit). Latency: arrival minus
    original publish time, p50/p99, over the rows of the window after the first 2 s."""
    src = f"persistent://public/default/bench-sink-lat-src-{guarantee}"
    dst = f"persistent://public/default/bench-sink-lat-dst-{guarantee}"
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    prod = client.create_producer(src, batching_enabled=True, batching_max_publish_delay_ms=1)
    prod.send(b"warm")
    arrivals: list[tuple[float, int]] = []

    def arrived(consumer, msg) -> None:  # type: ignore[no-untyped-def]
        arrivals.append((time.time() * 1000, int(msg.data())))
        consumer.acknowledge(msg)

    client.subscribe(dst, "lat", message_listener=arrived)
    stop = threading.Event()

    def publish() -> None:
        interval = 1 / rate
        next_at = time.monotonic()
        while not stop.is_set():
            prod.send_async(b"y" * 100, None)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # a steady publishing rate, not synchronisation

    q = (spark.readStream.format("pulsar").option("service.url", url)
         .option("topic", src).option("startingOffsets", "latest").load()
         .selectExpr("CAST(unix_millis(__publishTime) AS STRING) AS value")
         .writeStream.format("pulsar").option("service.url", url).option("topic", dst)
         .option("deliveryGuarantee", guarantee)
         .option("checkpointLocation", str(tmp / f"sink-lat-{guarantee}"))
         .trigger(processingTime="0 seconds").start())
    publisher = threading.Thread(target=publish, daemon=True)
    started = time.time() * 1000
    publisher.start()
    time.sleep(seconds)  # the measuring window
    stop.set()
    publisher.join()
    prod.flush()
    q.processAllAvailable()
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    q.stop()
    time.sleep(2)  # the last arrivals (a bench, not a test)
    client.close()
    lats = sorted(at - pub for at, pub in arrivals if pub > started + 2000)
    if not lats:
        return f"sink latency ({guarantee}): no rows arrived"
    commits = sorted(p["durationMs"].get("addBatch", 0) for p in progress)
    return (f"stream to topic at {rate} msg/s, {guarantee}: publish to readable in the "
            f"sink topic p50 {statistics.median(lats):.0f} ms, p99 "
            f"{lats[min(len(lats) - 1, int(len(lats) * 0.99))]:.0f} ms ({len(lats):,} rows, "
            f"{len(progress)} micro-batches; median addBatch {statistics.median(commits):.0f}"
            " ms, which includes the sink's commit)")


def _ms(iso: str) -> float:
    """Milliseconds since the epoch of a progress report's UTC timestamp."""
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


def streaming_latency(spark: SparkSession, url: str, tmp: Path, rate: int,
                      seconds: float, broker_pid: int) -> str:
    """Publish at ``rate`` msg/s while a ``processingTime="0 seconds"`` query appends each
    row's publish time and its micro-batch's timestamp to a memory sink. A row is in the
    sink when its micro-batch commits: the start of that trigger (the progress report's
    ``timestamp``, the last at or before the batch's ``current_timestamp()``) plus its
    ``triggerExecution`` time."""
    topic = "persistent://public/default/bench-latency"
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    prod = client.create_producer(topic, batching_enabled=True,
                                  batching_max_publish_delay_ms=1)
    prod.send(b"warm")
    stop = threading.Event()

    def publish() -> None:
        interval = 1 / rate
        next_at = time.monotonic()
        while not stop.is_set():
            prod.send_async(b"y" * 100, None)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # a steady publishing rate, not synchronisation

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    before = cpu_by_group(broker_pid)
    started = time.time() * 1000
    q = (spark.readStream.format("pulsar").option("service.url", url)
         .option("topic", topic).option("startingOffsets", "latest").load()
         .selectExpr("unix_millis(__publishTime) AS pub",
                     "unix_millis(current_timestamp()) AS batch_ts")
         .writeStream.format("memory").queryName("lat")
         .option("checkpointLocation", str(tmp / "lat-ckpt"))
         .trigger(processingTime="0 seconds").start())
    time.sleep(seconds)  # the measuring window
    after = cpu_by_group(broker_pid)
    window = time.time() - started / 1000
    stop.set()
    publisher.join()
    prod.flush()
    q.processAllAvailable()
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    q.stop()
    client.close()
    rows = spark.sql("SELECT pub, batch_ts FROM lat").collect()
    if not rows or not progress:
        return "streaming: no rows arrived"
    starts = sorted((_ms(p["timestamp"]), p["durationMs"]["triggerExecution"]) for p in progress)
    lats = []
    for pub, batch_ts in rows:
        begin, took = max((s for s in starts if s[0] <= batch_ts + 1), default=starts[0])
        lats.append(begin + took - pub)
    lats.sort()
    p50 = statistics.median(lats)
    p99 = lats[min(len(lats) - 1, int(len(lats) * 0.99))]
    first = starts[0][0] + starts[0][1] - started
    steady = progress[1:] or progress
    phases = ", ".join(
        f"{k} {statistics.median(p['durationMs'].get(k, 0) for p in steady):.0f}"
        for k in ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets",
                  "triggerExecution"))
    return (f"streaming at {rate} msg/s, processingTime 0 s, memory sink: publish to "
            f"committed in the sink p50 {p50:.0f} ms, p99 {p99:.0f} ms ({len(lats):,} rows in "
            f"{len(progress)} micro-batches); first micro-batch with rows committed "
            f"{first / 1000:.2f} s after start(); median ms per micro-batch after the "
            f"first: {phases}; CPU core-s per s while it ran: "
            + ", ".join(f"{k} {(after[k] - before[k]) / window:.2f}" for k in before)
            + " (the bench's publisher thread not counted)")


if __name__ == "__main__":
    main()
