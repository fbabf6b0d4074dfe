"""One contract, two backends: every test runs on SQLite and on a real ZooKeeper."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.metadata import (
    MISSING,
    BadVersionError,
    InvalidPathError,
    MetadataCache,
    MetadataStore,
    NotEmptyError,
    NotFoundError,
    Notification,
    NotificationType,
    StoreClosedError,
)

from .conftest import Backend, run

N = NotificationType


class Recorder:
    """Collects a store's notifications; ``wait_for`` is a bounded wait on an event."""

    def __init__(self, store: MetadataStore) -> None:
        self.seen: list[Notification] = []
        self.changed = asyncio.Event()
        store.register_listener(self.on)

    def on(self, note: Notification) -> None:
        self.seen.append(note)
        self.changed.set()

    async def wait_for(self, kind: NotificationType, path: str, timeout: float = 10.0) -> None:
        async def until() -> None:
            while Notification(kind, path) not in self.seen:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(until(), timeout)


def test_get_put_versions(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        s = await b.store()
        assert await s.get("/a/b") is None
        stat = await s.put("/a/b", b"one")
        assert stat.version == 0 and stat.path == "/a/b" and not stat.ephemeral
        value, got = await s.get("/a/b")  # type: ignore[misc]
        assert value == b"one" and got.version == 0
        stat2 = await s.put("/a/b", b"two")
        assert stat2.version == 1
        assert stat2.creation_timestamp == stat.creation_timestamp
        assert stat2.modification_timestamp >= stat.modification_timestamp
        assert (await s.get("/a/b"))[0] == b"two"  # type: ignore[index]
        assert await s.exists("/a") and await s.exists("/a/b") and not await s.exists("/c")
        assert await s.get("/a") is not None  # parents are created, empty

    run(backend, scenario)


def test_compare_and_set(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        s = await b.store()
        stat = await s.put("/cas", b"v0", -1)  # must not exist: created
        with pytest.raises(BadVersionError, match="must not exist"):
            await s.put("/cas", b"again", -1)
        with pytest.raises(BadVersionError, match="version 5"):
            await s.put("/cas", b"x", 5)
        with pytest.raises(BadVersionError):
            await s.put("/missing", b"x", 0)
        assert await s.get("/missing") is None
        stat = await s.put("/cas", b"v1", stat.version)
        with pytest.raises(BadVersionError):
            await s.put("/cas", b"stale", stat.version - 1)
        assert (await s.get("/cas"))[0] == b"v1"  # type: ignore[index]

    run(backend, scenario)


def test_concurrent_cas_one_winner(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        s1, s2 = await b.store(), await b.store()
        results = await asyncio.gather(
            *(st.put("/leader", name.encode(), -1) for st, name in
              [(s1, "a"), (s2, "b"), (s1, "c"), (s2, "d")]),
            return_exceptions=True)
        assert sum(not isinstance(r, Exception) for r in results) == 1
        assert sum(isinstance(r, BadVersionError) for r in results) == 3

    run(backend, scenario)


def test_delete(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        s = await b.store()
        with pytest.raises(NotFoundError):
            await s.delete("/nothing")
        stat = await s.put("/d/x", b"1")
        with pytest.raises(NotEmptyError):
            await s.delete("/d")
        with pytest.raises(BadVersionError):
            await s.delete("/d/x", stat.version + 1)
        await s.delete("/d/x", stat.version)
        assert await s.get("/d/x") is None
        await s.put("/r/a/b", b"")
        await s.put("/r/c", b"")
        await s.delete_recursive("/r")
        assert not await s.exists("/r")

    run(backend, scenario)


def test_children(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        s = await b.store()
        assert await s.get_children("/admin/policies") == []
        for name in ["public", "acme", "zeta"]:
            await s.put(f"/admin/policies/{name}", b"{}")
        await s.put("/admin/policies/acme/orders", b"{}")
        assert await s.get_children("/admin/policies") == ["acme", "public", "zeta"]
        assert await s.get_children("/admin/policies/acme") == ["orders"]
        assert "admin" in await s.get_children("/")

    run(backend, scenario)


def test_bad_paths(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        s = await b.store()
        for bad in ["relative", "/trailing/", "/a//b", "", "/a/../b"]:
            with pytest.raises(InvalidPathError):
                await s.get(bad)
            with pytest.raises(InvalidPathError):
                await s.put(bad, b"x")

    run(backend, scenario)


def test_ephemeral_keys_end_with_their_session(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        owner, other = await b.store(), await b.store()
        stat = await owner.put("/brokers/b1", b"up", ephemeral=True)
        assert stat.ephemeral and stat.created_by_self
        _, seen = await other.get("/brokers/b1")  # type: ignore[misc]
        assert seen.ephemeral and not seen.created_by_self
        await owner.put("/brokers/persistent", b"stays")
        rec = Recorder(other)
        await owner.close()
        await rec.wait_for(N.DELETED, "/brokers/b1")
        assert await other.get("/brokers/b1") is None
        assert await other.get("/brokers/persistent") is not None
        with pytest.raises(StoreClosedError):
            await owner.get("/brokers/persistent")

    run(backend, scenario)


def test_notifications_from_another_store(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        writer, watcher = await b.store(), await b.store()
        rec = Recorder(watcher)
        # the contract: a key this store has read is notified when it changes
        assert await watcher.get("/n/k") is None
        assert await watcher.get_children("/n") == []
        await writer.put("/n/k", b"1")
        await rec.wait_for(N.CREATED, "/n/k")
        await rec.wait_for(N.CREATED, "/n")  # listed while missing: its creation is told
        assert (await watcher.get("/n/k"))[0] == b"1"  # type: ignore[index]
        await writer.put("/n/k", b"2")
        await rec.wait_for(N.MODIFIED, "/n/k")
        assert await watcher.get_children("/n") == ["k"]
        await writer.put("/n/j", b"")
        await rec.wait_for(N.CHILDREN_CHANGED, "/n")
        assert (await watcher.get("/n/k"))[0] == b"2"  # type: ignore[index]  # read again
        await writer.delete("/n/k")
        await rec.wait_for(N.DELETED, "/n/k")

    run(backend, scenario)


def test_cache_serves_warm_reads_and_follows_changes(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        writer, reader = await b.store(), await b.store()
        cache: MetadataCache[dict[str, int]] = MetadataCache(reader)
        rec = Recorder(reader)
        assert cache.get_if_cached("/p/x") is MISSING
        assert await cache.get("/p/x") is None
        assert cache.get_if_cached("/p/x") is None  # known missing, no round trip
        await writer.put("/p/x", b'{"retention": 1}')
        await rec.wait_for(N.CREATED, "/p/x")
        assert cache.get_if_cached("/p/x") is MISSING  # invalidated by the notification
        assert await cache.get("/p/x") == {"retention": 1}
        misses = cache.misses
        for _ in range(100):
            assert await cache.get("/p/x") == {"retention": 1}
        assert cache.misses == misses  # warm: no store reads
        await writer.put("/p/x", b'{"retention": 2}')
        await rec.wait_for(N.MODIFIED, "/p/x")
        assert await cache.get("/p/x") == {"retention": 2}
        assert await cache.children("/p") == ["x"]
        await writer.put("/p/y", b"{}")
        await rec.wait_for(N.CHILDREN_CHANGED, "/p")
        assert await cache.children("/p") == ["x", "y"]
        await writer.delete("/p/x")
        await rec.wait_for(N.DELETED, "/p/x")
        assert await cache.get("/p/x") is None

    run(backend, scenario)


def test_cache_own_writes_are_read_back_at_once(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        s = await b.store()
        cache: MetadataCache[dict[str, int]] = MetadataCache(s)
        assert await cache.get("/own") is None
        await cache.create("/own", {"v": 1})
        assert await cache.get("/own") == {"v": 1}
        await s.put("/own", b'{"v": 2}')
        assert await cache.get("/own") == {"v": 2}
        await s.delete("/own")
        assert await cache.get("/own") is None

    run(backend, scenario)


def test_read_modify_update_races(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        s1, s2 = await b.store(), await b.store()
        c1: MetadataCache[dict[str, int]] = MetadataCache(s1)
        c2: MetadataCache[dict[str, int]] = MetadataCache(s2)

        def bump(value: dict[str, int] | None) -> dict[str, int]:
            return {"n": (value or {"n": 0})["n"] + 1}

        await asyncio.gather(*(c.read_modify_update("/counter", bump)
                               for c in [c1, c2] * 10))
        assert await c1.get("/counter") == {"n": 20}

    run(backend, scenario)
