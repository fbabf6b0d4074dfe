"""Which topics' metrics figures may have changed: a set of topic names, filled as they change.

`/metrics` at namespace level keeps each namespace's totals between scrapes and folds in
only the topics named here (admin/metrics_totals.py), so a scrape costs what changed, not
what is loaded. A name is added (one ``set.add``, no object made) after anything a
topic's series read changes:

- a batch of appends completed (``PersistentTopic._appends_done``: counters, size,
  backlog), a non-persistent publish, a cursor moved or a segment trimmed (the ledger's
  ``on_change``), a subscription's consumer added or removed (`touch` by hand);
- a producer or subscription added or removed: ``Topic.producers`` and
  ``Topic.subscriptions`` are `WatchedDict` s, which note every change themselves;
- a topic loaded, unloaded, deleted or replaced: ``BrokerService.topics`` is a
  `TopicRegistry`, which notes the name of every key set or removed;
- a topic's rates: `RateTracker` notes the topics whose rate in or out differs from the
  last sample's.

The reader takes the names (`take`) and reads those topics again (a second reader, e.g.
a test's own builder, makes each one read every topic at its next take); a name noted twice is
read once, and a name read when nothing changed costs one read: the marks may be
generous, never missing. The set holds names only (never a topic), so an unloaded topic is
freed at once; without a reader, past twice the loaded topics plus `SLACK` names it is
emptied and marked `TopicChanges.overflowed` (the reader then reads every topic).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")


#: names kept beyond twice the loaded topics before they are dropped (`TopicChanges.overflowed`)
SLACK = 10_000
#: names `TopicChanges.take_in_slices` moves per turn of the loop
TAKE_SLICE = 5_000


async def _next_turn() -> None:
    await asyncio.sleep(0)


class TopicChanges:
    """The names of topics changed since the reader last took them."""

    __slots__ = ("_reader", "names", "overflowed")

    def __init__(self) -> None:
        self.names: set[str] = set()
        # the names were dropped (nobody took them for long: more than twice the loaded
        # topics plus `SLACK`): the reader must read every loaded topic again
        self.overflowed = False
        self._reader: object = None  # who took the names last

    def take(self, reader: object) -> tuple[set[str], bool]:
        """The names noted so far and whether the caller must read every topic instead
        (some were dropped, or another ``reader`` took the last ones); an empty set for the
        next ones (the set object stays the same: topics hold it)."""
        taken, overflowed = set(self.names), self.overflowed or self._reader is not reader
        self.names.clear()
        self.overflowed = False
        self._reader = reader
        return taken, overflowed

    def backlog(self, reader: object) -> int | None:
        """How many names ``reader`` would take now; None when it must read every topic
        instead (some were dropped, or another reader took the last ones)."""
        if self.overflowed or self._reader is not reader:
            return None
        return len(self.names)

    async def take_in_slices(self, reader: object, step: int = TAKE_SLICE,
                             pause: Callable[[], Awaitable[Any]] = _next_turn,
                             ) -> tuple[set[str], bool]:
        """`take`, moving ``step`` names at a time, ``pause`` awaited between (by default
        the next turn of the loop; a caller working in slices passes its own): after topics
        were made or unloaded in bulk the set holds every one of them, and copying 100,000
        names in one call held the loop ~25 ms (the first scrape after). Names noted
        meanwhile are taken too (their topics are read after this returns). When the
        caller must read every topic anyway (overflowed, or a new reader), the names are
        dropped the same way (at once: 5-10 ms of the loop, every name's string touched),
        and the set returned is empty."""
        overflowed = self.overflowed or self._reader is not reader
        self.overflowed = False
        self._reader = reader
        names, taken = self.names, set[str]()
        pop, add = names.pop, taken.add
        try:
            while overflowed and names:  # (the reader reads every topic: not needed)
                for _ in range(min(step, len(names))):
                    pop()
                if names:
                    await pause()
            while not overflowed:
                for _ in range(min(step, len(names))):
                    add(pop())
                if not names:
                    return taken, overflowed
                await pause()
        except BaseException:  # (cancelled: the names moved or dropped are lost, and the
            self.overflowed = True  # caller reads every topic at its next take)
            raise
        return taken, True


class WatchedDict(dict[K, V]):
    """A dict that notes ``key`` in ``changes`` whenever an entry is set or removed (reads
    cost what a dict's cost)."""

    __slots__ = ("_changes", "_key")

    def __init__(self, changes: set[str], key: str) -> None:
        super().__init__()
        self._changes = changes
        self._key = key

    def __setitem__(self, k: K, v: V) -> None:
        super().__setitem__(k, v)
        self._changes.add(self._key)

    def __delitem__(self, k: K) -> None:
        super().__delitem__(k)
        self._changes.add(self._key)

    def pop(self, k: K, *default: Any) -> Any:
        self._changes.add(self._key)
        return super().pop(k, *default)

    def popitem(self) -> tuple[K, V]:
        self._changes.add(self._key)
        return super().popitem()

    def setdefault(self, k: K, default: Any = None) -> Any:
        self._changes.add(self._key)
        return super().setdefault(k, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._changes.add(self._key)

    def clear(self) -> None:
        super().clear()
        self._changes.add(self._key)


class TopicRegistry(dict[str, V]):
    """The broker's loaded topics by name: notes each name set or removed in ``changes``
    (a load, an unload, a delete, a topic replaced by another of the same name), and counts
    those changes in `version`: a reader that saw the same version saw the same topics
    (no walk over them to tell)."""

    __slots__ = ("_changes", "_names", "_names_version", "_owner", "version")

    def __init__(self, owner: TopicChanges) -> None:
        super().__init__()
        self._owner = owner
        self._changes = owner.names
        self.version = 0  # one more at every key set or removed
        self._names: tuple[str, ...] = ()
        self._names_version = 0

    def names(self) -> tuple[str, ...]:
        """The loaded topics' names, a tuple copied again only once they changed
        (`version`): the walks over every loaded topic (the periodic rounds at the same
        minute's mark, a ``/metrics`` build and its tail) share one copy while no topic is
        loaded or unloaded; each copy of 100,000 names held the loop 5-15 ms (heap.py's
        `topic_names`)."""
        if self._names_version != self.version:
            self._names = tuple(self)
            self._names_version = self.version
        return self._names

    def __setitem__(self, k: str, v: V) -> None:
        super().__setitem__(k, v)
        self.version += 1
        changes = self._changes
        changes.add(k)
        if len(changes) > 2 * len(self) + SLACK:  # nobody reads them: forget them
            changes.clear()
            self._owner.overflowed = True

    def __delitem__(self, k: str) -> None:
        super().__delitem__(k)
        self.version += 1
        self._changes.add(k)

    def pop(self, k: str, *default: Any) -> Any:
        self.version += 1
        self._changes.add(k)
        return super().pop(k, *default)

    def popitem(self) -> tuple[str, V]:
        k, v = super().popitem()
        self.version += 1
        self._changes.add(k)
        return k, v

    def setdefault(self, k: str, default: Any = None) -> Any:
        self.version += 1
        self._changes.add(k)
        return super().setdefault(k, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        keys = dict(*args, **kwargs)
        super().update(keys)
        self.version += 1
        self._changes.update(keys)

    def clear(self) -> None:
        self._changes.update(self)
        super().clear()
        self.version += 1
