"""The broker's key/JSON stores under their storage-layer names (they live in
`magnetar.metadata.kv`); here they raise `StorageError` as they always have."""

from __future__ import annotations

from magnetar.metadata.kv import KeyValueStore, MemoryKeyValueStore, SqliteKeyValueStore

from .errors import StorageError

MetadataStore = KeyValueStore


class SqliteMetadataStore(SqliteKeyValueStore):
    """`SqliteKeyValueStore` raising `StorageError`."""

    error_type = StorageError


class MemoryMetadataStore(MemoryKeyValueStore):
    """`MemoryKeyValueStore` raising `StorageError`."""

    error_type = StorageError


__all__ = ["MemoryMetadataStore", "MetadataStore", "SqliteMetadataStore"]
