"""``Producer``: the public producer, routing messages across a topic's partitions."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import Any

from magnetar.client.errors import AlreadyClosed, ProducerQueueIsFull
from magnetar.client.message_id import MessageId
from magnetar.client.routing import Router
from magnetar.client.schema import Schema
from magnetar.client.topic_producer import TopicProducer
from magnetar.client.transaction import Transaction

SendCallback = Callable[[BaseException | None, MessageId | None], Any]


def _callback_adapter(cb: SendCallback) -> Callable[[asyncio.Future[MessageId]], None]:
    def done(fut: asyncio.Future[MessageId]) -> None:
        if fut.cancelled():
            cb(asyncio.CancelledError(), None)
        elif fut.exception() is not None:
            cb(fut.exception(), None)
        else:
            cb(None, fut.result())

    return done


async def _join(txn: Transaction, part: TopicProducer) -> None:
    """``part``'s partition joins ``txn`` before its first send there: the add written now
    and the send right behind it on the same connection where the broker keeps that
    order (`Transaction._join_now`; ``part`` resends nothing before the add is done after
    a reconnection), else the add's answer awaited."""
    joining = txn._join_now(part.topic, part.cnx)
    if joining is None:
        await txn._add_partition(part.topic)
    else:
        part.after_join(joining)


class Producer:
    """Publishes messages; create with ``Client.create_producer``."""

    def __init__(self, topic: str, parts: list[TopicProducer], router: Router | None,
                 schema: Schema, block_if_queue_full: bool) -> None:
        self._topic = topic
        self._parts = parts
        self._single = parts[0] if router is None else None
        self._router = router
        self._schema = schema
        self._encode = None if type(schema).__name__ == "BytesSchema" else schema.encode
        self._block = block_if_queue_full
        self._loop = asyncio.get_running_loop()
        # the C future type, built without the loop's Python-level ``create_future``
        self._new_future = functools.partial(asyncio.Future, loop=self._loop)
        self._closed = False

    def topic(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        return self._parts[0].name or ""

    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id for p in self._parts)

    def is_connected(self) -> bool:
        return not self._closed and all(p.connected for p in self._parts)

    async def send(self, content: Any, properties: dict[str, str] | None = None,
                   partition_key: str | None = None, ordering_key: bytes | None = None,
                   sequence_id: int | None = None, event_timestamp: int | None = None,
                   deliver_at: int | None = None, deliver_after: Any = None,
                   txn: Transaction | None = None, **_ignored: Any) -> MessageId:
        """Publish one message and wait for the broker's receipt (``txn``: in that
        transaction; visible to consumers once it commits)."""
        fut = await self.send_async(content, None, properties, partition_key, ordering_key,
                                    sequence_id, event_timestamp, deliver_at, deliver_after,
                                    txn=txn)
        return await fut

    async def send_async(self, content: Any, callback: SendCallback | None = None,
                         properties: dict[str, str] | None = None,
                         partition_key: str | None = None, ordering_key: bytes | None = None,
                         sequence_id: int | None = None, event_timestamp: int | None = None,
                         deliver_at: int | None = None, deliver_after: Any = None,
                         txn: Transaction | None = None,
                         **_ignored: Any) -> asyncio.Future[MessageId]:
        """Queue one message; returns a future for its ``MessageId``.

        Awaiting ``send_async`` itself only waits for room in the pending queue (when
        ``block_if_queue_full``); ``callback(exception_or_None, message_id)`` also fires.
        """
        part = self._single
        if (part is not None and type(content) is bytes and callback is None
                and properties is None and partition_key is None and ordering_key is None
                and sequence_id is None and event_timestamp is None and deliver_at is None
                and deliver_after is None and self._encode is None and not self._closed
                and txn is None
                and part.pending < part.max_pending and part.batching and part.fenced is None):
            # the common case, kept short: one plain message into the open batch
            fut: asyncio.Future[MessageId] = self._new_future()
            part.add_plain(content, fut)
            return fut
        if self._closed:
            raise AlreadyClosed("producer is closed")
        if self._encode is not None:
            content = self._encode(content)
        elif type(content) is not bytes:
            content = bytes(content)
        if part is None:
            assert self._router is not None
            part = self._parts[self._router.choose(partition_key, content)]
        if part.fenced is not None:
            raise part.fenced
        if part.pending >= part.max_pending:
            if not self._block:
                raise ProducerQueueIsFull(f"{part.pending} messages pending on {part.topic}")
            await part.wait_space()
        fut = self._loop.create_future()
        if callback is not None:
            fut.add_done_callback(_callback_adapter(callback))
        if deliver_after is not None:
            seconds = deliver_after.total_seconds() if hasattr(deliver_after, "total_seconds") \
                else float(deliver_after) / 1000.0
            deliver_at = int((time.time() + seconds) * 1000)
        if txn is not None:  # the partition joins the transaction before the first send
            if not txn._joined_on(part.topic, part.cnx):
                await _join(txn, part)
            txn._track_send(fut, part)
            part.add(content, fut, properties, partition_key, ordering_key, event_timestamp,
                     sequence_id, deliver_at, txn._id)
            return fut
        part.add(content, fut, properties, partition_key, ordering_key, event_timestamp,
                 sequence_id, deliver_at)
        return fut

    async def send_batch_async(self, records: bytes, count: int, first_sequence_id: int,
                               txn: Transaction | None = None) -> asyncio.Future[MessageId]:
        """Queue ``count`` messages already laid out as a batch payload (``records``: per
        message a 4-byte big-endian size, its ``SingleMessageMetadata`` and its bytes, as
        ``protocol.encode_batch`` writes them) as one batch entry, with sequence ids
        ``first_sequence_id`` onwards; returns a future for the id of its first message.
        For a producer on one topic or partition (not a partitioned topic); the records
        go out as they are (no schema encoding), compressed as the producer is configured.
        Awaiting it waits for room in the pending queue like ``send_async``. With ``txn``
        the whole entry is in that transaction (the Spark sink's exactly-once path)."""
        part = self._single
        if part is None:
            raise ValueError("send_batch_async needs a producer on one topic or partition")
        if self._closed:
            raise AlreadyClosed("producer is closed")
        if part.fenced is not None:
            raise part.fenced
        if part.pending >= part.max_pending:
            if not self._block:
                raise ProducerQueueIsFull(f"{part.pending} messages pending on {part.topic}")
            await part.wait_space()
        fut: asyncio.Future[MessageId] = self._new_future()
        if txn is not None:  # the partition joins the transaction before the first send
            if not txn._joined_on(part.topic, part.cnx):
                await _join(txn, part)
            txn._track_send(fut, part)
            part.add_batch(records, count, first_sequence_id, fut, txn.id)
            return fut
        part.add_batch(records, count, first_sequence_id, fut)
        return fut

    async def flush(self) -> None:
        """Send open batches now and wait for all pending receipts."""
        await asyncio.gather(*(p.flush() for p in self._parts))

    async def close(self, flush: bool = True) -> None:
        """Close the producer. By default pending messages are sent and acknowledged first;
        ``flush=False`` fails the ones not sent yet instead (their batches never go out:
        for a task that must not publish part of its work, e.g. a failed Spark write task
        whose retry writes the same rows again)."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(p.close(flush) for p in self._parts), return_exceptions=True)

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
