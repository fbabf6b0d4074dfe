"""Sans-IO codec for the Apache Pulsar binary protocol.

Owns the wire schema (``pb``, generated from ``pulsar.proto``), framing, checksums,
batches, compression and key hashing. No sockets, no asyncio: bytes in, commands out.
"""

from magnetar.protocol import pulsar_pb2 as pb
from magnetar.protocol.commands import command, command_body, message_id
from magnetar.protocol.errors import (
    ChecksumMismatch,
    CompressionError,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
)
from magnetar.protocol.frames import (
    DEFAULT_MAX_FRAME_SIZE,
    Frame,
    FrameDecoder,
    build_payload_part,
    encode_command,
    encode_payload_command,
    parse_payload_part,
    peek_metadata,
    verify_checksum,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "ChecksumMismatch",
    "CompressionError",
    "Frame",
    "FrameDecoder",
    "FrameTooLarge",
    "MalformedFrame",
    "ProtocolError",
    "build_payload_part",
    "command",
    "command_body",
    "encode_command",
    "encode_payload_command",
    "message_id",
    "parse_payload_part",
    "pb",
    "peek_metadata",
    "verify_checksum",
]
