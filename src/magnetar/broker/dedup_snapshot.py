"""Dedup persistence: storing, restoring and replaying each topic's deduplication state.

`MessageDeduplication` (dedup.py) is the pure per-topic state machine; `DedupSnapshots`
owns where that state lives between runs. A topic's state is one metadata key,
``dedup/<topic>`` = ``{"position": the last entry it reflects, "producers": {name: highest
persisted sequence id}}``, written every ``brokerDeduplicationEntriesInterval`` entries (by
the topic's publish path), at housekeeping, at unload and on shutdown (never per message).
Loading a topic restores the snapshot and replays the producer name and sequence ids of the
entries after its position (at most one interval's worth), so a kill -9 loses nothing that
was persisted. `restore` does that on the caller's thread, `restore_async` (used by
`BrokerService.load_topic`) with the snapshot and the replayed entries read off the event
loop; `apply` attaches the result to the topic being built. The topic keeps
``dedup_position`` and ``dedup_unsaved`` (entries since the last snapshot); this module reads
and resets them.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from typing import NamedTuple

from magnetar.broker.config import BrokerConfig
from magnetar.broker.dedup import MessageDeduplication
from magnetar.broker.dispatcher import entry_metadata
from magnetar.broker.topic import PersistentTopic
from magnetar.storage import EARLIEST, ManagedLedger, MetadataStore, Position, StorageError

_REPLAY_CHUNK_BYTES = 16 * 1024 * 1024

log = logging.getLogger(__name__)


class Restored(NamedTuple):
    """A topic's dedup state as found in storage, not yet attached to the topic."""

    dedup: MessageDeduplication
    position: Position | None  # the last entry it reflects; None: no snapshot (starts now)
    replayed: int  # entries replayed after the snapshot


class DedupSnapshots:
    """Restores (snapshot + replay of the ledger tail) and saves topics' dedup state."""

    def __init__(self, metadata: MetadataStore, config: BrokerConfig,
                 executor: Executor | None = None) -> None:
        self.metadata = metadata
        self.config = config
        self.executor = executor  # where restore_async reads the snapshot (None: default)

    def load(self, topic: PersistentTopic) -> MessageDeduplication:
        """The dedup state of a topic being loaded: its snapshot plus the entries after it
        (read here, on the caller's thread)."""
        return self.apply(topic, self.restore(topic.name, topic.ledger))

    def restore(self, name: str, ledger: ManagedLedger) -> Restored:
        """The stored snapshot of topic ``name`` and the replay of the entries after it."""
        dedup = self.new_state()
        stored = self.metadata.get(f"dedup/{name}")
        if stored is None:
            return Restored(dedup, None, 0)
        dedup.restore({producer: int(seq) for producer, seq in stored["producers"].items()})
        position = Position(*stored["position"])
        replayed = 0
        start = ledger.next_position(position)
        last = ledger.last_confirmed()
        if start is not None and last is not None:
            for entry_position, data in ledger.read_range(start, last):
                replay_entry(dedup, data)
                replayed += 1
                position = entry_position
        return Restored(dedup, position, replayed)

    async def restore_async(self, name: str, ledger: ManagedLedger) -> Restored:
        """`restore` with the snapshot read on ``executor`` and the entries after it read
        through the read cache or, when not cached, on the storage's reader threads."""
        dedup = self.new_state()
        loop = asyncio.get_running_loop()
        stored = await loop.run_in_executor(self.executor, self.metadata.get, f"dedup/{name}")
        if stored is None:
            return Restored(dedup, None, 0)
        dedup.restore({producer: int(seq) for producer, seq in stored["producers"].items()})
        position = Position(*stored["position"])
        replayed = 0
        last = ledger.last_confirmed()
        start = ledger.next_position(position)
        while start is not None and last is not None and start <= last:
            chunk = ledger.read_cached(start, 1024, _REPLAY_CHUNK_BYTES)
            if not chunk:
                chunk = await ledger.read_cold(start, 1024, _REPLAY_CHUNK_BYTES)
            if not chunk:
                break
            for entry_position, data in chunk:
                if entry_position > last:
                    break
                replay_entry(dedup, data)
                replayed += 1
                position = entry_position
            start = ledger.next_position(chunk[-1][0])
        return Restored(dedup, position, replayed)

    def new_state(self) -> MessageDeduplication:
        """An empty dedup state with the broker's limits."""
        return MessageDeduplication(max_producers=self.config.brokerDeduplicationMaxNumberOfProducers)

    def apply(self, topic: PersistentTopic, restored: Restored) -> MessageDeduplication:
        """Attach restored state to the topic being built (a topic without a snapshot
        gets one now: dedup starts at its last entry; earlier ones are not replayed)."""
        if restored.position is None:
            topic.dedup_position = topic.ledger.last_confirmed() or EARLIEST
            self.put(topic, {})
            return restored.dedup
        topic.dedup_position = restored.position
        topic.dedup_unsaved = restored.replayed
        if restored.replayed:
            log.info("topic %s: dedup state restored, %d entries replayed", topic.name, restored.replayed)
        return restored.dedup

    def save(self, topic: PersistentTopic) -> None:
        """Store the topic's dedup state if it changed since the last snapshot."""
        if topic.dedup is None or topic.dedup_unsaved == 0:
            return
        self.put(topic, topic.dedup.snapshot())

    def put(self, topic: PersistentTopic, producers: dict[str, int]) -> None:
        """Write a snapshot of ``producers`` at the topic's dedup position (on a storage
        error the ledger tail still holds the state: it is logged and retried later)."""
        position = topic.dedup_position or EARLIEST
        try:
            self.metadata.put(
                f"dedup/{topic.name}", {"position": list(position), "producers": producers}
            )
        except StorageError as exc:
            log.error("topic %s: saving the dedup snapshot failed: %s", topic.name, exc)
            return
        topic.dedup_unsaved = 0

    def delete(self, topic_name: str) -> None:
        """Forget a deleted topic's snapshot."""
        self.metadata.delete(f"dedup/{topic_name}")


def replay_entry(dedup: MessageDeduplication, data: bytes) -> None:
    """Apply one stored entry's producer and sequence ids to the dedup state."""
    metadata = entry_metadata(data)
    if metadata is None or not metadata.producer_name:
        return
    if metadata.HasField("chunk_id") and metadata.chunk_id != metadata.num_chunks_from_msg - 1:
        return
    seq = metadata.sequence_id
    if metadata.HasField("highest_sequence_id"):
        highest = metadata.highest_sequence_id
    else:  # clients number the messages of a batch consecutively
        highest = seq + max(1, metadata.num_messages_in_batch) - 1
    dedup.replay(metadata.producer_name, seq, max(seq, highest))
