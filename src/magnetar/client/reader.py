"""``Reader``: a non-durable, exclusive consumer positioned at a message id."""

from __future__ import annotations

from magnetar.client.consumer import Consumer
from magnetar.client.entry import Entry
from magnetar.client.errors import PulsarException
from magnetar.client.message import Message
from magnetar.client.message_id import MessageId


class Reader:
    """Reads a topic from ``start_message_id``; create with ``Client.create_reader``."""

    def __init__(self, consumer: Consumer, start: MessageId, inclusive: bool) -> None:
        self._consumer = consumer
        self._start = start
        self._inclusive = inclusive

    def topic(self) -> str:
        return self._consumer.topic()

    def _messages_only(self) -> None:
        if self._consumer._conf.deliver_entries:
            raise PulsarException("this reader hands out whole entries: use read_entries")

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        self._messages_only()
        msg = await self._consumer.receive(timeout_millis)
        await self._consumer.acknowledge_cumulative(msg)
        return msg

    async def read_batch(self, max_messages: int, timeout_millis: int | None = None) -> list[Message]:
        """Up to ``max_messages`` messages at once: waits ``timeout_millis`` for the first
        (``Timeout`` if none comes), then takes what is already queued, with one cumulative
        acknowledgement for all of them (``read_next`` acknowledges each)."""
        self._messages_only()
        consumer = self._consumer
        out = [await consumer.receive(timeout_millis)]
        take = consumer.take_queued
        if max_messages > 1:
            out.extend(take(max_messages - 1))
        await consumer.acknowledge_cumulative(out[-1])
        return out

    async def read_entries(self, max_entries: int,
                           timeout_millis: int | None = None) -> list[Entry]:
        """Whole entries, for a reader made with ``deliver_entries=True`` (see ``Entry``):
        waits ``timeout_millis`` for the first (``Timeout`` if none comes), then takes up
        to ``max_entries`` of those already received, with one cumulative acknowledgement."""
        consumer = self._consumer
        out = await consumer.receive_entries(max_entries, timeout_millis)
        await consumer.acknowledge_cumulative(out[-1].message_id())
        return out

    def __aiter__(self) -> Reader:
        return self

    async def __anext__(self) -> Message:
        msg = await self._consumer.__anext__()
        await self._consumer.acknowledge_cumulative(msg)
        return msg

    async def has_message_available(self) -> bool:
        """True when a ``read_next`` would return without waiting for new messages."""
        c = self._consumer
        c._catch_up()  # what a blocking reader took, taken into account
        if c._queue:
            return True
        children = c._children
        for child in children:
            last = await child.get_last_message_id()
            if last._entry_id < 0 or last._ledger_id < 0:
                continue
            ref = child.last_dequeued
            last_key = (last._ledger_id, last._entry_id)
            if ref is None:
                start = child.start_id or self._start
                if start == MessageId.earliest:
                    return True
                if start == MessageId.latest:
                    continue
                start_key = (start._ledger_id, start._entry_id)
                if last_key > start_key:
                    return True
                if last_key == start_key:
                    if child.start_inclusive or (
                            start._batch_index >= 0 and last._batch_index > start._batch_index):
                        return True
                    if start._batch_index >= 0 and last._batch_index < 0 and \
                            await self._settle(child, last_key):
                        return True  # the broker gave no batch index: look at the entry
                continue
            ref_key = (ref._ledger_id, ref._entry_id)
            if last_key > ref_key:
                return True
            if last_key == ref_key and last._batch_index > ref._batch_index >= 0:
                return True
        return bool(c._queue)

    async def _settle(self, child: object, key: tuple[int, int]) -> bool:
        """The broker will deliver entry ``key``: wait for it, then look at the queue."""
        await child.wait_entry(key, self._consumer._client._op_timeout)  # type: ignore[attr-defined]
        return bool(self._consumer._queue)

    async def seek(self, message_id: MessageId | int) -> None:
        await self._consumer.seek(message_id)

    async def get_last_message_id(self) -> MessageId:
        return await self._consumer.get_last_message_id()

    def is_connected(self) -> bool:
        return self._consumer.is_connected()

    async def close(self) -> None:
        await self._consumer.close()

    async def __aenter__(self) -> Reader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
