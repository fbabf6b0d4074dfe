"""Stored entries as the broker writes them, read by every room: an optional broker entry
metadata section (magic 0x0e02, length, ``BrokerEntryMetadata``) in front of the payload
part exactly as the producer framed it.

This module is the broker's floor (with ``errors``): pure functions on bytes, importing no
room, so that topics (which write entries) and subscriptions (which read them) share one
definition of the layout.
"""

from __future__ import annotations

import struct
import time
from typing import overload

from magnetar.protocol import pb
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import peek_metadata

ENTRY_METADATA_MAGIC = b"\x0e\x02"
_U32 = struct.Struct(">I")


@overload
def split_entry(data: bytes) -> tuple[bytes | None, bytes]: ...
@overload
def split_entry(data: memoryview) -> tuple[memoryview | None, memoryview]: ...
def split_entry(data: bytes | memoryview) -> tuple[bytes | memoryview | None, bytes | memoryview]:
    """Split a stored entry into (broker entry metadata, payload part); of the same type
    as ``data`` (a ``memoryview`` from a cold read is cut without copying)."""
    if data[:2] == ENTRY_METADATA_MAGIC:
        (size,) = _U32.unpack_from(data, 2)
        return data[6 : 6 + size], data[6 + size :]
    return None, data


def with_entry_metadata(payload: bytes | memoryview, index: int) -> bytes:
    """A payload part with a broker entry metadata section (now, ``index``) in front."""
    bem = pb.BrokerEntryMetadata(broker_timestamp=int(time.time() * 1000), index=index)
    raw = bem.SerializeToString()
    return b"".join((ENTRY_METADATA_MAGIC, _U32.pack(len(raw)), raw, payload))


def entry_index_after(entry: bytes | memoryview) -> int:
    """The broker entry index that follows a stored entry (0 without one)."""
    bem_raw, _ = split_entry(entry)
    if bem_raw is None:
        return 0
    bem = pb.BrokerEntryMetadata.FromString(bytes(bem_raw))
    return bem.index + 1 if bem.HasField("index") else 0


def entry_metadata(data: bytes | memoryview) -> pb.MessageMetadata | None:
    """The producer's MessageMetadata of a stored entry (None if it cannot be parsed)."""
    try:
        return peek_metadata(split_entry(data)[1])
    except (ProtocolError, ValueError, IndexError):
        return None


def entry_num_messages(metadata: pb.MessageMetadata | None) -> int:
    """How many messages an entry holds (a batch's count; 1 without metadata)."""
    if metadata is None or not metadata.HasField("num_messages_in_batch"):
        return 1
    return max(1, metadata.num_messages_in_batch)
