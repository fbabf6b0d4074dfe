"""Writes of the broker's own metadata keys (policies, tenants, namespaces, permissions)
whose in-memory state changes at once.

Those components keep their keys in memory (read once at start), so their reads never touch
the store; a change updates memory on the event loop, then `KeyWriter` hands the store
write to the storage's metadata writer thread (`ManagedLedgerFactory.write_metadata`): one
thread, so writes of a key land in the order they were made, and the factory's close lets
them finish before the store closes. The admin handlers await the returned future (see
`written`), so an answer means the change is stored. Without a writer or a running event
loop (unit tests, start-up), the write happens at once and nothing is returned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

#: ``ManagedLedgerFactory.write_metadata``: ``fn(*args)`` on the metadata writer thread.
Write = Callable[..., "asyncio.Future[Any]"]


class KeyWriter:
    """Puts and deletes of metadata store keys, in order, off the loop when one runs."""

    def __init__(self, metadata: Any, write: Write | None = None) -> None:
        self.metadata = metadata
        self.write = write

    def _off_loop(self) -> bool:
        if self.write is None:
            return False
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    def put(self, key: str, value: Any) -> asyncio.Future[Any] | None:
        """Store ``value`` under ``key`` (the future resolves once it is stored)."""
        if self.write is not None and self._off_loop():
            return self._handed_off(key, self.metadata.put, key, value)
        self.metadata.put(key, value)
        return None

    def delete(self, key: str) -> asyncio.Future[Any] | None:
        """Delete ``key`` (the future resolves once it is deleted)."""
        if self.write is not None and self._off_loop():
            return self._handed_off(key, self.metadata.delete, key)
        self.metadata.delete(key)
        return None

    def _handed_off(self, key: str, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """``fn(*args)`` on the writer thread, the store holding ``key`` meanwhile: the
        memory already shows the change, and another broker's older value arriving before
        the thread reaches the store must not replace it there."""
        assert self.write is not None
        self.metadata.hold(key)
        try:
            future = self.write(fn, *args)
        except BaseException:
            self.metadata.release(key)
            raise
        future.add_done_callback(lambda _done: self.metadata.release(key))
        return future


async def written(*futures: asyncio.Future[Any] | None) -> None:
    """Wait for the writes `KeyWriter` returned (None: written already)."""
    for future in futures:
        if future is not None:
            await future
