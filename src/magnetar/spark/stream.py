"""Streaming reads: offsets per topic partition, admission control, availableNow, and a
durable subscription that follows ``commit``.

Offsets are ``{"<partition topic>": "ledger:entry:batch"}``: the key of the last message
of the batch (see ``offsets``). ``latestOffset(start, limit)`` finds the partitions (new
partitions and, with ``topicsPattern``, new topics start from their earliest message),
asks for their last message ids and, under ``ReadMaxRows``, admits at most that many
messages, counted on the driver by reading ahead (ids only kept) since message ids are
not counters. ``partitions(start, end)`` depends on its arguments only, so a replayed
batch reads the same messages. With ``subscriptionName`` a durable subscription (created
at the first trigger, at the earliest position so retention keeps everything unread) is
acknowledged cumulatively up to each committed offset: idempotent, and the topic's
backlog for that subscription is the query's lag. A batch entry cut by a row limit is
acknowledged once the query has read past it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from magnetar.client import ConsumerType, InitialPosition, MessageId
from magnetar.client.errors import Timeout
from magnetar.client.topic import partition_index
from magnetar.spark.arrow import serialize_id
from magnetar.spark.batch import read_partition
from magnetar.spark.offsets import EARLIEST, Bound, decode_offset, encode_offset
from magnetar.spark.options import SourceOptions
from magnetar.spark.planning import start_bounds
from magnetar.spark.ranges import RangePartition
from magnetar.spark.schema import ValueFormat
from magnetar.spark.session import Session

log = logging.getLogger(__name__)


class _Lookahead:
    """Message keys of one partition read ahead on the driver, to count rows (whole
    entries are read: a batch's keys follow from its size, nothing is split)."""

    def __init__(self, session: Session, topic: str) -> None:
        self.session = session
        self.topic = topic
        self.reader: Any = None
        self.pos: Bound | None = None  # everything up to here was handed out
        self.keys: deque[Bound] = deque()

    def advance(self, after: Bound, upto: Bound, n: int,
                timeout_ms: int) -> tuple[Bound, int]:
        """(bound, count) after admitting at most ``n`` messages past ``after``, to
        ``upto`` at most."""
        if self.pos != after or self.reader is None:
            self._reset(after)
        pos = after
        taken = 0
        while taken < n and pos < upto:
            if not self.keys:
                try:
                    entries = self.session.run(self.reader.read_entries(64, timeout_ms))
                except Timeout:
                    log.warning("%s: no message within %d ms while counting up to %s",
                                self.topic, timeout_ms, upto)
                    break
                for e in entries:
                    ledger, entry = e.ledger_id(), e.entry_id()
                    if e.is_batch():
                        self.keys.extend((ledger, entry, i) for i in range(e.num_messages()))
                    else:
                        self.keys.append((ledger, entry, -1))
            key = self.keys.popleft()
            if key <= pos:
                continue
            if key > upto:
                self.keys.appendleft(key)
                break
            pos = key
            taken += 1
        self.pos = pos
        return pos, taken

    def _reset(self, after: Bound) -> None:
        self.close()
        start = MessageId.earliest if after <= EARLIEST else \
            MessageId(partition_index(self.topic), after[0], after[1])
        self.reader = self.session.run(self.session.client.create_reader(
            self.topic, start, start_message_id_inclusive=after > EARLIEST,
            receiver_queue_size=4096, deliver_entries=True))

    def close(self) -> None:
        if self.reader is not None:
            try:
                self.session.run(self.reader.close())
            except Exception as exc:
                log.info("closing look-ahead reader failed: %s", exc)
        self.reader = None
        self.keys.clear()
        self.pos = None


class PulsarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions, schema: StructType, fmt: ValueFormat) -> None:
        self.opts = opts
        self.schema = schema
        self.fmt = fmt
        self._session: Session | None = None
        self._target: dict[str, Bound] | None = None
        self._lookahead: dict[str, _Lookahead] = {}
        self._subscription: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # executors get the options and schema only: the driver's client stays here
        state = dict(self.__dict__)
        state.update(_session=None, _lookahead={}, _subscription=None)
        return state

    @property
    def session(self) -> Session:
        if self._session is None:
            self._session = Session(self.opts.client, threaded=True)
        return self._session

    # ------------------------------------------------------------------ offsets
    def _partitions(self) -> list[str]:
        return self.session.partitions_of(self.opts.topics, self.opts.pattern)

    def initialOffset(self) -> dict[str, Any]:
        parts = self._partitions()
        last = self.session.last_ids(parts)
        after = start_bounds(self.session, parts, self.opts.starting, self.opts.starting_time,
                             last)
        self._ensure_subscription(parts)
        return encode_offset(after)

    def prepareForTriggerAvailableNow(self) -> None:
        parts = self._partitions()
        self._target = self.session.last_ids(parts)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = decode_offset(start)
        if self._target is not None:
            parts = sorted(self._target)
            last = self._target
        else:
            parts = self._partitions()
            last = self.session.last_ids(parts)
        self._ensure_subscription(parts)
        end = dict(begin)
        for t in parts:
            b = begin.get(t, EARLIEST)
            end[t] = max(b, last[t])
        if isinstance(limit, ReadMaxRows):
            end = self._admit(begin, end, limit.max_rows)
        return encode_offset(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None

    def _admit(self, begin: dict[str, Bound], avail: dict[str, Bound],
               budget: int) -> dict[str, Bound]:
        """At most ``budget`` messages past ``begin``, shared fairly among partitions."""
        end = {t: begin.get(t, EARLIEST) for t in avail}
        pending = [t for t in sorted(avail) if avail[t] > end[t]]
        while budget > 0 and pending:
            share = max(1, budget // len(pending))
            still = []
            for t in pending:
                if budget <= 0:
                    break
                la = self._lookahead.get(t)
                if la is None:
                    la = self._lookahead[t] = _Lookahead(self.session, t)
                new, got = la.advance(end[t], avail[t], min(share, budget),
                                      self.opts.poll_timeout_ms)
                budget -= got
                end[t] = new
                if new < avail[t]:
                    still.append(t)
            pending = still
        return end

    # --------------------------------------------------------------- planning
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = decode_offset(start)
        stop = decode_offset(end)
        out = []
        for t in sorted(stop):
            r = RangePartition(t, partition_index(t), begin.get(t, EARLIEST), stop[t])
            if not r.empty:
                out.append(r)
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        return read_partition(self.opts, self.schema, self.fmt, partition)

    # ----------------------------------------------------------------- commit
    def _ensure_subscription(self, parts: list[str]) -> None:
        name = self.opts.subscription_name
        if name is None or not parts:
            return
        sub = self._subscription
        if sub is not None and sub[1] == parts:
            return
        session = self.session

        async def make() -> Any:
            if sub is not None:
                await sub[0].close()
            return await session.client.subscribe(
                parts, name, consumer_type=ConsumerType.Failover,
                initial_position=InitialPosition.Earliest, receiver_queue_size=1)

        self._subscription = (session.run(make()), parts)

    def commit(self, end: dict[str, Any]) -> None:
        if self.opts.subscription_name is None:
            return
        stop = decode_offset(end)
        self._ensure_subscription(sorted(stop))
        consumer = self._subscription[0]

        async def ack() -> None:
            for t, (ledger, entry, batch) in stop.items():
                if ledger < 0 or entry < 0:
                    continue
                # up to the entry before the committed one, never that entry itself: the
                # next range starts reading at it, so retention must keep it (its absence
                # then means data was removed: failOnDataLoss). A batch index with a larger
                # batch size says "entry not finished": the client acknowledges the one before.
                index = max(batch, 0)
                raw = serialize_id(ledger, entry, partition_index(t), index, index + 2)
                await consumer.acknowledge_cumulative(MessageId.deserialize(raw, topic=t))

        self.session.run(ack())

    def stop(self) -> None:
        for la in self._lookahead.values():
            la.close()
        self._lookahead.clear()
        if self._session is not None:
            self._session.close()
            self._session = None
        self._subscription = None

