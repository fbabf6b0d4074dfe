"""Helpers shared by the storage tests (imported as a plain module)."""

from __future__ import annotations

import asyncio
from typing import Any


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def append_all(ledger: Any, payloads: list[bytes]) -> list[Any]:
    return list(await asyncio.gather(*(ledger.append(p) for p in payloads)))
