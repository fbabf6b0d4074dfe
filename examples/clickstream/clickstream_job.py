"""Clicks per user and 10-second window (event time, 5 s watermark), written to the topic
``clicks-per-user`` (JSON values keyed by user) and to Parquet.

    python examples/clickstream/clickstream_job.py --url pulsar://localhost:6650 \\
        --out /tmp/clicks --seconds 75

``clicks_per_user`` builds the aggregation and ``start_sinks`` starts both queries; the
tests run them with an ``availableNow`` trigger on a few hand-made events. ``account``
checks the figures add up: every click in the source topic is either counted in a window
written to Parquet (the same count the source gives that window) or in a window the
watermark had not closed yet when the job stopped (append mode writes a window only then).
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


def account(spark: SparkSession, url: str, out: str, source: str = "clicks") -> dict[str, Any]:
    """Where each click of ``source`` went: ``total`` clicks in the topic, ``written`` in
    the ``windows`` written to ``out``/parquet, ``unwritten`` in windows not closed when the
    job stopped (from ``open_from`` on); ``mismatched`` windows whose written count differs
    from the source's, and ``lost`` clicks in closed windows that were not written (both 0
    when nothing was lost)."""
    events = (spark.read.format("pulsar").option("service.url", url).option("topic", source)
              .load().select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
              .select("e.user", (F.col("e.ts") / 1000).cast("timestamp").alias("event_time")))
    per_window = (events.groupBy(F.window("event_time", "10 seconds"), "user").count()
                  .select(F.col("window.start").alias("window_start"), "user",
                          F.col("count").alias("source_count")))
    written = spark.read.parquet(f"{out}/parquet").select("window_start", "user", "count")
    rows = per_window.join(written, ["window_start", "user"], "full_outer").collect()
    closed = [r for r in rows if r["count"] is not None]
    last_closed = max((r.window_start for r in closed), default=None)
    open_rows = [r for r in rows if r["count"] is None]
    lost = sum(r.source_count for r in open_rows
               if last_closed is not None and r.window_start <= last_closed)
    return {
        "total": sum(r.source_count or 0 for r in rows),
        "written": sum(r["count"] for r in closed),
        "windows": len(closed),
        "unwritten": sum(r.source_count for r in open_rows),
        "open_from": min((r.window_start for r in open_rows), default=None),
        "mismatched": sum(1 for r in closed if r["count"] != r.source_count),
        "lost": lost,
    }


def _input_rows(query: StreamingQuery, seen: dict[int, int]) -> None:
    """Remember each batch's input rows (Spark keeps only the last 100 progress reports)."""
    for p in query.recentProgress:
        seen[p["batchId"]] = p["numInputRows"]


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
    rows: list[dict[int, int]] = [{} for _ in queries]
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline and all(q.isActive for q in queries):
        queries[0].awaitTermination(min(5.0, max(0.1, deadline - time.monotonic())))
        for q, seen in zip(queries, rows, strict=True):
            _input_rows(q, seen)
    for q, seen in zip(queries, rows, strict=True):
        q.stop()
        _input_rows(q, seen)
        log.info("%s: read %d clicks in %d batches", q.name or q.id, sum(seen.values()),
                 sum(1 for n in seen.values() if n))
    spark.read.parquet(f"{args.out}/parquet").orderBy("window_start", "user").show(10, False)
    got = account(spark, args.url, args.out)
    log.info("%d clicks in the topic: %d counted in the %d windows written, %d in windows "
             "the watermark had not closed yet (from %s); %d lost, %d windows miscounted",
             got["total"], got["written"], got["windows"], got["unwritten"], got["open_from"],
             got["lost"], got["mismatched"])
    spark.stop()


if __name__ == "__main__":
    main()
