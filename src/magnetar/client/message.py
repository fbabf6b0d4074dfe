"""Received messages: payload, metadata accessors and id, built lazily from the wire."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.client.message_id import MessageId
from magnetar.protocol import pb

if TYPE_CHECKING:
    from magnetar.client.schema import Schema


class Message:
    """A message as handed to the application (the official client's ``Message`` API)."""

    __slots__ = ("_consumer", "_data", "_event_time", "_id", "_meta", "_redelivery",
                 "_schema", "_smm", "_topic")

    def __init__(self, data: bytes, meta: pb.MessageMetadata,
                 smm: pb.SingleMessageMetadata | None, mid: MessageId, topic: str,
                 redelivery: int, schema: Schema | None, consumer: Any = None,
                 event_time: int = 0) -> None:
        self._data = data
        self._meta = meta
        self._smm = smm
        self._id = mid
        self._topic = topic
        self._redelivery = redelivery
        self._schema = schema
        self._consumer = consumer
        self._event_time = event_time

    def data(self) -> bytes:
        return self._data

    def value(self) -> Any:
        """The payload decoded with the consumer's schema (bytes without one)."""
        if self._schema is None:
            return self._data
        return self._schema.decode(self._data)

    def properties(self) -> dict[str, str]:
        src = self._smm if self._smm is not None else self._meta
        if self._smm is None and self._meta.HasField("num_messages_in_batch"):
            return {}
        return {kv.key: kv.value for kv in src.properties}

    def partition_key(self) -> str:
        if self._smm is not None:
            return self._smm.partition_key
        if self._meta.HasField("num_messages_in_batch"):
            return ""
        return self._meta.partition_key

    def ordering_key(self) -> bytes:
        src = self._smm if self._smm is not None else self._meta
        return src.ordering_key

    def message_id(self) -> MessageId:
        return self._id

    def publish_timestamp(self) -> int:
        return self._meta.publish_time

    def event_timestamp(self) -> int:
        if self._event_time:
            return self._event_time
        if self._smm is not None:
            return self._smm.event_time
        return self._meta.event_time

    def redelivery_count(self) -> int:
        return self._redelivery

    def topic_name(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        return self._meta.producer_name

    def schema_version(self) -> bytes:
        return self._meta.schema_version

    def __repr__(self) -> str:
        return f"Message(id={self._id}, topic={self._topic!r}, {len(self._data)} bytes)"
