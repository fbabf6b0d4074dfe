"""Clicks per user and 10-second window (event time, 5 s watermark), written to the topic
``clicks-per-user`` (JSON values keyed by user) and to Parquet.

    python examples/clickstream/clickstream_job.py --url pulsar://localhost:6650 \\
        --out /tmp/clicks --seconds 60
"""

from __future__ import annotations

import argparse
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="pulsar://localhost:6650")
    ap.add_argument("--out", default="/tmp/clicks")
    ap.add_argument("--seconds", type=float, default=60)
    args = ap.parse_args()
    spark = (SparkSession.builder.master("local[2]").appName("clickstream")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    clicks = (spark.readStream.format("pulsar").option("service.url", args.url)
              .option("topic", "clicks").option("startingOffsets", "earliest")
              .option("subscriptionName", "clickstream-job").load()
              .select(F.from_json(F.col("value").cast("string"),
                                  "user string, page string, ts long").alias("e"))
              .select("e.user", "e.page",
                      (F.col("e.ts") / 1000).cast("timestamp").alias("event_time")))
    counts = (clicks.withWatermark("event_time", "5 seconds")
              .groupBy(F.window("event_time", "10 seconds"), "user").count()
              .select(F.col("window.start").alias("window_start"),
                      F.col("window.end").alias("window_end"), "user", "count"))
    to_topic = (counts.select(F.col("user").alias("__key"),
                              F.to_json(F.struct("window_start", "window_end", "user",
                                                 "count")).alias("value"))
                .writeStream.format("pulsar").option("service.url", args.url)
                .option("topic", "clicks-per-user").outputMode("append")
                .option("checkpointLocation", f"{args.out}/ckpt-topic").start())
    to_files = (counts.writeStream.format("parquet").option("path", f"{args.out}/parquet")
                .option("checkpointLocation", f"{args.out}/ckpt-parquet")
                .outputMode("append").start())
    deadline = time.time() + args.seconds
    while time.time() < deadline and to_topic.isActive and to_files.isActive:
        to_topic.awaitTermination(5)
    to_topic.stop()
    to_files.stop()
    spark.read.parquet(f"{args.out}/parquet").orderBy("window_start", "user").show(10, False)


if __name__ == "__main__":
    main()
