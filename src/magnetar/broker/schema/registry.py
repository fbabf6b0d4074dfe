"""Schema registry: versioned schemas per topic, kept in a JSON key-value store.

Theory of operation
-------------------
Each topic (by its schema id; see ``TopicName.schema_name``: ``tenant/ns/topic`` of the
partitioned base, so all partitions share one history) has a list of schema versions
numbered from 0, as in Pulsar. A version is stored under
``schemas/{topic_base}/{version:010d}`` as JSON: ``name``, ``type`` (the value of
Pulsar's ``Schema.Type`` enum), ``data`` (base64), ``properties``, ``version``.

A producer's schema goes through :meth:`SchemaRegistry.get_or_create`: if a stored
version has the same type, data and properties, its number is returned (no check, as in
Pulsar's ``putSchemaIfAbsent``); otherwise the new schema must pass the topic's
compatibility strategy against the stored versions (:func:`schema_compat.check_new_version`)
and is stored as the next version. (Pulsar's own lookup compares type and data only;
properties count here as well, so a schema whose properties changed gets a new version.)
A consumer's schema on a topic that has one goes through :meth:`SchemaRegistry.check_consumer`
(:func:`schema_compat.check_consumer`) and is never stored. Both take the strategy as an
argument (the broker looks it up per namespace), defaulting to the registry's ``strategy``.
An incompatible schema raises :class:`IncompatibleSchemaError`, which the broker reports
as ``ServerError.IncompatibleSchema``.

``allow_auto_update=False`` (the broker's ``isAllowAutoUpdateSchemaEnabled=false``) stores
nothing new: as in Pulsar's ``AbstractTopic.addSchema``, a schema that is not already
stored for the topic is refused with :class:`IncompatibleSchemaError`, whether or not the
topic has a schema yet (schemas then come from the admin API).

On the wire a schema version is 8 bytes, a big-endian signed long (Pulsar's
``LongSchemaVersion``): see :func:`encode_version` / :func:`decode_version`.

The store is any object with ``get(key)``, ``put(key, value)``, ``list(prefix) ->
dict[key, value]`` and ``delete(key)`` (the storage MetadataStore fits). This class caches what it has read;
in cluster mode the store's ``watch`` tells it of versions stored through other brokers.

The broker uses the ``*_async`` methods, which make their store calls through the ``read``
and ``write`` runners it passes in (`ManagedLedgerFactory.read_metadata` /
`write_metadata`: off the event loop); a topic's async operations run one at a time, so a
version is numbered, stored and cached before the next operation on that topic looks. The
synchronous methods call the store directly (tools, tests; and, once `load_async` has
filled the cache, reads and the lookup of an already stored version, which do no I/O).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from magnetar.broker.schema.compat import (
    DEFAULT_STRATEGY,
    IncompatibleSchemaError,
    check_consumer,
    check_new_version,
    validate_strategy,
)

__all__ = [
    "IncompatibleSchemaError",
    "SchemaRecord",
    "SchemaRegistry",
    "SchemaStore",
    "decode_version",
    "encode_version",
]

KEY_ROOT = "schemas"
_VERSION = struct.Struct(">q")

#: runs ``fn(*args)`` (store calls) somewhere and returns its result: see the docstring
Runner = Callable[..., Awaitable[Any]]


async def _inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


class SchemaStore(Protocol):
    def get(self, key: str) -> Any | None: ...

    def put(self, key: str, value: Any) -> None: ...

    def list(self, prefix: str) -> dict[str, Any]: ...

    # whatever it returns (the metadata store's: whether the key existed) goes unused
    def delete(self, key: str) -> object: ...


def encode_version(version: int) -> bytes:
    """Schema version as carried in ``schema_version`` fields (8 bytes, big-endian)."""
    return _VERSION.pack(version)


def decode_version(raw: bytes | None) -> int | None:
    """Inverse of :func:`encode_version`; empty or absent means "latest" (``None``)."""
    if not raw:
        return None
    if len(raw) != _VERSION.size:
        raise ValueError(f"schema version must be 8 bytes, got {len(raw)}")
    return int(_VERSION.unpack(raw)[0])


@dataclass
class SchemaRecord:
    """One schema. ``version`` is ``None`` until the registry assigns it."""

    name: str
    type: int
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    version: int | None = None

    def same_schema(self, other: SchemaRecord) -> bool:
        """Equal type, data and properties (name and version do not count)."""
        return (
            self.type == other.type
            and bytes(self.data) == bytes(other.data)
            and dict(self.properties) == dict(other.properties)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": int(self.type),
            "data": base64.b64encode(bytes(self.data)).decode("ascii"),
            "properties": dict(self.properties),
            "version": self.version,
        }

    @staticmethod
    def from_json(obj: dict[str, Any]) -> SchemaRecord:
        return SchemaRecord(
            name=str(obj.get("name", "")),
            type=int(obj["type"]),
            data=base64.b64decode(obj.get("data", "")),
            properties={str(k): str(v) for k, v in (obj.get("properties") or {}).items()},
            version=None if obj.get("version") is None else int(obj["version"]),
        )


class SchemaRegistry:
    """Versioned schemas per topic over a :class:`SchemaStore`."""

    def __init__(
        self,
        store: SchemaStore,
        allow_auto_update: bool = True,
        strategy: str = DEFAULT_STRATEGY,
        read: Runner | None = None,
        write: Runner | None = None,
    ) -> None:
        self._store = store
        self.allow_auto_update = allow_auto_update
        self.strategy = validate_strategy(strategy)
        self._cache: dict[str, list[SchemaRecord]] = {}
        self._read = read or _inline
        self._write = write or _inline
        # per topic: [lock, users] serializing the async operations (see the docstring)
        self._locks: dict[str, list[Any]] = {}
        if hasattr(store, "watch"):  # cluster mode: versions stored through other brokers
            store.watch(f"{KEY_ROOT}/", self._changed)

    def _changed(self, key: str, value: Any) -> None:
        """Another broker stored or deleted a version: read this topic's list afresh."""
        self._cache.pop(key[len(KEY_ROOT) + 1:].rsplit("/", 1)[0], None)

    @staticmethod
    def key(topic_base: str, version: int) -> str:
        return f"{KEY_ROOT}/{topic_base}/{version:010d}"

    def versions(self, topic_base: str) -> list[int]:
        """Stored version numbers, ascending."""
        return [r.version for r in self._load(topic_base) if r.version is not None]

    def get(self, topic_base: str, version: int | None = None) -> SchemaRecord | None:
        """The given version, or the latest one when ``version`` is ``None``."""
        records = self._load(topic_base)
        if not records:
            return None
        if version is None:
            return replace(records[-1], properties=dict(records[-1].properties))
        for rec in records:
            if rec.version == version:
                return replace(rec, properties=dict(rec.properties))
        return None

    def get_or_create(self, topic_base: str, schema: SchemaRecord, strategy: str | None = None) -> int:
        """Version of an identical stored schema, else store ``schema`` as a new version if
        ``strategy`` allows it (unless auto-update is off: then :class:`IncompatibleSchemaError`)."""
        records = self._load(topic_base)
        version = _same_as(records, schema)
        if version is not None:
            return version
        stored = self._new_version(topic_base, records, schema, strategy, upload=False)
        self._store.put(self.key(topic_base, stored.version or 0), stored.to_json())
        records.append(stored)
        return stored.version or 0

    # -- off the event loop ------------------------------------------------------------

    def cached(self, topic_base: str) -> bool:
        """Whether the topic's versions are in memory (reads then do no I/O)."""
        return topic_base in self._cache

    def stored_version(self, topic_base: str, schema: SchemaRecord) -> int | None:
        """The version of an identical stored schema, from memory (None: not cached, or
        not stored)."""
        records = self._cache.get(topic_base)
        return None if records is None else _same_as(records, schema)

    async def load_async(self, topic_base: str) -> None:
        """Read the topic's versions into memory (through ``read``) unless they are there."""
        async with self._exclusive(topic_base):
            await self._records_async(topic_base)

    async def get_or_create_async(self, topic_base: str, schema: SchemaRecord,
                                  strategy: str | None = None, upload: bool = False) -> int:
        """`get_or_create`, the store calls made through the runners; the new version is
        stored before this returns. ``upload``: an explicit upload (admin API), allowed
        even with auto-update off."""
        async with self._exclusive(topic_base):
            records = await self._records_async(topic_base)
            version = _same_as(records, schema)
            if version is not None:
                return version
            stored = self._new_version(topic_base, records, schema, strategy, upload)
            await self._write(self._store.put, self.key(topic_base, stored.version or 0),
                              stored.to_json())
            records.append(stored)
            return stored.version or 0

    async def delete_async(self, topic_base: str) -> int:
        """`delete`, its store calls made through ``write`` (after any write before it)."""
        async with self._exclusive(topic_base):
            removed: int = await self._write(self._delete_stored, topic_base)
            self._cache.pop(topic_base, None)
            return removed

    @contextlib.asynccontextmanager
    async def _exclusive(self, topic_base: str) -> AsyncIterator[None]:
        entry = self._locks.get(topic_base)
        if entry is None:
            entry = self._locks[topic_base] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._locks[topic_base]

    async def _records_async(self, topic_base: str) -> list[SchemaRecord]:
        cached = self._cache.get(topic_base)
        if cached is None:
            cached = await self._read(self._read_records, topic_base)
            self._cache[topic_base] = cached
        return cached

    def _new_version(self, topic_base: str, records: list[SchemaRecord], schema: SchemaRecord,
                     strategy: str | None, upload: bool) -> SchemaRecord:
        """The record ``schema`` is stored as, once allowed and checked (raises
        :class:`IncompatibleSchemaError` otherwise)."""
        if not self.allow_auto_update and not upload:
            raise IncompatibleSchemaError(
                f"Schema not found and schema auto updating is disabled (topic {topic_base})"
            )
        try:
            check_new_version(records, schema, strategy or self.strategy)
        except IncompatibleSchemaError as exc:
            raise IncompatibleSchemaError(f"Incompatible schema for topic {topic_base}: {exc}") from None
        return SchemaRecord(
            name=schema.name,
            type=int(schema.type),
            data=bytes(schema.data),
            properties=dict(schema.properties),
            version=self._next_version(records),
        )

    def check_consumer(self, topic_base: str, schema: SchemaRecord, strategy: str | None = None) -> None:
        """Raise :class:`IncompatibleSchemaError` unless a consumer with ``schema`` may read
        the topic's stored versions under ``strategy`` (nothing is stored)."""
        try:
            check_consumer(self._load(topic_base), schema, strategy or self.strategy)
        except IncompatibleSchemaError as exc:
            raise IncompatibleSchemaError(
                f"Trying to subscribe to topic {topic_base} with an incompatible schema: {exc}"
            ) from None

    def delete(self, topic_base: str) -> int:
        """Remove every version of the topic's schema; returns how many were removed."""
        removed = self._delete_stored(topic_base)
        self._cache.pop(topic_base, None)
        return removed

    def _delete_stored(self, topic_base: str) -> int:
        keys = list(self._store.list(self._prefix(topic_base)))
        for key in keys:
            self._store.delete(key)
        return len(keys)

    @staticmethod
    def _next_version(records: list[SchemaRecord]) -> int:
        last = records[-1].version if records else None
        return 0 if last is None else last + 1

    def _prefix(self, topic_base: str) -> str:
        return f"{KEY_ROOT}/{topic_base}/"

    def _load(self, topic_base: str) -> list[SchemaRecord]:
        cached = self._cache.get(topic_base)
        if cached is None:
            cached = self._cache[topic_base] = self._read_records(topic_base)
        return cached

    def _read_records(self, topic_base: str) -> list[SchemaRecord]:
        """The stored versions, ascending (only store calls: safe in a worker thread)."""
        prefix = self._prefix(topic_base)
        records: list[SchemaRecord] = []
        for key, value in self._store.list(prefix).items():
            tail = key[len(prefix) :]
            if "/" in tail or not tail.isdigit() or not isinstance(value, dict):
                continue  # another topic's key under a longer name, or junk
            rec = SchemaRecord.from_json(value)
            rec.version = int(tail)
            records.append(rec)
        records.sort(key=lambda r: r.version or 0)
        return records


def _same_as(records: list[SchemaRecord], schema: SchemaRecord) -> int | None:
    """The version of the record identical to ``schema`` (None: there is none)."""
    for rec in records:
        if rec.same_schema(schema) and rec.version is not None:
            return rec.version
    return None
