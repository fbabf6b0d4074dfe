"""Structured Streaming with the ``pulsar`` source and sink on a real local Spark and
broker: several micro-batches under a row limit, a stop and restart from the checkpoint
with no loss and no duplicate (processing-time and availableNow triggers), the durable
subscription following commits, and a stream written back to a topic."""

from __future__ import annotations

import pulsar

from tests.spark.conftest import new_topic
from tests.spark.test_batch import produce, read_back


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
