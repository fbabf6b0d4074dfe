"""The metadata store contract every backend keeps (modelled on Pulsar's ``MetadataStore``).

Theory of operation
-------------------
Keys are ZooKeeper-style absolute paths (``/admin/policies/public/default``) holding opaque
bytes (`MetadataCache` adds JSON). Every key has a `Stat` with a ``version`` that starts at 0
and grows by one on each write, which makes compare-and-set possible:

- ``await store.get(path)`` -> ``(value, stat)`` or ``None``;
- ``await store.put(path, value, expected_version)``: ``None`` writes unconditionally,
  ``-1`` means "must not exist yet" (create), ``n >= 0`` means "only if still at version n";
  a lost race raises `BadVersionError`. Missing parents are created (empty values).
  ``ephemeral=True`` binds a new key to this store's session: it disappears when the session
  ends (the process for SQLite; the ZooKeeper session, see below);
- ``await store.delete(path, expected_version)`` (`NotFoundError`, `BadVersionError`,
  `NotEmptyError`), ``delete_recursive``, ``get_children`` (sorted names; ``[]`` for a
  missing key), ``exists``.

Notifications (`Notification`: CREATED, MODIFIED, DELETED, CHILDREN_CHANGED) go to the
callbacks given to ``register_listener``, on the store's event loop. The guarantee both
backends keep: a change to a key is notified if this store has read that key (get, exists;
``get_children`` for CHILDREN_CHANGED, or CREATED when the key was missing) since its last
notification. (ZooKeeper watches are
one-shot and set by reads; SQLite notifies every change, across stores of one process.)
`MetadataCache` relies on exactly that, and the store also invalidates caches on its own
writes before they return, so a write followed by a cached read never sees the old value.

Session events (`SessionEvent`) go to ``register_session_listener`` callbacks:
CONNECTION_LOST (requests wait), RECONNECTED (same session: ephemeral keys kept; caches
were cleared since changes may have been missed), SESSION_LOST (the session expired: its
ephemeral keys are gone), SESSION_REESTABLISHED (a new session, holding no ephemeral key: their owners create
again the ones they want). SESSION_LOST also comes when the store has not heard from its
server for the session timeout by its own clock, before the server may say so (a paused
process, a partition). With ``zookeeperSessionExpiredPolicy=reconnect`` (Magnetar's
default) the store carries on with a new session; with ``shutdown`` (Pulsar's default) a
store whose session is lost closes itself after telling SESSION_LOST, and the broker
shuts down.

``lease_deadline`` (monotonic seconds) is how long the session is certainly alive by this
process's clock (infinite for a store without sessions; minus infinity once lost);
``unavailable_reason()`` says why requests cannot be served now (None while they can),
for callers that answer at once rather than wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import math
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import NotFoundError, StoreClosedError

if TYPE_CHECKING:
    from .cache import MetadataCache

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Stat:
    """What the store knows of a key besides its value."""

    path: str
    version: int
    creation_timestamp: int  # ms since the epoch
    modification_timestamp: int
    ephemeral: bool = False
    created_by_self: bool = False  # an ephemeral key of this store's session


class NotificationType(enum.Enum):
    CREATED = "Created"
    MODIFIED = "Modified"
    DELETED = "Deleted"
    CHILDREN_CHANGED = "ChildrenChanged"


@dataclass(frozen=True, slots=True)
class Notification:
    type: NotificationType
    path: str


class SessionEvent(enum.Enum):
    CONNECTION_LOST = "ConnectionLost"
    RECONNECTED = "Reconnected"
    SESSION_LOST = "SessionLost"
    SESSION_REESTABLISHED = "SessionReestablished"


class SessionExpiredPolicy(enum.Enum):
    """Pulsar's ``zookeeperSessionExpiredPolicy``."""

    SHUTDOWN = "shutdown"
    RECONNECT = "reconnect"

    @classmethod
    def parse(cls, text: str) -> SessionExpiredPolicy:
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ValueError(
                f"zookeeperSessionExpiredPolicy must be shutdown or reconnect, not {text!r}"
            ) from None


Listener = Callable[[Notification], None]
SessionListener = Callable[[SessionEvent], None]


class MetadataStore(ABC):
    """A versioned, hierarchical key store with ephemeral keys and notifications.

    Subclasses implement the ``_``-free abstract methods; this base keeps the listeners,
    the caches and the event loop, and dispatches to them (on the loop, one callback
    failing never stops the others)."""

    #: the address in messages (``zk:host:2181/chroot``, ``sqlite:/path``)
    url: str = ""
    #: monotonic time until which the session is certainly alive (see the docstring)
    lease_deadline: float = math.inf

    def __init__(self, session_expired_policy: SessionExpiredPolicy) -> None:
        self.session_expired_policy = session_expired_policy
        self._listeners: list[Listener] = []
        self._session_listeners: list[SessionListener] = []
        self._caches: weakref.WeakSet[MetadataCache[object]] = weakref.WeakSet()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect (and retry as the backend does); must run on the loop that will use it."""
        self._loop = asyncio.get_running_loop()

    async def close(self) -> None:
        """End the session (its ephemeral keys go) and release resources."""
        self.closed = True

    async def __aenter__(self) -> MetadataStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the store was started on (None before `start`): its calls run
        there; another thread hands them over with ``run_coroutine_threadsafe``."""
        return self._loop

    def unavailable_reason(self) -> str | None:
        """Why the store cannot serve requests now (ZooKeeper not connected, the session
        lost, the store closed), or None."""
        return f"metadata store unavailable: {self.url} is closed" if self.closed else None

    def _check_open(self) -> None:
        if self.closed:
            raise StoreClosedError(f"metadata store {self.url} is closed")

    # -- the contract ---------------------------------------------------------------------
    @abstractmethod
    async def get(self, path: str) -> tuple[bytes, Stat] | None:
        """The value and stat at ``path``, or None."""

    @abstractmethod
    async def put(self, path: str, value: bytes, expected_version: int | None = None,
                  *, ephemeral: bool = False) -> Stat:
        """Write ``value`` at ``path`` (see the module docstring for ``expected_version``)."""

    @abstractmethod
    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Remove ``path`` (only at ``expected_version`` when given)."""

    @abstractmethod
    async def get_children(self, path: str) -> list[str]:
        """The names of ``path``'s direct children, sorted (``[]`` if it does not exist)."""

    @abstractmethod
    async def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""

    async def delete_recursive(self, path: str) -> None:
        """Remove ``path`` and everything under it (missing keys are fine)."""
        for child in await self.get_children(path):
            await self.delete_recursive(path.rstrip("/") + "/" + child)
        if path != "/":
            with contextlib.suppress(NotFoundError):
                await self.delete(path)

    # -- listeners ------------------------------------------------------------------------
    def register_listener(self, listener: Listener) -> None:
        """Call ``listener(notification)`` on the loop for each change (see the docstring)."""
        self._listeners.append(listener)

    def unregister_listener(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def register_session_listener(self, listener: SessionListener) -> None:
        """Call ``listener(event)`` on the loop for each `SessionEvent`."""
        self._session_listeners.append(listener)

    def attach_cache(self, cache: MetadataCache[object]) -> None:
        """Used by `MetadataCache`: invalidate it on notifications and session events."""
        self._caches.add(cache)

    def _deliver(self, notification: Notification) -> None:
        """On the loop: invalidate the caches, then tell the listeners."""
        if self._caches:  # (iterating an empty WeakSet is not free: a store per write)
            for cache in list(self._caches):
                cache.on_notification(notification)
        for listener in list(self._listeners):
            try:
                listener(notification)
            except Exception:
                log.exception("metadata listener failed on %s", notification)

    def _deliver_session(self, event: SessionEvent) -> None:
        if event in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED,
                     SessionEvent.SESSION_LOST):
            for cache in list(self._caches):
                cache.invalidate_all()
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("metadata session listener failed on %s", event)

    def _invalidate_own_write(self, path: str) -> None:
        """A write of this store completed: no cache may serve the old value any more."""
        if self._caches:
            for cache in list(self._caches):
                cache.invalidate(path)
