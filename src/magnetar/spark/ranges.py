"""Reading one planned range of one topic partition, on an executor.

``RangePartition`` is the pickled ``InputPartition``: the partition topic, its index and
the bounds ``(after, upto]`` (see ``offsets``), fixed on the driver, so reading it twice
(a retried task, a replayed micro-batch) yields the same messages. ``read_range`` opens a
non-durable reader at the entry of ``after``, drops what lies at or below ``after``, and
stops at the first message past ``upto`` or at ``upto`` itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from magnetar.client import MessageId
from magnetar.client.errors import Timeout
from magnetar.spark.offsets import EARLIEST, Bound
from magnetar.spark.session import Session, take

log = logging.getLogger(__name__)

#: Messages per Arrow record batch.
CHUNK = 8192
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


def read_range(session: Session, r: RangePartition, reader_kwargs: dict[str, Any],
               timeout_ms: int, fail_on_data_loss: bool,
               chunk: int = CHUNK) -> Iterator[list[Any]]:
    """Chunks of the messages of ``r``, in order, each exactly once."""
    if r.empty:
        return
    start, inclusive = _start_id(r)
    kwargs = {"receiver_queue_size": 4 * chunk, **reader_kwargs}
    reader = session.run(session.client.create_reader(
        r.topic, start, start_message_id_inclusive=inclusive, **kwargs))
    after, upto = r.after, r.upto
    seen = after
    waited = 0
    try:
        while True:
            try:
                msgs = session.run(take(reader, chunk, min(POLL_MS, timeout_ms)))
            except Timeout:
                # nothing came: is there anything left to wait for?
                last = session.run(reader.get_last_message_id())
                last_key = (last.ledger_id(), last.entry_id(), last.batch_index())
                if last_key <= seen or last_key[1] < 0:
                    _lost(r, seen, last_key, fail_on_data_loss)
                    return
                waited += POLL_MS
                if waited >= timeout_ms:
                    raise DataLossError(f"{r.topic}: no message within {timeout_ms} ms while "
                                        f"reading up to {upto}") from None
                continue
            waited = 0
            out = []
            done = False
            for m in msgs:
                mid = m._id
                key = (mid._ledger_id, mid._entry_id, mid._batch_index)
                if key <= after:
                    continue
                if key > upto:
                    done = True
                    break
                out.append(m)
                seen = key
                if key == upto:
                    done = True
                    break
            if out:
                yield out
            if done:
                return
    finally:
        try:
            session.run(reader.close())
        except Exception as exc:
            log.info("closing reader on %s failed: %s", r.topic, exc)
