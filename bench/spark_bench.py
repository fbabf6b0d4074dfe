"""Spark data source figures, on ``local[2]`` against a ``magnetar standalone`` child:

* batch read rows/s of N messages of 100 B on 4 partitions (produced batched), with the
  ``pulsar`` source (Arrow batches) and, in the same run, with the simplest alternative a
  user would write: a Python data source reading each partition with the official
  ``pulsar-client`` Reader and yielding tuples;
* batch write rows/s (a DataFrame of N rows of 100 B written with ``format("pulsar")``);
* streaming end-to-end latency: messages published at a fixed rate, a query with a
  100 ms processing-time trigger appending ``now - __publishTime`` to a memory sink.

Each batch read also reports the CPU seconds it cost, per process group (the broker, the
Spark JVM, Spark's Python workers; from ``/proc``), against the wall time on the
machine's cores, so the figure says what bounds it, and the rate those CPU seconds
would allow on cores nobody else uses (on a shared machine the wall-clock rate also
measures the neighbours).

    python bench/spark_bench.py [--messages 1000000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pulsar
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from tests.broker.brokerproc import BrokerProcess


class NaiveSource(DataSource):
    """What a user writes first: the official Reader, one tuple per message."""

    @classmethod
    def name(cls) -> str:
        return "naive_pulsar"

    def schema(self) -> str:
        return "value binary, __key string, __publishTime timestamp"

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
        import datetime as dt

        import pulsar as pc

        client = pc.Client(self.url, logger=pc.ConsoleLogger(pc.LoggerLevel.Error))
        topic = f"{self.topic}-partition-{partition.value}"
        reader = client.create_reader(topic, pc.MessageId.earliest, receiver_queue_size=10000)
        try:
            while reader.has_message_available():
                m = reader.read_next()
                yield (m.data(), m.partition_key() or None,
                       dt.datetime.fromtimestamp(m.publish_timestamp() / 1000, dt.UTC))
        finally:
            reader.close()
            client.close()


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


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (field 3 onwards)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cpu_seconds(fields: list[str] | None) -> float:
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_group(broker_pid: int) -> dict[str, float]:
    """CPU seconds used so far by the broker, and by this process's descendants: the
    Spark JVM and Spark's Python workers (other Spark jobs on the machine do not count)."""
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
        elif b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
            out["python workers"] += _cpu_seconds(fields)
    return out


def cpu_report(before: dict[str, float], after: dict[str, float], wall: float) -> str:
    used = {k: after[k] - before[k] for k in before}
    cores = os.cpu_count() or 1
    parts = ", ".join(f"{k} {v:.1f}" for k, v in used.items())
    return (f"CPU s: {parts} (of {wall * cores:.1f} core-seconds: {wall:.1f}s x {cores} "
            "cores)")


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    args = ap.parse_args()
    n = args.messages
    os.environ["PYSPARK_PYTHON"] = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp), {"allowAutoTopicCreationType": "partitioned",
                                           "defaultNumPartitions": "4",
                                           "magnetarFsyncPolicy": "never"})
        broker.start()
        try:
            assert broker.proc is not None
            run(broker.url, n, Path(tmp), broker.proc.pid)
        finally:
            broker.stop()


def run(url: str, n: int, tmp: Path, broker_pid: int) -> None:
    topic = "persistent://public/default/bench-read"
    t = timed(lambda: produce(url, topic, n))
    print(f"produced {n:,} x 100 B on 4 partitions in {t:.1f}s")
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(NaiveSource)

    def count(fmt: str, schema: str | None = None) -> None:
        df = spark.read.format(fmt).option("service.url", url).option("topic", topic)
        if fmt == "naive_pulsar":
            df = df.option("partitions", "4")
        if schema is not None:
            df = df.schema(schema)
        got = df.load().selectExpr("sum(length(value))").collect()[0][0]
        assert got == 100 * n, got

    def measured(fmt: str, schema: str | None = None) -> float:
        before = cpu_by_group(broker_pid)
        wall = timed(lambda: count(fmt, schema))
        after = cpu_by_group(broker_pid)
        label = fmt + (f" .schema({schema!r})" if schema else
                       " (its 3 columns)" if fmt == "naive_pulsar" else " (all 9 columns)")
        ours = sum(after.values()) - sum(before.values())
        cores = os.cpu_count() or 1
        print(f"  {label}: {n / wall:,.0f} rows/s; {cpu_report(before, after, wall)}; "
              f"{n / (ours / cores):,.0f} rows/s if those processes had the cores alone")
        return n / wall

    same = NaiveSource({}).schema()  # the naive source's three columns
    count("pulsar")  # warm-up: python workers started
    ours = max(measured("pulsar") for _ in range(2))
    like = max(measured("pulsar", same) for _ in range(2))
    naive = measured("naive_pulsar")
    print(f"batch read rows/s: pulsar source {ours:,.0f} (all 9 columns), {like:,.0f} "
          f"({same}); naive official-Reader tuples {naive:,.0f} (same columns); "
          f"ratio {like / naive:.1f}x like for like, {ours / naive:.1f}x all columns")

    wn = n // 2
    df = spark.range(wn).selectExpr("unhex(repeat('78', 100)) AS value").repartition(2)
    df.cache().count()
    out = "persistent://public/default/bench-write"
    t = timed(lambda: df.write.format("pulsar").option("service.url", url)
              .option("topic", out).mode("append").save())
    print(f"batch write rows/s: {wn / t:,.0f} ({wn:,} rows of 100 B, 2 tasks, 4 partitions)")

    lat_topic = "persistent://public/default/bench-latency"
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    prod = client.create_producer(lat_topic, batching_enabled=False)
    prod.send(b"warm")
    q = (spark.readStream.format("pulsar").option("service.url", url)
         .option("topic", lat_topic).option("startingOffsets", "latest").load()
         .selectExpr("(unix_micros(current_timestamp()) - unix_micros(__publishTime)) / 1000"
                     " AS ms")
         .writeStream.format("memory").queryName("lat")
         .option("checkpointLocation", str(tmp / "lat-ckpt"))
         .trigger(processingTime="100 milliseconds").start())
    rate = 200
    end = time.monotonic() + 15
    while time.monotonic() < end:
        prod.send_async(b"y" * 100, None)
        time.sleep(1 / rate)  # a fixed publishing rate, not synchronisation
    prod.flush()
    q.processAllAvailable()
    q.stop()
    lats = sorted(r.ms for r in spark.sql("SELECT ms FROM lat").collect())
    if lats:
        p50 = statistics.median(lats)
        p99 = lats[int(len(lats) * 0.99) - 1]
        print(f"streaming end-to-end latency at {rate} msg/s, 100 ms trigger: p50 {p50:.0f} ms "
              f"p99 {p99:.0f} ms ({len(lats)} messages; includes Spark's batch planning)")
    client.close()
    spark.stop()


if __name__ == "__main__":
    main()
