"""PersistentTopic and NonPersistentTopic: producers, subscriptions and the publish path.

Publish path (persistent): the payload part arrives exactly as the producer framed it; if
broker entry metadata is configured, a 0x0e02 section is put in front; the bytes are
appended to the managed ledger; when the ledger says the entry is durable, the SendReceipt
goes out (receipts resolve in append order) and every subscription is told to dispatch.
Nothing inside the payload is decoded on this path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from magnetar.broker.entries import with_entry_metadata
from magnetar.broker.errors import BrokerError
from magnetar.broker.topic_name import TopicName
from magnetar.broker.topics.backlog_times import BacklogTimes
from magnetar.broker.topics.changes import WatchedDict
from magnetar.broker.topics.dedup import NOT_CHUNKED, REPLICATOR_PREFIX, chunk_of, origin_of
from magnetar.broker.topics.entry_index import load_entry_index
from magnetar.broker.topics.producer import Producer, ProducerCnx
from magnetar.broker.topics.replicated import TopicReplicator
from magnetar.broker.topics.topic_limits import TopicLimits
from magnetar.broker.topics.transaction_buffer import TransactionBuffer, TxnId, stored_snapshot
from magnetar.protocol import pb
from magnetar.protocol.markers import is_marker_part
from magnetar.storage import StorageError
from magnetar.storage.errors import is_no_space

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.subscriptions.snapshot_cache import SnapshotListener
    from magnetar.broker.subscriptions.subscription import NonPersistentSubscription, Subscription
    from magnetar.broker.topics.dedup import MessageDeduplication
    from magnetar.broker.topics.dedup_snapshot import Restored
    from magnetar.broker.topics.txn_entries import TxnLane
    from magnetar.protocol.frames import SendFrame
    from magnetar.storage import ManagedLedger, Position

log = logging.getLogger(__name__)

#: the answer to a send while this broker's metadata session may have ended (its clock)
_NO_LEASE = "this broker's metadata session may have expired: not acknowledged; look it up again"

#: the ledger property that holds a persistent topic's epoch (of its exclusive producers)
TOPIC_EPOCH_PROPERTY = "topicEpoch"

ACCESS_SHARED = pb.Shared
ACCESS_EXCLUSIVE = pb.Exclusive
ACCESS_EXCLUSIVE_WITH_FENCING = pb.ExclusiveWithFencing


#: the dedup identity of a marker entry sent by a replicator: markers are never duplicates
_NO_DEDUP = ("", -1, -1)
_FENCE_MIN_S = 0.5
_FENCE_MAX_S = 30.0


class Topic:
    """What both topic kinds share: the name, producers, subscriptions, access modes."""

    persistent = True
    # in a cluster, while its bundle moves: the new owner's (pulsar://, pulsar+ssl://)
    # URLs, sent as assignedBrokerServiceUrl when its clients are closed
    moving_to: tuple[str, str] | None = None
    # a persistent topic's transactions, from the first one it saw (None on the others)
    txn_buffer: TransactionBuffer | None = None

    def __init__(self, service: BrokerService, name: TopicName) -> None:
        self.service = service
        self.topic_name = name
        self.name = str(name)
        # noting this topic in the broker's TopicChanges when an entry comes or goes
        changes = service.topic_changes.names
        self.producers: dict[str, Producer] = WatchedDict(changes, self.name)
        self.subscriptions: dict[str, Subscription] = WatchedDict(changes, self.name)
        self.waiting_exclusive: list[tuple[Producer, int]] = []
        self.topic_epoch: int | None = None  # of the exclusive producers (see add_producer)
        self.msg_in = 0
        self.bytes_in = 0
        self.terminated = False
        self.created = time.time()
        self.limits = TopicLimits(service.policies, name)  # rates (topic_limits.py)

    def touch(self) -> None:
        """Note that a figure /metrics reads of this topic may have changed (changes.py)."""
        self.service.topic_changes.names.add(self.name)

    # -- producers ---------------------------------------------------------------

    def last_sequence_id(self, producer_name: str) -> int:
        return -1

    def add_producer(self, producer: Producer, request_id: int) -> bool:
        """Attach ``producer``; False when it waits for exclusive access (WaitForExclusive).

        Access modes as in Pulsar: a Shared producer is refused (ProducerBusy) while an
        exclusive one holds the topic or waits for it; Exclusive is refused (ProducerFenced)
        while any other producer is attached or waiting; WaitForExclusive waits until the
        topic is free; ExclusiveWithFencing takes it, closing every producer attached
        (they find it held when they reconnect) and failing the waiting ones. An exclusive
        producer gets the topic's next epoch (in ProducerSuccess); one reconnecting with an
        epoch older than the topic's is fenced (ProducerFenced): a newer exclusive producer
        held the topic meanwhile. A persistent topic stores its epoch with its ledger
        before the producer is answered (`producer_ready`), so a restart never hands out
        an epoch a fenced producer saw; a non-persistent topic's lives while it is loaded."""
        if self.terminated:
            raise BrokerError(pb.TopicTerminatedError, f"topic {self.name} is terminated")
        if producer.name in self.producers:
            raise BrokerError(
                pb.ProducerBusy, f"producer with name '{producer.name}' is already connected to {self.name}"
            )
        held = self.exclusive_holder()
        mode = producer.access_mode
        if mode == ACCESS_SHARED:
            if held is not None or self.waiting_exclusive:
                raise BrokerError(pb.ProducerBusy, f"topic {self.name} has an exclusive producer")
            self.producers[producer.name] = producer
            return True
        if mode == ACCESS_EXCLUSIVE:
            if held is not None or self.waiting_exclusive:
                raise BrokerError(
                    pb.ProducerFenced, f"topic {self.name} has an exclusive producer: {held or 'waiting'}")
            if self.producers:
                raise BrokerError(pb.ProducerFenced, f"topic {self.name} has shared producers")
        elif mode == ACCESS_EXCLUSIVE_WITH_FENCING:
            self._fence_producers()
        elif self.producers:  # WaitForExclusive
            self.waiting_exclusive.append((producer, request_id))
            return False
        self._take_epoch(producer)
        self.producers[producer.name] = producer
        return True

    def exclusive_holder(self) -> str | None:
        """The name of the exclusive producer holding the topic, if one does."""
        for p in self.producers.values():
            if p.access_mode != ACCESS_SHARED:
                return p.name
        return None

    def _fence_producers(self) -> None:
        """ExclusiveWithFencing arrived: fail the waiting producers, close the attached."""
        waiting, self.waiting_exclusive = self.waiting_exclusive, []
        for p, request_id in waiting:
            p.cnx.producers.pop(p.producer_id, None)
            p.cnx.send_error(request_id, pb.ProducerFenced, f"fenced out of {self.name}")
        for p in list(self.producers.values()):
            self.remove_producer(p)
            p.close_by_broker()

    def _take_epoch(self, producer: Producer) -> None:
        """Give exclusive ``producer`` the topic's epoch (ProducerFenced: it is stale)."""
        current = -1 if self.topic_epoch is None else self.topic_epoch
        asked = producer.topic_epoch
        if asked is not None and asked < current:
            raise BrokerError(
                pb.ProducerFenced,
                f"topic {self.name} epoch moved to {current}; producer {producer.name} has {asked}")
        self.topic_epoch = producer.topic_epoch = current + 1 if asked is None else asked
        self._epoch_taken()

    def _epoch_taken(self) -> None:
        """The epoch moved (a persistent topic stores it)."""

    def producer_ready(self, producer: Producer, request_id: int) -> None:
        """Answer the ProducerSuccess of an attached producer (once its epoch is stored)."""
        producer.cnx.on_producer_ready(producer, request_id)

    def remove_producer(self, producer: Producer) -> None:
        waiting = [w for w in self.waiting_exclusive if w[0] is not producer]
        self.waiting_exclusive = waiting
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
        while not self.producers and self.waiting_exclusive:
            nxt, request_id = self.waiting_exclusive.pop(0)
            if nxt.cnx.closed:
                continue
            try:
                self._take_epoch(nxt)
            except BrokerError as exc:
                nxt.cnx.producers.pop(nxt.producer_id, None)
                nxt.cnx.send_error(request_id, exc.code, str(exc))
                continue
            self.producers[nxt.name] = nxt
            self.producer_ready(nxt, request_id)

    def close_all(self) -> None:
        recovery = getattr(self, "_txn_recovery", None)
        if recovery is not None and not recovery.done():
            recovery.cancel()
        self.limits.close()
        for producer in list(self.producers.values()):
            producer.close_by_broker()
        self.producers.clear()
        for sub in list(self.subscriptions.values()):
            sub.disconnect_consumers()

    # -- publishing ----------------------------------------------------------------

    def publish(
        self, producer: Producer, send: SendFrame, payload: bytes | memoryview, size: int,
        part_crc: int | None = None, txn: TxnId | None = None, lane: TxnLane | None = None,
    ) -> None:
        """Store (or hand out) one Send's ``payload`` part of ``size`` bytes and answer it.
        ``part_crc``: the part's CRC32C, which the caller checked against its content
        (`magnetar.protocol.frames.part_checksum`); a persistent topic stores the part
        with it, so storage computes no checksum of its own. None: not checked. ``txn``:
        the transaction the send is in, checked there (only a topic with a
        ``txn_buffer`` is given one); ``lane``: its lane on this topic, when the caller
        found it (`Producer.publish`: a later send of a transaction checked open here)."""
        raise NotImplementedError

    def stats(self) -> dict[str, Any]:
        return {
            "msgInCounter": self.msg_in,
            "bytesInCounter": self.bytes_in,
            "publishers": [
                {"producerName": p.name, "producerId": p.producer_id, "msgInCounter": p.msg_in,
                 "bytesInCounter": p.bytes_in, "address": p.cnx.peer}
                for p in self.producers.values()
            ],
            "subscriptions": {name: sub.stats() for name, sub in self.subscriptions.items()},
        }


class PersistentTopic(BacklogTimes, Topic):
    """A topic whose entries live in a ManagedLedger; subscriptions have durable cursors."""

    # Defaults most topics keep live on the class: at most 29 attributes set in __init__
    # share their keys with the class (~0.3 KB, not ~1.6 KB, per loaded topic): keep it so.
    _epoch_write: asyncio.Future[None] | None = None
    dedup_position: Position | None = None
    dedup_unsaved = 0
    last_publish_error: str | None = None
    # told when a replicated subscription passes a snapshot (replication/snapshots.py)
    snapshot_listener: SnapshotListener | None = None
    markers_in = 0  # marker entries received from other clusters (in msg_in)
    # After a failed append (disk full, I/O error) new producers are refused until
    # fenced_until (monotonic), backing off while the failures go on; see _storage_failed.
    fenced_until = 0.0
    _fence_backoff = 0.0
    # the publish time of the oldest backlog entry read last (backlog time quota, sweep)
    _publish_time_read: tuple[Position, float | None] | None = None
    _txn_recovery: asyncio.Future[None] | None = None

    def __init__(self, service: BrokerService, name: TopicName, ledger: ManagedLedger,
                 restored: Restored | None = None, entry_index: int | None = None) -> None:
        """``restored`` / ``entry_index``: the dedup state and next entry index when the
        caller read them already (`BrokerService.load_topic`, off the loop); else read here."""
        super().__init__(service, name)
        self.ledger = ledger
        self.terminated = ledger.is_terminated
        # the exclusive producers' epoch, stored with the ledger (Pulsar keeps it in the
        # managed ledger's properties too); the write of a new one, while under way
        stored = ledger.properties.get(TOPIC_EPOCH_PROPERTY)
        self.topic_epoch = int(stored) if stored is not None else None
        self._stored_epoch = self.topic_epoch
        # Dedup state reflects every entry up to dedup_position; the stored snapshot lags by
        # dedup_unsaved entries (replayed from the ledger after a crash).
        self.dedup: MessageDeduplication | None = None
        if service.policies.get(name.namespace).deduplication_enabled:
            snapshots = service.dedup_snapshots
            self.dedup = snapshots.load(self) if restored is None else snapshots.apply(self, restored)
        self.entry_index = -1
        if service.config.entry_metadata_enabled:
            self.entry_index = load_entry_index(ledger) if entry_index is None else entry_index
        self._held: list[ProducerCnx] = []  # connections with receipts queued for _appends_done
        self._confirmed = False  # entries were confirmed since the last _appends_done
        ledger.after_appends = self._appends_done
        # a cursor moved, a segment was trimmed: the name noted (a C call, no frame per ack)
        ledger.on_change = partial(service.topic_changes.names.add, self.name)
        # the geo-replicators, by remote cluster (broker/replication: told of new entries)
        self.replicators: dict[str, TopicReplicator] = {}
        self._disk = service.disk  # a full disk makes the broker read-only (disk_usage)
        # transactions (transaction_buffer.py): a topic that had one replays its entries
        # after the stored snapshot when loaded (class defaults: None until it sees one)
        snapshot = stored_snapshot(ledger.properties)
        if snapshot is not None:
            self.txn_buffer = TransactionBuffer(self, snapshot)
            self._txn_recovery = asyncio.ensure_future(self.txn_buffer.recover())


    def _epoch_taken(self) -> None:
        """Store the new epoch with the ledger; `producer_ready` answers after that (a
        producer reconnecting with the stored epoch needs no write)."""
        if self.topic_epoch == self._stored_epoch and self._epoch_write is None:
            return
        taken = self.topic_epoch
        epoch = str(taken)
        write = asyncio.ensure_future(self.ledger.set_property_async(TOPIC_EPOCH_PROPERTY, epoch))
        self._epoch_write = write

        def done(f: asyncio.Future[None]) -> None:
            if self._epoch_write is f:
                self._epoch_write = None
            if not f.cancelled() and f.exception() is not None:
                log.error("topic %s: cannot store epoch %s: %s", self.name, epoch, f.exception())
            elif not f.cancelled():
                self._stored_epoch = max(taken or 0, self._stored_epoch or 0)

        write.add_done_callback(done)

    def producer_ready(self, producer: Producer, request_id: int) -> None:
        write = self._epoch_write
        if write is None or producer.access_mode == ACCESS_SHARED:
            producer.cnx.on_producer_ready(producer, request_id)
            return
        producer.ready = False
        producer.cnx.producers[producer.producer_id] = producer  # a close removes it meanwhile

        def stored(f: asyncio.Future[None]) -> None:
            if producer.cnx.closed or self.producers.get(producer.name) is not producer:
                return
            error = f.exception() if not f.cancelled() else StorageError("cancelled")
            if error is None:
                producer.cnx.on_producer_ready(producer, request_id)
                return
            self.remove_producer(producer)
            producer.cnx.producers.pop(producer.producer_id, None)
            producer.cnx.send_error(request_id, pb.ServiceNotReady,
                                    f"cannot store the epoch of topic {self.name}: {error}")

        write.add_done_callback(stored)

    def last_sequence_id(self, producer_name: str) -> int:
        if self.dedup is None:
            return -1
        return self.dedup.last_sequence_id(producer_name)

    def add_producer(self, producer: Producer, request_id: int) -> bool:
        if self._disk.read_only:  # the code on which the C++ client fails pending sends at once
            raise BrokerError(pb.ProducerBlockedQuotaExceededException, self._disk.refusal() or "")
        if self.fenced_until and time.monotonic() < self.fenced_until:
            raise BrokerError(
                pb.ServiceNotReady,
                f"storage of topic {self.name} is failing ({self.last_publish_error}); retry later",
            )
        if not self.terminated:
            quota_error = self.service.backlog_quota.producer_error(self)
            if quota_error is not None:
                raise BrokerError(*quota_error)
        ready = super().add_producer(producer, request_id)
        if self.dedup is not None:
            self.dedup.producer_added(producer.name)
        return ready

    def remove_producer(self, producer: Producer) -> None:
        super().remove_producer(producer)
        if self.dedup is not None and producer.name not in self.producers:
            self.dedup.producer_removed(producer.name)

    def publish(
        self, producer: Producer, send: SendFrame, payload: bytes | memoryview, size: int,
        part_crc: int | None = None, txn: TxnId | None = None, lane: TxnLane | None = None,
    ) -> None:
        """``txn``: the transaction the send is in (checked by `Producer.publish` or
        `txn_sends`); ``lane``: its lane, from `Producer.publish`."""
        seq = send.sequence_id
        highest = send.highest_sequence_id
        if highest < 0:
            highest = seq
        if self.terminated:
            producer.send_error(seq, pb.TopicTerminatedError, f"topic {self.name} is terminated",
                                size, txn)
            return
        if producer.closing:  # closed once its sends in flight are answered: the client
            producer.dropped(size, txn)  # sends this one again where it reconnects
            return
        if self._disk.read_only:
            producer.send_error(seq, pb.NotAllowedError, self._disk.refusal() or "", size, txn)
            return
        cluster = self.service.cluster
        if cluster is not None and not cluster.lease_ok():
            producer.send_error(seq, pb.ServiceNotReady, _NO_LEASE, size, txn)
            return
        num_messages = send.num_messages
        chunk = NOT_CHUNKED
        dedup_id = (producer.name, seq, highest)
        if producer.name.startswith(REPLICATOR_PREFIX) and is_marker_part(payload):
            self.markers_in += 1  # a marker from another cluster: never deduplicated
            dedup_id = _NO_DEDUP
        elif self.dedup is not None:
            if send.is_chunk:
                chunk = chunk_of(payload)
            if num_messages > 1 and send.highest_sequence_id < 0:
                # a batch from a client that numbers its messages consecutively (the C++
                # client sends no highest_sequence_id and counts seq + n - 1 as published)
                dedup_id = (producer.name, seq, seq + num_messages - 1)
            if producer.name.startswith(REPLICATOR_PREFIX):
                dedup_id = origin_of(payload, dedup_id)
            verdict = self.dedup.check(
                dedup_id[0], dedup_id[1], dedup_id[2], chunk_id=chunk[0], num_chunks=chunk[1]
            )
            if verdict == "duplicate":
                producer.send_receipt(seq, highest, -1, -1, size)
                return
            if verdict == "unknown":
                producer.send_error(
                    seq, pb.PersistenceError, "a message with this sequence id is still being stored",
                    size, txn,
                )
                return
        if self.entry_index >= 0:
            # the entry starts with the broker entry metadata, not the part: its CRC is
            # the storage's own
            self.entry_index += num_messages
            data: bytes | memoryview = with_entry_metadata(payload, self.entry_index - 1)
            part_crc = None
        else:
            data = payload
        producer.in_flight += 1
        if txn is not None and (lane is None or lane.entry is None):  # (else a later entry)
            buf = self.txn_buffer
            if buf is not None and txn not in buf.open and txn not in buf.unplaced:
                buf.appending(txn)  # (else a later entry: nothing to note)
        try:
            self.ledger.append_then(
                data, partial(self._persisted, producer, seq, highest, dedup_id, chunk, size,
                              num_messages, txn, lane),
                part_crc)
        except BaseException:  # no outcome will come for it (the caller answers it)
            producer.in_flight -= 1
            if txn is not None and self.txn_buffer is not None:
                self.txn_buffer.placed(txn, None)
            raise

    def _persisted(
        self,
        producer: Producer,
        seq: int,
        highest: int,
        dedup_id: tuple[str, int, int],
        chunk: tuple[int, int],
        size: int,
        num_messages: int,
        txn: TxnId | None,
        lane: TxnLane | None,
        position: Position | None,
        exc: BaseException | None,
    ) -> None:
        """The append of one send finished: answer it, exactly once, whatever fails here
        (an unanswered send would keep its pending-send slot and publish-buffer bytes).
        A receipt is queued on its connection and written by `_appends_done`, once for
        every send of the batch the storage completed. A closing producer's last answer
        closes it (`Producer.after_answers`): the close is queued behind the receipts.
        Only stored messages count in the topic's and the producer's counters."""
        producer.in_flight -= 1
        answered = False
        if txn is not None:
            # `TransactionBuffer.placed`'s common case, inline (once a message): a later
            # entry of a transaction open here (its lane has its entry until its end
            # begins), in the ledger of its latest entries
            entry = lane.entry if lane is not None else None
            if entry is not None and position is not None and position[0] == entry.ledger:
                entry.ids.append(position[1])
            else:
                buf = self.txn_buffer
                if buf is not None:
                    buf.placed(txn, position)
        try:
            if position is None:
                if self.dedup is not None:
                    self.dedup.reset_pushed()
                disk = self._disk
                if is_no_space(exc):  # read-only now: no back-off, writes resume with space
                    disk.no_space(str(exc))
                refusal = disk.refusal()
                answered = True
                if refusal is not None:
                    self.last_publish_error = refusal
                    producer.send_error(seq, pb.NotAllowedError, refusal, size, txn)
                    return
                self._storage_failed(exc or RuntimeError("append failed"))
                producer.send_error(seq, pb.PersistenceError, f"could not store the message: {exc}",
                                    size, txn)
                return
            self.msg_in += num_messages
            self.bytes_in += size
            producer.msg_in += num_messages
            producer.bytes_in += size
            if self._fence_backoff:
                self._fence_backoff = 0.0
            if self.dedup is not None and dedup_id is not _NO_DEDUP:
                self.dedup.on_persisted(*dedup_id, chunk_id=chunk[0], num_chunks=chunk[1])
                self.dedup_position = position
                self.dedup_unsaved += 1
            answered = True
            cluster = self.service.cluster
            if cluster is not None and not cluster.lease_ok():
                # stored (before any new owner's fence: the storage checked), but this
                # broker may no longer own the topic: no receipt; the client sends it
                # again where the topic is served, whose deduplication knows it
                producer.send_error(seq, pb.ServiceNotReady, _NO_LEASE, size, txn)
                return
            if producer.receipt_held(seq, highest, position.ledger_id, position.entry_id, size):
                self._held.append(producer.cnx)
            self._confirmed = True
            if self.dedup is not None and (
                self.dedup_unsaved >= self.service.config.brokerDeduplicationEntriesInterval
            ):
                self.service.dedup_snapshots.save(self)
        except Exception:
            log.exception("topic %s: failed to complete send %d of producer %s",
                          self.name, seq, producer.name)
            if not answered:
                producer.send_error(seq, pb.UnknownError, "internal broker error", size, txn)
        finally:
            if producer.closing and not producer.in_flight:
                producer.answered()

    def entries_confirmed(self) -> None:
        """Entries appended without a producer (`markers.append_marker`) are durable."""
        self._confirmed = True  # `_appends_done` tells subscriptions and replicators

    def _appends_done(self) -> None:
        """The storage told the outcome of a batch of appends (the ledger's
        ``after_appends``): write the receipts queued for it, one write per connection,
        and, if entries were confirmed, give every subscription with consumers a dispatch
        pass (once per batch however many entries it holds: thousands of subscriptions
        nobody consumes from cost nothing per entry)."""
        self.service.topic_changes.names.add(self.name)  # counters, size, backlog (changes.py)
        held = self._held
        if held:
            self._held = []
            for cnx in held:
                cnx.release_held()
        if self._confirmed:
            self._confirmed = False
            self._notify_subscriptions()
            for replicator in self.replicators.values():
                replicator.entries_added()

    def txn_visibility_changed(self) -> None:
        """What readers may read moved (a transaction ended, the buffer became ready):
        give subscriptions and replicators a pass."""
        self._notify_subscriptions()
        for replicator in self.replicators.values():
            replicator.entries_added()

    def readable_last(self) -> Position | None:
        """The last entry readers may read: the last confirmed one, or, while a
        transaction is open, the one before its first entry (`TransactionBuffer.max_read`)."""
        last = self.ledger.last_confirmed()
        buf = self.txn_buffer
        return last if buf is None else buf.readable_last(last)

    def _notify_subscriptions(self) -> None:
        for sub in self.subscriptions.values():
            dispatcher = sub.dispatcher  # None: a stored subscription nobody joined yet
            if dispatcher is not None and dispatcher.consumers:
                dispatcher.schedule()

    def _storage_failed(self, exc: BaseException) -> None:
        """An append failed: the send gets a SendError (on which clients drop the connection,
        reconnect and resend) and, for a back-off that doubles while failures go on, the
        producers' reconnections are refused with ServiceNotReady. Without that pause a
        client would resend at once, forever: its send timeout restarts with every
        reconnection, so the application would never hear of the failure."""
        self.last_publish_error = str(exc)
        now = time.monotonic()
        if now < self.fenced_until:
            return  # same failure period: already logged
        self._fence_backoff = min(_FENCE_MAX_S, max(_FENCE_MIN_S, self._fence_backoff * 2))
        self.fenced_until = now + self._fence_backoff
        log.error("topic %s: append failed (%s); producers refused for %.1f s",
                  self.name, exc, self._fence_backoff)

    def remove_subscription(self, name: str) -> None:
        """Forget a subscription that holds no state (a Reader's, once its consumer left)."""
        self.subscriptions.pop(name, None)

    def delete_subscription(self, name: str) -> Future[Any] | None:
        """Unsubscribe: drop the subscription and its durable cursor, at once; the cursor's
        row is deleted off the loop (its future, to await for the answer; None when there
        is no row: a non-durable subscription)."""
        sub = self.subscriptions.pop(name, None)
        if sub is not None and sub.durable:
            return self.ledger.delete_cursor(name)
        return None

    # -- lifecycle -----------------------------------------------------------------

    async def terminate(self) -> Position | None:
        """Stop accepting messages (admin 'terminate'); consumers get ReachedEndOfTopic.
        Sends are refused and producers closed at once; the ledger's terminated flag is
        stored off the loop (`ManagedLedger.terminate_async`) and this returns once it is
        (the last confirmed position then). If storing fails, the topic is not terminated
        and the StorageError is raised."""
        self.terminated = True
        for producer in list(self.producers.values()):
            producer.close_by_broker()
        self.producers.clear()
        try:
            await self.ledger.terminate_async()
        except Exception:
            self.terminated = self.ledger.is_terminated
            raise
        for sub in self.subscriptions.values():
            sub.check_end_of_topic()
        return self.ledger.last_confirmed()

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out["storageSize"] = self.ledger.size_bytes()
        out["entryCount"] = self.ledger.entry_count()
        out["terminated"] = self.terminated
        return out


class NonPersistentTopic(Topic):
    """Dispatch-or-drop: a message goes to consumers that have permits now, or nowhere."""

    persistent = False

    def __init__(self, service: BrokerService, name: TopicName) -> None:
        super().__init__(service, name)
        self.next_entry_id = 0
        self.msg_dropped = 0
        # `subscriptions` itself (the same dict), typed as what it holds on this topic
        self._np_subscriptions = cast("dict[str, NonPersistentSubscription]", self.subscriptions)

    def publish(
        self, producer: Producer, send: SendFrame, payload: bytes | memoryview, size: int,
        part_crc: int | None = None, txn: TxnId | None = None, lane: TxnLane | None = None,
    ) -> None:
        seq = send.sequence_id
        highest = send.highest_sequence_id
        if highest < 0:
            highest = seq
        num_messages = send.num_messages
        self.msg_in += num_messages
        self.bytes_in += size
        producer.msg_in += num_messages
        producer.bytes_in += size
        self.service.topic_changes.names.add(self.name)  # its counters (changes.py)
        entry_id = self.next_entry_id
        self.next_entry_id += 1
        for sub in self._np_subscriptions.values():
            if not sub.dispatcher.offer(entry_id, payload, num_messages):
                self.msg_dropped += num_messages
        producer.send_receipt(seq, highest, -1, -1, size)

