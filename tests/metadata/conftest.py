"""Fixtures of the metadata-store tests: a store per backend (SQLite, and ZooKeeper on the
suite's ``zookeeper`` fixture, tests/conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from magnetar.metadata import MetadataStore, create_metadata_store
from tests.zkserver import ZooKeeperServer

BACKENDS = ["sqlite", "zk"]


_counter = iter(range(1, 1_000_000))


class Backend:
    """Makes stores of one backend that share state (one file, or one ZooKeeper chroot)."""

    def __init__(self, kind: str, root: Path, zk: ZooKeeperServer | None) -> None:
        self.kind = kind
        self.url = (f"sqlite:{root / 'metadata.db'}" if zk is None
                    else zk.url(f"/t{next(_counter)}"))
        self.stores: list[MetadataStore] = []

    async def store(self, **options: object) -> MetadataStore:
        store = await create_metadata_store(self.url, **options)
        self.stores.append(store)
        return store

    async def close(self) -> None:
        for store in self.stores:
            await store.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    zk = request.getfixturevalue("zookeeper") if request.param == "zk" else None
    return Backend(request.param, tmp_path, zk)


def run(backend: Backend, scenario: Callable[[Backend], Awaitable[None]],
        timeout: float = 60.0) -> None:
    """Run ``scenario(backend)`` on a fresh event loop, closing its stores after."""
    async def main() -> None:
        try:
            await asyncio.wait_for(scenario(backend), timeout)
        finally:
            await backend.close()

    asyncio.run(main())
