"""`TreeMirror`: a subtree of a `MetadataStore` kept in memory and in step with the store
through notifications (never by polling).

``TreeMirror(store, "/admin/policies", depth=2, on_change)`` loads every key down to
``depth`` levels below the root, then follows changes: a CHILDREN_CHANGED re-lists that
key's children (loading new ones, dropping removed ones with their subtrees), a
CREATED/MODIFIED/DELETED re-reads the key. Each read re-arms the store's watch, which is
what the store's notification contract asks for. After RECONNECTED or
SESSION_REESTABLISHED (changes may have been missed) the whole subtree is read again.

``on_change(path, value)`` is called on the loop for every key whose value changed (None:
removed), including the ones a reload finds changed. Refreshes run one at a time on one
task; a refresh that fails (store unavailable) is retried after a second. ``settled()``
waits until no refresh is pending (tests, start-up).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from .api import MetadataStore, Notification, NotificationType, SessionEvent
from .errors import MetadataStoreError
from .paths import check_path

log = logging.getLogger(__name__)

OnChange = Callable[[str, bytes | None], None]


class TreeMirror:
    """The keys under ``root`` (to ``depth`` levels) and their values, kept current."""

    def __init__(self, store: MetadataStore, root: str, depth: int, on_change: OnChange) -> None:
        self.store = store
        self.root = check_path(root)
        self.depth = depth
        self.on_change = on_change
        self.values: dict[str, bytes] = {}
        self._children: dict[str, set[str]] = {}
        self._queue: dict[tuple[str, str], None] = {}  # ordered set of (kind, path)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def _level(self, path: str) -> int:
        if path == self.root:
            return 0
        if not path.startswith(self.root.rstrip("/") + "/"):
            return -1
        return path[len(self.root.rstrip("/")):].count("/")

    async def start(self) -> None:
        """Load the subtree (returns once it is loaded) and follow changes from then on."""
        self.store.register_listener(self._on_notification)
        self.store.register_session_listener(self._on_session)
        await self._list(self.root)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self.store.unregister_listener(self._on_notification)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def settled(self) -> None:
        await self._idle.wait()

    # -- notifications --------------------------------------------------------------------
    def _on_notification(self, note: Notification) -> None:
        level = self._level(note.path)
        if level < 0 or level > self.depth:
            return
        if note.type is NotificationType.CHILDREN_CHANGED or level == 0:
            self._enqueue("list", note.path)
        else:
            self._enqueue("read", note.path)

    def _on_session(self, event: SessionEvent) -> None:
        if event in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED):
            self._enqueue("reload", self.root)

    def _enqueue(self, kind: str, path: str) -> None:
        self._queue[(kind, path)] = None
        self._idle.clear()
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                kind, path = next(iter(self._queue))
                del self._queue[(kind, path)]
                try:
                    if kind == "list":
                        await self._list(path)
                    elif kind == "read":
                        await self._read(path)
                    else:
                        await self._reload()
                except MetadataStoreError as exc:
                    if self.store.closed:
                        return
                    log.warning("metadata mirror of %s: %s; retrying in 1 s", self.root, exc)
                    await asyncio.sleep(1.0)
                    self._queue[(kind, path)] = None
            self._idle.set()

    # -- reads ----------------------------------------------------------------------------
    async def _list(self, path: str) -> None:
        level = self._level(path)
        if level >= self.depth:
            return
        names = set(await self.store.get_children(path))
        known = self._children.get(path, set())
        self._children[path] = names
        base = path.rstrip("/")
        for gone in sorted(known - names):
            self._drop(f"{base}/{gone}")
        for name in sorted(names):
            child = f"{base}/{name}"
            if name not in known or child not in self.values:
                await self._read(child)
            elif level + 1 < self.depth and child not in self._children:
                await self._list(child)

    async def _read(self, path: str) -> None:
        got = await self.store.get(path)
        if got is None:
            self._drop(path)
            return
        value = got[0]
        if self.values.get(path) != value:
            self.values[path] = value
            self.on_change(path, value)
        if self._level(path) < self.depth:
            await self._list(path)

    async def _reload(self) -> None:
        for path in sorted(self.values):
            await self._read(path)
        await self._list(self.root)

    def _drop(self, path: str) -> None:
        prefix = path + "/"
        for child in [p for p in self.values if p.startswith(prefix)]:
            self._drop(child)
        self._children.pop(path, None)
        if self.values.pop(path, None) is not None:
            self.on_change(path, None)
