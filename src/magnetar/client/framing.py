"""Client-side frame splitting that also accepts payload frames without a checksum.

Pulsar's format makes the ``0x0e01`` magic + CRC32C optional (brokers such as pulsar-lite
omit it on delivery, and the official clients accept that), whereas
``magnetar.protocol.FrameDecoder`` insists on it. This decoder splits the stream into
``(command, payload)`` pairs, where ``payload`` is whatever follows the command (broker
entry metadata, optional checksum, metadata, payload); ``split_payload`` takes that apart.
"""

from __future__ import annotations

import struct

import crc32c as _crc32c
from google.protobuf.message import DecodeError

from magnetar.protocol import ChecksumMismatch, FrameTooLarge, MalformedFrame, pb

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
MAGIC_CRC = 0x0E01
MAGIC_BEM = 0x0E02


class ClientFrameDecoder:
    """Incremental splitter. Partial input is kept as a list of chunks and joined once the
    frame it belongs to is complete, so a large frame costs one copy, not one per read."""

    __slots__ = ("_have", "_need", "_parts", "max_frame_size")

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._parts: list[bytes] = []
        self._have = 0
        self._need = 0

    def feed(self, data: bytes) -> list[tuple[pb.BaseCommand, bytes | None]]:
        if self._parts:
            self._parts.append(data)
            self._have += len(data)
            if self._have < self._need:
                return []
            buf = b"".join(self._parts)
            self._parts = []
        else:
            buf = data
        out: list[tuple[pb.BaseCommand, bytes | None]] = []
        pos = 0
        size = len(buf)
        unpack = _U32.unpack_from
        while size - pos >= 8:
            (total,) = unpack(buf, pos)
            if total > self.max_frame_size:
                raise FrameTooLarge(total, self.max_frame_size)
            end = pos + 4 + total
            if end > size:
                break
            (cmd_size,) = unpack(buf, pos + 4)
            cmd_end = pos + 8 + cmd_size
            if cmd_end > end:
                raise MalformedFrame("command size runs past the end of the frame")
            cmd = pb.BaseCommand()
            try:
                cmd.ParseFromString(buf[pos + 8:cmd_end])
            except (DecodeError, ValueError) as exc:
                raise MalformedFrame(f"undecodable command: {exc}") from None
            out.append((cmd, buf[cmd_end:end] if cmd_end < end else None))
            pos = end
        if pos < size:
            rest = buf[pos:]
            self._parts = [rest]
            self._have = len(rest)
            self._need = max(8, unpack(rest, 0)[0] + 4) if self._have >= 4 else 8
        else:
            self._need = 0
        return out


def split_payload(data: bytes, verify: bool = True) -> tuple[pb.MessageMetadata, bytes]:
    """(metadata, payload) of a payload frame's tail; checks the CRC32C when present."""
    pos = 0
    if len(data) >= 6 and _U16.unpack_from(data, 0)[0] == MAGIC_BEM:
        pos = 6 + _U32.unpack_from(data, 2)[0]
    if len(data) - pos >= 6 and _U16.unpack_from(data, pos)[0] == MAGIC_CRC:
        if verify:
            (expected,) = _U32.unpack_from(data, pos + 2)
            actual = _crc32c.crc32c(memoryview(data)[pos + 6:])
            if actual != expected:
                raise ChecksumMismatch(expected, actual)
        pos += 6
    if len(data) - pos < 4:
        raise MalformedFrame("payload frame too short for its metadata size")
    (meta_size,) = _U32.unpack_from(data, pos)
    pos += 4
    if meta_size > len(data) - pos:
        raise MalformedFrame("metadata runs past the end of the frame")
    meta = pb.MessageMetadata()
    try:
        meta.ParseFromString(data[pos:pos + meta_size])
    except (DecodeError, ValueError) as exc:
        raise MalformedFrame(f"undecodable metadata: {exc}") from None
    return meta, data[pos + meta_size:]
