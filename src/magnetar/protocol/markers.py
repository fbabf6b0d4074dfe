"""Marker entries: server-only messages a broker writes into a topic (Pulsar's
``PulsarMarkers.proto``), here the four of replicated subscriptions.

Transactions add two more (``TXN_COMMIT`` = 21, ``TXN_ABORT`` = 22): written by a
topic when a transaction ends on it, their metadata carries the transaction id
(``txnid_most_bits``/``txnid_least_bits``) and their payload is empty.

A marker is an ordinary payload part whose ``MessageMetadata`` carries ``marker_type``; its
payload is one of the small protobuf messages below. Brokers replicate markers between
clusters like any entry and never dispatch them to consumers. The messages are encoded and
decoded by hand (a few strings, nested message ids), so no generated module is needed:

- ``SnapshotRequest`` (type 10): ``snapshot_id`` = 1, ``source_cluster`` = 2
- ``SnapshotResponse`` (type 11): ``snapshot_id`` = 1, ``cluster`` = 2 (a ``ClusterMessageId``)
- ``Snapshot`` (type 12): ``snapshot_id`` = 1, ``local_message_id`` = 2, ``clusters`` = 3
- ``Update`` (type 13): ``subscription_name`` = 1, ``clusters`` = 2
- ``ClusterMessageId``: ``cluster`` = 1, ``message_id`` = 2; a message id: ``ledger_id`` = 1,
  ``entry_id`` = 2 (uint64)

Bad input raises `MarkerError` (a ``ProtocolError``).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

import crc32c as _crc32c

from magnetar.protocol import pulsar_pb2 as pb
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.fastpath import txnid_fields
from magnetar.protocol.frames import build_payload_part, peek_metadata
from magnetar.protocol.varint import decode_varint, encode_varint

__all__ = [
    "MARKER_PRODUCER",
    "REPLICATED_SUBSCRIPTION_SNAPSHOT",
    "REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST",
    "REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE",
    "REPLICATED_SUBSCRIPTION_UPDATE",
    "TXN_ABORT",
    "TXN_COMMIT",
    "ClusterPosition",
    "MarkerError",
    "Snapshot",
    "SnapshotRequest",
    "SnapshotResponse",
    "Update",
    "decode_marker",
    "encode_marker",
    "is_marker",
    "is_marker_part",
    "marker_part",
    "txn_marker_part",
]

REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST = 10
REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE = 11
REPLICATED_SUBSCRIPTION_SNAPSHOT = 12
REPLICATED_SUBSCRIPTION_UPDATE = 13
TXN_COMMIT = 21
TXN_ABORT = 22

#: the producer name a marker's metadata carries
MARKER_PRODUCER = "pulsar.marker"

_VARINT = 0
_LEN = 2
_FIXED64 = 1
_FIXED32 = 5


class MarkerError(ProtocolError):
    """A marker payload that cannot be decoded."""


@dataclass(frozen=True)
class ClusterPosition:
    """A position (ledger id, entry id) in one cluster's copy of a topic."""

    cluster: str
    ledger_id: int
    entry_id: int

    @property
    def position(self) -> tuple[int, int]:
        return self.ledger_id, self.entry_id


@dataclass(frozen=True)
class SnapshotRequest:
    snapshot_id: str
    source_cluster: str


@dataclass(frozen=True)
class SnapshotResponse:
    snapshot_id: str
    cluster: ClusterPosition


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: str
    local: tuple[int, int]  # where the last response was stored in the local topic
    clusters: tuple[ClusterPosition, ...]


@dataclass(frozen=True)
class Update:
    subscription: str
    clusters: tuple[ClusterPosition, ...]


Marker = SnapshotRequest | SnapshotResponse | Snapshot | Update


# -- writing -------------------------------------------------------------------------

def _key(number: int, wire_type: int) -> bytes:
    return encode_varint((number << 3) | wire_type)


def _string(number: int, value: str) -> bytes:
    raw = value.encode()
    return _key(number, _LEN) + encode_varint(len(raw)) + raw


def _nested(number: int, body: bytes) -> bytes:
    return _key(number, _LEN) + encode_varint(len(body)) + body


def _message_id(ledger_id: int, entry_id: int) -> bytes:
    return (_key(1, _VARINT) + encode_varint(ledger_id)
            + _key(2, _VARINT) + encode_varint(entry_id))


def _cluster(number: int, cp: ClusterPosition) -> bytes:
    return _nested(number, _string(1, cp.cluster) + _nested(2, _message_id(cp.ledger_id, cp.entry_id)))


def encode_marker(marker: Marker) -> tuple[int, bytes]:
    """(marker type, payload bytes) of ``marker``."""
    if isinstance(marker, SnapshotRequest):
        return REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST, (
            _string(1, marker.snapshot_id) + _string(2, marker.source_cluster))
    if isinstance(marker, SnapshotResponse):
        return REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE, (
            _string(1, marker.snapshot_id) + _cluster(2, marker.cluster))
    if isinstance(marker, Snapshot):
        return REPLICATED_SUBSCRIPTION_SNAPSHOT, (
            _string(1, marker.snapshot_id) + _nested(2, _message_id(*marker.local))
            + b"".join(_cluster(3, c) for c in marker.clusters))
    return REPLICATED_SUBSCRIPTION_UPDATE, (
        _string(1, marker.subscription) + b"".join(_cluster(2, c) for c in marker.clusters))


def marker_part(marker: Marker, replicate_to: str | None = None, now_ms: int | None = None) -> bytes:
    """The payload part of a marker entry (checksummed, uncompressed), as a broker stores
    it: producer ``pulsar.marker``, sequence id 0, the publish time, ``marker_type`` and,
    when the marker is for one cluster only, ``replicate_to``."""
    marker_type, body = encode_marker(marker)
    metadata = pb.MessageMetadata(
        producer_name=MARKER_PRODUCER, sequence_id=0,
        publish_time=int(time.time() * 1000) if now_ms is None else now_ms,
        marker_type=marker_type)
    if replicate_to is not None:
        metadata.replicate_to.append(replicate_to)
    return build_payload_part(metadata, body)


#: a transaction marker's metadata up to its publish time's value: ``producer_name`` (1)
#: ``pulsar.marker``, ``sequence_id`` (2) 0, the tag of ``publish_time`` (3)
_TXN_MARKER_HEAD = b"\x0a" + bytes((len(MARKER_PRODUCER),)) + MARKER_PRODUCER.encode() + b"\x10\x00\x18"
#: the ``marker_type`` field (20) of a commit and of an abort marker
_TXN_MARKER_TYPE = {TXN_COMMIT: b"\xa0\x01" + encode_varint(TXN_COMMIT),
                    TXN_ABORT: b"\xa0\x01" + encode_varint(TXN_ABORT)}
_MAGIC = b"\x0e\x01"
_U32 = struct.Struct(">I")


def txn_marker_part(marker_type: int, most: int, least: int, now_ms: int | None = None,
                    fields: bytes | None = None) -> bytes:
    """The payload part of a transaction's commit (``TXN_COMMIT``) or abort
    (``TXN_ABORT``) marker for transaction ``(most, least)``: the bytes that
    `build_payload_part` makes of its ``MessageMetadata`` (producer ``pulsar.marker``,
    sequence id 0, the publish time, ``marker_type``, the transaction id; no body), put
    together from their serialized fields. ``fields``: the transaction id's, when at hand
    (`fastpath.txnid_fields`)."""
    if fields is None:
        fields = txnid_fields(most, least)
    meta = b"".join((_TXN_MARKER_HEAD,
                     encode_varint(int(time.time() * 1000) if now_ms is None else now_ms),
                     _TXN_MARKER_TYPE[marker_type], fields))
    head = _U32.pack(len(meta))
    return b"".join((_MAGIC, _U32.pack(_crc32c.crc32c(meta, _crc32c.crc32c(head))), head, meta))


def is_marker(metadata: pb.MessageMetadata) -> bool:
    """Whether an entry with this metadata is a marker (never given to consumers)."""
    return metadata.HasField("marker_type")


def is_marker_part(part: bytes | memoryview) -> bool:
    """Whether a payload part is a marker a broker wrote (False when unreadable)."""
    try:
        metadata = peek_metadata(part)
    except ProtocolError:
        return False
    return metadata.HasField("marker_type") and metadata.producer_name == MARKER_PRODUCER


# -- reading -------------------------------------------------------------------------

def _fields(data: bytes | memoryview) -> list[tuple[int, int | bytes]]:
    """(field number, value) of each field: an int for varints, bytes for the others."""
    out: list[tuple[int, int | bytes]] = []
    pos, end = 0, len(data)
    try:
        while pos < end:
            key, pos = decode_varint(data, pos)
            number, wire_type = key >> 3, key & 7
            if wire_type == _VARINT:
                value, pos = decode_varint(data, pos)
                out.append((number, value))
            elif wire_type == _LEN:
                size, pos = decode_varint(data, pos)
                if pos + size > end:
                    raise MarkerError("a field runs past the end of the marker")
                out.append((number, bytes(data[pos:pos + size])))
                pos += size
            elif wire_type == _FIXED64:
                pos += 8
            elif wire_type == _FIXED32:
                pos += 4
            else:
                raise MarkerError(f"unsupported wire type {wire_type} in a marker")
    except ValueError as exc:
        raise MarkerError(f"truncated marker: {exc}") from exc
    if pos != end:
        raise MarkerError("truncated marker")
    return out


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise MarkerError("a string field has the wrong wire type")
    try:
        return value.decode()
    except UnicodeDecodeError as exc:
        raise MarkerError("a string field is not UTF-8") from exc


def _decode_message_id(value: int | bytes) -> tuple[int, int]:
    if not isinstance(value, bytes):
        raise MarkerError("a message id has the wrong wire type")
    ids = {n: v for n, v in _fields(value) if isinstance(v, int)}
    if 1 not in ids or 2 not in ids:
        raise MarkerError("a message id lacks its ledger or entry id")
    return ids[1], ids[2]


def _decode_cluster(value: int | bytes) -> ClusterPosition:
    if not isinstance(value, bytes):
        raise MarkerError("a cluster message id has the wrong wire type")
    cluster: str | None = None
    position: tuple[int, int] | None = None
    for number, v in _fields(value):
        if number == 1:
            cluster = _text(v)
        elif number == 2:
            position = _decode_message_id(v)
    if cluster is None or position is None:
        raise MarkerError("a cluster message id lacks its cluster or message id")
    return ClusterPosition(cluster, *position)


def decode_marker(marker_type: int, payload: bytes | memoryview) -> Marker | None:
    """The marker of ``marker_type`` in ``payload`` (None: a type this broker does not
    know, such as the transaction markers). MarkerError when it cannot be decoded."""
    if marker_type not in (REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST,
                           REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE,
                           REPLICATED_SUBSCRIPTION_SNAPSHOT, REPLICATED_SUBSCRIPTION_UPDATE):
        return None
    first: str | None = None
    second: str | None = None
    local: tuple[int, int] | None = None
    clusters: list[ClusterPosition] = []
    for number, value in _fields(payload):
        if number == 1:
            first = _text(value)
        elif marker_type == REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST and number == 2:
            second = _text(value)
        elif marker_type == REPLICATED_SUBSCRIPTION_SNAPSHOT and number == 2:
            local = _decode_message_id(value)
        elif (marker_type == REPLICATED_SUBSCRIPTION_SNAPSHOT and number == 3) or (
                marker_type in (REPLICATED_SUBSCRIPTION_UPDATE, REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE)
                and number == 2):
            clusters.append(_decode_cluster(value))
    if first is None:
        raise MarkerError(f"marker of type {marker_type} lacks its first (required) field")
    if marker_type == REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST:
        return SnapshotRequest(first, second or "")
    if marker_type == REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE:
        if not clusters:
            raise MarkerError("a snapshot response names no cluster")
        return SnapshotResponse(first, clusters[-1])
    if marker_type == REPLICATED_SUBSCRIPTION_SNAPSHOT:
        if local is None:
            raise MarkerError("a snapshot lacks its local message id")
        return Snapshot(first, local, tuple(clusters))
    return Update(first, tuple(clusters))
