"""Hand-written codecs for the commands sent once per entry on the hot path.

SendReceipt (broker to producer) and Message (broker to consumer) go out once per entry;
building them through protobuf objects costs more than everything else the broker does
for an unbatched message. These functions write the same bytes protobuf would (fields in
number order, the same varints), which ``tests/protocol/test_fastpath.py`` checks against
``SerializeToString`` for many values.

On the consumer's side, ``parse_message_command`` reads a MESSAGE command without building
protobuf objects (parsing, checking required fields and reading a few fields back through
upb costs more than the rest of receiving an unbatched message). It reads only the layout
a serializer writes for the fields a broker sends and declines (``None``) anything else,
which then goes through protobuf; the tests check it against protobuf both ways.

On the broker's side, ``parse_send_command`` does the same for SEND, the one command a
producer sends per entry: the fields a client writes for a plain or a transactional send
come back as a tuple; a replicated one (``message_id``) or anything unexpected is
declined and parsed by protobuf.
"""

from __future__ import annotations

import struct

from magnetar.protocol.ids import to_signed64
from magnetar.protocol.varint import decode_varint as _read_varint
from magnetar.protocol.varint import encode_varint as _varint

_MASK64 = (1 << 64) - 1

_TWO_U32 = struct.Struct(">II")
_U32 = struct.Struct(">I")
#: ``(value,)`` of the big-endian u32 at an offset: ``METADATA_SIZE_AT(part, 6)`` is a
#: payload part's metadata size (after its magic and CRC32C)
METADATA_SIZE_AT = _U32.unpack_from

# BaseCommand.type (field 1, varint) values, and the tag of the sub-message field
# (field number == type value, wire type 2).
_SEND_RECEIPT_HEAD = bytes((0x08, 7, (7 << 3) | 2))
_MESSAGE_HEAD = bytes((0x08, 9, (9 << 3) | 2))


def _message_id(ledger_id: int, entry_id: int) -> bytes:
    return b"".join((b"\x08", _varint(ledger_id), b"\x10", _varint(entry_id)))


def partition_field(partition: int) -> bytes:
    """The ``partition`` field of a ``MessageIdData`` (empty when ``partition`` < 0, as
    for a topic that is not a partition): what a consumer of partition N appends to the
    id of every message it is sent; computed once per consumer."""
    return b"\x18" + _varint(partition) if partition >= 0 else b""


def txnid_fields(most: int, least: int) -> bytes:
    """The ``txnid_least_bits`` and ``txnid_most_bits`` fields (22 and 23) of a serialized
    ``MessageMetadata`` carrying transaction ``(most, least)``, as a serializer writes them
    (in number order, one after the other; a zero is written too, both fields being set)."""
    return b"".join((b"\xb0\x01", _varint(least), b"\xb8\x01", _varint(most)))


def metadata_ends_with(part: bytes | memoryview, fields: bytes) -> bool:
    """Whether the ``MessageMetadata`` of payload part ``part`` (magic, CRC32C, metadata
    size, metadata, payload) ends with the serialized ``fields`` (`txnid_fields`): where
    a client writes a transaction's id when no later field is set (an unchunked message).
    ``part``'s layout must have been checked (its magic, and its metadata size within it:
    what `FrameDecoder` checks of every payload part it reads). Read from the bytes alone,
    without a parse: a string field that ends the metadata with those very bytes would
    pass too (a client writing that mislabels only its own message, as it could by
    writing the fields themselves wrong)."""
    end = 10 + METADATA_SIZE_AT(part, 6)[0]
    start = end - len(fields)
    return start >= 10 and part[start:end] == fields


def send_receipt_frame(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int
) -> bytes:
    """A whole SEND_RECEIPT frame."""
    mid = _message_id(ledger_id, entry_id)
    body = b"".join((
        b"\x08", _varint(producer_id),
        b"\x10", _varint(sequence_id),
        b"\x1a", _varint(len(mid)), mid,
        b"\x20", _varint(highest_sequence_id),
    ))
    cmd = b"".join((_SEND_RECEIPT_HEAD, _varint(len(body)), body))
    return _TWO_U32.pack(len(cmd) + 4, len(cmd)) + cmd


#: BaseCommand.type of the answers `txn_answer_frame` writes (each one's sub-message field
#: has the number of its type)
NEW_TXN_RESPONSE = 51
ADD_PARTITION_TO_TXN_RESPONSE = 53
ADD_SUBSCRIPTION_TO_TXN_RESPONSE = 55
END_TXN_RESPONSE = 57
#: the command's type and its sub-message's tag, for each of them
_TXN_ANSWER_HEAD = {kind: b"\x08" + _varint(kind) + _varint(kind << 3 | 2)
                    for kind in (NEW_TXN_RESPONSE, ADD_PARTITION_TO_TXN_RESPONSE,
                                 ADD_SUBSCRIPTION_TO_TXN_RESPONSE, END_TXN_RESPONSE)}


def txn_answer_frame(kind: int, request_id: int, most: int, least: int) -> bytes:
    """A whole frame of the success answer ``kind`` (`NEW_TXN_RESPONSE`,
    `ADD_PARTITION_TO_TXN_RESPONSE`, `ADD_SUBSCRIPTION_TO_TXN_RESPONSE` or
    `END_TXN_RESPONSE`) to request ``request_id`` about transaction ``(most, least)``: its
    ``request_id``, ``txnid_least_bits`` and ``txnid_most_bits``, both ids written even
    when 0, as protobuf writes fields that were set. Once per transaction and command:
    building the protobuf objects cost several times more."""
    body = b"".join((b"\x08", _varint(request_id), b"\x10", _varint(least),
                     b"\x18", _varint(most)))
    cmd = b"".join((_TXN_ANSWER_HEAD[kind], _varint(len(body)), body))
    return _TWO_U32.pack(len(cmd) + 4, len(cmd)) + cmd


def message_command(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    redelivery_count: int = 0,
    ack_set: list[int] | None = None,
    partition: bytes = b"",
) -> bytes:
    """The serialized BaseCommand of a MESSAGE (to frame with its payload part);
    ``partition`` is the consumer's `partition_field` (the topic's partition index, which
    Pulsar's broker puts in every message id it sends)."""
    mid = b"".join((b"\x08", _varint(ledger_id), b"\x10", _varint(entry_id), partition))
    parts = [b"\x08", _varint(consumer_id), b"\x12", _varint(len(mid)), mid,
             b"\x18", _varint(redelivery_count)]
    if ack_set:
        for word in ack_set:
            parts += (b"\x20", _varint(word))
    body = b"".join(parts)
    return b"".join((_MESSAGE_HEAD, _varint(len(body)), body))


def message_frame_head(
    command_bytes: bytes, payload_size: int, entry_metadata: bytes | memoryview | None
) -> bytes:
    """Everything of a MESSAGE frame before its payload part (sizes, the pre-serialized
    command, the broker entry metadata section if any): the head and the stored payload
    part of ``payload_size`` bytes, written one after the other (``writev``), make the
    frame without copying the payload."""
    size = len(command_bytes)
    if entry_metadata is None:
        return _TWO_U32.pack(4 + size + payload_size, size) + command_bytes
    bem = len(entry_metadata)
    return b"".join((
        _TWO_U32.pack(4 + size + 6 + bem + payload_size, size),
        command_bytes,
        b"\x0e\x02",
        bem.to_bytes(4, "big"),
        entry_metadata,
    ))


def message_frame(
    command_bytes: bytes, payload_part: bytes | memoryview, entry_metadata: bytes | memoryview | None
) -> bytes:
    """Frame a pre-serialized MESSAGE command around a stored payload part (one copy:
    `message_frame_head` + the payload part, for whoever needs the frame in one piece)."""
    return message_frame_head(command_bytes, len(payload_part), entry_metadata) + payload_part


def message_id_prefix(ledger_id: int, entry_id: int, partition: int = -1) -> bytes:
    """The start of a serialized ``MessageIdData`` (ledger, entry, partition when >= 0):
    what every message of one entry shares."""
    head = b"".join((b"\x08", _varint(ledger_id & _MASK64), b"\x10", _varint(entry_id & _MASK64)))
    return head + (b"\x18" + _varint(partition) if partition >= 0 else b"")


def message_id_bytes(
    ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1,
    batch_size: int = 0, prefix: bytes | None = None,
) -> bytes:
    """A serialized ``MessageIdData`` as the official client's ``MessageId.serialize()``
    writes it (batch index when >= 0, batch size when set); ``prefix`` may pass the
    ``message_id_prefix`` of the same entry to save building it again."""
    out = prefix if prefix is not None else message_id_prefix(ledger_id, entry_id, partition)
    if batch_index >= 0:
        out += message_id_suffix(batch_index, batch_size)
    return out


_U32_LIMIT = 1 << 32


def parse_message_command(
    buf: bytes | memoryview, pos: int, end: int
) -> tuple[int, int, int, int, list[int]] | None:
    """``(consumer_id, ledger_id, entry_id, redelivery_count, ack_set)`` of the serialized
    ``BaseCommand`` in ``buf[pos:end]`` when it is a MESSAGE as brokers write it: ``type``,
    then ``message`` with ``consumer_id``, ``message_id`` (``ledgerId``, ``entryId`` and
    ``partition``, which is read past: the consumer knows its partition), ``redelivery_count``, ``ack_set`` words and ``consumer_epoch``, in any order.
    Ledger and entry ids come signed (``ids.to_signed64``), ack-set words as protobuf's
    ``int64``. ``None`` for anything else, malformed input included: the caller then
    parses with protobuf, which decides."""
    if end - pos < 4 or buf[pos] != 0x08 or buf[pos + 1] != 0x09 or buf[pos + 2] != 0x4A:
        return None
    read = _read_varint
    try:
        length, pos = read(buf, pos + 3)
        if pos + length != end:
            return None
        consumer_id = ledger_id = entry_id = -1
        redelivery = 0
        ack_set: list[int] = []
        while pos < end:
            tag = buf[pos]
            value = buf[pos + 1]  # most values here fit one varint byte
            if value < 0x80:
                pos += 2
            else:
                value, pos = read(buf, pos + 1)
            if tag == 0x12:  # message_id: ``value`` is its size
                id_end = pos + value
                if id_end > end:
                    return None
                while pos < id_end:
                    tag = buf[pos]
                    value = buf[pos + 1]
                    if value < 0x80:
                        pos += 2
                    else:
                        value, pos = read(buf, pos + 1)
                    if value >> 64:
                        return None
                    if tag == 0x08:
                        ledger_id = value
                    elif tag == 0x10:
                        entry_id = value
                    elif tag != 0x18:  # partition: read past
                        return None
                if pos != id_end:
                    return None
                continue
            if value >> 64:
                return None
            if tag == 0x08:
                consumer_id = value
            elif tag == 0x18:
                if value >= _U32_LIMIT:
                    return None
                redelivery = value
            elif tag == 0x20:
                ack_set.append(to_signed64(value))
            elif tag != 0x28:  # consumer_epoch: read past
                return None
    except (ValueError, IndexError):
        return None
    if pos != end or consumer_id < 0 or ledger_id < 0 or entry_id < 0:
        return None
    return consumer_id, to_signed64(ledger_id), to_signed64(entry_id), redelivery, ack_set


def message_id_suffix(batch_index: int, batch_size: int = 0) -> bytes:
    """The end of a serialized ``MessageIdData`` after its ``message_id_prefix``: batch
    index and, when set, batch size (``prefix + suffix`` is ``message_id_bytes``)."""
    out = b"\x20" + _varint(batch_index)
    if batch_size:
        out += message_id_batch_size(batch_size)
    return out


def message_id_batch_size(batch_size: int) -> bytes:
    """The batch size field that ends a serialized batch ``MessageIdData``."""
    return b"\x30" + _varint(batch_size)


#: ``(producer_id, sequence_id, num_messages, highest_sequence_id, is_chunk, marker, txnid)``
#: of a SEND; ``highest_sequence_id`` is -1 when the field is absent; ``txnid`` is
#: ``(most, least)`` when either transaction field is present (the other one 0, as
#: protobuf reads it), else None.
SendFields = tuple[int, int, int, int, bool, bool, "tuple[int, int] | None"]


def parse_send_command(buf: bytes | bytearray | memoryview, pos: int, end: int) -> SendFields | None:
    """The fields of the serialized ``BaseCommand`` in ``buf[pos:end]`` when it is a SEND
    with ``producer_id``, ``sequence_id`` and any of ``num_messages``,
    ``txnid_least_bits``, ``txnid_most_bits``, ``highest_sequence_id``, ``is_chunk``,
    ``marker`` (fields in any order, the last occurrence winning, as protobuf reads them).
    ``None`` for anything else (``message_id``, unknown fields, values out of range,
    malformed bytes): the caller then parses with protobuf, which decides.

    The layout a serializer writes (each field once, in number order) is read straight
    through, one test per field; anything else is read again field by field
    (`_send_fields`)."""
    if end - pos < 7 or buf[pos] != 0x08 or buf[pos + 1] != 0x06 or buf[pos + 2] != 0x32:
        return None
    try:
        length = buf[pos + 3]
        if length < 0x80:
            pos += 4
        else:
            length, pos = _read_varint(buf, pos + 3)
        if pos + length != end:
            return None
        start = pos
        if buf[pos] != 0x08:
            return _send_fields(buf, start, end)
        producer_id = buf[pos + 1]
        if producer_id < 0x80:
            pos += 2
        else:
            producer_id, pos = _long_varint(buf, pos + 1)
        if pos >= end or buf[pos] != 0x10:
            return _send_fields(buf, start, end)
        sequence_id = buf[pos + 1]
        if sequence_id < 0x80:
            pos += 2
        else:
            sequence_id, pos = _long_varint(buf, pos + 1)
        if pos == end:
            return producer_id, sequence_id, 1, -1, False, False, None
        num_messages = 1
        if buf[pos] == 0x18:
            num_messages = buf[pos + 1]
            if num_messages < 0x80:
                pos += 2
            else:
                num_messages, pos = _long_varint(buf, pos + 1)
                if num_messages >= 0x80000000:  # int32: a negative count is sign-extended
                    return None
        txnid = None
        if pos < end and buf[pos] == 0x20:  # a transaction's (least, then most)
            least = buf[pos + 1]
            if least < 0x80:
                pos += 2
            elif buf[pos + 2] < 0x80:  # (a coordinator's sequence below 16384)
                least = (least & 0x7F) | (buf[pos + 2] << 7)
                pos += 3
            else:
                least, pos = _long_varint(buf, pos + 1)
            most = 0
            if pos < end and buf[pos] == 0x28:
                most = buf[pos + 1]
                if most < 0x80:
                    pos += 2
                else:
                    most, pos = _long_varint(buf, pos + 1)
            txnid = (most, least)
            if pos == end:
                return producer_id, sequence_id, num_messages, -1, False, False, txnid
        elif pos < end and buf[pos] == 0x28:
            return _send_fields(buf, start, end)
        highest = -1
        if pos < end and buf[pos] == 0x30:
            highest = buf[pos + 1]
            if highest < 0x80:
                pos += 2
            else:
                highest, pos = _long_varint(buf, pos + 1)
        is_chunk = marker = False
        if pos < end and buf[pos] == 0x38:
            is_chunk, pos = _flag(buf, pos)
        if pos < end and buf[pos] == 0x40:
            marker, pos = _flag(buf, pos)
    except (ValueError, IndexError):
        return None
    if pos != end:  # another layout (or past the end: then declined there too)
        return _send_fields(buf, start, end)
    return producer_id, sequence_id, num_messages, highest, is_chunk, marker, txnid


def _long_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` whose first byte has its continuation bit set (two and three
    bytes read here: sequence ids and transaction ids); ValueError past 64 bits."""
    second = buf[pos + 1]
    if second < 0x80:
        return (buf[pos] & 0x7F) | (second << 7), pos + 2
    third = buf[pos + 2]
    if third < 0x80:
        return (buf[pos] & 0x7F) | ((second & 0x7F) << 7) | (third << 14), pos + 3
    value, pos = _read_varint(buf, pos)
    if value >> 64:
        raise ValueError("a varint past 64 bits")
    return value, pos


def _flag(buf: bytes | bytearray | memoryview, pos: int) -> tuple[bool, int]:
    """The bool field at ``pos`` (its tag there): (its value, the position after it)."""
    value = buf[pos + 1]
    if value < 0x80:
        return value != 0, pos + 2
    value, pos = _long_varint(buf, pos + 1)
    return value != 0, pos


def _send_fields(buf: bytes | bytearray | memoryview, pos: int, end: int) -> SendFields | None:
    """`parse_send_command` for the fields in ``buf[pos:end]`` in any order, field by field."""
    read = _read_varint
    try:
        producer_id = sequence_id = highest = most = least = -1
        num_messages = 1
        is_chunk = marker = False
        while pos < end:
            tag = buf[pos]
            value = buf[pos + 1]  # most values here fit one or two varint bytes
            if value < 0x80:
                pos += 2
            elif buf[pos + 2] < 0x80:  # (a sequence id or a transaction's below 16384)
                value = (value & 0x7F) | (buf[pos + 2] << 7)
                pos += 3
            else:
                value, pos = read(buf, pos + 1)
                if value >> 64:
                    return None
            if tag == 0x10:
                sequence_id = value
            elif tag == 0x08:
                producer_id = value
            elif tag == 0x18:  # int32: a negative count is sign-extended to 64 bits
                if value >= 0x80000000:
                    return None
                num_messages = value
            elif tag == 0x20:  # (a transaction's two fields before the rarer ones)
                least = value
            elif tag == 0x28:
                most = value
            elif tag == 0x30:
                highest = value
            elif tag == 0x38:
                is_chunk = value != 0
            elif tag == 0x40:
                marker = value != 0
            else:
                return None
    except (ValueError, IndexError):
        return None
    if pos != end or producer_id < 0 or sequence_id < 0:
        return None
    txnid = None if most < 0 and least < 0 else (most if most > 0 else 0, least if least > 0 else 0)
    return producer_id, sequence_id, num_messages, highest, is_chunk, marker, txnid

