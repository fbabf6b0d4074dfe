"""Batch payloads: many messages behind one ``MessageMetadata``.

A batch payload (before compression) is the concatenation, per message, of a 4-byte
big-endian size, a serialized ``SingleMessageMetadata`` and the message bytes, whose
length is ``SingleMessageMetadata.payload_size``. ``MessageMetadata.num_messages_in_batch``
says how many there are.

``decode_batch`` returns one parsed ``SingleMessageMetadata`` and one ``bytes`` per message.
``split_batch`` is for readers that turn a whole batch into columns: it returns offsets
into the payload (no copy per message) and parses with protobuf only the metadata that
holds more than ``payload_size``, ``event_time`` and ``sequence_id`` (varints it reads by
hand, as the official clients write them for a message without key or properties).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from magnetar.protocol import pulsar_pb2 as pb
from magnetar.protocol.errors import MalformedFrame
from magnetar.protocol.varint import decode_varint

__all__ = ["BatchSplit", "decode_batch", "encode_batch", "split_batch"]

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


@dataclass(slots=True)
class BatchSplit:
    """Where the messages of a batch payload lie, and their per-message metadata.

    ``bounds`` has ``2 * count + 1`` offsets: message ``i``'s header (size and metadata) is
    ``payload[bounds[2i]:bounds[2i+1]]`` and its bytes ``payload[bounds[2i+1]:bounds[2i+2]]``,
    so the offsets are increasing and contiguous from 0 (as an Arrow binary array's are).
    ``sequence_ids[i]`` is -1 and ``event_times[i]`` 0 when the message's metadata lacks
    them; ``metadata`` holds the parsed ``SingleMessageMetadata`` of the messages whose
    metadata has other fields (key, properties, ``compacted_out``, ...), by index.
    """

    bounds: list[int]
    sequence_ids: list[int]
    event_times: list[int]
    metadata: dict[int, pb.SingleMessageMetadata]


def _simple_metadata(data: bytes, pos: int, end: int) -> tuple[int, int, int] | None:
    """(payload_size, sequence_id, event_time) when ``data[pos:end]`` holds only those
    varint fields (3, 8, 5), else None."""
    size = -1
    seq = -1
    event_time = 0
    while pos < end:
        tag = data[pos]
        if tag == 0x18:  # payload_size
            b = data[pos + 1]
            if b < 0x80:
                size = b
                pos += 2
            else:
                size, pos = decode_varint(data, pos + 1)
        elif tag == 0x40:  # sequence_id
            seq, pos = decode_varint(data, pos + 1)
        elif tag == 0x28:  # event_time
            event_time, pos = decode_varint(data, pos + 1)
        else:
            return None
    if size < 0 or pos != end:
        return None
    return size, seq, event_time


def split_batch(payload: bytes, count: int) -> BatchSplit:
    """Offsets and metadata of the ``count`` messages of an (uncompressed) batch payload.

    Bytes after the last message are ignored. Raises ``MalformedFrame`` when the payload
    ends early or a header does not parse."""
    size = len(payload)
    if count < 0 or count > size // 4 + 1:
        raise MalformedFrame(f"batch of {size} bytes cannot hold {count} messages")
    bounds = [0]
    seqs: list[int] = []
    times = [0] * count
    parsed: dict[int, pb.SingleMessageMetadata] = {}
    add = bounds.append
    add_seq = seqs.append
    unpack = _U32.unpack_from
    simple = _simple_metadata
    pos = 0
    try:
        for index in range(count):
            (meta_size,) = unpack(payload, pos)
            start = pos + 4
            stop = start + meta_size
            if stop > size:
                raise MalformedFrame(f"batch message {index}: metadata runs past the end")
            # inline: payload_size then maybe sequence_id, the official clients' usual
            q = -1
            if payload[start] == 0x18:
                b = payload[start + 1]
                if b < 0x80:
                    psize = b
                    q = start + 2
                else:
                    psize, q = decode_varint(payload, start + 1)
                seq = -1
                if q < stop and payload[q] == 0x40:
                    # a sequence id of up to 3 bytes unrolled (ids below 2**21)
                    b = payload[q + 1]
                    if b < 0x80:
                        seq = b
                        q += 2
                    else:
                        b2 = payload[q + 2]
                        if b2 < 0x80:
                            seq = (b & 0x7F) | (b2 << 7)
                            q += 3
                        else:
                            b3 = payload[q + 3]
                            if b3 < 0x80:
                                seq = (b & 0x7F) | ((b2 & 0x7F) << 7) | (b3 << 14)
                                q += 4
                            else:
                                seq, q = decode_varint(payload, q + 1)
                if q == stop:
                    pos = stop + psize
                    if pos > size:
                        raise MalformedFrame(f"batch message {index}: payload runs past the "
                                             "end")
                    add(stop)
                    add(pos)
                    add_seq(seq)
                    continue
            fields = simple(payload, start, stop)
            if fields is None:
                smm = pb.SingleMessageMetadata()
                try:
                    smm.ParseFromString(payload[start:stop])
                except (DecodeError, ValueError, TypeError) as exc:
                    raise MalformedFrame(f"batch message {index}: bad metadata: {exc}") \
                        from None
                if not smm.IsInitialized():
                    raise MalformedFrame(f"batch message {index}: metadata lacks payload_size")
                parsed[index] = smm
                fields = (smm.payload_size,
                          smm.sequence_id if smm.HasField("sequence_id") else -1,
                          smm.event_time)
            pos = stop + fields[0]
            if pos > size:
                raise MalformedFrame(f"batch message {index}: payload runs past the end")
            add(stop)
            add(pos)
            add_seq(fields[1])
            times[index] = fields[2]
    except (struct.error, IndexError, ValueError) as exc:
        raise MalformedFrame(f"batch truncated: {exc}") from None
    return BatchSplit(bounds, seqs, times, parsed)
