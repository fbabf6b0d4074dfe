"""``Entry``: one stored entry as the broker dispatched it, not split into messages.

A reader created with ``deliver_entries=True`` hands these out (``Reader.read_entries``)
instead of ``Message`` objects, for callers that turn a whole batch into columns at once
(``magnetar.protocol.split_batch``) rather than pay for one object per message. The
payload is uncompressed and a chunked message is assembled, but a batch stays whole, and
nothing is filtered: messages of the first entry before the reader's start id, and batch
indexes the subscription already acknowledged (``ack_set``), are the caller's to skip.
"""

from __future__ import annotations

from typing import Any

from magnetar.client.message_id import MessageId
from magnetar.protocol import pb


class Entry:
    """A whole entry: its ``MessageMetadata`` and payload (a batch's messages inside)."""

    __slots__ = ("_ack_set", "_consumer", "_count", "_id", "_meta", "_payload",
                 "_redelivery", "_topic")

    def __init__(self, payload: bytes, meta: pb.MessageMetadata, mid: MessageId, topic: str,
                 redelivery: int, ack_set: list[int] | None, consumer: Any = None) -> None:
        self._payload = payload
        self._meta = meta
        self._id = mid
        self._topic = topic
        self._redelivery = redelivery
        self._ack_set = ack_set
        self._consumer = consumer
        self._count = meta.num_messages_in_batch if meta.HasField("num_messages_in_batch") \
            else 1

    def message_id(self) -> MessageId:
        """The entry's id (partition, ledger, entry; batch index -1)."""
        return self._id

    def ledger_id(self) -> int:
        return self._id._ledger_id

    def entry_id(self) -> int:
        return self._id._entry_id

    def partition(self) -> int:
        return self._id._partition

    def topic_name(self) -> str:
        return self._topic

    def metadata(self) -> pb.MessageMetadata:
        return self._meta

    def payload(self) -> bytes:
        """Uncompressed: one message's bytes, or a batch payload to split."""
        return self._payload

    def is_batch(self) -> bool:
        return self._meta.HasField("num_messages_in_batch")

    def num_messages(self) -> int:
        return self._count

    def ack_set(self) -> list[int] | None:
        """The batch indexes still to deliver, as 64-bit words (bit ``i`` of word
        ``i // 64``), when the subscription acknowledged some; None means all of them."""
        return self._ack_set

    def redelivery_count(self) -> int:
        return self._redelivery

    def last_message_id(self) -> MessageId:
        """The id of the entry's last message (what a reader has read up to)."""
        if not self.is_batch():
            return self._id
        mid = MessageId(self._id._partition, self._id._ledger_id, self._id._entry_id,
                        self._count - 1, self._count)
        mid._topic = self._topic
        return mid

    def __repr__(self) -> str:
        return (f"Entry(id={self._id}, topic={self._topic!r}, {self._count} messages, "
                f"{len(self._payload)} bytes)")
