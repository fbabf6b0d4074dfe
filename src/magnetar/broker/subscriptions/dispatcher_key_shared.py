"""Key_Shared subscriptions: each key hash belongs to one consumer (AUTO_SPLIT or STICKY ranges).

Per-key order holds while consumers come and go:
- an entry whose consumer has no permits is held back (replay), and so is every later entry
  of the same key hash in the same pass;
- when a key hash changes hands (a consumer joins or leaves), the new owner gets nothing of
  that hash while another consumer still holds unacknowledged messages of it (the hash is
  *draining*, as in Pulsar 4): each consumer's ``PendingAcks`` counts its entries per hash,
  and the dispatcher runs again when a draining hash is released;
- new entries whose key hash still has entries waiting in the replay set are held back
  too, so a redelivered message is never overtaken by a later one of its key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.entries import entry_metadata, entry_num_messages
from magnetar.broker.errors import BrokerError
from magnetar.broker.subscriptions.dispatcher import (
    MAX_READS_PER_PASS,
    Entry,
)
from magnetar.broker.subscriptions.dispatcher_shared import Prepared, SharedDispatcher
from magnetar.broker.subscriptions.key_shared import AutoSplitSelector, StickySelector, sticky_key
from magnetar.protocol import pb
from magnetar.protocol.hashing import sticky_key_hash

if TYPE_CHECKING:
    from magnetar.broker.subscriptions.consumer import Consumer
    from magnetar.broker.subscriptions.subscription import PersistentSubscription
    from magnetar.storage import Position

MAX_HELD_BACK = 10_000


class KeySharedDispatcher(SharedDispatcher):
    def __init__(
        self, subscription: PersistentSubscription, sub_type: int, meta: pb.KeySharedMeta | None
    ) -> None:
        super().__init__(subscription, sub_type)
        self.mode = meta.keySharedMode if meta is not None else pb.AUTO_SPLIT
        self.allow_out_of_order = bool(meta is not None and meta.allowOutOfOrderDelivery)
        self.selector: AutoSplitSelector[Consumer] | StickySelector[Consumer] = (
            StickySelector() if self.mode == pb.STICKY else AutoSplitSelector()
        )
        self._hash_of: dict[Position, int] = {}  # key hashes of entries in the replay set
        self._waiting: set[int] | None = None  # hashes with entries held back (one turn)
        self._draining: set[int] = set()  # hashes held back because another consumer has them

    def add_consumer_with_meta(self, consumer: Consumer, meta: pb.KeySharedMeta | None) -> None:
        mode = meta.keySharedMode if meta is not None else pb.AUTO_SPLIT
        if mode != self.mode:
            raise BrokerError(
                pb.ConsumerAssignError,
                f"subscription {self.sub.name} uses Key_Shared mode "
                f"{pb.KeySharedMode.Name(self.mode)}, not {pb.KeySharedMode.Name(mode)}",
            )
        try:
            if isinstance(self.selector, StickySelector):
                ranges = [(r.start, r.end) for r in meta.hashRanges] if meta is not None else []
                self.selector.add_consumer(consumer, ranges)
            else:
                self.selector.add_consumer(consumer)
        except ValueError as exc:
            raise BrokerError(pb.ConsumerAssignError, str(exc)) from exc
        consumer.pending.on_release = self._hash_released
        self.add_consumer(consumer)
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        self.selector.remove_consumer(consumer)
        super().remove_consumer(consumer)

    def _hash_released(self, key_hash: int) -> None:
        """A consumer no longer holds messages of ``key_hash``: its new owner may go on."""
        if key_hash in self._draining:
            self._draining.discard(key_hash)
            self.schedule()

    def _held_by_another(self, key_hash: int, owner: Consumer) -> bool:
        for c in self.consumers:
            if c is not owner and key_hash in c.pending.hash_counts:
                self._draining.add(key_hash)
                return True
        return False

    def dispatch(self) -> None:
        self._waiting = None  # computed at most once per turn, then kept up to date
        for _ in range(MAX_READS_PER_PASS):  # bounded work per turn; reschedules itself if more
            if not self._available() or not self.has_more():
                break
            allowed = self.rate_allowance()
            if not allowed:
                break  # a dispatch rate: its timer runs the next pass
            most = min(self.max_read(), allowed)
            entries = self.read_replay(most)
            replayed = len(entries)
            new: list[Entry] = []
            if len(self.replay) + replayed < MAX_HELD_BACK:
                new = self.read_new(most)
            prepared = self.prepare(entries + new, replayed)
            if not prepared:
                continue  # all held for later delivery or already acknowledged
            if self.assign(prepared, replayed) == 0 and not new:
                break  # nothing can go out until permits, acks or consumers change
        else:
            self.schedule()
        self.sub.check_end_of_topic()

    def assign(  # type: ignore[override]  # returns how many it sent (Shared's: nothing)
        self, entries: list[Prepared], replayed: int = 0
    ) -> int:
        """Send what the rules allow; hold the rest back in the replay set. The first
        ``replayed`` entries come from the replay set, the others are new."""
        blocked_hashes: set[int] = set()
        waiting: set[int] | None = None
        sent = 0
        for i, (position, data, metadata) in enumerate(entries):
            key_hash = metadata_key_hash(metadata)
            if i == replayed and self.replay and not self.allow_out_of_order:
                # New entries must not overtake older ones of their key still held back. The
                # set may still hold hashes sent earlier in this turn: that only holds an
                # entry back one more pass, never lets one through early.
                if self._waiting is None:
                    self._waiting = self._waiting_hashes()
                waiting = self._waiting
            consumer = self.selector.select(key_hash)
            if (
                consumer is None
                or key_hash in blocked_hashes
                or (waiting is not None and key_hash in waiting)
                or not consumer.available
                or (not self.allow_out_of_order and self._held_by_another(key_hash, consumer))
            ):
                blocked_hashes.add(key_hash)
                self.replay.add(position)
                self._hash_of[position] = key_hash
                if self._waiting is not None:
                    self._waiting.add(key_hash)
                continue
            self.send(consumer, position, data, entry_num_messages(metadata))
            consumer.pending.add_hash(position, key_hash)
            sent += 1
        return sent

    def _waiting_hashes(self) -> set[int]:
        """Key hashes of the entries now in the replay set. The hash of an entry not seen
        yet (a redelivered or delayed one) comes from the read cache, else from disk: those
        entries are read off the loop (`_read_positions`; `_take_replay_read` learns their
        hashes and the dispatcher runs again) and meanwhile every hash counts as waiting
        (`EveryHash`), so no new entry can overtake one of its key."""
        hashes = self._hash_of
        out: set[int] = set()
        unknown: list[Position] = []
        cached = self.ledger.cached_entry
        for position in self.replay:
            key_hash = hashes.get(position)
            if key_hash is None:
                data = cached(position)
                if data is None:
                    if not self.cursor.is_deleted(position):  # (else read_replay drops it)
                        unknown.append(position)
                    continue
                key_hash = hashes[position] = metadata_key_hash(entry_metadata(data))
            out.add(key_hash)
        if len(hashes) > 2 * len(self.replay) + 1024:
            self._hash_of = {p: h for p, h in hashes.items() if p in self.replay}
        if unknown:
            if not self._reading():
                self._read_positions(unknown)
            return EveryHash()
        return out

    def _take_replay_read(self) -> dict[Position, bytes | memoryview] | None:
        """The base's, also learning the key hashes of the entries read."""
        read = super()._take_replay_read()
        if read:
            hashes = self._hash_of
            replay = self.replay
            for position, data in read.items():
                if position in replay and position not in hashes:
                    hashes[position] = metadata_key_hash(entry_metadata(data))
        return read


class EveryHash(set[int]):
    """The waiting hashes while some entries of the replay set have a hash not known yet:
    every hash is taken for waiting (so every new entry is held back in order)."""

    def __contains__(self, key_hash: object) -> bool:
        return True


def metadata_key_hash(metadata: pb.MessageMetadata | None) -> int:
    """The Key_Shared hash of an entry: Murmur3 of its sticky key, modulo 65536."""
    if metadata is None:
        return sticky_key_hash(sticky_key(None, None))
    key = sticky_key(
        metadata.partition_key if metadata.HasField("partition_key") else None,
        metadata.ordering_key if metadata.HasField("ordering_key") else None,
        partition_key_b64_encoded=metadata.partition_key_b64_encoded,
    )
    return sticky_key_hash(key)
