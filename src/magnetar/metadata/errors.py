"""Exceptions of the metadata layer; `MetadataStoreError` is the base of all of them."""

from __future__ import annotations


class MetadataStoreError(Exception):
    """A metadata store operation could not be completed."""


class BadVersionError(MetadataStoreError):
    """A compare-and-set lost: the key's version is not the expected one (with expected
    version -1: the key already exists; with a version >= 0: it changed or is gone)."""

    def __init__(self, path: str, expected: int) -> None:
        what = "must not exist but does" if expected == -1 else f"is not at version {expected}"
        super().__init__(f"{path} {what}")
        self.path = path
        self.expected = expected


class NotFoundError(MetadataStoreError):
    """The key does not exist (delete of a missing key)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path} does not exist")
        self.path = path


class NotEmptyError(MetadataStoreError):
    """A key with children cannot be deleted (use ``delete_recursive``)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path} has children")
        self.path = path


class InvalidPathError(MetadataStoreError, ValueError):
    """A path that is not absolute, ends in ``/`` or has an empty segment."""


class InvalidUrlError(MetadataStoreError, ValueError):
    """A malformed ``metadataStoreUrl``."""


class StoreUnavailableError(MetadataStoreError):
    """The store could not be reached (ZooKeeper down past the retries, session lost)."""


class StoreClosedError(MetadataStoreError):
    """The store was closed (or shut itself down after its session expired)."""
