"""`ClusterKeyValueStore`: the broker's flat key store in cluster mode. Cluster-wide keys
(tenants, namespaces, their policies and permissions, partitioned topics, schemas; see
`key_paths`) live in the cluster's metadata store at Pulsar's paths; every other key
goes to the broker's own store (``metadata.db`` in its data directory), as in standalone.

Theory of operation
-------------------
The broker's components read their keys synchronously, on the event loop and on storage
threads, so this store keeps a mirror of every cluster-wide key in memory: `start` loads it
(one `TreeMirror` per Pulsar subtree) and notifications keep it current from then on, with
no polling. A read is a dict lookup.

A change made here updates the mirror at once and is written to the metadata store by one
writer task, in order. A schema version is created, never overwritten (compare-and-set on
"must not exist"). A namespace's three flat keys share one Policies node: each write
is a read-modify-write of the node's own part with compare-and-set, retried when another
broker changed the node meanwhile. Called from a storage thread (`KeyWriter`'s off-loop
writes), ``put``/``delete`` return once the metadata store has the change, and raise
`StoreUnavailableError` with the store's reason, at once or as soon as it becomes
unavailable, while ZooKeeper is not connected; called on the loop (start-up) they return
at once and the writer catches up.

A change made elsewhere (another broker) reaches the mirror through a notification, and
the components that keep their own copies in memory hear of it through `watch`:
``watch(prefix, callback)`` calls ``callback(key, value)`` (None: deleted) on the loop for
each changed key under ``prefix``. While a key has writes of this broker pending, remote
values for it are not applied (the pending write would overwrite them; its own
notification brings the mirror back in step). That holds from the moment a component
changes its memory: a write handed to a storage thread is announced on the loop at once
(``hold``), before the thread reaches this store, so another broker's older value
arriving in between cannot overwrite the component's new one (it did: a namespace's
replication clusters, set through the admin API, reverted to the value its creation
stored, for good, when the creation's notification came in that gap).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from magnetar.broker.cluster.key_paths import (
    BOOTSTRAPPED,
    CLUSTERS_ROOT,
    NAMESPACE_PARTS,
    PARTITIONED_ROOT,
    POLICIES_ROOT,
    SCHEMAS_ROOT,
    TOPIC_POLICIES_ROOT,
    cluster_data,
    decode,
    encode,
    flat_keys,
    is_cluster_key,
    namespace_parts,
    new_namespace_node,
    node_path,
    with_part,
)
from magnetar.metadata import (
    BadVersionError,
    KeyValueStore,
    MetadataStore,
    MetadataStoreError,
    NotEmptyError,
    NotFoundError,
    StoreUnavailableError,
)
from magnetar.metadata.tree import TreeMirror

log = logging.getLogger(__name__)

#: how often a write waited for off the loop checks whether the store became unavailable
_WAIT_SLICE_S = 0.25

Watcher = Callable[[str, Any], None]

#: (subtree root, depth, which store: "config" or "local")
_TREES = ((POLICIES_ROOT, 2, "config"), (PARTITIONED_ROOT, 4, "config"),
          (CLUSTERS_ROOT, 1, "config"), (SCHEMAS_ROOT, 4, "local"),
          (TOPIC_POLICIES_ROOT, 4, "config"))


class ClusterKeyValueStore(KeyValueStore):
    """Flat keys over a cluster's metadata store(s) and the broker's own store."""

    def __init__(self, local: KeyValueStore, store: MetadataStore,
                 config_store: MetadataStore | None = None, *, cluster: str,
                 cluster_info: dict[str, Any] | None = None,
                 write_timeout_s: float = 60.0) -> None:
        self.local = local
        self.store = store
        self.config_store = config_store or store
        self.cluster = cluster
        self.cluster_info = cluster_info or cluster_data()
        self.write_timeout_s = write_timeout_s
        self._mirror: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._watchers: list[tuple[str, Watcher]] = []
        self._pending: dict[str, int] = {}
        self._held: dict[str, int] = {}  # changes still on their way from a writer thread
        self._missed: set[str] = set()  # held keys whose remote values were passed over
        self._resyncs: set[asyncio.Task[None]] = set()
        self._trees: list[TreeMirror] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writes: asyncio.Queue[tuple[str, Any, bool, asyncio.Future[None]]] | None = None
        self._writer: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the mirror and follow the stores' changes (the stores are started)."""
        self._loop = asyncio.get_running_loop()
        self._writes = asyncio.Queue()
        for root, depth, which in _TREES:
            store = self.config_store if which == "config" else self.store
            tree = TreeMirror(store, root, depth, self._on_node)
            await tree.start()
            self._trees.append(tree)
        self._writer = self._loop.create_task(self._write_loop())

    async def settled(self) -> None:
        """Wait until every write made here is stored and every notification applied."""
        if self._writes is not None:
            await self._writes.join()
        for tree in self._trees:
            await tree.settled()

    async def stop(self) -> None:
        """Finish the pending writes, stop following changes (the stores stay open)."""
        if self._writes is not None and self._writer is not None and not self._writer.done():
            try:  # (asyncio.timeout: 3.11's wait_for can lose a cancellation)
                async with asyncio.timeout(self.write_timeout_s):
                    await self._writes.join()
            except TimeoutError:
                log.warning("metadata writes still pending at stop")
        if self._writer is not None:
            self._writer.cancel()
        for tree in self._trees:
            await tree.stop()

    def close(self) -> None:
        self.local.close()

    # -- KeyValueStore --------------------------------------------------------------------
    def watch(self, prefix: str, callback: Watcher) -> None:
        self._watchers.append((prefix, callback))

    def hold(self, key: str) -> None:
        if is_cluster_key(key):
            self._held[key] = self._held.get(key, 0) + 1

    def release(self, key: str) -> None:
        left = self._held.get(key, 0) - 1
        if left > 0:
            self._held[key] = left
            return
        self._held.pop(key, None)
        if key in self._missed and self._loop is not None:
            # what was passed over meanwhile may be newer than the change (which failed,
            # or was stored before it): the store says which
            self._missed.discard(key)
            task = self._loop.create_task(self._resync(key))
            self._resyncs.add(task)
            task.add_done_callback(self._resyncs.discard)

    def get(self, key: str) -> Any | None:
        if not is_cluster_key(key):
            return self.local.get(key)
        with self._lock:
            return self._mirror.get(key)

    async def read_through(self, key: str) -> Any | None:
        """A cluster-wide key the mirror lacks is read from the metadata store and taken
        into the mirror (its watchers told, as for a notification): what another broker
        has written and answered is known here before its notification arrives."""
        if not is_cluster_key(key):
            return self.local.get(key)
        with self._lock:
            if key in self._mirror:
                return self._mirror[key]
        await self._resync(key)
        return self.get(key)

    def list(self, prefix: str = "") -> dict[str, Any]:
        with self._lock:
            mine = {k: v for k, v in self._mirror.items() if k.startswith(prefix)}
        if prefix and is_cluster_key(prefix) and "/" in prefix:
            return dict(sorted(mine.items()))
        return dict(sorted({**self.local.list(prefix), **mine}.items()))

    def put(self, key: str, value: Any) -> None:
        if not is_cluster_key(key):
            self.local.put(key, value)
            return
        self._change(key, value, False)

    def put_many(self, items: Mapping[str, Any]) -> None:
        local = {k: v for k, v in items.items() if not is_cluster_key(k)}
        if local:
            self.local.put_many(local)
        for key, value in items.items():
            if is_cluster_key(key):
                self._change(key, value, False)

    def delete(self, key: str) -> bool:
        if not is_cluster_key(key):
            return self.local.delete(key)
        with self._lock:
            existed = key in self._mirror
        self._change(key, None, True)
        return existed

    def delete_prefix(self, prefix: str) -> int:
        count = 0
        if not (prefix and is_cluster_key(prefix)):
            count += self.local.delete_prefix(prefix)
        with self._lock:
            keys = [k for k in self._mirror if k.startswith(prefix)]
        for key in keys:
            self._change(key, None, True)
        return count + len(keys)

    # -- writes ---------------------------------------------------------------------------
    def _change(self, key: str, value: Any, delete: bool) -> None:
        loop = self._loop
        if loop is None:
            raise MetadataStoreError("the cluster metadata store is not started")
        on_loop = _running_loop() is loop
        if on_loop:
            self._enqueue(key, value, delete)
            return
        store = self._store_for(key)
        reason = store.unavailable_reason()
        if reason is not None:  # refused at once, nothing changed
            raise StoreUnavailableError(reason)
        done = asyncio.run_coroutine_threadsafe(self._change_async(key, value, delete), loop)
        # the wait ends when the store is found unavailable (ZooKeeper stopped or silent),
        # not after the whole write timeout; the write stays queued and is stored if the
        # store comes back (or fails then, and the mirror shows the store's value again)
        deadline = time.monotonic() + self.write_timeout_s
        while True:
            try:
                done.result(min(_WAIT_SLICE_S, max(deadline - time.monotonic(), 0.001)))
                return
            except TimeoutError:
                reason = store.unavailable_reason()
                if reason is not None:
                    raise StoreUnavailableError(reason) from None
                if time.monotonic() >= deadline:
                    raise StoreUnavailableError(
                        f"metadata store: writing {key} took more than"
                        f" {self.write_timeout_s:g} s") from None

    def unavailable_reason(self) -> str | None:
        return self.config_store.unavailable_reason() or self.store.unavailable_reason()

    def _enqueue(self, key: str, value: Any, delete: bool) -> asyncio.Future[None]:
        assert self._writes is not None and self._loop is not None
        with self._lock:
            if delete:
                self._mirror.pop(key, None)
            else:
                self._mirror[key] = value
        self._pending[key] = self._pending.get(key, 0) + 1
        done: asyncio.Future[None] = self._loop.create_future()
        self._writes.put_nowait((key, value, delete, done))
        return done

    async def _change_async(self, key: str, value: Any, delete: bool) -> None:
        await self._enqueue(key, value, delete)

    async def write_async(self, key: str, value: Any) -> None:
        """Store a cluster-wide key and wait until the metadata store has it."""
        await self._enqueue(key, value, False)

    async def _write_loop(self) -> None:
        assert self._writes is not None
        while True:
            key, value, delete, done = await self._writes.get()
            failed: Exception | None = None
            try:
                await self._write(key, value, delete)
            except Exception as exc:
                failed = exc
            left = self._pending.get(key, 1) - 1
            if left > 0:
                self._pending[key] = left
            else:
                self._pending.pop(key, None)
            if failed is not None:
                log.warning("metadata write of %s failed: %s", key, failed)
                # the mirror showed the write: show the store again
                await self._resync(key, even_if_held=True)
                if not done.done():
                    done.set_exception(failed)
            elif not done.done():
                done.set_result(None)
            self._writes.task_done()

    async def _resync(self, key: str, even_if_held: bool = False) -> None:
        path = node_path(key, self.cluster)
        try:
            got = await self._store_for(key).get(path)
        except MetadataStoreError as exc:
            log.warning("cannot read %s again: %s", path, exc)
            return
        self._on_node(path, None if got is None else got[0], even_if_held)

    def _store_for(self, key: str) -> MetadataStore:
        return self.store if key.startswith("schemas/") else self.config_store

    async def _write(self, key: str, value: Any, delete: bool) -> None:
        path = node_path(key, self.cluster)
        store = self._store_for(key)
        kind = key.partition("/")[0]
        if key == BOOTSTRAPPED:
            if not delete:
                # initialize-cluster-metadata (or another broker) may have made it
                with contextlib.suppress(BadVersionError):
                    await store.put(path, encode(self.cluster_info), -1)
            return
        if kind in NAMESPACE_PARTS:
            await self._write_namespace_part(store, path, kind, value, delete)
            return
        if delete:
            with contextlib.suppress(NotFoundError):
                await store.delete(path)
            if kind in ("partitioned", "schemas", "topic-policies"):
                await self._prune(store, path)
        elif kind == "schemas":
            await self._create_version(store, path, value)
        else:
            await store.put(path, encode(value))

    async def _create_version(self, store: MetadataStore, path: str, value: Any) -> None:
        """A schema version is written once: two brokers numbering a new version alike
        cannot overwrite each other's (the second fails; its registry reads afresh)."""
        try:
            await store.put(path, encode(value), -1)
        except BadVersionError:
            got = await store.get(path)
            if got is None or decode(got[0]) != value:
                raise MetadataStoreError(
                    f"schema version {path} was stored by another broker meanwhile") from None

    async def _write_namespace_part(self, store: MetadataStore, path: str, kind: str,
                                    value: Any, delete: bool) -> None:
        if kind == "namespaces":
            if delete:
                with contextlib.suppress(NotFoundError):
                    await store.delete(path)
                return
            # created by another broker meanwhile: it exists, as wanted
            with contextlib.suppress(BadVersionError):
                await store.put(path, encode(new_namespace_node(self.cluster)), -1)
            return
        while True:
            got = await store.get(path)
            if got is None:
                return  # the namespace is gone: nothing of it to keep
            node = decode(got[0]) or {}
            try:
                await store.put(path, encode(with_part(node, kind, None if delete else value)),
                                got[1].version)
                return
            except BadVersionError:
                continue

    async def _prune(self, store: MetadataStore, path: str) -> None:
        """Remove the empty structural parents a deleted key leaves (as Pulsar does for
        partitioned-topic and schema paths), stopping at the subtree's root."""
        root = next(r for r in (PARTITIONED_ROOT, TOPIC_POLICIES_ROOT, SCHEMAS_ROOT)
                    if path.startswith(r))
        parent = path.rsplit("/", 1)[0]
        while parent.count("/") > root.count("/") + 2:  # keep /root/{tenant}/{ns}
            try:
                await store.delete(parent)
            except (NotEmptyError, NotFoundError, BadVersionError):
                return
            parent = parent.rsplit("/", 1)[0]

    # -- changes made elsewhere -----------------------------------------------------------
    def _on_node(self, path: str, raw: bytes | None, even_if_held: bool = False) -> None:
        keys = flat_keys(path, self.cluster)
        if not keys:
            return
        node = decode(raw) if raw is not None else None
        if keys[0].startswith("namespaces/"):  # a namespace's Policies node
            parts = namespace_parts(node if raw is not None else None)
            if raw is not None and node is None:
                parts = {"namespaces": {"created": 0}, "policies": None, "permissions": None}
            values = {f"{kind}/{keys[0].split('/', 1)[1]}": parts[kind]
                      for kind in NAMESPACE_PARTS}
        else:
            values = {key: None if raw is None else ({"at": 0} if key == BOOTSTRAPPED else node)
                      for key in keys}
        for key, value in values.items():
            self._apply_remote(key, value, even_if_held)

    def _apply_remote(self, key: str, value: Any, even_if_held: bool = False) -> None:
        if self._pending.get(key):
            return
        if self._held.get(key) and not even_if_held:
            self._missed.add(key)
            return
        with self._lock:
            old = self._mirror.get(key)
            if key.startswith("namespaces/") and (old is None) == (value is None):
                return
            if old == value:
                return
            if value is None:
                self._mirror.pop(key, None)
            else:
                self._mirror[key] = value
        for prefix, callback in list(self._watchers):
            if key.startswith(prefix):
                try:
                    callback(key, value)
                except Exception:
                    log.exception("metadata watcher of %s failed on %s", prefix, key)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
