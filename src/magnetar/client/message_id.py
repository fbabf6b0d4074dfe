"""``MessageId``: (ledger, entry, partition, batch index), ordered, serializable."""

from __future__ import annotations

from typing import ClassVar

from magnetar.protocol import pb
from magnetar.protocol.ids import to_unsigned64, wire_position

_I64_MAX = (1 << 63) - 1


class MessageId:
    """Position of a message. ``MessageId.earliest`` / ``MessageId.latest`` are markers."""

    __slots__ = ("_batch_index", "_batch_size", "_chunk_ids", "_entry_id", "_ledger_id",
                 "_partition", "_topic")

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def __init__(self, partition: int = -1, ledger_id: int = -1, entry_id: int = -1,
                 batch_index: int = -1, batch_size: int = 0) -> None:
        self._partition = partition
        self._ledger_id = ledger_id
        self._entry_id = entry_id
        self._batch_index = batch_index
        self._batch_size = batch_size
        self._topic: str | None = None
        self._chunk_ids: list[MessageId] | None = None

    def ledger_id(self) -> int:
        return self._ledger_id

    def entry_id(self) -> int:
        return self._entry_id

    def batch_index(self) -> int:
        return self._batch_index

    def partition(self) -> int:
        return self._partition

    def batch_size(self) -> int:
        return self._batch_size

    def topic_name(self) -> str | None:
        return self._topic

    def _key(self) -> tuple[int, int, int]:
        return (self._ledger_id, self._entry_id, self._batch_index)

    def _entry_key(self) -> tuple[int, int, int]:
        return (self._partition, self._ledger_id, self._entry_id)

    def to_pb(self, with_batch: bool = True) -> pb.MessageIdData:
        mid = pb.MessageIdData(ledgerId=to_unsigned64(self._ledger_id),
                               entryId=to_unsigned64(self._entry_id))
        if self._partition >= 0:
            mid.partition = self._partition
        if with_batch and self._batch_index >= 0:
            mid.batch_index = self._batch_index
            if self._batch_size:
                mid.batch_size = self._batch_size
        return mid

    @classmethod
    def from_pb(cls, data: pb.MessageIdData, partition: int = -1,
                batch_index: int | None = None, batch_size: int = 0) -> MessageId:
        ledger, entry = wire_position(data)
        part = data.partition if data.HasField("partition") else partition
        bi = data.batch_index if batch_index is None else batch_index
        return cls(part, ledger, entry, bi, batch_size or data.batch_size)

    def serialize(self) -> bytes:
        """Bytes understood by ``deserialize`` (and by the official client)."""
        return self.to_pb().SerializeToString()

    @staticmethod
    def deserialize(data: bytes, topic: str | None = None) -> MessageId:
        mid = pb.MessageIdData()
        mid.ParseFromString(data)
        out = MessageId.from_pb(mid)
        out._topic = topic
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() == other._key() and self._partition == other._partition

    def __hash__(self) -> int:
        return hash((self._partition, *self._key()))

    def __lt__(self, other: MessageId) -> bool:
        return self._key() < other._key()

    def __le__(self, other: MessageId) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: MessageId) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: MessageId) -> bool:
        return self._key() >= other._key()

    def __str__(self) -> str:
        return f"({self._ledger_id},{self._entry_id},{self._partition},{self._batch_index})"

    __repr__ = __str__


MessageId.earliest = MessageId(-1, -1, -1, -1)
MessageId.latest = MessageId(-1, _I64_MAX, _I64_MAX, -1)
