"""Writes, batch and streaming, from Arrow batches: one batched producer per task and
target topic, the task returning only after every receipt.

Rows carry ``value`` (binary or string) and optionally ``__key``, ``__messageProperties``,
``__eventTime`` and ``__topic`` (per-row routing, used when no ``topic`` option is set).

Duplicates from retries: every task names its producers ``<prefix>-<spark partition>`` and
gives each row the sequence id ``base + row index``, where the prefix identifies the write
(a random id made on the driver for a batch job, so every attempt of a task shares it; the
query id for a stream) and ``base`` is ``batch id << 32`` for a stream (0 for a batch
job). Batches are cut only by count and size, never by time, so a retried task sends the
same batches with the same sequence ids, and a broker with ``brokerDeduplicationEnabled``
drops the ones it already stored. See the README's "Exactly once" for the conditions.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from magnetar.spark.options import PulsarOptionError, SinkOptions
from magnetar.spark.session import Session

log = logging.getLogger(__name__)

WRITABLE = {"value", "__key", "__messageProperties", "__eventTime", "__topic"}


@dataclass
class WriteResult(WriterCommitMessage):
    partition: int
    rows: int


def check_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    names = {f.name for f in schema.fields}
    if "value" not in names:
        raise PulsarOptionError("writing to pulsar needs a 'value' column (binary or string)")
    vtype = schema["value"].dataType
    if not isinstance(vtype, BinaryType | StringType):
        raise PulsarOptionError(f"the 'value' column must be binary or string, not "
                                f"{vtype.simpleString()}; serialize it first (e.g. to_json)")
    if opts.topic is None and "__topic" not in names:
        raise PulsarOptionError("set the 'topic' option or give each row a '__topic' column")
    ignored = sorted(names - WRITABLE - {"__messageId", "__publishTime", "__producerName",
                                         "__sequenceId"})
    if ignored:
        log.info("pulsar sink ignores columns %s", ignored)


def _task() -> tuple[int, Any]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, None
    return ctx.partitionId(), ctx


def write_task(opts: SinkOptions, prefix: str, base: int,
               batches: Iterator[Any]) -> WriteResult:
    """Publish every row of ``batches``; returns once every receipt has arrived."""
    partition, _ = _task()
    name = f"{prefix}-{partition}"
    session = Session(opts.client)
    try:
        rows = session.run(_publish(session, opts, name, base, batches))
    except BaseException:
        session.abandon()
        raise
    session.close()
    return WriteResult(partition, rows)


async def _publish(session: Session, opts: SinkOptions, name: str, base: int,
                   batches: Iterator[Any]) -> int:
    client = session.client
    conf: dict[str, Any] = {
        "batching_enabled": True, "batching_max_messages": 1000,
        "batching_max_allowed_size_in_bytes": 128 * 1024,
        "max_pending_messages": 20000, "block_if_queue_full": True,
        "send_timeout_millis": 120_000, **opts.producer_kwargs,
    }
    # batches cut by count and size only (deterministic under retries)
    conf["batching_max_publish_delay_ms"] = 3_600_000
    producers: dict[str, Any] = {}
    futures: list[asyncio.Future[Any]] = []
    row = 0

    async def producer(topic: str) -> Any:
        p = producers.get(topic)
        if p is None:
            p = producers[topic] = await client.create_producer(topic, producer_name=name,
                                                                **conf)
        return p

    ok = False
    try:
        for batch in batches:
            cols = {n: batch.column(i).to_pylist() for i, n in enumerate(batch.schema.names)
                    if n in WRITABLE}
            values = cols["value"]
            keys = cols.get("__key")
            props = cols.get("__messageProperties")
            events = cols.get("__eventTime")
            topics = cols.get("__topic")
            for i, value in enumerate(values):
                topic = opts.topic if topics is None or topics[i] is None else topics[i]
                if topic is None:
                    raise ValueError(f"row {row} has no __topic and no 'topic' option is set")
                p = producers.get(topic) or await producer(topic)
                if value is None:
                    value = b""
                elif isinstance(value, str):
                    value = value.encode()
                kwargs: dict[str, Any] = {"sequence_id": base + row}
                if keys is not None and keys[i] is not None:
                    kwargs["partition_key"] = keys[i]
                if props is not None and props[i]:
                    kwargs["properties"] = dict(props[i])
                if events is not None and events[i] is not None:
                    kwargs["event_timestamp"] = int(events[i].timestamp() * 1000)
                futures.append(await p.send_async(value, **kwargs))
                row += 1
                if len(futures) >= 50_000:
                    # the open batches must go out first: they are never cut by time, so
                    # their receipts would never come (a flush every 50,000 rows is still
                    # a deterministic cut: a retried task cuts the same batches)
                    await asyncio.gather(*(p.flush() for p in producers.values()))
                    await asyncio.gather(*futures)
                    futures.clear()
        await asyncio.gather(*(p.flush() for p in producers.values()))
        await asyncio.gather(*futures)
        ok = True
    finally:
        if ok:
            await asyncio.gather(*(p.close() for p in producers.values()),
                                 return_exceptions=True)
    return row


class PulsarBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, opts)
        self.opts = opts
        # made on the driver: every attempt of a task shares it (and so its producer name)
        self.write_id = uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return write_task(self.opts, f"spark-{self.write_id}", 0, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, WriteResult))
        log.info("pulsar write %s committed: %d rows", self.write_id, rows)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("pulsar write %s aborted; rows sent by finished tasks stay published",
                    self.write_id)


class PulsarStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, opts)
        self.opts = opts
        self.fallback_id = uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        _, ctx = _task()
        query = batch = None
        if ctx is not None:
            query = ctx.getLocalProperty("sql.streaming.queryId")
            batch = ctx.getLocalProperty("streaming.sql.batchId")
        if query is None or batch is None:
            log.warning("no streaming query/batch id in the task: writes of replayed "
                        "batches will not be deduplicated")
        prefix = f"spark-{query or self.fallback_id}"
        base = int(batch) << 32 if batch is not None else 0
        return write_task(self.opts, prefix, base, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, WriteResult))
        log.info("pulsar stream write batch %d committed: %d rows", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("pulsar stream write batch %d aborted", batchId)
