"""Received messages: payload, metadata accessors and id, built lazily from the wire.

Theory of operation: every message of one delivered entry shares one ``Received`` (the
received bytes, the entry's ``MessageMetadata``, where each batch member ends, and what the
consumer knew on arrival: topic, partition, redelivery count, schema). A ``Message`` is only
that ``Received`` and its index in the batch, so receiving costs one small object per message.
Its bytes, its ``SingleMessageMetadata`` and its ``MessageId`` are cut out or decoded on
first use (``protocol.batch.batch_message_at`` knows where they are).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError

from magnetar.client.message_id import MessageId
from magnetar.protocol import pb
from magnetar.protocol.batch import batch_message_at

if TYPE_CHECKING:
    from magnetar.client.schema import Schema


class Received:
    """What the messages of one delivered entry share.

    ``buf`` holds the payload from ``start``: for a batch (``size > 0``, the batch's
    message count) the members are found through ``ends``; otherwise (``size == 0``,
    ``ends`` None) the payload is ``buf[start:]``.
    """

    __slots__ = ("buf", "chunk_ids", "consumer", "ends", "entry_id", "key", "ledger_id",
                 "meta", "partition", "redelivery", "schema", "size", "smms", "start",
                 "topic")

    def __init__(self, buf: bytes, start: int, ends: list[int] | None, size: int,
                 meta: pb.MessageMetadata, ledger_id: int, entry_id: int, partition: int,
                 topic: str, redelivery: int, schema: Schema | None, consumer: Any) -> None:
        self.buf = buf
        self.start = start
        self.ends = ends
        self.size = size
        self.meta = meta
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.key = (ledger_id, entry_id)
        self.partition = partition
        self.topic = topic
        self.redelivery = redelivery
        self.schema = schema
        self.consumer = consumer
        self.chunk_ids: list[MessageId] | None = None
        self.smms: dict[int, pb.SingleMessageMetadata] | None = None

    def data(self, index: int) -> bytes:
        if self.ends is None:
            return self.buf[self.start:] if self.start else self.buf
        _, at, end = batch_message_at(self.buf, self.start, self.ends, index)
        return self.buf[at:end]

    def data_size(self, index: int) -> int:
        if self.ends is None:
            return len(self.buf) - self.start
        _, at, end = batch_message_at(self.buf, self.start, self.ends, index)
        return end - at

    def single_metadata(self, index: int) -> pb.SingleMessageMetadata | None:
        """The batch member's ``SingleMessageMetadata`` (None outside a batch), decoded once."""
        if self.ends is None:
            return None
        smms = self.smms
        if smms is None:
            smms = self.smms = {}
        smm = smms.get(index)
        if smm is None:
            meta_at, at, _ = batch_message_at(self.buf, self.start, self.ends, index)
            smm = pb.SingleMessageMetadata()
            try:
                smm.ParseFromString(self.buf[meta_at:at])
            except DecodeError:  # only its size was checked on arrival
                smm = pb.SingleMessageMetadata(payload_size=self.data_size(index))
            smms[index] = smm
        return smm


class Message:
    """A message as handed to the application (the official client's ``Message`` API)."""

    __slots__ = ("_entry", "_index", "_mid")

    def __init__(self, entry: Received, index: int) -> None:
        self._entry = entry
        self._index = index
        self._mid: MessageId | None = None

    def data(self) -> bytes:
        return self._entry.data(self._index)

    def value(self) -> Any:
        """The payload decoded with the consumer's schema (bytes without one)."""
        schema = self._entry.schema
        if schema is None:
            return self.data()
        return schema.decode(self.data())

    def properties(self) -> dict[str, str]:
        e = self._entry
        smm = e.single_metadata(self._index)
        src = smm if smm is not None else e.meta
        return {kv.key: kv.value for kv in src.properties}

    def partition_key(self) -> str:
        e = self._entry
        smm = e.single_metadata(self._index)
        return smm.partition_key if smm is not None else e.meta.partition_key

    def ordering_key(self) -> bytes:
        e = self._entry
        smm = e.single_metadata(self._index)
        return smm.ordering_key if smm is not None else e.meta.ordering_key

    def message_id(self) -> MessageId:
        mid = self._mid
        if mid is None:
            e = self._entry
            if e.ends is None:
                mid = MessageId(e.partition, e.ledger_id, e.entry_id)
                mid._chunk_ids = e.chunk_ids
            else:
                mid = MessageId(e.partition, e.ledger_id, e.entry_id, self._index, e.size)
            mid._topic = e.topic
            self._mid = mid
        return mid

    def replicated_from(self) -> str | None:
        """The cluster this message was first published in, when geo-replication brought
        it here (the metadata's ``replicated_from``); None for a message published here."""
        meta = self._entry.meta
        return meta.replicated_from if meta.HasField("replicated_from") else None

    def publish_timestamp(self) -> int:
        return self._entry.meta.publish_time

    def event_timestamp(self) -> int:
        e = self._entry
        smm = e.single_metadata(self._index)
        return smm.event_time if smm is not None else e.meta.event_time

    def redelivery_count(self) -> int:
        return self._entry.redelivery

    def topic_name(self) -> str:
        return self._entry.topic

    def producer_name(self) -> str:
        return self._entry.meta.producer_name

    def schema_version(self) -> bytes:
        return self._entry.meta.schema_version

    # Internal views kept for code written against the eager message (``spark.arrow``).
    @property
    def _id(self) -> MessageId:
        return self.message_id()

    @property
    def _data(self) -> bytes:
        return self._entry.data(self._index)

    @property
    def _meta(self) -> pb.MessageMetadata:
        return self._entry.meta

    @property
    def _smm(self) -> pb.SingleMessageMetadata | None:
        return self._entry.single_metadata(self._index)

    @property
    def _consumer(self) -> Any:
        return self._entry.consumer

    @property
    def _topic(self) -> str:
        return self._entry.topic

    def __repr__(self) -> str:
        size = self._entry.data_size(self._index)
        return f"Message(id={self.message_id()}, topic={self._entry.topic!r}, {size} bytes)"
