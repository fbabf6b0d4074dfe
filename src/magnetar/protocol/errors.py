"""Exceptions raised by the codec.

``ProtocolError`` is the only exception type the codec lets escape on bad input; the
subclasses say what was wrong so callers can pick the right reaction (close the
connection, answer ``ChecksumError``, ...).
"""

from __future__ import annotations

__all__ = [
    "ChecksumMismatch",
    "CompressionError",
    "FrameTooLarge",
    "MalformedFrame",
    "ProtocolError",
]


class ProtocolError(Exception):
    """Input that does not follow the Pulsar binary protocol."""


class FrameTooLarge(ProtocolError):
    """A frame declares a size above the configured limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class MalformedFrame(ProtocolError):
    """A frame, command, metadata block or batch that cannot be parsed."""


class ChecksumMismatch(ProtocolError):
    """The CRC32C of a payload part does not match the one it carries."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(f"checksum mismatch: frame says {expected:#010x}, computed {actual:#010x}")
        self.expected = expected
        self.actual = actual


class CompressionError(ProtocolError):
    """A payload that does not decompress, or decompresses to the wrong size."""
