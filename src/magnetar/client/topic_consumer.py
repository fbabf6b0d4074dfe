"""Consumer on one topic or partition: subscribe, flow permits, message decoding,
acks, redelivery and reconnection.

Theory of operation: after ``Subscribe`` succeeds the consumer grants ``Flow`` permits for
its whole receiver queue; each message the application takes returns one permit, and
permits go back to the broker in one ``Flow`` once half the queue's worth has gathered.
Decoded messages go into the parent ``Consumer``'s queue (shared by every partition of a
multi-topic consumer). When the connection drops, queued messages from this consumer are
discarded (the broker will redeliver them) and the consumer subscribes again with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from itertools import repeat
from typing import TYPE_CHECKING, Any

from magnetar.client.acks import AckGroupingTracker, ack_set_words
from magnetar.client.backoff import Backoff, with_retries
from magnetar.client.chunks import ChunkAssembler
from magnetar.client.connection import Connection
from magnetar.client.entry import Entry
from magnetar.client.errors import PulsarException, server_error
from magnetar.client.message import Message, Received
from magnetar.client.message_id import MessageId
from magnetar.protocol import (
    ProtocolError,
    command,
    decompress,
    encode_command,
    pb,
)
from magnetar.protocol.batch import scan_batch
from magnetar.protocol.frames import MessageFrame, split_message_at
from magnetar.protocol.ids import message_id_data, wire_position

if TYPE_CHECKING:
    from magnetar.client.consumer import Consumer

log = logging.getLogger(__name__)
T = pb.BaseCommand


class TopicConsumer:
    def __init__(self, parent: Consumer, topic: str, partition: int,
                 start: MessageId | None = None) -> None:
        self.parent = parent
        self.topic = topic
        self.partition = partition
        client = parent._client
        self._client = client
        self._loop = asyncio.get_running_loop()
        self.consumer_id = client._new_consumer_id()
        self._cnx: Connection | None = None
        self._closed = False
        self._queue_size = max(1, parent._conf.receiver_queue_size)
        self._permits = 0
        self._threshold = max(1, self._queue_size // 2)
        self._acks = AckGroupingTracker(self._write, lambda: self.consumer_id,
                                        parent._conf.ack_group_time_ms / 1000.0,
                                        batch_index_ack=parent._conf.batch_index_ack_enabled)
        self._chunks = ChunkAssembler(parent._conf.max_pending_chunked_message)
        self._backoff = Backoff()
        self._reconnecting: asyncio.Task[None] | None = None
        self._assigned: str | None = None  # the new owner a CloseProducer/Consumer named
        self.start_id = start
        self._filter: MessageId | None = None
        self.start_inclusive = parent._conf.start_message_id_inclusive
        self.min_publish_time = 0
        # the last message the application took (or its id)
        self.last_taken: Message | MessageId | None = None
        self.end_of_topic = False
        self._dlq_redelivery: dict[tuple[int, int], list[Message]] = {}
        self.subscription = parent._conf.subscription_name
        self._generation = 0
        self.seen_entry: tuple[int, int] = (-2, -2)
        self._entry_waiters: list[tuple[tuple[int, int], asyncio.Future[None]]] = []
        self.schema = parent._schema
        self._entries = parent._conf.deliver_entries

    # -------------------------------------------------------------- connecting
    async def start(self) -> None:
        await with_retries(self._connect, self._client._op_timeout,
                           self._client._pool.connect_budget())

    def _subscribe_fields(self) -> dict[str, Any]:
        conf = self.parent._conf
        fields: dict[str, Any] = {
            "topic": self.topic, "subscription": self.subscription,
            "subType": int(conf.consumer_type), "consumer_id": self.consumer_id,
            "durable": conf.durable, "initialPosition": int(conf.initial_position),
            "read_compacted": conf.is_read_compacted,
            "replicate_subscription_state": conf.replicate_subscription_state_enabled,
            "force_topic_creation": True,
        }
        if conf.consumer_name:
            fields["consumer_name"] = conf.consumer_name
        if conf.properties:
            fields["metadata"] = [pb.KeyValue(key=k, value=v) for k, v in conf.properties.items()]
        info = self.schema.schema_info()
        if info is not None:
            fields["schema"] = info
        if int(conf.consumer_type) == pb.CommandSubscribe.Key_Shared:
            fields["keySharedMeta"] = pb.KeySharedMeta(keySharedMode=pb.AUTO_SPLIT)
        if not conf.durable and self.start_id is not None:
            fields["start_message_id"] = self.start_id.to_pb(with_batch=True)
        return fields

    async def _connect(self) -> None:
        # a broker that moved our topic named its new owner: go straight there, once
        address, self._assigned = self._assigned, None
        if address is None:
            address = await self._client._lookup.lookup(self.topic)
        cnx = await self._client._pool.get(address)
        cnx.consumers[self.consumer_id] = self
        try:
            await cnx.request(T.SUBSCRIBE, timeout=self._client._op_timeout,
                              **self._subscribe_fields())
        except BaseException:
            cnx.consumers.pop(self.consumer_id, None)
            raise
        self._cnx = cnx
        self._backoff.reset()
        self._permits = 0
        conf = self.parent._conf
        self._filter = None if conf.durable or self.start_id in (
            MessageId.earliest, MessageId.latest) else self.start_id
        if self._closed:
            return
        cnx.write(encode_command(command(T.FLOW, consumer_id=self.consumer_id,
                                         messagePermits=self._queue_size)))

    def _on_disconnect(self, cnx: Connection, assigned_url: str | None = None) -> None:
        if cnx is not self._cnx:
            return
        self._cnx = None
        self._assigned = assigned_url
        self._discard_queued()
        if self._closed or self._reconnecting is not None:
            return
        self._reconnecting = self._loop.create_task(self._reconnect())

    def _discard_queued(self) -> None:
        self.parent._drop_from(self)
        self._chunks.clear()
        self._acks.forget_batches()
        if not self.parent._conf.durable and self.last_dequeued is not None:
            self.start_id = self.last_dequeued
            self.start_inclusive = False

    async def _reconnect(self) -> None:
        try:
            while not self._closed:
                if self._assigned is None:  # an assigned new owner is tried at once
                    await asyncio.sleep(self._backoff.next())
                try:
                    await self._connect()
                    log.info("consumer on %s reconnected", self.topic)
                    return
                except (PulsarException, OSError) as exc:
                    log.info("consumer on %s: reconnect failed: %s", self.topic, exc)
        finally:
            self._reconnecting = None

    @property
    def last_dequeued(self) -> MessageId | None:
        """Id of the last message the application took from the queue."""
        last = self.last_taken
        return last.message_id() if isinstance(last, Message) else last

    @last_dequeued.setter
    def last_dequeued(self, mid: MessageId | None) -> None:
        self.last_taken = mid

    @property
    def connected(self) -> bool:
        return self._cnx is not None and not self._cnx.closed

    def _write(self, data: bytes) -> None:
        if self._cnx is not None:
            self._cnx.write(data)

    def _on_end_of_topic(self) -> None:
        self.end_of_topic = True

    # ---------------------------------------------------------------- messages
    def _on_message(self, m: MessageFrame) -> None:
        key = (m.ledger_id, m.entry_id)
        try:
            self._decode(m, m.payload_part, key)  # type: ignore[arg-type]  # a payload frame
        finally:
            if key > self.seen_entry:
                self.seen_entry = key
            if self._entry_waiters:
                self._mark_seen(key)

    def _decode(self, m: MessageFrame, part: bytes, key: tuple[int, int]) -> None:
        try:
            meta, at = split_message_at(part)
        except ProtocolError as exc:
            log.warning("%s: discarding corrupt message %s:%s: %s", self.topic, key[0],
                        key[1], exc)
            self._reject(m.message_id, pb.CommandAck.ChecksumMismatch)
            return
        buf = part
        chunk_ids = None
        if meta.num_chunks_from_msg > 1:
            done = self._chunks.add(meta, m.message_id, part[at:])
            if done is None:
                self.returned_permits(1)
                return
            if isinstance(done, list):
                self._write(encode_command(command(
                    T.ACK, consumer_id=self.consumer_id, ack_type=pb.CommandAck.Individual,
                    message_id=done)))
                self.returned_permits(1)
                return
            buf, chunk_ids = done
            at = 0
            key = wire_position(chunk_ids[-1])
        if meta.compression != pb.NONE:
            try:
                buf = decompress(meta.compression, memoryview(buf)[at:], meta.uncompressed_size)
            except ProtocolError as exc:
                log.warning("%s: cannot decompress %s:%s: %s", self.topic, key[0], key[1],
                            exc)
                self._reject(chunk_ids[-1] if chunk_ids else m.message_id,
                             pb.CommandAck.DecompressionError)
                return
            at = 0
        ledger, entry_id = key
        partition = self.partition
        if self._entries:  # a reader of whole entries (``client.entry.Entry``)
            eid = MessageId(partition, ledger, entry_id)
            eid._topic = self.topic
            self.parent._enqueue(Entry(  # type: ignore[arg-type]  # its queue holds entries
                buf[at:] if at else buf, meta, eid, self.topic, m.redelivery_count,
                list(m.ack_set) if m.ack_set else None, self))
            return
        filtering = self._filter is not None or self.min_publish_time
        if not meta.HasField("num_messages_in_batch"):
            entry = Received(buf, at, None, 0, meta, ledger, entry_id, partition, self.topic,
                          m.redelivery_count, self.parent._value_schema, self)
            if chunk_ids is not None:
                entry.chunk_ids = [MessageId(partition, *wire_position(c)) for c in chunk_ids]
            msg = Message(entry, -1)
            if filtering and self._skip(key, -1, meta):
                self.returned_permits(1)
                self._acks.individual(key)
                return
            if self.parent._dlq is not None:
                self._track_dlq(msg, entry.redelivery)
            self.parent._enqueue(msg)
            return
        self._on_batch(m, meta, buf, at, key, filtering)

    def _on_batch(self, m: MessageFrame, meta: pb.MessageMetadata, buf: bytes, at: int,
                  key: tuple[int, int], filtering: Any) -> None:
        """Queue the members of a batch: one pass finds where each ends (``scan_batch``);
        the messages themselves are the shared ``Received`` and an index."""
        n = meta.num_messages_in_batch
        ack_set = m.ack_set
        try:
            ends, compacted = scan_batch(buf, at, n)
            keep: list[int] | None = None
            if compacted or ack_set or filtering:
                dropped = set(compacted)
                keep = [i for i in range(n) if i not in dropped and (
                    not ack_set or (ack_set[i >> 6] >> (i & 63)) & 1)]
                if filtering:
                    keep = [i for i in keep if not self._skip(key, i, meta)]
        except (ProtocolError, IndexError) as exc:
            log.warning("%s: bad batch %s:%s: %s", self.topic, key[0], key[1], exc)
            self._reject(m.message_id, pb.CommandAck.BatchDeSerializeError)
            return
        redelivery = m.redelivery_count
        entry = Received(buf, at, ends, n, meta, key[0], key[1], self.partition, self.topic,
                      redelivery, self.parent._value_schema, self)
        if keep is None:
            self._acks.track_batch(key, n)
            msgs: Iterable[Message] = map(Message, repeat(entry, n), range(n))
        else:
            if len(keep) < n:
                self.returned_permits(n - len(keep))
            if not keep:
                self._acks.individual(key)
                return
            self._acks.track_batch(key, set(keep))
            msgs = map(Message, repeat(entry), keep)
        if redelivery and self.parent._dlq is not None:
            msgs = list(msgs)
            for msg in msgs:
                self._track_dlq(msg, redelivery)
        self.parent._enqueue_many(msgs)

    def _skip(self, key: tuple[int, int], batch_index: int, meta: pb.MessageMetadata) -> bool:
        """Whether the message at ``key`` / ``batch_index`` lies before where a
        non-durable subscription (a reader) starts, or was published too early."""
        if self.min_publish_time and meta.publish_time < self.min_publish_time:
            return True
        s = self._filter
        if s is None:
            return False
        sk = (s._ledger_id, s._entry_id)
        if key != sk:
            if key > sk:
                self._filter = None  # past the start: stop checking
            return key < sk
        if s._batch_index < 0 or batch_index < 0:
            return not self.start_inclusive
        if batch_index != s._batch_index:
            return batch_index < s._batch_index
        return not self.start_inclusive

    def _reject(self, mid: pb.MessageIdData, reason: int) -> None:
        self._write(encode_command(command(
            T.ACK, consumer_id=self.consumer_id, ack_type=pb.CommandAck.Individual,
            message_id=[pb.MessageIdData(ledgerId=mid.ledgerId, entryId=mid.entryId)],
            validation_error=reason)))
        self.returned_permits(1)

    def _track_dlq(self, msg: Message, redelivery: int) -> None:
        dlq = self.parent._dlq
        if dlq is not None and redelivery >= dlq.max_redeliver_count:
            key = msg._entry.key
            self._dlq_redelivery.setdefault(key, []).append(msg)

    # ----------------------------------------------------------------- permits
    def returned_permits(self, n: int) -> None:
        self._permits += n
        if self._permits >= self._threshold:
            self.send_flow()

    def send_flow(self) -> None:
        permits = self._permits
        self._permits = 0
        self._write(encode_command(command(T.FLOW, consumer_id=self.consumer_id,
                                           messagePermits=permits)))

    # -------------------------------------------------------------------- acks
    def ack(self, mid: MessageId) -> bool:
        """Record an individual ack; True once the message's whole entry is acknowledged."""
        return self.ack_at((mid._ledger_id, mid._entry_id), mid._batch_index, mid._chunk_ids)

    def ack_at(self, key: tuple[int, int], batch_index: int,
               chunk_ids: list[MessageId] | None = None) -> bool:
        """``ack`` of the message at entry ``key`` and ``batch_index`` (-1: not batched)."""
        if chunk_ids:
            for c in chunk_ids:
                self._acks.individual((c._ledger_id, c._entry_id))
            return True
        if self._acks.individual(key, batch_index):
            if self._dlq_redelivery:
                self._dlq_redelivery.pop(key, None)
            return True
        return False

    def ack_cumulative(self, mid: MessageId) -> None:
        if mid._batch_index >= 0 and mid._batch_size and mid._batch_index < mid._batch_size - 1:
            if mid._entry_id == 0:
                return
            key = (mid._ledger_id, mid._entry_id - 1)
        else:
            key = (mid._ledger_id, mid._entry_id)
        self._acks.cumulative(key)
        for k in [k for k in self._dlq_redelivery if k <= key]:
            del self._dlq_redelivery[k]

    async def ack_in_txn(self, mid: MessageId, txn: tuple[int, int], cumulative: bool) -> None:
        """Acknowledge ``mid`` (cumulatively) in transaction ``txn`` (its id; the
        subscription was added to it): the Ack carries the transaction id and a request
        id, and the broker's AckResponse is awaited. A batched message is acknowledged by
        its index (an ``ack_set`` with every other index left set)."""
        data = pb.MessageIdData(ledgerId=mid._ledger_id, entryId=mid._entry_id)
        if mid._batch_index >= 0 and mid._batch_size > 0:
            left = set(range(mid._batch_index + 1, mid._batch_size)) if cumulative \
                else set(range(mid._batch_size)) - {mid._batch_index}
            if left:
                data.ack_set.extend(ack_set_words(left))
        most, least = txn
        ack_type = pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual
        resp = await self._request(T.ACK, ack_type=ack_type, message_id=[data],
                                   txnid_most_bits=most, txnid_least_bits=least)
        if resp.HasField("error"):
            raise server_error(resp.error, resp.message)

    def flush_acks(self) -> None:
        self._acks.flush()

    def redeliver(self, keys: list[tuple[int, int]]) -> None:
        """Ask for these entries again (Shared/Key_Shared) or for all unacked otherwise."""
        if not keys:
            return
        self._acks.flush()  # the broker must not resend what we already acknowledged
        shared = int(self.parent._conf.consumer_type) in (
            pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared)
        if shared:
            ids = [pb.MessageIdData(ledgerId=ledger, entryId=entry) for ledger, entry in keys]
            self._write(encode_command(command(
                T.REDELIVER_UNACKNOWLEDGED_MESSAGES, consumer_id=self.consumer_id,
                message_ids=ids)))
        else:
            self.redeliver_all()

    def redeliver_all(self) -> None:
        self._acks.flush()
        dropped = self.parent._drop_from(self)
        self._acks.forget_batches()
        self._write(encode_command(command(T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
                                           consumer_id=self.consumer_id)))
        if dropped:
            self.returned_permits(dropped)

    def take_dlq(self, key: tuple[int, int]) -> list[Message] | None:
        return self._dlq_redelivery.pop(key, None)

    # -------------------------------------------------------------- operations
    async def _request(self, kind: int, **fields: Any) -> Any:
        cnx = self._cnx
        if cnx is None:
            from magnetar.client.errors import NotConnected

            raise NotConnected(f"consumer on {self.topic} is not connected")
        return await cnx.request(kind, timeout=self._client._op_timeout,
                                 consumer_id=self.consumer_id, **fields)

    async def seek(self, target: MessageId | int) -> None:
        """Durable: ``Seek`` then a fresh subscription; non-durable: resubscribe there."""
        self._acks.flush()
        durable = self.parent._conf.durable
        if durable:
            if isinstance(target, MessageId):
                await self._request(T.SEEK, message_id=message_id_data(
                    target._ledger_id, target._entry_id))
            else:
                await self._request(T.SEEK, message_publish_time=int(target))
        else:
            self.last_taken = None
            if isinstance(target, MessageId):
                self.start_id = target
                self.start_inclusive = True  # like a durable seek: the id itself is next
                self.min_publish_time = 0
            else:
                self.start_id = MessageId.earliest
                self.start_inclusive = True
                self.min_publish_time = int(target)
        await self._resubscribe()

    async def _resubscribe(self) -> None:
        """Close and re-create the subscription on this connection (queue discarded)."""
        cnx = self._cnx
        self.parent._drop_from(self)
        self._acks.forget_batches()
        self._chunks.clear()
        if cnx is None or cnx.consumers.get(self.consumer_id) is not self:
            return  # the broker closed us already; the reconnection is under way
        cnx.consumers.pop(self.consumer_id, None)
        self._cnx = None
        with contextlib.suppress(PulsarException):
            await cnx.request(T.CLOSE_CONSUMER, timeout=self._client._op_timeout,
                              consumer_id=self.consumer_id)
        if not self.parent._conf.durable:
            # a fresh non-durable subscription: some brokers keep the old one's position
            self._generation += 1
            self.subscription = f"{self.parent._conf.subscription_name}-{self._generation}"
        if self._reconnecting is not None or self._closed:
            return
        try:
            await self._connect()
        except (PulsarException, OSError):
            self._reconnecting = self._loop.create_task(self._reconnect())

    async def wait_entry(self, key: tuple[int, int], timeout: float) -> None:
        """Wait until an entry at or past ``key`` has been received and decoded."""
        if self.seen_entry >= key:
            return
        fut = self._loop.create_future()
        self._entry_waiters.append((key, fut))
        async with asyncio.timeout(timeout):
            await fut

    def _mark_seen(self, key: tuple[int, int]) -> None:
        if key > self.seen_entry:
            self.seen_entry = key
        if self._entry_waiters:
            keep = []
            for k, fut in self._entry_waiters:
                if k <= key:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    keep.append((k, fut))
            self._entry_waiters = keep

    async def get_last_message_id(self) -> MessageId:
        resp = await self._request(T.GET_LAST_MESSAGE_ID)
        mid = MessageId.from_pb(resp.last_message_id, partition=self.partition)
        mid._topic = self.topic
        return mid

    async def unsubscribe(self) -> None:
        await self._request(T.UNSUBSCRIBE)
        await self.close(send_close=False)

    async def close(self, send_close: bool = True) -> None:
        if self._closed:
            return
        self._acks.flush()
        self._closed = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        cnx = self._cnx
        self._cnx = None
        if cnx is not None and not cnx.closed:
            cnx.consumers.pop(self.consumer_id, None)
            if send_close:
                with contextlib.suppress(PulsarException):
                    await cnx.request(T.CLOSE_CONSUMER, timeout=self._client._op_timeout,
                                      consumer_id=self.consumer_id)
