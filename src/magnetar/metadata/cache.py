"""`MetadataCache`: typed values of a `MetadataStore`, read once and kept until a notification
(or the store's own write, or a reconnection) says they changed.

A warm ``get`` costs no round trip: hot paths (producer and consumer attach, lookup) read
policies, permissions and partition counts through a cache. Values are decoded once per
load (JSON by default) and shared: treat them as read-only. Concurrent misses of one path
share one load; a load overtaken by an invalidation is returned but not kept.

``get_if_cached`` answers synchronously from memory (`MISSING` when the path was never
loaded or was invalidated); ``children`` caches child lists the same way;
``read_modify_update`` is the compare-and-set loop (re-read, apply, put at the read
version, retry on `BadVersionError`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

from .api import MetadataStore, Notification, NotificationType, Stat
from .errors import BadVersionError
from .paths import check_path, parent

T = TypeVar("T")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: what ``get_if_cached`` answers when the cache does not know
MISSING: Any = _Missing()


def json_encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def json_decode(raw: bytes) -> Any:
    return json.loads(raw) if raw else None


class MetadataCache(Generic[T]):
    """Cached, decoded values of one store (all paths; one instance per value type)."""

    def __init__(self, store: MetadataStore,
                 decode: Callable[[bytes], T] = json_decode,
                 encode: Callable[[T], bytes] = json_encode) -> None:
        self.store = store
        self.decode = decode
        self.encode = encode
        self._values: dict[str, tuple[T, Stat] | None] = {}
        self._children: dict[str, list[str]] = {}
        self._loading: dict[str, asyncio.Future[tuple[T, Stat] | None]] = {}
        self._generation: dict[str, int] = {}
        self.hits = 0
        self.misses = 0
        store.attach_cache(cast("MetadataCache[object]", self))

    # -- reads ----------------------------------------------------------------------------
    async def get(self, path: str) -> T | None:
        """The decoded value at ``path`` or None."""
        got = await self.get_with_stat(path)
        return None if got is None else got[0]

    def get_if_cached(self, path: str) -> T | None:
        """The cached value (None: known missing) or `MISSING`, without a round trip."""
        if path not in self._values:
            return cast(T, MISSING)
        got = self._values[path]
        return None if got is None else got[0]

    async def get_with_stat(self, path: str) -> tuple[T, Stat] | None:
        if path in self._values:
            self.hits += 1
            return self._values[path]
        loading = self._loading.get(path)
        if loading is not None:
            self.hits += 1
            return await asyncio.shield(loading)
        self.misses += 1
        check_path(path)
        fut: asyncio.Future[tuple[T, Stat] | None] = asyncio.get_running_loop().create_future()
        self._loading[path] = fut
        generation = self._generation.get(path, 0)
        try:
            raw = await self.store.get(path)
            result = None if raw is None else (self.decode(raw[0]), raw[1])
        except BaseException as exc:
            self._loading.pop(path, None)
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # retrieved: waiters re-raise it themselves
            raise
        self._loading.pop(path, None)
        if self._generation.get(path, 0) == generation:
            self._values[path] = result
        fut.set_result(result)
        return result

    async def children(self, path: str) -> list[str]:
        """``path``'s child names (cached until a child is created or deleted)."""
        cached = self._children.get(path)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        generation = self._generation.get(path, 0)
        names = await self.store.get_children(path)
        if self._generation.get(path, 0) == generation:
            self._children[path] = names
        return names

    # -- writes ---------------------------------------------------------------------------
    async def create(self, path: str, value: T) -> Stat:
        """Write ``value`` only if ``path`` does not exist (`BadVersionError` if it does)."""
        return await self.put(path, value, -1)

    async def put(self, path: str, value: T, expected_version: int | None = None,
                  *, ephemeral: bool = False) -> Stat:
        return await self.store.put(path, self.encode(value), expected_version,
                                    ephemeral=ephemeral)

    async def read_modify_update(self, path: str, modify: Callable[[T | None], T],
                                 *, attempts: int = 20) -> T:
        """Apply ``modify`` to the current value (None if missing) and store the result,
        atomically: on a concurrent change, re-read and apply again."""
        for _ in range(attempts):
            self.invalidate(path)
            current = await self.get_with_stat(path)
            new = modify(None if current is None else current[0])
            try:
                await self.put(path, new, -1 if current is None else current[1].version)
            except BadVersionError:
                continue
            return new
        raise BadVersionError(path, -2)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        await self.store.delete(path, expected_version)

    # -- invalidation ---------------------------------------------------------------------
    def invalidate(self, path: str) -> None:
        """Forget ``path``'s value and child list, and the child list of its parent."""
        self._generation[path] = self._generation.get(path, 0) + 1
        self._values.pop(path, None)
        self._children.pop(path, None)
        up = parent(path)
        if up is not None:
            self._invalidate_children(up)

    def _invalidate_children(self, path: str) -> None:
        self._generation[path] = self._generation.get(path, 0) + 1
        self._children.pop(path, None)

    def invalidate_all(self) -> None:
        for path in list(self._values) + list(self._children) + list(self._loading):
            self._generation[path] = self._generation.get(path, 0) + 1
        self._values.clear()
        self._children.clear()

    def on_notification(self, notification: Notification) -> None:
        if notification.type is NotificationType.CHILDREN_CHANGED:
            self._invalidate_children(notification.path)
        else:
            self.invalidate(notification.path)
