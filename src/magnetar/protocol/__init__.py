"""Sans-IO codec for the Apache Pulsar binary protocol.

Owns the wire schema (``pb``, generated from ``pulsar.proto``), framing, checksums,
batches, compression and key hashing. No sockets, no asyncio: bytes in, commands out.
"""

from magnetar.protocol import pulsar_pb2 as pb
from magnetar.protocol.batch import BatchSplit, decode_batch, encode_batch, split_batch
from magnetar.protocol.commands import command, command_body, message_id
from magnetar.protocol.compression import compress, decompress
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
from magnetar.protocol.hashing import boost_hash, java_string_hash, murmur3_32, sticky_key_hash
from magnetar.protocol.version import PROTOCOL_VERSION

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "PROTOCOL_VERSION",
    "BatchSplit",
    "ChecksumMismatch",
    "CompressionError",
    "Frame",
    "FrameDecoder",
    "FrameTooLarge",
    "MalformedFrame",
    "ProtocolError",
    "boost_hash",
    "build_payload_part",
    "command",
    "command_body",
    "compress",
    "decode_batch",
    "decompress",
    "encode_batch",
    "encode_command",
    "encode_payload_command",
    "java_string_hash",
    "message_id",
    "murmur3_32",
    "parse_payload_part",
    "pb",
    "peek_metadata",
    "split_batch",
    "sticky_key_hash",
    "verify_checksum",
]
