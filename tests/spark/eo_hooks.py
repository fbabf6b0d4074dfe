"""Failure and pause hooks for the exactly-once sink tests: a data source ``pulsar-hooked``
that is the ``pulsar`` sink with tasks that fail or wait where a test says (through
files, since tasks run in other processes). Pickled by value (``register``), so Spark's
workers need not import this module."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from magnetar.spark.source import PulsarDataSource
from magnetar.spark.writer import PulsarBatchWriter, PulsarStreamWriter

# option "hooks" is a directory; files in it steer the tasks:
#   fail-after-<partition>: attempt 0 of that partition fails after all its rows were
#       stored (its transaction left open: the driver must abort it)
#   fail-mid-<partition>: attempt 0 of that partition fails half-way through its rows
#   hold-<partition>: that partition's task, its rows stored, writes "held-<partition>"
#       and waits for "go"
#   hold-commit-<batch>: the stream driver, after committing batch <batch> to the topic
#       (before Spark's checkpoint), writes "committed-<batch>" and waits for ever
#   slow-<partition>: attempt 0 of that partition, its rows stored, waits until another
#       attempt of it (Spark's speculative copy) has stored its rows too ("done-<p>-<n>"),
#       so that both attempts' transactions hold the rows when Spark keeps one


def _wait_for(path: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never came")
        time.sleep(0.05)


def _hooked(hooks: Path, iterator: Iterator[Any], write: Any) -> WriterCommitMessage:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None
    part, attempt = ctx.partitionId(), ctx.attemptNumber()
    if attempt == 0 and (hooks / f"fail-after-{part}").exists():
        write(iter(list(iterator)))
        (hooks / f"failed-after-{part}").touch()
        raise RuntimeError(f"injected: task {part} fails after its rows were stored")
    if attempt == 0 and (hooks / f"fail-mid-{part}").exists():
        batches = list(iterator)

        def half() -> Iterator[Any]:
            yield from batches[:max(1, len(batches) // 2)]
            (hooks / f"failed-mid-{part}").touch()
            raise RuntimeError(f"injected: task {part} fails half-way")

        write(half())
    message = write(iterator)
    if (hooks / f"slow-{part}").exists():
        if attempt == 0:
            (hooks / f"stored-{part}-0").touch()
            deadline = time.monotonic() + 300
            while not list(hooks.glob(f"done-{part}-*")) and time.monotonic() < deadline:
                time.sleep(0.05)
        else:
            (hooks / f"done-{part}-{attempt}").touch()
    if (hooks / f"hold-{part}").exists():
        (hooks / f"held-{part}").touch()
        _wait_for(hooks / "go")
    return message


class HookedBatchWriter(PulsarBatchWriter):
    def __init__(self, opts: Any, schema: StructType, hooks: Path) -> None:
        super().__init__(opts, schema)
        self.hooks = hooks

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _hooked(self.hooks, iterator, super().write)


class HookedStreamWriter(PulsarStreamWriter):
    def __init__(self, opts: Any, schema: StructType, hooks: Path) -> None:
        super().__init__(opts, schema)
        self.hooks = hooks

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _hooked(self.hooks, iterator, super().write)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        super().commit(messages, batchId)
        if (self.hooks / f"hold-commit-{batchId}").exists():
            import os

            parent = os.getppid()
            (self.hooks / f"committed-{batchId}").touch()
            deadline = time.monotonic() + 600
            while os.getppid() == parent and time.monotonic() < deadline:
                time.sleep(0.1)  # until the test kills the driver (then this goes too)
            os._exit(1)


class HookedSource(PulsarDataSource):
    @classmethod
    def name(cls) -> str:
        return "pulsar-hooked"

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from magnetar.spark.source import _sink_options

        return HookedBatchWriter(_sink_options(self._sink()), schema,
                                 Path(self.options["hooks"]))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from magnetar.spark.source import _sink_options

        return HookedStreamWriter(_sink_options(self._sink()), schema,
                                  Path(self.options["hooks"]))

    def _sink(self) -> dict[str, str]:
        return {k: v for k, v in self.options.items() if k.lower() != "hooks"}


def register(spark: Any) -> None:
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(HookedSource)
