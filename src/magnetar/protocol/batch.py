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

Both read a member's metadata with the same two functions: ``_read_single``, the one hand
reader of those three fields, and ``_parse_single`` (protobuf) for metadata holding more.
``scan_batch`` only adds its inline check of the common case, a lone ``payload_size``
first, which lets it skip the rest of the metadata without reading it.
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


def _read_single(buf: bytes, pos: int, end: int) -> tuple[int, int, int] | None:
    """``(payload_size, sequence_id, event_time)`` of the serialized
    ``SingleMessageMetadata`` in ``buf[pos:end]`` when it holds only those varint fields
    (in any order; the last value wins, as in protobuf; ``sequence_id`` -1 and
    ``event_time`` 0 when absent), None when it holds anything else (``_parse_single``'s
    to read). The one place these fields are read by hand. ``MalformedFrame`` when a
    varint does not parse or ``payload_size`` is missing."""
    size = -1
    seq = -1
    event_time = 0
    try:
        while pos < end:
            field = buf[pos]
            if field == 0x18:
                slot = 0
            elif field == 0x40:
                slot = 1
            elif field == 0x28:
                slot = 2
            else:
                return None
            value = buf[pos + 1]  # a varint of up to 3 bytes unrolled (values below 2**21)
            if value < 0x80:
                pos += 2
            else:
                b = buf[pos + 2]
                if b < 0x80:
                    value = (value & 0x7F) | (b << 7)
                    pos += 3
                else:
                    b2 = buf[pos + 3]
                    if b2 < 0x80:
                        value = (value & 0x7F) | ((b & 0x7F) << 7) | (b2 << 14)
                        pos += 4
                    else:
                        value, pos = decode_varint(buf, pos + 1)
            if slot == 0:
                size = value if value < 1 << 31 else -1
            elif slot == 1:
                seq = value
            else:
                event_time = value
    except (ValueError, IndexError) as exc:
        raise MalformedFrame(f"bad batch message metadata: {exc}") from None
    if pos != end:
        raise MalformedFrame("batch message metadata runs past its size")
    if size < 0:
        raise MalformedFrame("batch message metadata lacks payload_size")
    return size, seq, event_time


def _parse_single(buf: bytes, pos: int, end: int) -> pb.SingleMessageMetadata:
    """The ``SingleMessageMetadata`` in ``buf[pos:end]`` parsed by protobuf (for metadata
    ``_read_single`` leaves alone); ``MalformedFrame`` when it does not parse or has no
    usable ``payload_size``."""
    smm = pb.SingleMessageMetadata()
    try:
        smm.ParseFromString(buf[pos:end])
    except (DecodeError, ValueError, TypeError) as exc:
        raise MalformedFrame(f"bad batch message metadata: {exc}") from None
    if not smm.IsInitialized() or smm.payload_size < 0:
        raise MalformedFrame("batch message metadata lacks payload_size")
    return smm


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
        fields = _read_single(buf, at, data_at)
        if fields is None:
            smm = _parse_single(buf, at, data_at)
            psize = smm.payload_size
            if smm.compacted_out:
                compacted.append(index)
        else:
            psize = fields[0]
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


def split_batch(payload: bytes, count: int) -> BatchSplit:
    """Offsets and metadata of the ``count`` messages of an (uncompressed) batch payload.

    One pass reads each message's metadata with ``_read_single`` (size, sequence id, event
    time by hand), or ``_parse_single`` (protobuf) when it holds more. Bytes after the
    last message are ignored. Raises ``MalformedFrame`` like ``decode_batch``."""
    size = len(payload)
    if count < 0 or count > size // 4 + 1:
        raise MalformedFrame(f"batch of {size} bytes cannot hold {count} messages")
    bounds = [0]
    add = bounds.append
    seqs = [-1] * count
    times = [0] * count
    parsed: dict[int, pb.SingleMessageMetadata] = {}
    unpack = _U32.unpack_from
    read = _read_single
    pos = 0
    for index in range(count):
        if size - pos < 4:
            raise MalformedFrame(f"batch truncated before message {index}")
        at = pos + 4
        stop = at + unpack(payload, pos)[0]
        if stop > size:
            raise MalformedFrame(f"batch message {index}: metadata runs past the end")
        fields = read(payload, at, stop)
        if fields is None:
            smm = parsed[index] = _parse_single(payload, at, stop)
            pos = stop + smm.payload_size
            if smm.HasField("sequence_id"):
                seqs[index] = smm.sequence_id
            times[index] = smm.event_time
        else:
            pos = stop + fields[0]
            seqs[index] = fields[1]
            times[index] = fields[2]
        if pos > size:
            raise MalformedFrame(f"batch message {index}: payload runs past the end")
        add(stop)
        add(pos)
    return BatchSplit(bounds, seqs, times, parsed)
