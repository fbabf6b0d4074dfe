"""Helpers shared by the storage tests (imported as a plain module)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import crc32c


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def append_all(ledger: Any, payloads: list[bytes]) -> list[Any]:
    return list(await asyncio.gather(*(ledger.append(p) for p in payloads)))


def make_part(body: bytes) -> tuple[bytes, int]:
    """A payload part as a producer sends it (magic 0x0e01, big-endian CRC32C of what
    follows, then ``body``) and that CRC: what a part record stores."""
    crc = crc32c.crc32c(body)
    return b"\x0e\x01" + crc.to_bytes(4, "big") + body, crc


async def append_parts(ledger: Any, parts: list[tuple[bytes, int]]) -> list[Any]:
    """Append payload parts as the broker does: with their checked CRC."""
    return list(await asyncio.gather(*(ledger.append(p, crc) for p, crc in parts)))


class IdCounter:
    """The cluster's ledger id counter (the metadata store's, in memory): blocks of ids,
    each above the last and above ``floor`` (thread-safe)."""

    def __init__(self) -> None:
        self.next = 0
        self.lock = threading.Lock()

    def reserve(self, count: int, floor: int) -> int:
        with self.lock:
            start = max(self.next, floor)
            self.next = start + count
            return start
