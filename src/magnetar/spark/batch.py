"""Batch reads: one input partition per topic partition, planned on the driver.

``PulsarBatchReader.partitions()`` resolves the topics, asks the broker for each
partition's last message id and turns the options into ``(after, upto]`` bounds;
``read()`` runs on an executor and yields Arrow record batches. Filters on
``__publishTime`` (``>``, ``>=``, ``<``, ``<=``, ``=``) narrow the ranges by seeking by
time; Spark still evaluates them on the rows, so a narrower range is only an optimisation.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from magnetar.client.topic import partition_index
from magnetar.spark.offsets import EARLIEST
from magnetar.spark.options import SourceOptions
from magnetar.spark.planning import end_bounds, start_bounds
from magnetar.spark.ranges import RangePartition, read_range
from magnetar.spark.schema import ValueFormat
from magnetar.spark.session import Session

log = logging.getLogger(__name__)


def _millis(value: Any) -> int | None:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, int | float):
        return int(value)
    return None


def read_partition(opts: SourceOptions, schema: StructType, fmt: ValueFormat,
                   partition: RangePartition) -> Iterator[Any]:
    """Executor side of batch and streaming reads: Arrow batches of one range."""
    from magnetar.spark.arrow import BatchBuilder

    if partition.empty:
        return
    builder = BatchBuilder(schema, fmt, partition.topic, partition.partition)
    session = Session(opts.client)
    try:
        for runs in read_range(session, partition, opts.reader_kwargs, opts.poll_timeout_ms,
                               opts.fail_on_data_loss):
            yield builder.build(runs)
    finally:
        session.close()


class PulsarBatchReader(DataSourceReader):
    """Batch reader without filter pushdown (Spark refuses a reader implementing
    ``pushFilters`` while ``spark.sql.python.filterPushdown.enabled`` is false)."""

    def __init__(self, opts: SourceOptions, schema: StructType, fmt: ValueFormat) -> None:
        self.opts = opts
        self.schema = schema
        self.fmt = fmt
        self.min_time: int | None = None  # from pushed filters, inclusive
        self.max_time: int | None = None  # exclusive

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        session = Session(opts.client)
        try:
            parts = session.partitions_of(opts.topics, opts.pattern)
            if not parts:
                return [RangePartition("", -1, EARLIEST, EARLIEST)]
            last = session.last_ids(parts)
            start_time = _max(opts.starting_time, self.min_time)
            end_time = _min(opts.ending_time, self.max_time)
            after = start_bounds(session, parts, opts.starting, start_time, last)
            upto = end_bounds(session, parts, opts.ending, end_time, last)
        finally:
            session.close()
        out = [RangePartition(t, partition_index(t), after[t], upto[t]) for t in parts]
        log.info("pulsar batch read planned: %s", out)
        return list(out)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        return read_partition(self.opts, self.schema, self.fmt, partition)


class PulsarPushdownReader(PulsarBatchReader):
    """The batch reader Spark's filter-pushdown worker gets: ``__publishTime`` filters
    narrow the planned ranges."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            if getattr(f, "attribute", None) == ("__publishTime",):
                ms = _millis(f.value)  # type: ignore[attr-defined]
                if ms is not None:
                    if isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo):
                        self.min_time = ms if self.min_time is None else max(self.min_time,
                                                                             ms)
                    if isinstance(f, LessThan | LessThanOrEqual | EqualTo):
                        high = ms + 1 if not isinstance(f, LessThan) else ms
                        self.max_time = high if self.max_time is None else min(self.max_time,
                                                                               high)
            yield f  # Spark re-checks every row: pushed filters only narrow the ranges


def pushdown_planning() -> bool:
    """True when called from Spark's filter-pushdown worker (the only place a reader may
    implement ``pushFilters``: that worker runs only when pushdown is enabled)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith("data_source_pushdown_filters.py"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)
