"""Clicks per user and 10-second window (event time, 5 s watermark), written to the topic
``clicks-per-user`` (JSON values keyed by user) and to Parquet.

    python examples/clickstream/clickstream_job.py --url pulsar://localhost:6650 \\
        --out /tmp/clicks --seconds 75

``clicks_per_user`` builds the aggregation and ``start_sinks`` starts both queries; the
tests run them with an ``availableNow`` trigger on a few hand-made events.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("clickstream")

EVENT_SCHEMA = "user string, page string, ts long"


def clicks_per_user(spark: SparkSession, url: str, topic: str = "clicks",
                    subscription: str | None = "clickstream-job") -> DataFrame:
    """A streaming DataFrame of (window_start, window_end, user, count) over ``topic``."""
    reader = (spark.readStream.format("pulsar").option("service.url", url)
              .option("topic", topic).option("startingOffsets", "earliest"))
    if subscription:
        reader = reader.option("subscriptionName", subscription)
    clicks = (reader.load()
              .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
              .select("e.user", "e.page",
                      (F.col("e.ts") / 1000).cast("timestamp").alias("event_time")))
    return (clicks.withWatermark("event_time", "5 seconds")
            .groupBy(F.window("event_time", "10 seconds"), "user").count()
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"), "user", "count"))


def start_sinks(spark: SparkSession, url: str, out: str, source: str = "clicks",
                topic: str = "clicks-per-user", subscription: str | None = "clickstream-job",
                **trigger: Any) -> list[StreamingQuery]:
    """Each closed window to ``topic`` (key: user, value: JSON) and to ``out``/parquet.

    Two queries, so two durable subscriptions (``<subscription>-topic`` and
    ``-parquet``): each one is acknowledged as its own query commits."""
    def counts(sink: str) -> DataFrame:
        return clicks_per_user(spark, url, source,
                               f"{subscription}-{sink}" if subscription else None)

    to_topic = (counts("topic").select(F.col("user").alias("__key"),
                                       F.to_json(F.struct("window_start", "window_end",
                                                          "user", "count")).alias("value"))
                .writeStream.format("pulsar").option("service.url", url)
                .option("topic", topic).outputMode("append")
                .option("checkpointLocation", f"{out}/ckpt-topic"))
    to_files = (counts("parquet").writeStream.format("parquet")
                .option("path", f"{out}/parquet")
                .option("checkpointLocation", f"{out}/ckpt-parquet").outputMode("append"))
    if trigger:
        to_topic, to_files = to_topic.trigger(**trigger), to_files.trigger(**trigger)
    return [to_topic.start(), to_files.start()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="pulsar://localhost:6650")
    ap.add_argument("--out", default="/tmp/clicks")
    ap.add_argument("--seconds", type=float, default=60)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    spark = (SparkSession.builder.master("local[2]").appName("clickstream")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    queries = start_sinks(spark, args.url, args.out)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline and all(q.isActive for q in queries):
        queries[0].awaitTermination(min(5.0, max(0.1, deadline - time.monotonic())))
    for q in queries:
        progress = [p for p in q.recentProgress if p["numInputRows"]]
        log.info("%s: %d input rows in the last %d batches", q.name or q.id,
                 sum(p["numInputRows"] for p in progress), len(progress))
        q.stop()
    spark.read.parquet(f"{args.out}/parquet").orderBy("window_start", "user").show(10, False)
    spark.stop()


if __name__ == "__main__":
    main()
