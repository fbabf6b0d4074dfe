"""Structured Streaming with the ``pulsar`` source and sink on a real local Spark and
broker: several micro-batches under a row limit, a stop and restart from the checkpoint
with no loss and no duplicate (processing-time and availableNow triggers), queries killed
mid-batch (before, half-way through and after writing a batch, before its commit) and
restarted from their checkpoint with each message exactly once in the sink, the durable
subscription following commits, a stream written back to a topic, and a replayed
micro-batch write dropped by the broker's deduplication."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import threading
from pathlib import Path
from types import ModuleType

import pulsar
import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException

from magnetar.spark.options import SinkOptions
from tests.spark.conftest import new_topic
from tests.spark.test_batch import produce, read_back

#: a hang guard: a SparkSession's first job on a loaded 2-core machine takes minutes, and a
#: py4j call cut by the timeout leaves the module's session unusable for every later test
pytestmark = pytest.mark.timeout(600)


def stream(spark, broker, topic, **options):
    reader = (spark.readStream.format("pulsar").option("service.url", broker.url)
              .option("topic", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().selectExpr("CAST(value AS STRING) AS v")


def sink_values(spark, path) -> list[str]:
    return [r.v for r in spark.read.parquet(str(path)).collect()]


def test_processing_time_restart_exactly_once(spark, broker, official, tmp_path):
    topic = new_topic("stream")
    sub = "spark-q1"
    produce(official, topic, 500)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run() -> list[int]:
        q = (stream(spark, broker, topic, maxRecordsPerTrigger="150", subscriptionName=sub)
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(ckpt)).trigger(processingTime="100 milliseconds")
             .start())
        try:
            q.processAllAvailable()
            return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
        finally:
            q.stop()

    first = run()
    assert max(first) <= 150 and sum(first) == 500 and len(first) >= 4
    produce(official, topic, 300, start=500)
    second = run()
    assert max(second) <= 150 and sum(second) == 300
    got = sink_values(spark, out)
    assert sorted(got) == sorted(f"m{i}" for i in range(800))  # no loss, no duplicate
    # the durable subscription was acknowledged as batches committed: it no longer
    # starts at the first message
    consumer = official.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Failover)
    try:
        first_left = int(consumer.receive(timeout_millis=10000).data()[1:])
    finally:
        consumer.close()
    assert first_left >= 300


def test_available_now_restart_exactly_once(spark, broker, official, tmp_path):
    topic = new_topic("avail")
    produce(official, topic, 400)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run() -> list[int]:
        q = (stream(spark, broker, topic, maxRecordsPerTrigger="100").writeStream
             .format("parquet").option("path", str(out))
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
        q.awaitTermination(180)
        assert not q.isActive
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    assert run() == [100, 100, 100, 100]
    produce(official, topic, 150, start=400)
    assert sum(run()) == 150
    assert sorted(sink_values(spark, out)) == sorted(f"m{i}" for i in range(550))


def test_stream_to_topic(spark, broker, official, tmp_path):
    src, dst = new_topic("from"), new_topic("to")
    produce(official, src, 250)
    q = (stream(spark, broker, src).selectExpr("upper(v) AS value")
         .writeStream.format("pulsar").option("service.url", broker.url).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True)
         .start())
    q.awaitTermination(180)
    assert sorted(m.data() for m in read_back(official, dst)) == \
        sorted(b"M%d" % i for i in range(250))


# ----------------------------------------------------------- killed and restarted
class Crash(RuntimeError):
    """Raised by the test sink to kill a query in the middle of a micro-batch."""


class CrashingSink:
    """A ``foreachBatch`` sink that is idempotent per batch id (batch ``b`` goes to file
    ``b``, rewritten whole when the batch is replayed) and can be told to die in a given
    batch: before writing, after writing half of it, or after writing all of it (written
    but not committed)."""

    def __init__(self, out) -> None:
        self.out = out
        out.mkdir(exist_ok=True)
        self.crash: dict[int, str] = {}
        self.stop_after: int | None = None
        self.passed = threading.Event()
        self.seen: list[tuple[int, int]] = []  # (batch id, rows), every call

    def __call__(self, df, batch_id: int) -> None:
        rows = [r.v for r in df.collect()]
        self.seen.append((batch_id, len(rows)))
        how = self.crash.pop(batch_id, None)
        path = self.out / f"{batch_id}.txt"
        if how == "before":
            raise Crash(f"killed before writing batch {batch_id}")
        if how == "half":
            path.write_text("".join(f"{v}\n" for v in rows[:len(rows) // 2]))
            raise Crash(f"killed half-way through batch {batch_id}")
        path.write_text("".join(f"{v}\n" for v in rows))
        if how == "after":
            raise Crash(f"killed after writing batch {batch_id}, before its commit")
        if self.stop_after is not None and batch_id >= self.stop_after:
            self.passed.set()

    def values(self) -> list[str]:
        return [v for p in sorted(self.out.glob("*.txt")) for v in p.read_text().split()]


def start_with(spark, broker, topic, sink: CrashingSink, ckpt, **trigger):
    return (stream(spark, broker, topic, maxRecordsPerTrigger="100").writeStream
            .foreachBatch(sink).option("checkpointLocation", str(ckpt))
            .trigger(**trigger).start())


def expect_crash(q) -> None:
    with pytest.raises(StreamingQueryException, match="killed"):
        q.awaitTermination(120)
    assert not q.isActive


def test_processing_time_killed_mid_batch_exactly_once(spark, broker, official, tmp_path):
    """Stopped between batches, killed half-way through writing one, restarted each time
    from the checkpoint: every message lands in the sink exactly once."""
    topic = new_topic("kill-pt")
    produce(official, topic, 600)
    sink, ckpt = CrashingSink(tmp_path / "out"), tmp_path / "ckpt"
    trigger = {"processingTime": "100 milliseconds"}
    # run 1: stopped from outside once batch 1 is written (batch 2 may be under way)
    sink.stop_after = 1
    q = start_with(spark, broker, topic, sink, ckpt, **trigger)
    assert sink.passed.wait(120)
    q.stop()
    sink.stop_after = None
    done = max(b for b, _ in sink.seen)
    # run 2: killed half-way through the next batch but one
    sink.crash[done + 2] = "half"
    expect_crash(start_with(spark, broker, topic, sink, ckpt, **trigger))
    produce(official, topic, 200, start=600)
    # run 3: to the end
    q = start_with(spark, broker, topic, sink, ckpt, **trigger)
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert sorted(sink.values()) == sorted(f"m{i}" for i in range(800))
    assert all(n <= 100 for _, n in sink.seen)
    # the killed batch was replayed whole, with the same rows
    assert [n for b, n in sink.seen if b == done + 2] == [100, 100]


def test_available_now_killed_mid_batch_exactly_once(spark, broker, official, tmp_path):
    """availableNow killed after writing a batch but before its commit, then half-way
    through another, restarted from the checkpoint: each message exactly once."""
    topic = new_topic("kill-an")
    produce(official, topic, 400)
    sink, ckpt = CrashingSink(tmp_path / "out"), tmp_path / "ckpt"
    sink.crash[1] = "after"
    expect_crash(start_with(spark, broker, topic, sink, ckpt, availableNow=True))
    produce(official, topic, 150, start=400)
    sink.crash[0] = "before"  # must not fire: batch 0 was committed
    sink.crash[3] = "half"
    expect_crash(start_with(spark, broker, topic, sink, ckpt, availableNow=True))
    q = start_with(spark, broker, topic, sink, ckpt, availableNow=True)
    q.awaitTermination(180)
    assert not q.isActive and q.exception() is None
    assert sorted(sink.values()) == sorted(f"m{i}" for i in range(550))
    # batch 1 replayed after its crash with the same 100 messages, batch 3 likewise
    assert [b for b, _ in sink.seen] == [0, 1, 1, 2, 3, 3, 4, 5]
    assert (tmp_path / "out" / "1.txt").read_text().split() == [f"m{i}" for i in
                                                                range(100, 200)]


# ------------------------------------------------------- replayed write, deduplicated
@pytest.mark.parametrize("dedup", [True, False])
def test_replayed_stream_write_is_deduplicated(spark, broker, official, tmp_path, dedup):
    """A micro-batch written to a topic but not committed (its commit-log entry removed,
    as when the driver dies between the two) is replayed on restart; with deduplication
    on, the broker drops the replayed rows. The control without deduplication shows the
    replay did publish them again."""
    namespace = "public/default" if dedup else "public/spark-nodedup"
    if not dedup and not broker.call(broker.service.namespaces.exists, namespace):
        broker.call(broker.service.namespaces.create_namespace, namespace)
        broker.call(lambda: broker.service.policies.set(namespace,
                                                        deduplication_enabled=False))
    src = new_topic("replay-src")
    dst = new_topic("replay-dst").replace("public/default", namespace)
    produce(official, src, 300)
    ckpt = tmp_path / "ckpt"

    def run() -> list[tuple[int, int]]:
        q = (stream(spark, broker, src, maxRecordsPerTrigger="100")
             .selectExpr("v AS value").writeStream.format("pulsar")
             .option("service.url", broker.url).option("topic", dst)
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
        q.awaitTermination(180)
        assert not q.isActive and q.exception() is None
        return [(p["batchId"], p["numInputRows"]) for p in q.recentProgress
                if p["numInputRows"]]

    assert run() == [(0, 100), (1, 100), (2, 100)]
    commit = ckpt / "commits" / "2"
    assert commit.exists()
    commit.unlink()
    (ckpt / "commits" / ".2.crc").unlink(missing_ok=True)
    assert run() == [(2, 100)]  # batch 2 replayed: the same 100 rows written again
    got = sorted(m.data() for m in read_back(official, dst))
    once = sorted(b"m%d" % i for i in range(300))
    if dedup:
        assert got == once
    else:
        assert got == sorted(once + [b"m%d" % i for i in range(200, 300)])


# ------------------------------------------------------------------ the example
def load_example() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "examples/clickstream/clickstream_job.py"
    spec = importlib.util.spec_from_file_location("clickstream_job", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_clickstream_example(spark, broker, official, tmp_path):
    """The example's two queries, run to the end of a few hand-made clicks: the windows the
    watermark closed, once each, in the output topic and in Parquet."""
    job = load_example()
    src, dst = new_topic("clicks"), new_topic("clicks-per-user")
    producer = official.create_producer(src, batching_enabled=True)
    base = 1_700_000_000_000  # ms, a 10-second boundary
    clicks = [("u1", base + 1000 * i) for i in range(6)] + [
        ("u2", base + 2500), ("u2", base + 12_000), ("u1", base + 13_000),
        ("u3", base + 60_000)]  # the last one moves the watermark to base + 55 s
    for user, ts in clicks:
        producer.send_async(json.dumps({"user": user, "page": "/", "ts": ts}).encode(), None,
                            partition_key=user)
    producer.flush()
    producer.close()
    queries = job.start_sinks(spark, broker.url, str(tmp_path), source=src, topic=dst,
                              subscription="clicks-test", availableNow=True)
    for q in queries:
        q.awaitTermination(180)
        assert not q.isActive and q.exception() is None
    start = dt.datetime.fromtimestamp(base / 1000, dt.UTC)
    w0, w1 = start.strftime("%Y-%m-%dT%H:%M:%S.000Z"), \
        (start + dt.timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    expected = [(w0, "u1", 6), (w0, "u2", 1), (w1, "u1", 1), (w1, "u2", 1)]
    got = [(json.loads(m.data()), m.partition_key()) for m in read_back(official, dst)]
    assert all(v["user"] == key for v, key in got)
    assert sorted((v["window_start"], v["user"], v["count"]) for v, _ in got) == expected
    files = spark.read.parquet(str(tmp_path / "parquet")).collect()
    assert sorted((r.window_start.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                   r.user, r["count"]) for r in files) == expected
    # the figures add up: each click is in a written window or one not closed yet
    got = job.account(spark, broker.url, str(tmp_path), source=src)
    assert (got["total"], got["written"], got["windows"], got["unwritten"]) == (10, 9, 4, 1)
    assert (got["lost"], got["mismatched"]) == (0, 0)


def test_retried_stream_write_task_is_deduplicated(broker, official, monkeypatch):
    """A stream write task run twice for the same query and batch (a retry after it
    failed half-way) publishes each row once; the next batch of the same query, whose
    sequence ids start higher, is kept whole."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from magnetar.spark import writer

    class Task:
        def __init__(self, batch_id: int) -> None:
            self.props = {"sql.streaming.queryId": "query-1",
                          "streaming.sql.batchId": str(batch_id)}

        def getLocalProperty(self, key: str) -> str | None:
            return self.props.get(key)

    topic = new_topic("stream-retry")
    sink = writer.PulsarStreamWriter(
        SinkOptions.parse({"service.url": broker.url, "topic": topic}),
        StructType([StructField("value", BinaryType())]))
    rows = [pa.RecordBatch.from_pydict({"value": [b"r%d" % i for i in range(k, k + 700)]})
            for k in range(0, 2800, 700)]

    def failing():
        yield from rows[:2]
        raise RuntimeError("executor lost")  # after 1,400 rows, a whole batch sent

    monkeypatch.setattr(writer, "_task", lambda: (0, Task(7)))
    with pytest.raises(RuntimeError, match="executor lost"):
        sink.write(failing())
    assert sink.write(iter(rows[:3])).rows == 2100  # the retry of batch 7
    monkeypatch.setattr(writer, "_task", lambda: (0, Task(8)))
    assert sink.write(iter(rows[3:])).rows == 700  # batch 8
    assert [m.data() for m in read_back(official, topic)] == [b"r%d" % i for i in range(2800)]
