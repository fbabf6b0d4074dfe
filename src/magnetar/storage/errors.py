"""Exceptions raised by the storage layer; `StorageError` is the base of all of them."""


class StorageError(Exception):
    """An append, read or metadata operation could not be completed."""


class LedgerClosedError(StorageError):
    """The managed ledger (or its factory) is closed or deleted."""


class LedgerTerminatedError(StorageError):
    """The managed ledger was terminated: it accepts no more appends."""


class EntryNotFoundError(StorageError):
    """No confirmed entry exists at the requested position."""


class CorruptEntryError(StorageError):
    """An entry read from disk failed its checksum (``position``: which one, when known)."""

    def __init__(self, message: str, position: tuple[int, int] | None = None) -> None:
        super().__init__(message)
        self.position = position
