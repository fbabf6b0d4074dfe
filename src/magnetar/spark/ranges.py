"""Reading one planned range of one topic partition, on an executor.

``RangePartition`` is the pickled ``InputPartition``: the partition topic, its index and
the bounds ``(after, upto]`` (see ``offsets``), fixed on the driver, so reading it twice
(a retried task, a replayed micro-batch) yields the same messages. ``read_range`` opens a
non-durable reader at the entry of ``after`` that hands out whole entries, and cuts each
into the run of its messages inside the range (nothing at or below ``after`` or below
what it already yielded, nothing past ``upto``); it stops at ``upto``'s entry.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from magnetar.client import Entry, MessageId
from magnetar.client.errors import Timeout
from magnetar.spark.arrow import Run, Split
from magnetar.spark.offsets import EARLIEST, Bound
from magnetar.spark.session import Session

log = logging.getLogger(__name__)

#: Messages per Arrow record batch (at least: whole entries are added until it is reached).
CHUNK = 8192
#: Entries taken from the reader at once.
ENTRIES = 64
#: How long to wait for a message before asking whether any is left to come.
POLL_MS = 2000


class DataLossError(RuntimeError):
    """Messages of a planned range are gone (retention, TTL, topic deleted)."""


@dataclass(frozen=True)
class RangePartition(InputPartition):
    topic: str
    partition: int
    after: Bound
    upto: Bound

    @property
    def empty(self) -> bool:
        # entry -1: the broker's "last id" of a topic without entries
        return self.upto <= self.after or self.upto[1] < 0


def _lost(r: RangePartition, seen: Bound, last: Bound, fail: bool) -> None:
    """The topic ends before the range does: its messages were removed."""
    if seen >= r.upto:
        return
    what = (f"{r.topic}: messages after {seen} up to {r.upto} were planned but the topic "
            f"now ends at {last} (removed by retention, TTL or deletion)")
    if fail:
        raise DataLossError(what + "; set failOnDataLoss=false to skip them")
    log.warning("%s; skipping them (failOnDataLoss=false)", what)


def _start_id(r: RangePartition) -> tuple[MessageId, bool]:
    if r.after <= EARLIEST:
        return MessageId.earliest, False
    return MessageId(r.partition, r.after[0], r.after[1]), True


def entry_runs(entry: Entry, lower: Bound, upto: Bound) -> tuple[list[Run], bool]:
    """The runs of ``entry``'s messages with ``lower < key <= upto``, and whether the range
    ends within this entry (no later entry can hold any of it)."""
    here = (entry.ledger_id(), entry.entry_id())
    n = entry.num_messages()
    first = 0 if entry.is_batch() else -1  # the batch index in message 0's key
    if here > lower[:2]:
        lo = 0
    elif here == lower[:2]:
        lo = max(0, lower[2] + 1 - first)
    else:
        lo = n
    if here < upto[:2]:
        hi, done = n, False
    elif here == upto[:2]:
        hi, done = min(n, max(0, upto[2] + 1 - first)), True
    else:
        hi, done = 0, True
    if lo >= hi:
        return [], done
    split = Split.of(entry)
    skipped = split.skipped()
    if not skipped:
        return [Run(split, lo, hi)], done
    runs = []
    start = lo
    for i in range(lo, hi + 1):
        if i == hi or i in skipped:
            if i > start:
                runs.append(Run(split, start, i))
            start = i + 1
    return runs, done


def read_range(session: Session, r: RangePartition, reader_kwargs: dict[str, Any],
               timeout_ms: int, fail_on_data_loss: bool,
               chunk: int = CHUNK) -> Iterator[list[Run]]:
    """Runs of the messages of ``r``, in order, each exactly once, about ``chunk`` messages
    at a time."""
    if r.empty:
        return
    start, inclusive = _start_id(r)
    kwargs = {"receiver_queue_size": 4 * chunk, **reader_kwargs}
    reader = session.run(session.client.create_reader(
        r.topic, start, start_message_id_inclusive=inclusive, deliver_entries=True,
        **kwargs))
    upto = r.upto
    seen = r.after  # everything at or below was read (or lies before the range)
    waited = 0
    out: list[Run] = []
    rows = 0
    try:
        while True:
            try:
                entries = session.run(reader.read_entries(ENTRIES, min(POLL_MS, timeout_ms)))
            except Timeout:
                # nothing came: is there anything left to wait for?
                last = session.run(reader.get_last_message_id())
                last_key = (last.ledger_id(), last.entry_id(), last.batch_index())
                if last_key <= seen or last_key[1] < 0:
                    if out:
                        yield out
                        out, rows = [], 0
                    _lost(r, seen, last_key, fail_on_data_loss)
                    return
                waited += POLL_MS
                if waited >= timeout_ms:
                    raise DataLossError(f"{r.topic}: no message within {timeout_ms} ms while "
                                        f"reading up to {upto}") from None
                continue
            waited = 0
            for entry in entries:
                runs, done = entry_runs(entry, seen, upto)
                if runs:
                    last_run = runs[-1]
                    index = last_run.hi - 1 if entry.is_batch() else -1
                    seen = (entry.ledger_id(), entry.entry_id(), index)
                    out.extend(runs)
                    rows += sum(len(x) for x in runs)
                if done:
                    if out:
                        yield out
                    return
                if rows >= chunk:
                    yield out
                    out, rows = [], 0
    finally:
        try:
            session.run(reader.close())
        except Exception as exc:
            log.info("closing reader on %s failed: %s", r.topic, exc)
