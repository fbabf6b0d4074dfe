"""Durable managed-ledger storage: segment files, entry index, cursors, metadata.

Knows nothing of the wire: entries are opaque bytes. See docs/internals.md.
"""

from .config import FSYNC_POLICIES, StorageConfig
from .cursor import ManagedCursor
from .errors import (
    CorruptEntryError,
    EntryNotFoundError,
    LedgerClosedError,
    LedgerTerminatedError,
    NoSpaceError,
    SegmentFileMissingError,
    StorageError,
)
from .factory import ManagedLedgerFactory
from .ledger import ManagedLedger, PositionsRead
from .metadata import MemoryMetadataStore, MetadataStore, SqliteMetadataStore
from .position import EARLIEST, Position

__all__ = [
    "EARLIEST",
    "FSYNC_POLICIES",
    "CorruptEntryError",
    "EntryNotFoundError",
    "LedgerClosedError",
    "LedgerTerminatedError",
    "ManagedCursor",
    "ManagedLedger",
    "ManagedLedgerFactory",
    "MemoryMetadataStore",
    "MetadataStore",
    "NoSpaceError",
    "Position",
    "PositionsRead",
    "SegmentFileMissingError",
    "SqliteMetadataStore",
    "StorageConfig",
    "StorageError",
]
