"""Dedup persistence: storing, restoring and replaying each topic's deduplication state.

`MessageDeduplication` (dedup.py) is the pure per-topic state machine; `DedupSnapshots`
owns where that state lives between runs. A topic's state is one metadata key,
``dedup/<topic>`` = ``{"position": the last entry it reflects, "producers": {name: highest
persisted sequence id}}``, written every ``brokerDeduplicationEntriesInterval`` entries (by
the topic's publish path), at housekeeping, at unload and on shutdown (never per message).
Loading a topic restores the snapshot and replays the producer name and sequence ids of the
entries after its position (at most one interval's worth), so a kill -9 loses nothing that
was persisted. The topic keeps ``dedup_position`` and ``dedup_unsaved`` (entries since the
last snapshot); this module reads and resets them.
"""

from __future__ import annotations

import logging

from magnetar.broker.config import BrokerConfig
from magnetar.broker.dedup import MessageDeduplication
from magnetar.broker.dispatcher import entry_metadata
from magnetar.broker.topic import PersistentTopic
from magnetar.storage import EARLIEST, MetadataStore, Position, StorageError

log = logging.getLogger(__name__)


class DedupSnapshots:
    """Restores (snapshot + replay of the ledger tail) and saves topics' dedup state."""

    def __init__(self, metadata: MetadataStore, config: BrokerConfig) -> None:
        self.metadata = metadata
        self.config = config

    def load(self, topic: PersistentTopic) -> MessageDeduplication:
        """The dedup state of a topic being loaded: its snapshot plus the entries after it."""
        dedup = MessageDeduplication(max_producers=self.config.brokerDeduplicationMaxNumberOfProducers)
        ledger = topic.ledger
        stored = self.metadata.get(f"dedup/{topic.name}")
        if stored is None:
            # dedup starts now: earlier entries (if dedup was off) are not replayed
            topic.dedup_position = ledger.last_confirmed() or EARLIEST
            self.put(topic, {})
            return dedup
        dedup.restore({name: int(seq) for name, seq in stored["producers"].items()})
        position = Position(*stored["position"])
        replayed = 0
        start = ledger.next_position(position)
        last = ledger.last_confirmed()
        if start is not None and last is not None:
            for entry_position, data in ledger.read_range(start, last):
                replay_entry(dedup, data)
                replayed += 1
                position = entry_position
        topic.dedup_position = position
        topic.dedup_unsaved = replayed
        if replayed:
            log.info("topic %s: dedup state restored, %d entries replayed", topic.name, replayed)
        return dedup

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
