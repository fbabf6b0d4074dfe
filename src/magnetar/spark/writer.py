"""Writes, batch and streaming, from Arrow batches: one batched producer per task and
target topic partition, the task returning only after every receipt.

Rows carry ``value`` (binary or string) and optionally ``__key``, ``__messageProperties``,
``__eventTime`` and ``__topic`` (per-row routing, used when no ``topic`` option is set).
An Arrow batch whose rows carry only values (the other columns absent or null) is turned
into batch entries whole: every record's header comes from a table of value sizes, one
Arrow join lays records and values out in one buffer, and each slice of it goes out as
one entry (``Producer.send_batch_async``), the entries rotating over the partitions. Other
rows go one by one: a keyed row to its key's partition (the client's key hash), the
others to a partition that changes every ``batching_max_messages`` rows.

Duplicates from retries: every task names its producers ``<prefix>-<spark partition>`` and
gives each row the sequence id ``base + row index``, where the prefix identifies the write
(a random id made on the driver for a batch job, so every attempt of a task shares it; the
query id for a stream) and ``base`` is ``batch id << 32`` for a stream (0 for a batch
job). Batches are cut only by count and size, never by time, and go to a partition that
depends only on the rows, so a retried task sends the same batches with the same sequence
ids to the same partitions, and a broker with ``brokerDeduplicationEnabled`` drops the
ones it already stored. See the README's "Exactly once" for the conditions.

With ``deliveryGuarantee=exactly-once`` each task attempt instead opens a transaction,
sends every row in it (producers named uniquely per attempt, so deduplication never drops
a retry's rows because a failed attempt's aborted ones were stored), aborts it if the
task fails, and returns its id; the driver's ``commit`` commits the ids of the attempts
Spark kept and ``abort`` aborts them (``txns``); a stream goes through ``commit_log``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from magnetar.client.batching import plain_header
from magnetar.client.enums import HashingScheme
from magnetar.client.routing import key_hash
from magnetar.spark import txns
from magnetar.spark.options import PulsarOptionError, SinkOptions
from magnetar.spark.session import Session

log = logging.getLogger(__name__)

WRITABLE = {"value", "__key", "__messageProperties", "__eventTime", "__topic"}


@dataclass
class WriteResult(WriterCommitMessage):
    partition: int
    rows: int
    txn: tuple[int, int] | None = None  # exactly-once: the attempt's transaction
    started_ms: int | None = None  # when it was opened (for the timeout's error)
    query: str | None = None  # a stream's query id (its commit log's name)


def kept_txns(messages: list[WriterCommitMessage | None]) -> list[WriteResult]:
    return [m for m in messages if isinstance(m, WriteResult) and m.txn is not None]


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
               batches: Iterator[Any], stream: tuple[str, int] | None = None,
               write_id: str | None = None) -> WriteResult:
    """Publish every row of ``batches``; returns once every receipt has arrived.
    Exactly-once: in a transaction of this attempt's own, recorded in the commit log
    (``stream``: the query id and batch id; else the batch job's ``write_id``), aborted
    if anything fails."""
    partition, _ = _task()
    name = f"{prefix}-{partition}"
    if opts.exactly_once:
        return _write_in_txn(opts, name, base, batches, stream, write_id)
    session = Session(opts.client)
    try:
        rows = session.run(_publish(session, opts, name, base, batches))
    except BaseException:
        session.abandon()
        raise
    session.close()
    return WriteResult(partition, rows)


def _write_in_txn(opts: SinkOptions, name: str, base: int, batches: Iterator[Any],
                  stream: tuple[str, int] | None, write_id: str | None) -> WriteResult:
    from magnetar.spark.commit_log import record_attempt, record_job_attempt

    partition, _ = _task()
    session = Session(txns.transactional(opts.client))
    txn: Any = None
    started = int(time.time() * 1000)
    try:
        client: Any = session.client
        txn = session.run(client.new_transaction(timeout_ms=opts.txn_timeout_ms))
        tid = (int(txn.id[0]), int(txn.id[1]))
        if stream is not None:
            session.run(record_attempt(client, opts, stream[0], stream[1], tid))
        elif write_id is not None:
            session.run(record_job_attempt(client, opts, write_id, tid))
        # a name of this attempt's own: never deduplicated against an aborted attempt
        unique = f"{name}-{uuid.uuid4().hex[:8]}"
        rows = session.run(_publish(session, opts, unique, base, batches, txn))
        if time.time() * 1000 - started > opts.txn_timeout_ms:
            raise txns.TransactionEndedError(txns.expired_message(
                tid, opts, started, "timed out before its task finished"))
    except BaseException as exc:
        if txn is not None:
            try:
                session.run(txn.abort(), timeout=30)
            except BaseException as abort_exc:
                log.info("abort of a failed write task's transaction: %s", abort_exc)
        session.abandon()
        if txn is not None and txns.named(exc, "InvalidTxnStatus", "TransactionNotFound"):
            tid = (int(txn.id[0]), int(txn.id[1]))
            raise txns.TransactionEndedError(txns.expired_message(
                tid, opts, started, f"ended while its task was writing ({exc})")) from exc
        raise
    session.close()
    return WriteResult(partition, rows, tid, started, stream[0] if stream else None)


_CONF: dict[str, Any] = {
    "batching_enabled": True, "batching_max_messages": 1000,
    "batching_max_allowed_size_in_bytes": 128 * 1024,
    "max_pending_messages": 20000, "block_if_queue_full": True,
    "send_timeout_millis": 120_000,
}


class _Targets:
    """The producers of one task, one per partition of each target topic, all named
    ``name`` (a partition's producer sees the task's rows for that partition, in order)."""

    def __init__(self, session: Session, opts: SinkOptions, name: str) -> None:
        self.client = session.client
        self.name = name
        conf = {**_CONF, **opts.producer_kwargs}
        # batches cut by count and size only (deterministic under retries)
        conf["batching_max_publish_delay_ms"] = 3_600_000
        self.conf = conf
        self.max_n = max(1, int(conf["batching_max_messages"]))
        self.max_bytes = int(conf["batching_max_allowed_size_in_bytes"])
        self.key_hash = key_hash(HashingScheme(int(conf.get("hashing_scheme", 0))))
        self.topics: dict[str, list[Any]] = {}

    async def of(self, topic: str) -> list[Any]:
        parts = self.topics.get(topic)
        if parts is None:
            names = await self.client.get_topic_partitions(topic)
            parts = self.topics[topic] = list(await asyncio.gather(*(
                self.client.create_producer(n, producer_name=self.name, **self.conf)
                for n in names)))
        return parts

    def all(self) -> list[Any]:
        return [p for parts in self.topics.values() for p in parts]


def _records(values: pa.Array) -> tuple[memoryview, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Batch records (size, ``SingleMessageMetadata(payload_size)``, value) of ``values``,
    joined in one buffer: (buffer, where each record starts in it and where the last
    ends, value sizes)."""
    sizes = pc.binary_length(values).to_numpy(zero_copy_only=False).astype(np.int64)
    unique, inverse = np.unique(sizes, return_inverse=True)
    headers = pa.array([plain_header(int(n)) for n in unique], pa.binary())
    joined = pc.binary_join_element_wise(headers.take(pa.array(inverse.astype(np.int32))),
                                         values, _NO_SEPARATOR)
    _, offsets, data = joined.buffers()
    ends = np.frombuffer(offsets, np.int32, len(joined) + 1,
                         4 * joined.offset).astype(np.int64)
    return memoryview(data), ends, sizes


_NO_SEPARATOR = pa.scalar(b"", pa.binary())


def _cuts(sizes: npt.NDArray[np.int64], max_n: int, max_bytes: int) -> list[tuple[int, int]]:
    """Rows cut into batches of at most ``max_n`` rows and, past the first row of each,
    ``max_bytes`` of values: a pure function of the sizes, so a retried task cuts alike."""
    cum = np.concatenate(([0], np.cumsum(sizes)))
    out = []
    a, n = 0, len(sizes)
    while a < n:
        b = int(np.searchsorted(cum, cum[a] + max_bytes, side="right")) - 1
        b = min(max(b, a + 1), a + max_n, n)
        out.append((a, b))
        a = b
    return out


def _plain(batch: pa.RecordBatch) -> bool:
    """No per-row key, properties, event time or topic in ``batch``: its rows can go out
    as whole batch entries."""
    for name in ("__key", "__messageProperties", "__eventTime", "__topic"):
        i = batch.schema.get_field_index(name)
        if i < 0:
            continue
        col = batch.column(i)
        if name == "__messageProperties":  # empty maps are no properties
            offsets = col.offsets
            if offsets[len(offsets) - 1].as_py() != offsets[0].as_py():
                return False
        elif col.null_count < batch.num_rows:
            return False
    return True


async def _publish(session: Session, opts: SinkOptions, name: str, base: int,
                   batches: Iterator[Any], txn: Any = None) -> int:
    targets = _Targets(session, opts, name)
    in_txn: dict[str, Any] = {} if txn is None else {"txn": txn}
    partition, _ = _task()
    futures: list[asyncio.Future[Any]] = []
    row = 0
    sent = 0  # batch entries sent by the bulk path (they rotate over the partitions)
    ok = False
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            if opts.topic is not None and _plain(batch):
                parts = await targets.of(opts.topic)
                values = batch.column(batch.schema.get_field_index("value"))
                if values.type != pa.binary():
                    values = values.cast(pa.binary())
                values = values.fill_null(b"")
                data, ends, sizes = _records(values)
                for a, b in _cuts(sizes, targets.max_n, targets.max_bytes):
                    p = parts[(partition + sent) % len(parts)]
                    sent += 1
                    records = bytes(data[ends[a]:ends[b]])  # offsets into the buffer
                    futures.append(await p.send_batch_async(records, b - a, base + row + a,
                                                            **in_txn))
                row += batch.num_rows
            else:
                row = await _publish_rows(targets, opts, base, row, batch, futures, in_txn)
            if len(futures) >= 1000:
                await asyncio.gather(*futures)
                futures.clear()
        await asyncio.gather(*(p.flush() for p in targets.all()))
        await asyncio.gather(*futures)
        ok = True
    finally:
        if ok:
            await asyncio.gather(*(p.close() for p in targets.all()), return_exceptions=True)
    return row


async def _publish_rows(targets: _Targets, opts: SinkOptions, base: int, row: int,
                        batch: pa.RecordBatch, futures: list[asyncio.Future[Any]],
                        in_txn: dict[str, Any]) -> int:
    """Rows with their own key, properties, event time or topic, one by one: a keyed row
    goes to the partition of its key's hash, the others to a partition that changes every
    ``batching_max_messages`` rows (a function of the row, for retries)."""
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
        parts = targets.topics.get(topic) or await targets.of(topic)
        key = keys[i] if keys is not None else None
        if len(parts) == 1:
            p = parts[0]
        elif key:
            p = parts[targets.key_hash(key) % len(parts)]
        else:
            p = parts[(row // targets.max_n) % len(parts)]
        if value is None:
            value = b""
        elif isinstance(value, str):
            value = value.encode()
        kwargs: dict[str, Any] = {"sequence_id": base + row, **in_txn}
        if key is not None:
            kwargs["partition_key"] = key
        if props is not None and props[i]:
            kwargs["properties"] = dict(props[i])
        if events is not None and events[i] is not None:
            kwargs["event_timestamp"] = int(events[i].timestamp() * 1000)
        futures.append(await p.send_async(value, **kwargs))
        row += 1
        if len(futures) >= 50_000:
            # the open batches must go out first: they are never cut by time, so their
            # receipts would never come (a flush every 50,000 rows is still a
            # deterministic cut: a retried task cuts the same batches)
            await asyncio.gather(*(p.flush() for p in targets.all()))
            await asyncio.gather(*futures)
            futures.clear()
    return row


def _end(opts: SinkOptions, messages: list[WriterCommitMessage | None], commit: bool,
         write_id: str | None = None, since: tuple[int, int] | None = None) -> None:
    """The driver's commit (or abort) of the kept attempts' transactions; with a
    ``write_id``, the job's other recorded attempts are aborted too."""
    from magnetar.spark.commit_log import Kept, end_job

    kept = [Kept(m.txn, m.started_ms) for m in kept_txns(messages) if m.txn is not None]
    session = Session(txns.transactional(opts.client))
    client: Any = session.client
    try:
        if write_id is not None:
            session.run(end_job(client, opts, write_id, since, kept, commit))
        elif commit:
            session.run(txns.commit_all(client, [(k.txn, k.started_ms) for k in kept], opts))
        else:
            session.run(txns.abort_all(client, [k.txn for k in kept]))
    finally:
        session.close()


class PulsarBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, opts)
        self.opts = opts
        # made on the driver: every attempt of a task shares it (and so its producer name)
        self.write_id = uuid.uuid4().hex[:16]
        self.log_start: tuple[int, int] | None = None
        if opts.exactly_once:  # where this job's attempt records will start
            from magnetar.spark.commit_log import log_position

            session = Session(opts.client)
            try:
                self.log_start = session.run(log_position(session.client, opts))
            finally:
                session.close()

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return write_task(self.opts, f"spark-{self.write_id}", 0, iterator,
                          write_id=self.write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.opts.exactly_once:
            _end(self.opts, messages, True, self.write_id, self.log_start)
        rows = sum(m.rows for m in messages if isinstance(m, WriteResult))
        log.info("pulsar write %s committed: %d rows", self.write_id, rows)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.opts.exactly_once:
            _end(self.opts, messages, False, self.write_id, self.log_start)
            log.warning("pulsar write %s aborted: its transactions too", self.write_id)
        else:
            log.warning("pulsar write %s aborted; rows sent by finished tasks stay "
                        "published", self.write_id)


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
        stream = (query or self.fallback_id, int(batch) if batch is not None else -1)
        return write_task(self.opts, prefix, base, iterator, stream)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.exactly_once:
            from magnetar.spark.commit_log import Kept, commit_batch

            kept = kept_txns(messages)
            if kept:
                query = kept[0].query or self.fallback_id
                session = Session(txns.transactional(self.opts.client))
                try:
                    session.run(commit_batch(session.client, self.opts, query, batchId,
                                             [Kept(m.txn, m.started_ms) for m in kept
                                              if m.txn is not None]))
                finally:
                    session.close()
        rows = sum(m.rows for m in messages if isinstance(m, WriteResult))
        log.info("pulsar stream write batch %d committed: %d rows", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.exactly_once:
            _end(self.opts, messages, commit=False)
        log.warning("pulsar stream write batch %d aborted", batchId)
