"""Exceptions raised by the storage layer; `StorageError` is the base of all of them."""

import errno

from .position import Position


class StorageError(Exception):
    """An append, read or metadata operation could not be completed."""


class LedgerClosedError(StorageError):
    """The managed ledger (or its factory) is closed or deleted."""


class LedgerTerminatedError(StorageError):
    """The managed ledger was terminated: it accepts no more appends."""


class EntryNotFoundError(StorageError):
    """No confirmed entry exists at the requested position."""


class SegmentFileMissingError(StorageError, FileNotFoundError):
    """The file of a segment that is still its ledger's is not there (a data directory
    whose mount is missing, a file removed by hand): an I/O error (an ``OSError``, ENOENT)
    that readers try again, as the storage error it also is. Never "no entries": that
    would end a replay or a read early without a word. ``segment``: (the segment's id,
    its last confirmed entry id) when known, what a reader that skips non-recoverable
    data passes over (``autoSkipNonRecoverableData``)."""

    segment: tuple[int, int] | None = None

    def rest_from(self, start: Position) -> tuple[Position, Position] | None:
        """The first and last position of what is left of the missing segment for a read
        from ``start`` (in the segment, or just past the one before it, which stands for
        this one's first entry); None when that is nothing or not known."""
        if self.segment is None:
            return None
        segment, last = self.segment
        first = Position(*start) if start[0] == segment else Position(segment, 0)
        if start[0] > segment or last < first[1]:
            return None
        return first, Position(segment, last)


class CorruptEntryError(StorageError):
    """An entry read from disk failed its checksum (``position``: which one, when known)."""

    def __init__(self, message: str, position: tuple[int, int] | None = None) -> None:
        super().__init__(message)
        self.position = position


class NoSpaceError(StorageError):
    """An append failed because the file system had no space left (ENOSPC, EDQUOT)."""


#: ``OSError.errno`` values that mean "no space left" (a full disk, a full quota).
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_no_space(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it came from) is a file system out of space."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, NoSpaceError) or (isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def append_error(message: str, exc: BaseException) -> StorageError:
    """The `StorageError` for an append that failed with ``exc``: a `NoSpaceError` when the
    file system was out of space (the broker then turns read-only, `disk_usage`)."""
    return NoSpaceError(message) if is_no_space(exc) else StorageError(message)
