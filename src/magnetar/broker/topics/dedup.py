"""Broker-side message deduplication for one topic (pure state machine).

Theory of operation
-------------------
Modelled on Pulsar's ``MessageDeduplication``. For each producer name two numbers are
kept:

* **pushed**: the highest sequence id accepted for writing (updated by :meth:`check`,
  before the entry is durable);
* **persisted**: the highest sequence id known durable (updated by :meth:`on_persisted`).

:meth:`check` classifies an incoming send, comparing its *lowest* sequence id
(``sequence_id``; for a batch the first message) with them:

* ``sequence_id > pushed`` (or no record): ``"new"``. pushed becomes
  ``max(sequence_id, highest_sequence_id)``; write it.
* ``sequence_id <= persisted``: ``"duplicate"``. It is durable already. Pulsar answers
  at once with a ``CommandSendReceipt`` whose message id is ledger -1 / entry -1 (clients
  treat that as success) and does not write it.
* otherwise (``persisted < sequence_id <= pushed``): ``"unknown"``. An earlier copy is in
  flight and its fate is not known yet. Pulsar fails the send with
  ``CommandSendError(error=UnknownError, message="... Cannot determine whether the message
  is a duplicate at this time")``; the client then drops the connection, reconnects and
  resends, by which time the copy in flight is either persisted (then "duplicate") or has
  failed (see :meth:`reset_pushed`).

Chunked messages: only the last chunk (``chunk_id == num_chunks - 1``) is checked and
recorded; the other chunks are always ``"new"`` and leave the state alone, as in Pulsar.

:meth:`last_sequence_id` is what ``CommandProducerSuccess.last_sequence_id`` reports
(the pushed value, -1 if unknown). If a write fails, the topic should, once its pending
writes have drained, call :meth:`reset_pushed` so the lost sequence ids can be re-sent.

Persistence is the caller's business: every ``snapshot_interval`` persisted entries the
``persist(producer_name, highest_persisted_sequence_id)`` callback is called for each
producer whose persisted value changed since the last flush. With the default interval of
1 the stored state is always current; with a larger one (Pulsar uses 1000) the caller
must, after :meth:`restore`, :meth:`replay` the entries written after the last flush.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Literal

from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import peek_metadata

__all__ = [
    "DUPLICATE",
    "NEW",
    "UNKNOWN",
    "DupStatus",
    "MessageDeduplication",
]

DupStatus = Literal["new", "duplicate", "unknown"]
NEW: DupStatus = "new"
DUPLICATE: DupStatus = "duplicate"
UNKNOWN: DupStatus = "unknown"

PersistCallback = Callable[[str, int], None]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _is_non_last_chunk(chunk_id: int, num_chunks: int) -> bool:
    return chunk_id != -1 and chunk_id != num_chunks - 1


class MessageDeduplication:
    """Per-topic dedup state; see the module docstring for the rules."""

    def __init__(
        self,
        persist: PersistCallback | None = None,
        *,
        snapshot_interval: int = 1,
        max_producers: int = 10_000,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        if snapshot_interval < 1:
            raise ValueError("snapshot_interval must be >= 1")
        self._persist = persist
        self.snapshot_interval = snapshot_interval
        self.max_producers = max_producers
        self._clock = clock
        self._pushed: dict[str, int] = {}
        self._persisted: dict[str, int] = {}
        self._dirty: set[str] = set()
        self._since_flush = 0
        self._inactive_since: dict[str, int] = {}

    # ------------------------------------------------------------------ recovery

    def restore(self, state: Mapping[str, int]) -> None:
        """Load a stored snapshot (producer name -> highest persisted sequence id).

        Restored producers count as inactive from now until they connect again.
        """
        now = self._clock()
        for name, seq in state.items():
            value = int(seq)
            self._pushed[name] = value
            self._persisted[name] = value
            self._inactive_since.setdefault(name, now)

    def replay(
        self, producer_name: str, sequence_id: int, highest_sequence_id: int | None = None
    ) -> None:
        """Apply one stored entry (read back in order after :meth:`restore`)."""
        value = max(sequence_id, highest_sequence_id if highest_sequence_id is not None else -1)
        self._pushed[producer_name] = value
        self._persisted[producer_name] = value
        self._inactive_since.setdefault(producer_name, self._clock())

    # ------------------------------------------------------------------ publish path

    def check(
        self,
        producer_name: str,
        sequence_id: int,
        highest_sequence_id: int | None = None,
        *,
        chunk_id: int = -1,
        num_chunks: int = -1,
    ) -> DupStatus:
        """Classify a send as ``"new"``, ``"duplicate"`` or ``"unknown"``."""
        if _is_non_last_chunk(chunk_id, num_chunks):
            return NEW
        pushed = self._pushed.get(producer_name)
        if pushed is not None and sequence_id <= pushed:
            persisted = self._persisted.get(producer_name)
            if persisted is not None and sequence_id <= persisted:
                return DUPLICATE
            return UNKNOWN
        highest = sequence_id if highest_sequence_id is None else highest_sequence_id
        self._pushed[producer_name] = max(highest, sequence_id)
        return NEW

    def on_persisted(
        self,
        producer_name: str,
        sequence_id: int,
        highest_sequence_id: int | None = None,
        *,
        chunk_id: int = -1,
        num_chunks: int = -1,
    ) -> None:
        """Record that an entry checked as ``"new"`` is now durable."""
        if not _is_non_last_chunk(chunk_id, num_chunks):
            highest = sequence_id if highest_sequence_id is None else highest_sequence_id
            self._persisted[producer_name] = max(highest, sequence_id)
            self._dirty.add(producer_name)
        self._since_flush += 1
        if self._since_flush >= self.snapshot_interval:
            self.flush()

    def reset_pushed(self) -> None:
        """Forget what was accepted but never persisted (after write failures)."""
        self._pushed = dict(self._persisted)

    def flush(self) -> None:
        """Hand every changed persisted value to the ``persist`` callback now."""
        self._since_flush = 0
        if self._persist is None:
            self._dirty.clear()
            return
        dirty, self._dirty = self._dirty, set()
        for name in sorted(dirty):
            if name in self._persisted:
                self._persist(name, self._persisted[name])

    # ------------------------------------------------------------------ queries

    def last_sequence_id(self, producer_name: str) -> int:
        """Highest accepted sequence id of the producer, -1 if none (for ProducerSuccess)."""
        return self._pushed.get(producer_name, -1)

    def last_persisted_sequence_id(self, producer_name: str) -> int:
        return self._persisted.get(producer_name, -1)

    def snapshot(self) -> dict[str, int]:
        """Persisted state, at most ``max_producers`` entries, ordered by producer name."""
        names = sorted(self._persisted)[: self.max_producers]
        return {name: self._persisted[name] for name in names}

    # ------------------------------------------------------------------ producer lifecycle

    def producer_added(self, producer_name: str) -> None:
        self._inactive_since.pop(producer_name, None)

    def producer_removed(self, producer_name: str) -> None:
        self._inactive_since[producer_name] = self._clock()

    def purge_inactive(self, timeout_ms: int) -> list[str]:
        """Forget producers gone for longer than ``timeout_ms``; return their names.

        Pulsar's ``brokerDeduplicationProducerInactivityTimeoutMinutes`` is 360. The
        caller removes the returned names from its store.
        """
        limit = self._clock() - timeout_ms
        gone = sorted(n for n, since in self._inactive_since.items() if since < limit)
        for name in gone:
            del self._inactive_since[name]
            self._pushed.pop(name, None)
            self._persisted.pop(name, None)
            self._dirty.discard(name)
        return gone


#: the name prefix of geo-replicators' producers (Pulsar's ``replicatorPrefix``)
REPLICATOR_PREFIX = "pulsar.repl."


#: (chunk_id, num_chunks) of a payload part that is not a chunk
NOT_CHUNKED = (-1, -1)


def chunk_of(payload: bytes | memoryview) -> tuple[int, int]:
    """(chunk_id, num_chunks) of a chunk's payload part (dedup only records last chunks)."""
    try:
        metadata = peek_metadata(payload)
    except ProtocolError:
        return NOT_CHUNKED
    if not metadata.HasField("chunk_id"):
        return NOT_CHUNKED
    return metadata.chunk_id, metadata.num_chunks_from_msg


def origin_of(payload: bytes | memoryview, default: tuple[str, int, int]) -> tuple[str, int, int]:
    """The deduplication identity of a geo-replicator's send, as Pulsar's: the original
    producer's name and sequence ids, from the message metadata (what a restart replays)."""
    try:
        metadata = peek_metadata(payload)
    except ProtocolError:
        return default
    if not metadata.producer_name:
        return default
    seq = metadata.sequence_id  # as `dedup_snapshot.replay_entry` reads a stored entry
    if metadata.HasField("highest_sequence_id"):
        highest = metadata.highest_sequence_id
    else:
        highest = seq + max(1, metadata.num_messages_in_batch) - 1
    return metadata.producer_name, seq, max(seq, highest)
