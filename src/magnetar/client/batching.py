"""Batch containers: many messages behind one ``MessageMetadata``, built with one join.

``BatchContainer`` is the ``BatchingType.Default`` batch (messages in send order);
``KeyedBatches`` holds one ``KeyedBatch`` per key for ``BatchingType.KeyBased``.

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
from magnetar.protocol.varint import encode_varint

_U32 = struct.Struct(">I")
HEADER_CACHE: dict[int, bytes] = {}


def plain_header(size: int) -> bytes:
    """Length prefix + ``SingleMessageMetadata(payload_size=size)``, serialized by hand."""
    h = HEADER_CACHE.get(size)
    if h is None:
        smm = b"\x18" + encode_varint(size)
        h = _U32.pack(len(smm)) + smm
        if len(HEADER_CACHE) < 4096:
            HEADER_CACHE[size] = h
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

    __slots__ = ("callbacks", "first_keys", "first_seq", "futures", "parts", "size", "txn")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.futures: list[asyncio.Future[Any]] = []
        self.callbacks: list[Any] | None = None
        self.size = 0
        self.first_seq = -1
        #: (partition key, ordering key) of the first message, when it has one: the batch's
        #: own keys, as the official clients copy them (Key_Shared routes the batch by them)
        self.first_keys: tuple[str | None, bytes | None] | None = None
        #: the id of the transaction the messages are in (one per batch), None for none
        self.txn: tuple[int, int] | None = None

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
        self.first_keys = None
        self.txn = None
        return payload, futures, first


class KeyedBatch:
    """The open batch of one key: its messages, and the first message's keys, which become
    the batch's ``MessageMetadata`` keys (what a Key_Shared dispatcher routes by)."""

    __slots__ = ("first_seq", "futures", "last_seq", "ordering_key", "partition_key", "parts")

    def __init__(self, partition_key: str | None, ordering_key: bytes | None,
                 first_seq: int) -> None:
        self.partition_key = partition_key
        self.ordering_key = ordering_key
        self.first_seq = first_seq
        self.last_seq = first_seq
        self.parts: list[bytes] = []
        self.futures: list[asyncio.Future[Any]] = []


class KeyedBatches:
    """Open batches of a ``KeyBased`` producer, one per key (the ordering key if the message
    has one, else its partition key; unkeyed messages share one batch). ``n`` and ``size``
    count every batch: the count and byte limits apply to all of them together, as in the
    official clients, and a flush sends them all."""

    __slots__ = ("groups", "n", "size", "txn")

    def __init__(self) -> None:
        self.groups: dict[bytes | str | None, KeyedBatch] = {}
        self.n = 0
        self.size = 0
        #: the transaction every open batch's messages are in (one at a time), or None
        self.txn: tuple[int, int] | None = None

    def __len__(self) -> int:
        return self.n

    def add(self, header: bytes, payload: bytes, fut: asyncio.Future[Any], seq: int,
            partition_key: str | None, ordering_key: bytes | None) -> None:
        key = ordering_key if ordering_key is not None else partition_key
        batch = self.groups.get(key)
        if batch is None:
            batch = self.groups[key] = KeyedBatch(partition_key, ordering_key, seq)
        batch.parts.append(header)
        batch.parts.append(payload)
        batch.futures.append(fut)
        if seq > batch.last_seq:
            batch.last_seq = seq
        self.n += 1
        self.size += len(payload)

    def take(self) -> list[KeyedBatch]:
        """Every open batch, by first sequence id (the order they must be sent in); the
        container empties."""
        batches = sorted(self.groups.values(), key=_first_seq)
        self.groups = {}
        self.n = 0
        self.size = 0
        self.txn = None
        return batches


def _first_seq(batch: KeyedBatch) -> int:
    return batch.first_seq
