"""Batch container: many messages behind one ``MessageMetadata``, built with one join.

Each message becomes ``size(4) + SingleMessageMetadata + payload``. For the common case
(no properties, key or event time) the ``SingleMessageMetadata`` is only ``payload_size``
and is written by hand (tag 0x18 + varint), cached per payload length, so adding a message
costs a dict lookup and two list appends: no protobuf work per message.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from magnetar.protocol import pb

_U32 = struct.Struct(">I")
_HEADER_CACHE: dict[int, bytes] = {}


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def plain_header(size: int) -> bytes:
    """Length prefix + ``SingleMessageMetadata(payload_size=size)``, serialized by hand."""
    h = _HEADER_CACHE.get(size)
    if h is None:
        smm = b"\x18" + _varint(size)
        h = _U32.pack(len(smm)) + smm
        if len(_HEADER_CACHE) < 4096:
            _HEADER_CACHE[size] = h
    return h


def full_header(size: int, properties: dict[str, str] | None, partition_key: str | None,
                ordering_key: bytes | None, event_time: int | None,
                sequence_id: int | None = None) -> bytes:
    """Length prefix + a ``SingleMessageMetadata`` carrying per-message fields."""
    smm = pb.SingleMessageMetadata(payload_size=size)
    if properties:
        smm.properties.extend(pb.KeyValue(key=k, value=v) for k, v in properties.items())
    if partition_key is not None:
        smm.partition_key = partition_key
    if ordering_key is not None:
        smm.ordering_key = ordering_key
    if event_time:
        smm.event_time = event_time
    if sequence_id is not None:
        smm.sequence_id = sequence_id
    data = smm.SerializeToString()
    return _U32.pack(len(data)) + data


class BatchContainer:
    """Messages waiting to go out together (``TopicProducer`` appends to ``parts`` and
    ``futures`` directly on its hot path); ``take`` hands them over and resets."""

    __slots__ = ("callbacks", "first_seq", "futures", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.futures: list[asyncio.Future[Any]] = []
        self.callbacks: list[Any] | None = None
        self.size = 0
        self.first_seq = -1

    def __len__(self) -> int:
        return len(self.futures)

    def take(self) -> tuple[bytes, list[asyncio.Future[Any]], int]:
        """(uncompressed batch payload, futures, first sequence id); the container empties."""
        payload = b"".join(self.parts)
        futures = self.futures
        first = self.first_seq
        self.parts = []
        self.futures = []
        self.size = 0
        self.first_seq = -1
        return payload, futures, first
