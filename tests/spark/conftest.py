"""Fixtures for the Spark data source tests: a real broker (in this process, on its own
event-loop thread, with deduplication on) and a real local SparkSession (``local[2]``),
both one per test module.

Spark's Python workers run ``sys.executable`` and inherit ``PYTHONPATH``, so they import
the same ``magnetar`` (and ``pyspark_pulsar``) as the tests.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.broker.conftest import QUIET, ThreadedBroker


@pytest.fixture(scope="module")
def broker() -> Iterator[ThreadedBroker]:
    with tempfile.TemporaryDirectory(prefix="spark-broker-") as tmp:
        b = ThreadedBroker(Path(tmp) / "data", brokerDeduplicationEnabled=True).start()
        try:
            yield b
        finally:
            b.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("magnetar-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.pythonDataSource.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def official(broker: ThreadedBroker) -> Iterator[pulsar.Client]:
    client = pulsar.Client(broker.url, logger=QUIET)
    try:
        yield client
    finally:
        client.close()


def new_topic(prefix: str = "spark") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:10]}"
