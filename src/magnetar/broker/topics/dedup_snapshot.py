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

Snapshots are written off the event loop (`ManagedLedgerFactory.write_metadata`), at most
one per topic at a time: a snapshot asked for while the topic's previous one is being
written is taken and written when that one lands, so an earlier snapshot never overwrites
a later one. A load waits for its topic's writes before it reads the snapshot (`written`),
housekeeping trims the ledger only once the snapshot landed (`when_saved`: replay must not
need what the trim drops), and the broker's stop awaits them all (`flush`) before the
store closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from magnetar.broker.config.broker_config import BrokerConfig
from magnetar.broker.entries import entry_metadata
from magnetar.broker.topics.dedup import MessageDeduplication
from magnetar.broker.topics.topic import PersistentTopic
from magnetar.storage import EARLIEST, ManagedLedger, ManagedLedgerFactory, Position, StorageError

_REPLAY_CHUNK_BYTES = 16 * 1024 * 1024

log = logging.getLogger(__name__)


class Restored(NamedTuple):
    """A topic's dedup state as found in storage, not yet attached to the topic."""

    dedup: MessageDeduplication
    position: Position | None  # the last entry it reflects; None: no snapshot (starts now)
    replayed: int  # entries replayed after the snapshot


class DedupSnapshots:
    """Restores (snapshot + replay of the ledger tail) and saves topics' dedup state."""

    def __init__(self, storage: ManagedLedgerFactory, config: BrokerConfig) -> None:
        self.storage = storage
        self.metadata = storage.metadata
        self.config = config
        self._writing: dict[str, asyncio.Future[Any]] = {}  # topic -> its snapshot being written
        self._again: dict[str, PersistentTopic] = {}  # topics to snapshot once that lands
        self._after: dict[str, list[Callable[[], None]]] = {}  # when_saved callbacks

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
        await self.written(name)
        stored = await self.storage.read_metadata(self.metadata.get, f"dedup/{name}")
        if stored is None:
            return Restored(dedup, None, 0)
        dedup.restore({producer: int(seq) for producer, seq in stored["producers"].items()})
        position = Position(*stored["position"])
        replayed = 0
        last = ledger.last_confirmed()
        start = ledger.next_position(position)
        chunk: Sequence[tuple[Position, bytes | memoryview]]  # cached entries, or a cold read's
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
        """Write a snapshot of ``producers`` at the topic's dedup position, off the loop
        (on a storage error the ledger tail still holds the state: it is logged and
        retried later). While the topic's previous snapshot is being written, a new one is
        taken and written once it lands."""
        name = topic.name
        if name in self._writing:
            self._again[name] = topic
            return
        position = topic.dedup_position or EARLIEST
        value = {"position": list(position), "producers": producers}
        try:
            future = self.storage.write_metadata(self.metadata.put, f"dedup/{name}", value)
        except StorageError as exc:  # the storage is closed
            log.error("topic %s: saving the dedup snapshot failed: %s", name, exc)
            return
        self._writing[name] = future
        saved = topic.dedup_unsaved
        future.add_done_callback(lambda f: self._written(topic, saved, f))

    def _written(self, topic: PersistentTopic, saved: int, future: asyncio.Future[Any]) -> None:
        """A snapshot write of ``topic`` ended (``saved``: the entries it covers)."""
        name = topic.name
        del self._writing[name]
        exc = None if future.cancelled() else future.exception()
        if exc is not None:
            log.error("topic %s: saving the dedup snapshot failed: %s", name, exc)
            self._after.pop(name, None)  # nothing landed: trimming could drop what replay needs
        else:
            topic.dedup_unsaved = max(0, topic.dedup_unsaved - saved)
        again = self._again.pop(name, None)
        if again is not None and again.dedup is not None:
            self.put(again, again.dedup.snapshot())
        if name not in self._writing:
            for callback in self._after.pop(name, ()):
                try:
                    callback()
                except Exception:
                    log.exception("topic %s: work after the dedup snapshot failed", name)

    def when_saved(self, topic: PersistentTopic, callback: Callable[[], None]) -> None:
        """Call ``callback`` now if no snapshot of ``topic`` is being written, else once
        the writes under way have landed (not at all if one fails)."""
        if topic.name in self._writing:
            self._after.setdefault(topic.name, []).append(callback)
        else:
            callback()

    async def written(self, name: str) -> None:
        """Wait until no snapshot of topic ``name`` is being written."""
        while name in self._writing:
            await asyncio.wait([self._writing[name]])

    async def flush(self) -> None:
        """Wait for every snapshot being written (and those queued behind them)."""
        while self._writing:
            await asyncio.wait(list(self._writing.values()))

    def delete(self, topic_name: str) -> None:
        """Forget a deleted topic's snapshot (off the loop, after any write of it)."""
        self._again.pop(topic_name, None)
        self._after.pop(topic_name, None)
        try:
            self.storage.write_metadata(self.metadata.delete, f"dedup/{topic_name}")
        except StorageError as exc:
            log.error("topic %s: deleting the dedup snapshot failed: %s", topic_name, exc)


def replay_entry(dedup: MessageDeduplication, data: bytes | memoryview) -> None:
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
