"""A Spark driver in a process of its own for the exactly-once tests: runs an
``availableNow`` stream from topic ``src`` to topic ``dst`` through the ``pulsar-hooked``
sink (exactly-once, 100 rows per micro-batch), so that a test can kill the whole driver
where a hook file makes it wait.

``python -m tests.spark.eo_driver <service url> <src> <dst> <checkpoint> <hooks dir>``
"""

from __future__ import annotations

import os
import sys


def main(url: str, src: str, dst: str, ckpt: str, hooks: str) -> int:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tests.spark import eo_hooks

    spark = (SparkSession.builder.master("local[2]").appName("magnetar-eo-driver")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.pythonDataSource.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    eo_hooks.register(spark)
    q = (spark.readStream.format("pulsar").option("service.url", url).option("topic", src)
         .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", "100").load()
         .selectExpr("value").writeStream.format("pulsar-hooked")
         .option("service.url", url).option("topic", dst)
         .option("deliveryGuarantee", "exactly-once").option("hooks", hooks)
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    q.awaitTermination()
    failed = q.exception() is not None
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
