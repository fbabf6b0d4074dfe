"""The exactly-once stream sink's commit log: how a restarted query knows that a
micro-batch's transactions were already committed.

Spark commits a micro-batch in two steps on the driver: the sink's ``commit(messages,
batchId)``, then the checkpoint's commit log. A driver dying between the two replays the
batch on restart: the same batch id, new task attempts, new transactions. So before it
commits anything, the driver appends a *commit record* ``{"batch": B, "txns": [...]}`` to
a small topic of the query's own, ``<transactionLogTopic>-<queryId>`` (default
``persistent://<sink topic's namespace>/__spark_sink_log-<queryId>``), and waits for the
broker's receipt. At every commit it first reads what that topic holds:

- the newest commit record names batch ``B`` itself: a replay. The recorded transactions
  are committed again (a commit of a committed transaction answers success) and every
  transaction of the replay is aborted: the batch is in the sink once.
- otherwise the record is written, then the batch's transactions are committed.

Task attempts also append an *attempt record* ``{"batch": B, "txn": [...]}`` before their
first row, so the driver aborts, at the next commit, the transactions of attempts Spark
threw away (failed, speculative losers) instead of leaving them open until their timeout
(an open transaction holds back readers of the partitions it wrote to).

The topic is kept small by a durable subscription (``magnetar-spark-sink``) that the
driver acknowledges up to the newest commit record, which stays.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from magnetar.client import MessageId
from magnetar.client.enums import ConsumerType, InitialPosition
from magnetar.client.topic import namespace_of
from magnetar.spark.options import SinkOptions
from magnetar.spark.txns import TxnId, abort_all, commit_all, named

log = logging.getLogger(__name__)

SUBSCRIPTION = "magnetar-spark-sink"
LOG_NAME = "__spark_sink_log"


def log_topic(opts: SinkOptions, query: str | None) -> str:
    """A stream's own log (``query``), or the log batch jobs share (None)."""
    if opts.log_topic:
        prefix = opts.log_topic
    else:
        ns = namespace_of(opts.topic) if opts.topic else "public/default"
        prefix = f"persistent://{ns}/{LOG_NAME}"
    return prefix if query is None else f"{prefix}-{query}"


@dataclass
class Kept:
    """A task attempt's transaction as its commit message carries it."""

    txn: TxnId
    started_ms: int | None = None


@dataclass
class Seen:
    """What the log holds beyond the acknowledged part."""

    last_commit: dict[str, Any] | None = None
    last_commit_id: MessageId | None = None
    before_last_commit: Any = None  # the message just before the newest commit record
    last: Any = None  # the newest message
    attempts: list[TxnId] = field(default_factory=list)


async def _single(client: Any, topic: str) -> str:
    """The log's one partition: the topic itself, or its partition 0 where the namespace
    creates topics partitioned (every writer and reader resolves it alike)."""
    names: list[str] = await client.get_topic_partitions(topic)
    return names[0]


async def append(client: Any, topic: str, record: dict[str, Any]) -> MessageId:
    producer = await client.create_producer(await _single(client, topic),
                                            batching_enabled=False,
                                            send_timeout_millis=60_000)
    try:
        mid: MessageId = await producer.send(json.dumps(record).encode())
        return mid
    finally:
        await producer.close()


async def record_attempt(client: Any, opts: SinkOptions, query: str, batch: int,
                         txn: TxnId) -> None:
    """From a stream's task, before its first row: which transaction this attempt
    writes in."""
    await append(client, log_topic(opts, query), {"batch": batch, "txn": list(txn)})


# ------------------------------------------------------------------ batch jobs
# A batch job's tasks record their attempts in the log batch jobs share, under the job's
# write id; the driver reads the records appended since the job started (it noted the
# log's last id then) and aborts the attempts it did not keep. Only that clean-up reads
# them: what is committed is what Spark's commit messages name.

async def log_position(client: Any, opts: SinkOptions) -> tuple[int, int] | None:
    """The shared batch log's last id now (None: empty)."""
    reader = await client.create_reader(await _single(client, log_topic(opts, None)),
                                        MessageId.latest, receiver_queue_size=1)
    try:
        last = await reader.get_last_message_id()
    finally:
        await reader.close()
    return None if last.entry_id() < 0 else (last.ledger_id(), last.entry_id())


async def record_job_attempt(client: Any, opts: SinkOptions, write_id: str,
                             txn: TxnId) -> None:
    await append(client, log_topic(opts, None), {"write": write_id, "txn": list(txn)})


async def job_attempts(client: Any, opts: SinkOptions, write_id: str,
                       since: tuple[int, int] | None) -> list[TxnId]:
    """The transactions of the job's attempts recorded after ``since``."""
    start = MessageId.earliest if since is None else \
        MessageId(ledger_id=since[0], entry_id=since[1])
    reader = await client.create_reader(await _single(client, log_topic(opts, None)), start,
                                        receiver_queue_size=100)
    out: list[TxnId] = []
    try:
        last = await reader.get_last_message_id()
        end = (last.ledger_id(), last.entry_id())
        if last.entry_id() < 0 or (since is not None and end <= since):
            return out
        while True:
            msg = await reader.read_next(timeout_millis=60_000)
            record = json.loads(msg.data())
            if record.get("write") == write_id:
                out.append((int(record["txn"][0]), int(record["txn"][1])))
            mid = msg.message_id()
            if (mid.ledger_id(), mid.entry_id()) >= end:
                return out
    finally:
        await reader.close()


async def end_job(client: Any, opts: SinkOptions, write_id: str,
                  since: tuple[int, int] | None, kept: list[Kept], commit: bool) -> None:
    """The batch driver's commit (or abort): the kept attempts' transactions, then an
    abort of every other attempt the job recorded."""
    if commit:
        await commit_all(client, [(k.txn, k.started_ms) for k in kept], opts)
    try:
        attempts = await job_attempts(client, opts, write_id, since)
    except Exception as exc:  # clean-up only: the strays time out instead
        log.warning("reading the sink's attempt log %s: %s", log_topic(opts, None), exc)
        attempts = []
    keep = {k.txn for k in kept} if commit else set()
    await abort_all(client, sorted((set(attempts) | {k.txn for k in kept}) - keep))


async def _read(consumer: Any) -> Seen:
    seen = Seen()
    last = await consumer.get_last_message_id()
    if last.entry_id() < 0:
        return seen
    end = (last.ledger_id(), last.entry_id())
    previous = None
    while seen.last is None or \
            (seen.last.message_id().ledger_id(), seen.last.message_id().entry_id()) < end:
        msg = await consumer.receive(timeout_millis=60_000)
        record = json.loads(msg.data())
        if "txns" in record:
            seen.last_commit = record
            seen.last_commit_id = msg.message_id()
            seen.before_last_commit = previous
        elif "txn" in record:
            seen.attempts.append((int(record["txn"][0]), int(record["txn"][1])))
        previous = msg
        seen.last = msg
    return seen


async def _subscribe(client: Any, topic: str) -> Any:
    """The log's one consumer (a dead driver's consumer goes when its connection does)."""
    for attempt in range(30):
        try:
            return await client.subscribe(await _single(client, topic), SUBSCRIPTION,
                                          consumer_type=ConsumerType.Exclusive,
                                          initial_position=InitialPosition.Earliest,
                                          ack_group_time_ms=0)
        except Exception as exc:
            if not named(exc, "ConsumerBusy") or attempt == 29:
                raise
            await asyncio.sleep(1)
    raise AssertionError("unreachable")


async def commit_batch(client: Any, opts: SinkOptions, query: str, batch: int,
                       kept: list[Kept]) -> None:
    """The driver's commit of micro-batch ``batch``: see the module's docstring."""
    topic = log_topic(opts, query)
    consumer = await _subscribe(client, topic)
    try:
        seen = await _read(consumer)
        recorded = seen.last_commit
        if recorded is not None and int(recorded["batch"]) > batch:
            raise RuntimeError(
                f"the sink's commit log {topic} already holds batch {recorded['batch']}, "
                f"after batch {batch}: is another query writing with the same id?")
        if recorded is not None and int(recorded["batch"]) == batch:
            txns = [(int(m), int(lo)) for m, lo in recorded["txns"]]
            log.warning("micro-batch %d of query %s was committed before its checkpoint: "
                        "committing its recorded transactions again and dropping the "
                        "replay's", batch, query)
            await commit_all(client, [(t, None) for t in txns], opts)
            keep = set(txns)
            ack = seen.before_last_commit
        else:
            keep = {k.txn for k in kept}
            previous = {(int(m), int(lo)) for m, lo in recorded["txns"]} if recorded else set()
            await append(client, topic, {"batch": batch,
                                         "txns": [list(k.txn) for k in kept]})
            await commit_all(client, [(k.txn, k.started_ms) for k in kept], opts)
            keep |= previous
            ack = seen.last
        stray = {k.txn for k in kept} | set(seen.attempts)
        await abort_all(client, sorted(stray - keep))
        if ack is not None:
            await consumer.acknowledge_cumulative(ack)
    finally:
        await consumer.close()
