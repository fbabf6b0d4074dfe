"""Batch payloads: many messages behind one ``MessageMetadata``.

A batch payload (before compression) is the concatenation, per message, of a 4-byte
big-endian size, a serialized ``SingleMessageMetadata`` and the message bytes, whose
length is ``SingleMessageMetadata.payload_size``. ``MessageMetadata.num_messages_in_batch``
says how many there are.

``decode_batch`` builds a ``SingleMessageMetadata`` and a payload copy per message. A
consumer's hot path uses ``scan_batch`` instead: one pass that only finds where each message
ends (and which ones the compactor marked ``compacted_out``), so a message's metadata and
bytes can be cut out of the shared buffer later, if and when they are asked for
(``batch_message_at``). It agrees with ``decode_batch`` on every batch; the tests check
both against the protobuf code.

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

__all__ = ["BatchSplit", "batch_message_at", "decode_batch", "encode_batch", "scan_batch",
           "split_batch"]

_U32 = struct.Struct(">I")
# a batch member's record: metadata size, then its first four bytes
_RECORD_HEAD = struct.Struct(">IBBBB")


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


# SingleMessageMetadata tags: payload_size (field 3, varint), compacted_out (4, varint)
_TAG_PAYLOAD_SIZE = 0x18
_TAG_COMPACTED_OUT = 0x20


def _scan_single(buf: bytes, pos: int, end: int) -> tuple[int, bool]:
    """``(payload_size, compacted_out)`` of the serialized ``SingleMessageMetadata`` in
    ``buf[pos:end]``, walking its fields in any order (the last value of a field wins, as
    in protobuf); ``MalformedFrame`` when it does not parse or lacks ``payload_size``."""
    size = -1
    compacted = False
    try:
        while pos < end:
            key, pos = decode_varint(buf, pos)
            wire = key & 7
            if wire == 0:
                value, pos = decode_varint(buf, pos)
                field = key >> 3
                if field == 3:
                    size = value if value < 1 << 31 else -1
                elif field == 4:
                    compacted = value != 0
            elif wire == 2:
                length, pos = decode_varint(buf, pos)
                pos += length
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise ValueError(f"wire type {wire}")
            if key >> 3 == 0:
                raise ValueError("field number 0")
    except ValueError as exc:
        raise MalformedFrame(f"bad batch message metadata: {exc}") from None
    if pos != end:
        raise MalformedFrame("batch message metadata runs past its size")
    if size < 0:
        raise MalformedFrame("batch message metadata lacks payload_size")
    return size, compacted


def scan_batch(buf: bytes, start: int, count: int) -> tuple[list[int], list[int]]:
    """Where each of the ``count`` messages of the batch payload ``buf[start:]`` ends.

    Returns ``(ends, compacted)``: ``ends[i]`` is the offset in ``buf`` just past message
    ``i`` (its record starts at ``ends[i - 1]``, or ``start`` for the first), and
    ``compacted`` lists the indexes whose metadata says ``compacted_out``. Nothing is
    copied or decoded beyond the sizes. The common metadata, ``payload_size`` first and no
    ``compacted_out`` right after it (how protobuf serializers order the fields), is read
    inline; any other is walked field by field. Raises ``MalformedFrame`` like
    ``decode_batch``.
    """
    size = len(buf)
    if count < 0 or count > (size - start) // 4 + 1:
        raise MalformedFrame(f"batch of {size - start} bytes cannot hold {count} messages")
    ends: list[int] = []
    append = ends.append
    compacted: list[int] = []
    head = _RECORD_HEAD.unpack_from
    pos = start
    for index in range(count):
        # inline: payload_size first, in one or two varint bytes, then nothing or a field
        # numbered past compacted_out (protobuf writes fields in number order)
        try:
            n, tag, b1, b2, b3 = head(buf, pos)
        except struct.error:  # fewer than 9 bytes left: the general path decides
            n = tag = 0
        if tag == _TAG_PAYLOAD_SIZE and n >= 2:
            if b1 < 0x80:
                if n == 2 or b2 > _TAG_COMPACTED_OUT:
                    pos += 4 + n + b1
                    append(pos)
                    continue
            elif b2 < 0x80 and n >= 3 and (n == 3 or b3 > _TAG_COMPACTED_OUT):
                pos += 4 + n + ((b1 & 0x7F) | (b2 << 7))
                append(pos)
                continue
        if size - pos < 4:
            raise MalformedFrame(f"batch truncated before message {index}")
        at = pos + 4
        data_at = at + _U32.unpack_from(buf, pos)[0]
        if data_at > size:
            raise MalformedFrame(f"batch message {index}: metadata runs past the end")
        psize, dropped = _scan_single(buf, at, data_at)
        if dropped:
            compacted.append(index)
        pos = data_at + psize
        append(pos)
    if pos > size:
        raise MalformedFrame(f"batch message {len(ends) - 1}: payload runs past the end")
    return ends, compacted


def batch_message_at(buf: bytes, start: int, ends: list[int], index: int) -> tuple[int, int, int]:
    """``(metadata_at, data_at, data_end)`` of message ``index`` of a batch that
    ``scan_batch(buf, start, ...)`` returned ``ends`` for: its ``SingleMessageMetadata`` is
    ``buf[metadata_at:data_at]``, its payload ``buf[data_at:data_end]``."""
    at = ends[index - 1] if index else start
    return at + 4, at + 4 + _U32.unpack_from(buf, at)[0], ends[index]


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
