"""Producer on one topic or one partition: batching, chunking, receipts, timeouts and
reconnection with resend.

Theory of operation: messages are queued as *ops*, each one ``Send`` frame (a batch, a
single message or one chunk) with the futures it settles. Ops are written in sequence-id
order and kept in ``_ops`` until the broker's receipt for their sequence id arrives. When
the connection drops, the producer looks the topic up again, re-creates itself under the
same id and name, and rewrites every pending frame in one write; sequence ids resume from
the broker's ``last_sequence_id`` on first creation.

A transaction's messages are batched as any others, one transaction per batch (a message
of another transaction, or of none, sends the open batch first), as the Java client does:
the batch's ``MessageMetadata`` and its ``Send`` carry the transaction id.
``KeyedTopicProducer`` (`keyed_producer`) is the ``BatchingType.KeyBased`` variant.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from magnetar.client.backoff import Backoff, with_retries
from magnetar.client.batching import HEADER_CACHE, BatchContainer, full_header, plain_header
from magnetar.client.connection import Connection
from magnetar.client.errors import (
    AlreadyClosed,
    MessageTooBig,
    NotAllowed,
    ProducerFenced,
    PulsarException,
    ServerError,
    Timeout,
    server_error,
)
from magnetar.client.message_id import MessageId
from magnetar.protocol import build_payload_part, command, compress, pb
from magnetar.protocol.frames import encode_payload_command

if TYPE_CHECKING:
    from magnetar.client.client import Client

log = logging.getLogger(__name__)
T = pb.BaseCommand
#: Room left in a chunk for its command and metadata.
CHUNK_OVERHEAD = 2048


@dataclass
class ProducerConf:
    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_millis: int = 30000
    compression_type: int = 0
    max_pending_messages: int = 1000
    block_if_queue_full: bool = False
    batching_enabled: bool = False
    batching_max_messages: int = 1000
    batching_max_allowed_size_in_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: float = 10
    batching_type: int = 0
    chunking_enabled: bool = False
    properties: dict[str, str] = field(default_factory=dict)
    access_mode: int = 0
    schema_info: pb.Schema | None = None
    initial_subscription_name: str | None = None
    txn_enabled: bool = False


#: a SendError that refuses a send in a transaction for good
_TXN_REFUSALS = frozenset((pb.InvalidTxnStatus, pb.TransactionNotFound))


class SendOp:
    """One Send frame in flight (``seq``: its sequence id, ``last``: its highest one)."""

    __slots__ = ("batch", "chunk", "created", "frame", "futures", "last", "n", "seq")

    def __init__(self, seq: int, frame: bytes, futures: list[asyncio.Future[Any]], n: int,
                 chunk: _ChunkState | None = None, batch: bool = False,
                 last: int = -1) -> None:
        self.seq = seq
        self.last = last if last >= 0 else (seq + n - 1 if n > 1 else seq)
        self.batch = batch
        self.frame = frame
        self.futures = futures
        self.n = n
        self.chunk = chunk
        self.created = time.monotonic()


class _ChunkState:
    __slots__ = ("first", "last_index")

    def __init__(self, last_index: int) -> None:
        self.first: MessageId | None = None
        self.last_index = last_index


class TopicProducer:
    """Publishes to a single (non-partitioned) topic or partition."""

    def __init__(self, client: Client, topic: str, partition: int, conf: ProducerConf) -> None:
        self._client = client
        self._loop = asyncio.get_running_loop()
        self.topic = topic
        self.partition = partition
        self.conf = conf
        self.producer_id = client._new_producer_id()
        self.name = conf.producer_name
        self._user_named = conf.producer_name is not None
        self._cnx: Connection | None = None
        self._ops: deque[SendOp] = deque()
        self._batch = BatchContainer()
        self._batch_timer: asyncio.TimerHandle | None = None
        self._timeout_timer: asyncio.TimerHandle | None = None
        self._seq = -1 if conf.initial_sequence_id is None else conf.initial_sequence_id
        self.last_sequence_id = self._seq
        self.pending = 0
        self._space_waiters: deque[asyncio.Future[None]] = deque()
        self._schema_version = b""
        self._epoch = 0
        self._closed = False
        # an exclusive producer's topic epoch, sent back on reconnect; a newer producer's
        # fencing ends this one for good (``fenced``: the error its sends fail with)
        self._topic_epoch: int | None = None
        self.fenced: ProducerFenced | None = None
        self._reconnecting: asyncio.Task[None] | None = None
        self._assigned: str | None = None  # the new owner a CloseProducer/Consumer named
        # transactions' adds that sends were written right behind (`after_join`)
        self._joining: list[asyncio.Future[None]] = []
        self._backoff = Backoff()
        self._compression = cast("pb.CompressionType", int(conf.compression_type))
        self._batching = conf.batching_enabled
        self.batching = conf.batching_enabled
        # 0 or less: no limit, as in the official client
        self.max_pending = conf.max_pending_messages if conf.max_pending_messages > 0 else 1 << 62
        self._max_batch_n = max(1, conf.batching_max_messages)
        self._max_batch_bytes = conf.batching_max_allowed_size_in_bytes
        self._delay = conf.batching_max_publish_delay_ms / 1000.0
        self._send_timeout = conf.send_timeout_millis / 1000.0

    # -------------------------------------------------------------- connecting
    async def start(self) -> None:
        await with_retries(lambda: self._connect(first=True), self._client._op_timeout,
                           self._client._pool.connect_budget())

    async def _connect(self, first: bool = False) -> None:
        joining = [fut for fut in self._joining if not fut.done()]
        self._joining = joining
        if joining:  # sends written right behind their transaction's add (`after_join`):
            await asyncio.wait(joining)  # resent only once the add is done again
        # a broker that moved our topic named its new owner: go straight there, once
        address, self._assigned = self._assigned, None
        if address is None:
            address = await self._client._lookup.lookup(self.topic)
        cnx = await self._client._pool.get(address)
        cnx.producers[self.producer_id] = self
        fields: dict[str, Any] = {
            "topic": self.topic, "producer_id": self.producer_id, "epoch": self._epoch,
            "user_provided_producer_name": self._user_named,
            "producer_access_mode": self.conf.access_mode,
        }
        if self.name:
            fields["producer_name"] = self.name
        if self.conf.properties:
            fields["metadata"] = [pb.KeyValue(key=k, value=v)
                                  for k, v in self.conf.properties.items()]
        if self.conf.schema_info is not None:
            fields["schema"] = self.conf.schema_info
        if self.conf.initial_subscription_name:
            fields["initial_subscription_name"] = self.conf.initial_subscription_name
        if self.conf.txn_enabled:
            fields["txn_enabled"] = True
        if self._topic_epoch is not None:
            fields["topic_epoch"] = self._topic_epoch
        try:
            resp = await cnx.request(T.PRODUCER, timeout=self._client._op_timeout, **fields)
        except BaseException:
            cnx.producers.pop(self.producer_id, None)
            raise
        self._epoch += 1
        self.name = resp.producer_name
        if resp.HasField("topic_epoch"):
            self._topic_epoch = resp.topic_epoch
        if resp.HasField("schema_version"):
            self._schema_version = resp.schema_version
        if first and self.conf.initial_sequence_id is None and resp.last_sequence_id >= 0:
            self._seq = resp.last_sequence_id
            self.last_sequence_id = self._seq
        self._cnx = cnx
        self._backoff.reset()
        if self._closed:
            return
        if self._ops:
            cnx.write(b"".join(op.frame for op in self._ops))

    def _on_disconnect(self, cnx: Connection, assigned_url: str | None = None) -> None:
        if cnx is not self._cnx:
            return
        self._cnx = None
        self._assigned = assigned_url
        if self._closed or self._reconnecting is not None:
            return
        self._reconnecting = self._loop.create_task(self._reconnect())

    async def _reconnect(self) -> None:
        try:
            while not self._closed:
                if self._assigned is None:  # an assigned new owner is tried at once
                    await asyncio.sleep(self._backoff.next())
                try:
                    await self._connect()
                    log.info("producer %s on %s reconnected", self.name, self.topic)
                    return
                except ProducerFenced as exc:  # a newer exclusive producer holds the topic
                    log.warning("producer %s on %s is fenced: %s", self.name, self.topic, exc)
                    self.fenced = exc
                    self._fail_all(exc)
                    return
                except (PulsarException, OSError) as exc:
                    log.info("producer on %s: reconnect failed: %s", self.topic, exc)
        finally:
            self._reconnecting = None

    @property
    def connected(self) -> bool:
        return self._cnx is not None and not self._cnx.closed

    @property
    def cnx(self) -> Connection | None:
        """The connection sends are written on now (None while reconnecting)."""
        return self._cnx

    def after_join(self, joining: asyncio.Future[None]) -> None:
        """A send about to be written right behind its transaction's AddPartitionToTxn,
        whose answer ``joining`` resolves: should the connection drop before, the sends
        are resent only once the add is done again (`_connect`), on whichever connection
        the coordinator is then reached."""
        if len(self._joining) >= 8:
            self._joining = [fut for fut in self._joining if not fut.done()]
        self._joining.append(joining)

    # ----------------------------------------------------------------- sending
    async def wait_space(self) -> None:
        while self.pending >= self.max_pending:
            if self._closed:
                raise AlreadyClosed("producer is closed")
            if self._batch:
                self._flush_batch()
            w = self._loop.create_future()
            self._space_waiters.append(w)
            await w

    def _wake(self) -> None:
        waiters = self._space_waiters
        while waiters and self.pending < self.max_pending:
            w = waiters.popleft()
            if not w.done():
                w.set_result(None)

    def add_plain(self, payload: bytes, fut: asyncio.Future[Any]) -> None:
        """``add`` for a message without properties, key or times (batching on)."""
        size = len(payload)
        if size >= self._max_batch_bytes:
            self.add(payload, fut, None, None, None, None, None, None)
            return
        self._seq += 1
        self.pending += 1
        header = HEADER_CACHE.get(size) or plain_header(size)
        batch = self._batch
        futures = batch.futures
        if futures and (batch.size + size > self._max_batch_bytes or batch.txn is not None):
            self._flush_batch()
            futures = batch.futures
        if not futures:
            batch.first_seq = self._seq
        parts = batch.parts
        parts.append(header)
        parts.append(payload)
        futures.append(fut)
        batch.size += size
        if len(futures) >= self._max_batch_n or batch.size >= self._max_batch_bytes:
            self._flush_batch()
        elif self._batch_timer is None:
            self._batch_timer = self._loop.call_later(self._delay, self._on_batch_timer)

    def _take_sequence_id(self, sequence_id: int | None) -> int:
        """The next sequence id, or the user's (which later ids then follow)."""
        if sequence_id is None:
            self._seq += 1
            return self._seq
        if sequence_id > self._seq:
            self._seq = sequence_id
        return sequence_id

    def add(self, payload: bytes, fut: asyncio.Future[Any], properties: dict[str, str] | None,
            partition_key: str | None, ordering_key: bytes | None, event_time: int | None,
            sequence_id: int | None, deliver_at: int | None,
            txn: tuple[int, int] | None = None) -> None:
        """Queue one message; ``fut`` gets its ``MessageId`` (or an exception); ``txn``:
        the id of its transaction."""
        seq = self._take_sequence_id(sequence_id)
        self.pending += 1
        size = len(payload)
        if self._batching and deliver_at is None and size < self._max_batch_bytes:
            if properties or partition_key is not None or ordering_key is not None \
                    or event_time:
                header = full_header(size, properties, partition_key, ordering_key,
                                     event_time)
            else:
                header = HEADER_CACHE.get(size) or plain_header(size)
            batch = self._batch
            futures = batch.futures
            if futures and (batch.size + size > self._max_batch_bytes or batch.txn != txn):
                self._flush_batch()
                futures = batch.futures
            # appended in place (no method call): this runs once per message
            if not futures:
                batch.first_seq = seq
                batch.txn = txn
                if partition_key is not None or ordering_key is not None:
                    batch.first_keys = (partition_key, ordering_key)
            parts = batch.parts
            parts.append(header)
            parts.append(payload)
            futures.append(fut)
            batch.size += size
            if len(futures) >= self._max_batch_n or batch.size >= self._max_batch_bytes:
                self._flush_batch()
            elif self._batch_timer is None:
                self._batch_timer = self._loop.call_later(self._delay, self._on_batch_timer)
            return
        if self._batch:
            self._flush_batch()
        meta = self._metadata(seq)
        if properties:
            meta.properties.extend(pb.KeyValue(key=k, value=v) for k, v in properties.items())
        if partition_key is not None:
            meta.partition_key = partition_key
        if ordering_key is not None:
            meta.ordering_key = ordering_key
        if event_time:
            meta.event_time = event_time
        if deliver_at is not None:
            meta.deliver_at_time = deliver_at
        if txn is not None:
            meta.txnid_most_bits, meta.txnid_least_bits = txn
        self._send_single(meta, payload, fut)

    def _metadata(self, seq: int) -> pb.MessageMetadata:
        meta = pb.MessageMetadata(producer_name=self.name or "", sequence_id=seq,
                                  publish_time=int(time.time() * 1000))
        if self._schema_version:
            meta.schema_version = self._schema_version
        return meta

    def _compress(self, meta: pb.MessageMetadata, payload: bytes) -> bytes:
        if self._compression:
            meta.compression = self._compression
            meta.uncompressed_size = len(payload)
            return compress(self._compression, payload)
        return payload

    def _send_single(self, meta: pb.MessageMetadata, payload: bytes,
                     fut: asyncio.Future[Any]) -> None:
        body = self._compress(meta, payload)
        limit = self._cnx.max_message_size if self._cnx else self._client._max_message_size
        if len(body) + CHUNK_OVERHEAD > limit:
            if not self.conf.chunking_enabled:
                self.pending -= 1
                self._wake()
                fut.set_exception(MessageTooBig(
                    f"message of {len(body)} bytes exceeds the broker's limit of {limit}"))
                return
            self._send_chunks(meta, body, fut, limit - CHUNK_OVERHEAD)
            return
        cmd = command(T.SEND, producer_id=self.producer_id, sequence_id=meta.sequence_id,
                      num_messages=1)
        if meta.HasField("txnid_most_bits"):
            cmd.send.txnid_most_bits = meta.txnid_most_bits
            cmd.send.txnid_least_bits = meta.txnid_least_bits
        frame = encode_payload_command(cmd, build_payload_part(meta, body))
        self._push(SendOp(meta.sequence_id, frame, [fut], 1))

    def _send_chunks(self, meta: pb.MessageMetadata, body: bytes, fut: asyncio.Future[Any],
                     chunk_size: int) -> None:
        n = (len(body) + chunk_size - 1) // chunk_size
        meta.uuid = f"{self.name}-{meta.sequence_id}-{uuid.uuid4().hex[:8]}"
        meta.num_chunks_from_msg = n
        meta.total_chunk_msg_size = len(body)
        state = _ChunkState(n - 1)
        seq = meta.sequence_id
        for i in range(n):
            meta.chunk_id = i
            part = build_payload_part(meta, body[i * chunk_size:(i + 1) * chunk_size])
            cmd = command(T.SEND, producer_id=self.producer_id, sequence_id=seq,
                          num_messages=1, is_chunk=True)
            if meta.HasField("txnid_most_bits"):
                cmd.send.txnid_most_bits = meta.txnid_most_bits
                cmd.send.txnid_least_bits = meta.txnid_least_bits
            # every chunk shares the message's future; only the last one settles it
            self._push(SendOp(seq, encode_payload_command(cmd, part), [fut], 1 if i == n - 1
                           else 0, state))

    def _on_batch_timer(self) -> None:
        self._batch_timer = None
        if self._batch:
            self._flush_batch()

    def add_batch(self, records: bytes, n: int, first_seq: int,
                  fut: asyncio.Future[Any], txn: tuple[int, int] | None = None) -> None:
        """Queue ``n`` messages already laid out as a batch payload (``records``: size,
        ``SingleMessageMetadata`` and value per message), as one batch entry with sequence
        ids ``first_seq`` to ``first_seq + n - 1`` (in transaction ``txn`` when given);
        ``fut`` gets the id of its first message. The open batch goes out first, so sends
        stay in order."""
        if self._batch:
            self._flush_batch()
        limit = self._cnx.max_message_size if self._cnx else self._client._max_message_size
        if len(records) + CHUNK_OVERHEAD > limit:
            fut.set_exception(MessageTooBig(
                f"a batch of {len(records)} bytes exceeds the broker's limit of {limit}"))
            return
        self._take_sequence_id(first_seq + n - 1)
        self.pending += n
        self._send_batch(records, [fut], first_seq, n, None, txn)

    def _flush_batch(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        keys = self._batch.first_keys
        txn = self._batch.txn
        payload, futures, first = self._batch.take()
        self._send_batch(payload, futures, first, len(futures), keys, txn)

    def _send_batch(self, payload: bytes, futures: list[asyncio.Future[Any]], first: int,
                    n: int, keys: tuple[str | None, bytes | None] | None,
                    txn: tuple[int, int] | None = None) -> None:
        last = first + n - 1
        meta = self._metadata(first)
        meta.num_messages_in_batch = n
        if keys is not None:
            if keys[0] is not None:
                meta.partition_key = keys[0]
            if keys[1] is not None:
                meta.ordering_key = keys[1]
        if n > 1:
            meta.highest_sequence_id = last
        if txn is not None:
            meta.txnid_most_bits, meta.txnid_least_bits = txn
        body = self._compress(meta, payload)
        cmd = command(T.SEND, producer_id=self.producer_id, sequence_id=first,
                      num_messages=n)
        if n > 1:
            cmd.send.highest_sequence_id = last
        if txn is not None:
            cmd.send.txnid_most_bits, cmd.send.txnid_least_bits = txn
        frame = encode_payload_command(cmd, build_payload_part(meta, body))
        self._push(SendOp(first, frame, futures, n, batch=True))

    def _push(self, op: SendOp) -> None:
        self._ops.append(op)
        cnx = self._cnx
        if cnx is not None:
            cnx.write(op.frame)
        if self._timeout_timer is None and self._send_timeout > 0:
            self._timeout_timer = self._loop.call_later(self._send_timeout, self._check_timeout)

    def flush_now(self) -> None:
        if self._batch:
            self._flush_batch()

    async def flush(self) -> None:
        """Send the open batch and wait until every pending message is acknowledged."""
        self.flush_now()
        if self._ops:
            futs = [f for op in self._ops for f in op.futures]
            await asyncio.gather(*futs, return_exceptions=True)

    # ---------------------------------------------------------------- receipts
    def _on_receipt(self, r: pb.CommandSendReceipt) -> None:
        ops = self._ops
        seq = r.sequence_id
        while ops:
            op = ops[0]
            if seq < op.seq:
                return  # a receipt we already handled (resent after reconnect)
            if seq > op.seq:
                # the broker acknowledged past our oldest op: it was lost
                log.warning("%s: receipt for %d while %d pending; reconnecting",
                            self.topic, seq, op.seq)
                if self._cnx is not None:
                    self._cnx.close()
                return
            ops.popleft()
            self._complete(op, r.message_id)
            return

    def _complete(self, op: SendOp, mid: pb.MessageIdData) -> None:
        ledger = mid.ledgerId
        entry = mid.entryId
        part = self.partition
        futures = op.futures
        if op.chunk is not None:
            this = MessageId(part, ledger, entry)
            state = op.chunk
            if state.first is None:
                state.first = this
            if op.n == 0:
                return
            this._chunk_ids = [state.first, this]
            if not futures[0].done():
                futures[0].set_result(this)
        elif not op.batch:
            if not futures[0].done():
                futures[0].set_result(MessageId(part, ledger, entry))
        else:
            n = op.n  # futures: one per message, or one for a whole ``add_batch``
            for i, f in enumerate(futures):
                if not f.done():
                    f.set_result(MessageId(part, ledger, entry, i, n))
        if op.last > self.last_sequence_id:
            self.last_sequence_id = op.last
        self.pending -= op.n
        if self._space_waiters:
            self._wake()

    def _on_send_error(self, err: pb.CommandSendError) -> None:
        ops = self._ops
        if err.error == pb.NotAllowedError and ops and ops[0].seq == err.sequence_id:
            # refused for good (a txn's message to a non-persistent topic): only it fails, as in Java
            op = ops.popleft()
            self._fail(op.futures, op.n, NotAllowed(err.error, f"{self.topic}: {err.message}"))
            return
        if err.error in _TXN_REFUSALS and ops and ops[0].seq == err.sequence_id:
            # a send in a transaction that is not open (ended, timed out, its add refused):
            # refused for good, so only it fails (a resend would meet the same answer)
            op = ops.popleft()
            self._fail(op.futures, op.n, server_error(err.error, f"{self.topic}: {err.message}"))
            return
        log.warning("%s: send error %s: %s; reconnecting", self.topic, err.error, err.message)
        if self._cnx is not None:
            self._cnx.close()

    def _check_timeout(self) -> None:
        self._timeout_timer = None
        if not self._ops:
            return
        now = time.monotonic()
        head = self._ops[0]
        expired_at = head.created + self._send_timeout
        if now >= expired_at:
            self._fail_all(Timeout(f"send to {self.topic} timed out"))
        else:
            self._timeout_timer = self._loop.call_later(expired_at - now, self._check_timeout)

    def _fail(self, futures: Iterable[asyncio.Future[Any]], n: int, exc: BaseException) -> None:
        for f in futures:
            if not f.done():
                f.set_exception(exc)
        self.pending -= n
        self._wake()

    def _take_open(self) -> list[asyncio.Future[Any]]:
        """Empty the open batch; its messages' futures."""
        return self._batch.take()[1]

    def _fail_all(self, exc: BaseException) -> None:
        ops, self._ops = self._ops, deque()
        opened = self._take_open()
        self._fail([f for op in ops for f in op.futures] + opened,
                   sum(op.n for op in ops) + len(opened), exc)

    # ----------------------------------------------------------------- closing
    async def close(self, flush: bool = True) -> None:
        """Close; with ``flush`` (the default) wait for what is pending first, without it
        fail what was not sent yet (open batches never go out)."""
        if self._closed:
            return
        if not flush:
            self._fail_all(AlreadyClosed("producer closed without flushing"))
        elif self.connected:
            with contextlib.suppress(TimeoutError, PulsarException):
                await asyncio.wait_for(self.flush(), self._client._op_timeout)
        self._closed = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        for h in (self._batch_timer, self._timeout_timer):
            if h is not None:
                h.cancel()
        cnx = self._cnx
        self._cnx = None
        if cnx is not None and not cnx.closed:
            cnx.producers.pop(self.producer_id, None)
            with contextlib.suppress(PulsarException, ServerError):
                await cnx.request(T.CLOSE_PRODUCER, timeout=self._client._op_timeout,
                                  producer_id=self.producer_id)
        self._fail_all(AlreadyClosed("producer closed"))
        for w in self._space_waiters:
            if not w.done():
                w.set_exception(AlreadyClosed("producer closed"))

