"""`IdBlocks`: ids unique across a cluster, handed out in blocks from one counter key.

Theory of operation
-------------------
The key holds the next id nobody has taken yet (a JSON integer). Reserving a block of
``count`` ids reads it (value and version), writes ``start + count`` back at that version
(compare-and-set: `BadVersionError` when another store wrote it meanwhile, and then the
read is retried) and returns ``start``, where ``start`` is the stored value, lifted to
``floor`` when that is higher (ids already in use that the counter never handed out, such
as ledgers on disk from before the counter existed). So:

- two stores (brokers) reserving at the same time get disjoint blocks: one of the two
  writes fails its version check and reads again;
- the counter only grows, so a store started later (a restarted broker) gets ids above
  every block handed out before, whatever it used of them;
- a block whose holder died before using all of it is never handed out again: its
  unused ids are skipped, not reused.

One read and one write per block, not per id: the caller sizes blocks so that this is
rare. (BookKeeper takes its ledger ids from ZooKeeper too, one sequential node per id.)
A value that is not a non-negative integer is an error, never a reason to start over at
0, which would hand out ids again.

`reserve` runs on the store's event loop; `reserve_blocking` is the same call made from
another thread (a storage thread), which waits for the loop to run it.
"""

from __future__ import annotations

import asyncio

from .api import MetadataStore
from .cache import json_decode, json_encode
from .errors import BadVersionError, MetadataStoreError

#: Compare-and-set attempts before `reserve` gives up (each lost one means another store
#: took a block meanwhile, so this many means the counter is being hammered).
_ATTEMPTS = 100


class IdBlocks:
    """Blocks of ids from the counter at ``path`` of ``store`` (see the module docstring)."""

    def __init__(self, store: MetadataStore, path: str, *, timeout_s: float = 60.0) -> None:
        self.store = store
        self.path = path
        self.timeout_s = timeout_s

    async def reserve(self, count: int, floor: int = 0) -> int:
        """Take ``count`` ids, none below ``floor``, never taken before; returns the first
        (the block is ``[start, start + count)``)."""
        if count < 1:
            raise ValueError(f"a block holds at least one id, not {count}")
        for _ in range(_ATTEMPTS):
            got = await self.store.get(self.path)
            stored = 0
            if got is not None:
                value = json_decode(got[0])
                if type(value) is not int or value < 0:
                    raise MetadataStoreError(
                        f"id counter {self.path} holds {got[0][:40]!r}, not a count: refusing"
                        " to hand out ids that may have been handed out already")
                stored = value
            start = max(stored, floor)
            try:
                await self.store.put(self.path, json_encode(start + count),
                                     -1 if got is None else got[1].version)
            except BadVersionError:
                continue  # another store took a block meanwhile: read again
            return start
        raise MetadataStoreError(f"id counter {self.path}: {_ATTEMPTS} compare-and-set "
                                 "attempts lost to other writers")

    def reserve_blocking(self, count: int, floor: int = 0) -> int:
        """`reserve` from a thread other than the store's event loop (which runs it);
        `MetadataStoreError` when it does not answer within ``timeout_s``."""
        loop = self.store.loop
        if loop is None or loop.is_closed():
            raise MetadataStoreError(f"metadata store {self.store.url} is not running")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("reserve_blocking called on the store's own event loop "
                               "(it would wait for itself): await reserve() there")
        future = asyncio.run_coroutine_threadsafe(self.reserve(count, floor), loop)
        try:
            return future.result(self.timeout_s)
        except TimeoutError:
            future.cancel()
            raise MetadataStoreError(f"id counter {self.path}: no answer from "
                                     f"{self.store.url} in {self.timeout_s:g} s") from None
