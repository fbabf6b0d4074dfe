"""Batch payloads: many messages behind one ``MessageMetadata``.

A batch payload (before compression) is the concatenation, per message, of a 4-byte
big-endian size, a serialized ``SingleMessageMetadata`` and the message bytes, whose
length is ``SingleMessageMetadata.payload_size``. ``MessageMetadata.num_messages_in_batch``
says how many there are.
"""

from __future__ import annotations

import struct

from google.protobuf.message import DecodeError

from magnetar.protocol import pulsar_pb2 as pb
from magnetar.protocol.errors import MalformedFrame

__all__ = ["decode_batch", "encode_batch"]

_U32 = struct.Struct(">I")


def encode_batch(messages: list[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    """Build a batch payload; sets each ``payload_size`` to the length of its payload."""
    parts: list[bytes] = []
    for smm, payload in messages:
        if smm.payload_size != len(payload) or not smm.HasField("payload_size"):
            smm.payload_size = len(payload)
        meta = smm.SerializeToString()
        parts.append(_U32.pack(len(meta)))
        parts.append(meta)
        parts.append(payload)
    return b"".join(parts)


def decode_batch(
    payload: bytes | bytearray | memoryview, count: int
) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """Split an (uncompressed) batch payload into ``count`` messages.

    Bytes after the last message are ignored, as the official clients do. Raises
    ``MalformedFrame`` when the payload ends early or a header does not parse.
    """
    view = memoryview(payload)
    size = len(view)
    if count < 0 or count > size // 4 + 1:
        raise MalformedFrame(f"batch of {size} bytes cannot hold {count} messages")
    out: list[tuple[pb.SingleMessageMetadata, bytes]] = []
    pos = 0
    for index in range(count):
        if size - pos < 4:
            raise MalformedFrame(f"batch truncated before message {index}")
        (meta_size,) = _U32.unpack_from(view, pos)
        pos += 4
        if meta_size > size - pos:
            raise MalformedFrame(f"batch message {index}: metadata runs past the end")
        smm = pb.SingleMessageMetadata()
        try:
            smm.ParseFromString(view[pos : pos + meta_size])  # type: ignore[arg-type]
        except (DecodeError, ValueError, TypeError) as exc:
            raise MalformedFrame(f"batch message {index}: bad metadata: {exc}") from None
        if not smm.IsInitialized():
            raise MalformedFrame(f"batch message {index}: metadata lacks payload_size")
        pos += meta_size
        end = pos + smm.payload_size
        if smm.payload_size < 0 or end > size:
            raise MalformedFrame(f"batch message {index}: payload runs past the end")
        out.append((smm, bytes(view[pos:end])))
        pos = end
    return out
