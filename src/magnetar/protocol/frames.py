"""Framing: turn a byte stream into ``Frame`` objects and commands back into bytes.

Theory of operation
-------------------
Every frame starts with a 4-byte big-endian ``total_size`` counting the bytes after it,
then a 4-byte ``command_size`` and a serialized ``BaseCommand``. A *simple* frame ends
there. A *payload* frame (SEND, MESSAGE) continues with, in order:

* optionally ``0x0e02`` + 4-byte size + serialized ``BrokerEntryMetadata`` (added by the
  broker, only towards consumers that asked for it);
* the *payload part*: ``0x0e01`` magic, 4-byte CRC32C of everything after the checksum,
  4-byte metadata size, serialized ``MessageMetadata``, then the raw payload (possibly
  compressed, possibly a batch) up to the end of the frame.

The broker stores the payload part exactly as received and hands the same bytes out on
delivery, so ``payload_part`` is kept as one object and never rebuilt: ``bytes``, or for a
large SEND read through ``get_buffer``, a read-only view of the buffer it was read into.

Pulsar makes the ``0x0e01`` magic and checksum optional: some brokers (pulsar-lite) leave
them out on delivery, and the official clients accept that. The broker's decoder insists on
them for what producers send (``Frame.payload_part`` is stored as is); a client's decoder,
``FrameDecoder(raw_payload=True)``, hands over the tail after the command untouched and
:func:`split_message` takes it apart, checksum or not.

``FrameDecoder`` is incremental: ``feed`` accepts any chunking of the stream (one byte at
a time, many frames at once) and returns the frames completed so far. Its buffer is a
``bytearray`` that is trimmed once per ``feed`` call, so a large frame arriving in many
small reads costs linear, not quadratic, copying. Bad input raises a ``ProtocolError``
subclass and leaves the decoder failed: the connection cannot be resynchronised.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import final, overload

import crc32c as _crc32c
from google.protobuf.message import DecodeError

from magnetar.protocol import pulsar_pb2 as pb
from magnetar.protocol.errors import (
    ChecksumMismatch,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
)
from magnetar.protocol.fastpath import parse_message_command, parse_send_command
from magnetar.protocol.ids import message_id_data, wire_position
from magnetar.protocol.varint import encode_varint

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FRAME_PADDING",
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "Frame",
    "FrameDecoder",
    "MessageFrame",
    "SendFrame",
    "build_payload_part",
    "encode_command",
    "encode_command_with_part",
    "encode_payload_command",
    "parse_payload_part",
    "part_checksum",
    "peek_metadata",
    "repeated_string_part",
    "split_message",
    "split_message_at",
    "verify_checksum",
]

#: Pulsar's default ``maxMessageSize`` (the payload part); the default frame limit is this
#: plus ``FRAME_PADDING``.
DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024
#: Room for the command and broker entry metadata on top of the message size limit.
FRAME_PADDING = 10 * 1024

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_TWO_U32 = struct.Struct(">II")
# magic (2) + checksum (4) + metadata size (4)
_PART_HEADER = struct.Struct(">HII")
_MAGIC_CRC_BYTES = _U16.pack(MAGIC_CRC32C)
_MAGIC_BEM_BYTES = _U16.pack(MAGIC_BROKER_ENTRY_METADATA)
#: Frames of this many bytes or more are read into a buffer of their own (``get_buffer``).
LARGE_FRAME = 16 * 1024
#: The largest size of the reused buffer that smaller frames are read into.
READ_BUFFER_SIZE = 64 * 1024
_FIRST_READ_BUFFER = 4 * 1024


@dataclass(slots=True)
class Frame:
    """One decoded frame.

    ``payload_part`` runs from the ``0x0e01`` magic to the end of the frame (magic,
    checksum, metadata size, metadata, payload) and is ``None`` for simple commands.
    ``broker_entry_metadata`` is the raw serialized ``BrokerEntryMetadata`` (without its
    magic and size) when the frame carried one.
    """

    command: pb.BaseCommand
    payload_part: bytes | None = None
    broker_entry_metadata: bytes | None = None

    @property
    def type(self) -> int:
        """The ``BaseCommand.Type`` value of the command."""
        return self.command.type


class MessageFrame:
    """A MESSAGE frame as a consumer needs it, without protobuf objects: what
    ``FrameDecoder(message_frames=True)`` returns for MESSAGE frames in the layout brokers
    write (``fastpath.parse_message_command``); ``from_command`` makes one of a parsed
    ``CommandMessage``. ``ledger_id`` and ``entry_id`` are signed (``ids``);
    ``message_id`` is the wire ``MessageIdData``, built on demand."""

    __slots__ = ("_wire_id", "ack_set", "consumer_id", "entry_id", "ledger_id",
                 "payload_part", "redelivery_count")

    type = pb.BaseCommand.MESSAGE

    def __init__(self, consumer_id: int, ledger_id: int, entry_id: int,
                 redelivery_count: int, ack_set: list[int], payload_part: bytes | None,
                 wire_id: pb.MessageIdData | None = None) -> None:
        self.consumer_id = consumer_id
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.redelivery_count = redelivery_count
        self.ack_set = ack_set
        self.payload_part = payload_part
        self._wire_id = wire_id

    @classmethod
    def from_command(cls, m: pb.CommandMessage, payload_part: bytes | None) -> MessageFrame:
        ledger_id, entry_id = wire_position(m.message_id)
        return cls(m.consumer_id, ledger_id, entry_id, m.redelivery_count, list(m.ack_set),
                   payload_part, m.message_id)

    @property
    def message_id(self) -> pb.MessageIdData:
        if self._wire_id is None:
            self._wire_id = message_id_data(self.ledger_id, self.entry_id)
            self._wire_id.ClearField("batch_index")
        return self._wire_id


@final  # never subclassed: `type(frame) is SendFrame` tells it from a Frame
class SendFrame:
    """A SEND frame as the broker needs it, without protobuf objects: what a
    ``FrameDecoder(send_frames=True)`` returns for a plain send
    (``fastpath.parse_send_command``); ``from_command`` makes one of a parsed
    ``CommandSend``. ``highest_sequence_id`` is -1 when the producer left it out;
    ``command`` builds the protobuf command on demand (error replies, logs);
    ``txnid``: (most, least) of a Send in a transaction."""

    __slots__ = ("_command", "highest_sequence_id", "is_chunk", "marker", "num_messages",
                 "payload_part", "producer_id", "sequence_id", "txnid")

    type = pb.BaseCommand.SEND
    broker_entry_metadata = None

    def __init__(self, producer_id: int, sequence_id: int, num_messages: int,
                 highest_sequence_id: int, is_chunk: bool, marker: bool,
                 txnid: tuple[int, int] | None,
                 payload_part: bytes | memoryview | None,
                 command: pb.BaseCommand | None = None) -> None:
        self.producer_id = producer_id
        self.sequence_id = sequence_id
        self.num_messages = num_messages
        self.highest_sequence_id = highest_sequence_id
        self.is_chunk = is_chunk
        self.marker = marker
        self.payload_part = payload_part
        self._command = command
        #: (most, least) of the transaction of a Send in one
        self.txnid = txnid

    @classmethod
    def from_command(cls, cmd: pb.BaseCommand, payload_part: bytes | memoryview | None) -> SendFrame:
        """The ``SendFrame`` of a SEND that protobuf parsed."""
        send = cmd.send
        highest = send.highest_sequence_id if send.HasField("highest_sequence_id") else -1
        txnid = ((send.txnid_most_bits, send.txnid_least_bits)
                 if send.HasField("txnid_most_bits") or send.HasField("txnid_least_bits")
                 else None)
        return cls(send.producer_id, send.sequence_id, send.num_messages, highest,
                   send.is_chunk, send.marker, txnid, payload_part, cmd)

    @property
    def command(self) -> pb.BaseCommand:
        if self._command is None:
            send = pb.CommandSend(producer_id=self.producer_id, sequence_id=self.sequence_id)
            if self.num_messages != 1:
                send.num_messages = self.num_messages
            if self.highest_sequence_id >= 0:
                send.highest_sequence_id = self.highest_sequence_id
            if self.is_chunk:
                send.is_chunk = True
            if self.marker:
                send.marker = True
            if self.txnid is not None:
                send.txnid_most_bits, send.txnid_least_bits = self.txnid
            self._command = pb.BaseCommand(type=pb.BaseCommand.SEND, send=send)
        return self._command


def _parse_command(data: bytes | memoryview) -> pb.BaseCommand:
    cmd = pb.BaseCommand()
    try:
        cmd.ParseFromString(data)  # type: ignore[arg-type]  # upb takes any buffer
    except (DecodeError, ValueError, TypeError) as exc:
        raise MalformedFrame(f"undecodable BaseCommand: {exc}") from None
    # upb does not enforce proto2 ``required`` on parse; an unknown ``type`` value also
    # ends up here (it lands in the unknown fields, leaving ``type`` unset).
    if not cmd.IsInitialized():
        raise MalformedFrame("BaseCommand is missing required fields")
    return cmd


class FrameDecoder:
    """Incremental decoder of a Pulsar byte stream.

    ``max_frame_size`` bounds a frame's declared ``total_size``. The default is Pulsar's
    ``maxMessageSize`` (``DEFAULT_MAX_FRAME_SIZE``) plus ``FRAME_PADDING`` for the command
    and metadata; a broker with another message size passes ``its size + FRAME_PADDING``.
    With ``verify_checksums`` the CRC32C of every payload part is checked
    while decoding (``ChecksumMismatch``); otherwise callers use ``verify_checksum``
    themselves, e.g. to answer a bad SEND with a ``ChecksumError`` instead of a hang-up.
    With ``raw_payload`` (a client's decoder) a payload frame's ``payload_part`` is
    everything after the command, unchecked: see :func:`split_message`; and
    ``feed_messages`` returns MESSAGE frames as ``MessageFrame`` objects, read without
    protobuf where they can be (``fastpath.parse_message_command``).
    """

    __slots__ = ("_big", "_big_fill", "_buf", "_failed", "_frame_limit", "_raw", "_rbuf",
                 "_rend", "_rpos", "_sends", "_verify")

    def __init__(
        self,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE + FRAME_PADDING,
        *,
        verify_checksums: bool = False,
        raw_payload: bool = False,
        send_frames: bool = False,
    ) -> None:
        if max_frame_size <= 0:
            raise ValueError("max_frame_size must be positive")
        self._frame_limit = max_frame_size
        self._verify = verify_checksums
        self._raw = raw_payload
        self._sends = send_frames
        self._buf = bytearray()
        self._failed: ProtocolError | None = None
        # get_buffer / buffer_updated: a reused read buffer, and a frame's own buffer
        self._rbuf: bytearray | None = None
        self._rpos = 0  # first byte not yet decoded
        self._rend = 0  # end of the bytes read
        self._big: bytearray | None = None
        self._big_fill = 0

    @property
    def max_frame_size(self) -> int:
        """Largest ``total_size`` accepted."""
        return self._frame_limit

    @max_frame_size.setter
    def max_frame_size(self, value: int) -> None:
        if value <= 0:
            raise ValueError("max_frame_size must be positive")
        self._frame_limit = value

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a frame."""
        return len(self._buf)

    # -- reading into the decoder's own memory (asyncio.BufferedProtocol) --

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next read from the socket should land; then call ``buffer_updated``.
        A frame of ``LARGE_FRAME`` bytes or more is read into a buffer of its own, of its
        exact size; a SEND's ``payload_part`` is then a read-only view of it, so the bytes
        are not copied between the socket and the disk. Smaller frames share one reused buffer, which starts small (an idle
        connection holds little) and grows to ``READ_BUFFER_SIZE`` when reads fill it."""
        if self._big is not None:
            return memoryview(self._big)[self._big_fill:]
        rbuf = self._rbuf
        pending = self._rend - self._rpos
        if rbuf is None:
            rbuf = self._rbuf = bytearray(_FIRST_READ_BUFFER)
        elif self._rend == len(rbuf) and len(rbuf) < READ_BUFFER_SIZE:  # reads fill it: grow
            grown = bytearray(min(len(rbuf) * 4, READ_BUFFER_SIZE))
            grown[:pending] = rbuf[self._rpos:self._rend]
            rbuf = self._rbuf = grown
            self._rpos, self._rend = 0, pending
        elif len(rbuf) - self._rend < len(rbuf) // 4:  # little room left: compact
            if pending:
                rbuf[:pending] = rbuf[self._rpos:self._rend]  # under LARGE_FRAME bytes
            self._rpos, self._rend = 0, pending
        return memoryview(rbuf)[self._rend:]

    def buffer_updated(self, nbytes: int) -> list[Frame | MessageFrame | SendFrame]:
        """``nbytes`` were read into the last ``get_buffer``: the frames they complete."""
        if self._failed is not None:
            raise self._failed
        big = self._big
        if big is not None:
            self._big_fill += nbytes
            if self._big_fill < len(big):
                return []
            self._big = None
            with memoryview(big) as view:  # the frame owns ``big``: its part can be a view
                return [self._decode_or_fail(view, 4, len(big), owned=True)]
        assert self._rbuf is not None, "buffer_updated before get_buffer"
        self._rend += nbytes
        rend = self._rend
        pos = self._rpos
        frames: list[Frame | MessageFrame | SendFrame] = []
        with memoryview(self._rbuf) as view:
            while rend - pos >= 4:
                (total,) = _U32.unpack_from(view, pos)
                if total > self._frame_limit:
                    self._failed = FrameTooLarge(total, self._frame_limit)
                    raise self._failed
                end = pos + 4 + total
                if end > rend:
                    if total + 4 >= LARGE_FRAME:  # the rest goes straight to its own buffer
                        big = self._big = bytearray(total + 4)
                        big[: rend - pos] = view[pos:rend]
                        self._big_fill = rend - pos
                        pos = rend
                    break
                frames.append(self._decode_or_fail(view, pos + 4, end))
                pos = end
        if pos == rend:
            self._rpos = self._rend = 0
        else:
            self._rpos = pos
        return frames

    def _decode_or_fail(self, view: memoryview, start: int, end: int,
                        owned: bool = False) -> Frame | MessageFrame | SendFrame:
        try:
            return self._decode_frame(view, start, end, owned=owned)
        except ProtocolError as exc:
            self._failed = exc
            raise

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame | SendFrame]:
        """Consume ``data`` and return every frame it completes, in stream order. (One
        stream is read either through ``feed`` or through ``get_buffer``, not both.)"""
        return self._feed(data, False)  # type: ignore[return-value]  # no MessageFrame

    def feed_messages(self, data: bytes | bytearray | memoryview) -> list[Frame | MessageFrame]:
        """``feed``, with MESSAGE frames as ``MessageFrame`` (a ``raw_payload`` decoder)."""
        if not self._raw:
            raise ValueError("feed_messages needs a raw_payload decoder")
        return self._feed(data, True)  # type: ignore[return-value]  # no SendFrame

    def _feed(self, data: bytes | bytearray | memoryview,
              messages: bool) -> list[Frame | MessageFrame | SendFrame]:
        if self._failed is not None:
            raise self._failed
        if self._buf:
            self._buf += data
            buf: bytes | bytearray | memoryview = self._buf
        else:
            # fast path: nothing pending, decode straight from the caller's buffer
            buf = data
        frames: list[Frame | MessageFrame | SendFrame] = []
        pos = 0
        size = len(buf)
        view = memoryview(buf)
        try:
            while size - pos >= 4:
                (total,) = _U32.unpack_from(view, pos)
                if total > self._frame_limit:
                    raise FrameTooLarge(total, self._frame_limit)
                end = pos + 4 + total
                if end > size:
                    break
                frames.append(self._decode_frame(view, pos + 4, end, messages))
                pos = end
        except ProtocolError as exc:
            self._failed = exc
            self._buf = bytearray()
            raise
        finally:
            view.release()
        if buf is self._buf:
            if pos:
                del self._buf[:pos]
        elif pos < size:
            self._buf = bytearray(memoryview(data)[pos:])
        return frames

    def _decode_frame(self, view: memoryview, start: int, end: int, messages: bool = False,
                      owned: bool = False) -> Frame | MessageFrame | SendFrame:
        """The frame in ``view[start:end]``. ``owned``: nothing else will ever write into
        ``view``'s memory, so a SEND's payload part may be a read-only view of it (no copy)."""
        if end - start < 4:
            raise MalformedFrame("frame too short for its command size")
        (cmd_size,) = _U32.unpack_from(view, start)
        cmd_end = start + 4 + cmd_size
        if cmd_end > end:
            raise MalformedFrame("command size runs past the end of the frame")
        if messages and cmd_end < end:
            fields = parse_message_command(view, start + 4, cmd_end)
            if fields is not None:
                return MessageFrame(*fields, bytes(view[cmd_end:end]))
        if self._sends and cmd_end + _PART_HEADER.size <= end and view[cmd_end + 1] == 0x01:
            # (a 0x0e02 there is broker entry metadata, which producers do not send)
            send = parse_send_command(view, start + 4, cmd_end)
            if send is not None:  # a payload part (0x0e01 magic) follows
                part = view[cmd_end:end].toreadonly() if owned else bytes(view[cmd_end:end])
                self._check_part(part)
                return SendFrame(*send, part)
        cmd = _parse_command(view[start + 4 : cmd_end])
        if cmd_end == end:
            return Frame(cmd)
        if self._raw:
            return Frame(cmd, bytes(view[cmd_end:end]))

        pos = cmd_end
        broker_entry_metadata = None
        if end - pos >= 2 and _U16.unpack_from(view, pos)[0] == MAGIC_BROKER_ENTRY_METADATA:
            if end - pos < 6:
                raise MalformedFrame("truncated broker entry metadata header")
            (bem_size,) = _U32.unpack_from(view, pos + 2)
            bem_end = pos + 6 + bem_size
            if bem_end > end:
                raise MalformedFrame("broker entry metadata runs past the end of the frame")
            broker_entry_metadata = bytes(view[pos + 6 : bem_end])
            pos = bem_end

        part = bytes(view[pos:end])
        self._check_part(part)
        return Frame(cmd, part, broker_entry_metadata)

    def _check_part(self, part: bytes | memoryview) -> None:
        """A payload part's layout, and its checksum when this decoder verifies them."""
        _check_part_layout(part)
        if self._verify:
            _verify_or_raise(part)


def _check_part_layout(part: bytes | memoryview) -> tuple[int, int]:
    """Validate magic and metadata size; return (checksum, metadata size)."""
    if len(part) < _PART_HEADER.size:
        raise MalformedFrame("payload part shorter than its header")
    magic, checksum, meta_size = _PART_HEADER.unpack_from(part, 0)
    if magic != MAGIC_CRC32C:
        raise MalformedFrame(f"bad payload magic {magic:#06x}")
    if meta_size > len(part) - _PART_HEADER.size:
        raise MalformedFrame("metadata size runs past the end of the payload part")
    return checksum, meta_size


def _verify_or_raise(part: bytes | memoryview) -> None:
    (expected,) = _U32.unpack_from(part, 2)
    actual = _crc32c.crc32c(memoryview(part)[6:])
    if actual != expected:
        raise ChecksumMismatch(expected, actual)


def encode_command(cmd: pb.BaseCommand) -> bytes:
    """Serialize a simple (payload-less) command as a whole frame."""
    body = cmd.SerializeToString()
    size = len(body)
    return _TWO_U32.pack(size + 4, size) + body


def repeated_string_part(number: int, values: Sequence[str]) -> bytes:
    """The serialized entries of repeated string field ``number`` holding ``values``, as
    protobuf writes them (tag, length, UTF-8 bytes, for each): a long list serialized a
    slice at a time (see `encode_command_with_part`)."""
    tag = encode_varint(number << 3 | 2)
    out: list[bytes] = []
    append = out.append
    for value in values:
        raw = value.encode()
        append(tag)
        append(encode_varint(len(raw)))
        append(raw)
    return b"".join(out)


def encode_command_with_part(cmd: pb.BaseCommand, field: str, extra: Sequence[bytes]) -> list[bytes]:
    """A whole frame of ``cmd`` whose sub-message ``field`` also holds the ``extra`` pieces
    (its serialized fields, appended after what the sub-message has: a parser takes fields
    in any order, and the entries of a repeated field add up), as pieces to write one
    after the other (never joined: a list of 100,000 topic names is 4 MB). So a command
    with such a list (one protobuf call of ~30 ms that holds the event loop) is built
    from slices serialized with the loop handed back between them."""
    sub = getattr(cmd, field).SerializeToString()
    rest = pb.BaseCommand()
    rest.CopyFrom(cmd)
    rest.ClearField(field)
    number = pb.BaseCommand.DESCRIPTOR.fields_by_name[field].number
    head = rest.SerializeToString()
    inner = len(sub) + sum(len(piece) for piece in extra)
    field_head = encode_varint(number << 3 | 2) + encode_varint(inner)
    size = len(head) + len(field_head) + inner
    return [_TWO_U32.pack(size + 4, size) + head + field_head + sub, *extra]


def encode_payload_command(
    cmd: pb.BaseCommand,
    payload_part: bytes | bytearray | memoryview,
    broker_entry_metadata: bytes | None = None,
) -> bytes:
    """Serialize a payload command (SEND / MESSAGE) around an existing payload part.

    ``payload_part`` is written as is (see ``build_payload_part``); the optional
    ``broker_entry_metadata`` (serialized ``BrokerEntryMetadata``) goes in front of it.
    """
    body = cmd.SerializeToString()
    size = len(body)
    if broker_entry_metadata is None:
        total = 4 + size + len(payload_part)
        return b"".join((_TWO_U32.pack(total, size), body, payload_part))
    bem_size = len(broker_entry_metadata)
    total = 4 + size + 6 + bem_size + len(payload_part)
    return b"".join(
        (
            _TWO_U32.pack(total, size),
            body,
            _MAGIC_BEM_BYTES,
            _U32.pack(bem_size),
            broker_entry_metadata,
            payload_part,
        )
    )


def build_payload_part(metadata: pb.MessageMetadata, payload: bytes | memoryview) -> bytes:
    """Build magic + CRC32C + metadata size + metadata + payload."""
    meta = metadata.SerializeToString()
    meta_size = _U32.pack(len(meta))
    crc = _crc32c.crc32c(payload, _crc32c.crc32c(meta, _crc32c.crc32c(meta_size)))
    return b"".join((_MAGIC_CRC_BYTES, _U32.pack(crc), meta_size, meta, payload))


def verify_checksum(part: bytes | memoryview) -> bool:
    """True when the CRC32C carried by ``part`` matches its content."""
    return part_checksum(part) is not None


def part_checksum(part: bytes | memoryview) -> int | None:
    """The CRC32C that ``part`` carries (bytes 2-5, big-endian, after the ``0x0e01``
    magic) when it matches its content (everything from byte 6), else None. The broker
    checks a SEND with it and hands the checked value to storage, which keeps it as the
    stored record's CRC instead of computing one of its own."""
    if len(part) < _PART_HEADER.size or _U16.unpack_from(part, 0)[0] != MAGIC_CRC32C:
        return None
    (expected,) = _U32.unpack_from(part, 2)
    return expected if _crc32c.crc32c(memoryview(part)[6:]) == expected else None


def _parse_metadata(part: bytes | memoryview, meta_size: int) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata()
    try:
        view = memoryview(part)[_PART_HEADER.size : _PART_HEADER.size + meta_size]
        metadata.ParseFromString(view)  # type: ignore[arg-type]  # upb takes any buffer
    except (DecodeError, ValueError, TypeError) as exc:
        raise MalformedFrame(f"undecodable MessageMetadata: {exc}") from None
    if not metadata.IsInitialized():
        raise MalformedFrame("MessageMetadata is missing required fields")
    return metadata


@overload
def parse_payload_part(part: bytes, verify: bool = True) -> tuple[pb.MessageMetadata, bytes]: ...
@overload
def parse_payload_part(
    part: memoryview, verify: bool = True
) -> tuple[pb.MessageMetadata, memoryview]: ...
def parse_payload_part(
    part: bytes | memoryview, verify: bool = True
) -> tuple[pb.MessageMetadata, bytes | memoryview]:
    """Split a payload part into its metadata and payload, checking the CRC32C first. The
    payload is of the same type as ``part`` (a ``memoryview`` is cut without copying)."""
    _, meta_size = _check_part_layout(part)
    if verify:
        _verify_or_raise(part)
    metadata = _parse_metadata(part, meta_size)
    return metadata, part[_PART_HEADER.size + meta_size :]


def split_message(tail: bytes, verify: bool = True) -> tuple[pb.MessageMetadata, bytes]:
    """``(metadata, payload)`` of what follows a payload command (a raw ``payload_part``):
    optional broker entry metadata, optional magic and CRC32C (checked when present and
    ``verify``: ``ChecksumMismatch``), metadata size, metadata, payload (``MalformedFrame``
    when the layout does not hold)."""
    metadata, at = split_message_at(tail, verify)
    return metadata, tail[at:]


def split_message_at(tail: bytes, verify: bool = True) -> tuple[pb.MessageMetadata, int]:
    """Like ``split_message``, but where the payload starts in ``tail`` instead of a copy
    of it (a consumer cuts its messages out of ``tail`` itself)."""
    pos = 0
    size = len(tail)
    view = memoryview(tail)
    if size >= 6 and tail[0] == 0x0E and tail[1] == 0x02:  # MAGIC_BROKER_ENTRY_METADATA
        pos = 6 + _U32.unpack_from(tail, 2)[0]
    if size - pos >= 6 and tail[pos] == 0x0E and tail[pos + 1] == 0x01:  # MAGIC_CRC32C
        if verify:
            (expected,) = _U32.unpack_from(tail, pos + 2)
            actual = _crc32c.crc32c(view[pos + 6 :])
            if actual != expected:
                raise ChecksumMismatch(expected, actual)
        pos += 6
    if size - pos < 4:
        raise MalformedFrame("payload frame too short for its metadata size")
    (meta_size,) = _U32.unpack_from(tail, pos)
    pos += 4
    if meta_size > size - pos:
        raise MalformedFrame("metadata runs past the end of the frame")
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(view[pos : pos + meta_size])  # type: ignore[arg-type]
    except (DecodeError, ValueError, TypeError) as exc:
        raise MalformedFrame(f"undecodable MessageMetadata: {exc}") from None
    return metadata, pos + meta_size


def peek_metadata(part: bytes | memoryview) -> pb.MessageMetadata:
    """Decode only the metadata of a payload part, without checking the checksum."""
    _, meta_size = _check_part_layout(part)
    return _parse_metadata(part, meta_size)
