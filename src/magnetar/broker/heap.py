"""Keeping CPython's full garbage collections short while many topics are loaded.

A full (generation 2) collection walks every container object the collector tracks, and
holds the event loop meanwhile: with 100,000 loaded topics that was up to a second in
which no send was answered. What a topic load builds lives until the topic is unloaded,
and an unloaded topic is freed by reference counting (`PersistentTopic.release` breaks
its cycles), so the collector need not look at it: `HeapFreezer` moves what the loads
built into the permanent generation (``gc.freeze``), after collecting the young
generations so that fresh garbage is not frozen with it. A full collection then walks only
what was made since the last freeze. While topics are loaded in a stream (creation, a
restart's clients coming back), waiting for a pause was not enough: what the loads built
meanwhile was walked again by every middle-generation collection (26-77 ms each, collecting
nothing) and by full ones (87-122 ms before a bulk). So during a stream each young
collection ends with a freeze (a ``gc.callbacks`` hook): an object a load keeps is walked
once, by the first-generation collection after it was made, and the generations' counts
start again at each freeze, so no older collection comes while the stream lasts.

Loads are not the only bulk: a ``/metrics`` build keeps caches that reference every
loaded topic (its blocks' names, columns and topics) until the next one. A full
collection walks every reference such a container holds (~20 per topic at 100,000
topics: 100-200 ms of the loop, during unloads or later scrapes), and CPython starts
one every 10 middle-generation collections once objects newer than the last full
collection exceed a quarter of its survivors, which with most objects frozen is often.
So a large bulk (`bulk_topics`) is framed: `before_bulk` collects every generation
(what was not frozen: cheap while the bulks before it were frozen, and the cyclic
garbage among it is freed, not frozen; during a stream of loads only the first
generation: the rest is frozen already), and `after_bulk` collects the young generations
and freezes; `HeapFreezer.bulk` is the two around a ``with`` block. Between the two, the
stream's hook is on for the bulk too: its young collections end with a freeze, and a
container made to hold every topic is frozen while still empty (`HeapFreezer.settle`),
else the first young collection after it grew walked it whole, and the freeze after the
bulk walked the middle generation again (13-28 ms each with 60,000-100,000 topics). What
the next bulk replaces is freed by reference counting (the caches hold no cycles). A rate
sample is no bulk: what it keeps is in dicts of strings and numbers, which the collector
never tracks (topics/stats.py). See docs/internals.md ("Many topics").
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from functools import partial
from itertools import islice
from operator import is_not
from typing import Any, TypeVar, cast

T = TypeVar("T")

log = logging.getLogger(__name__)


def topic_names(topics: dict[str, Any]) -> tuple[str, ...]:
    """A copy of ``topics``' keys (its names) to walk across many slices of the loop, a
    name looked up as it is reached: a tuple of strings, copied in C (5-15 ms at 100,000
    topics on this machine) and untracked by the first young collection that sees it (one
    pass over it); the broker's registry of loaded topics keeps its copy until a topic is
    loaded or unloaded (its ``names()``, broker/topics/changes.py), so walks in between
    share it. A list of the topics instead was walked by every collection while it lived;
    ``dict.fromkeys`` of the names, never tracked, cost 30-60 ms to make."""
    kept = getattr(topics, "names", None)
    return kept() if kept is not None else tuple(topics)


_LOADED = partial(is_not, None)


async def no_pause() -> None:
    """A `loaded_slices` pause that does not give the loop back (the caller's body does)."""


async def loaded_slices(topics: dict[str, T], size: int, pause: Callable[[], Awaitable[Any]],
                        names: tuple[str, ...] | None = None) -> AsyncIterator[list[T]]:
    """The topics loaded in ``topics``, ``size`` names at a time, for a walk over them
    across slices of the loop: a list per slice of the `topic_names` (or ``names``, a copy
    the caller keeps), ``pause`` awaited before each slice but the first (it gives the
    loop back, or not: the caller's choice), then each name of the slice looked up, in C,
    those no longer loaded left out (a list may be empty). Only the tuple of names lives
    through the walk, never a list of every topic."""
    if names is None:
        names = topic_names(topics)
    walk, get = iter(names), topics.get
    for start in range(0, len(names), size):
        if start:
            await pause()
        yield list(cast("Iterator[T]", filter(_LOADED, map(get, islice(walk, size)))))


async def dismantle(mappings: Iterable[dict[Any, Any]], size: int,
                    pause: Callable[[], Awaitable[Any]]) -> None:
    """Empty ``mappings`` (dicts nobody else holds any more), ``pause`` awaited after every
    ``size`` entries freed (across the dicts): what dicts of every topic held is freed a
    slice at a time. Dropped at once, the last reference freed it all in one call (a rate
    sample's counters at 100,000 topics, ~200,000 entries: 20-45 ms of the loop)."""
    budget = size
    for mapping in mappings:
        pop = mapping.popitem
        while mapping:
            count = min(budget, len(mapping))
            for _ in range(count):
                pop()
            budget -= count
            if not budget:
                await pause()
                budget = size


async def add_in_slices(target: set[T], items: list[T], size: int,
                        pause: Callable[[], Awaitable[Any]]) -> None:
    """``target.update(items)``, ``size`` items per slice, ``pause`` awaited between
    slices (100,000 names added in one call held the loop 15-50 ms, the set growing)."""
    for start in range(0, len(items), size):
        if start:
            await pause()
        target.update(islice(items, start, start + size))


#: loads have paused (a stream of loads ended) once no topic has loaded for this long
SETTLE_S = 0.5
#: a bulk built for this many times ``loads_per_freeze`` topics is frozen once built
BULK_FACTOR = 10
#: a stream of loads begins once the loaded topics grew by ``loads_per_freeze`` over this
STREAM_DIVISOR = 10


class Bulk:
    """What `HeapFreezer.bulk` yields: set ``built`` false when the block made nothing
    long-lived after all (then nothing is frozen after it)."""

    __slots__ = ("built", "framed")

    def __init__(self, framed: bool) -> None:
        self.framed = framed  # large enough to be framed (`HeapFreezer.bulk_topics`)
        self.built = True


class HeapFreezer:
    """Counts topic loads; once the loaded topics grew by `stream_loads` since the last
    freeze (a tenth of ``loads_per_freeze``; 0: never), a *stream* of loads is under way:
    until loads pause for `SETTLE_S`, every collection of the young generations ends with
    a freeze of what survived it (`young_freezes`, from a ``gc.callbacks`` hook), so what
    the loads build is walked by one first-generation collection and never by a
    middle-generation or full one; once loads pause or slow to a trickle (`stream_rate`),
    a last freeze (`freeze`) ends the stream. Unloads make a stream too once the loaded
    topics fell by `stream_loads` below the most since the last freeze (`topic_unloaded`):
    each leaves a few objects that outlive it (its due time, what lives while its ledger
    closes), and 5,000 unloads left ~50,000 young survivors, walked by middle-generation
    collections of ~35 ms that collected nothing. Loads and unloads in turn (the idle-topic
    sweep) make no stream. Use from the event loop (the hook runs on whichever thread
    collects)."""

    __slots__ = ("_bulk_hooked", "_ceiling", "_floor", "_handle", "_hook", "_last_load",
                 "_loaded", "_loaded_at_check", "_stopped", "bulk_freezes", "freezes", "loads",
                 "loads_per_freeze", "streams", "sweeps", "young_freezes", "young_sweeps")

    def __init__(self, loads_per_freeze: int) -> None:
        self.loads_per_freeze = loads_per_freeze
        self.loads = 0  # topics loaded now less the fewest loaded since the last freeze
        self.freezes = 0  # every freeze (`freeze`), after loads or bulks
        self.bulk_freezes = 0  # freezes after a bulk (`after_bulk`)
        self.sweeps = 0  # full collections before a bulk (`before_bulk`)
        self.young_sweeps = 0  # first-generation collections before a bulk during a stream
        self.streams = 0  # streams of loads begun
        self.young_freezes = 0  # freezes at the end of a young collection during a stream
        self._floor = 0  # the fewest topics loaded since the last freeze
        self._ceiling = 0  # the most topics loaded since the last freeze
        self._loaded = 0  # topics loaded at the last load
        self._loaded_at_check = 0  # topics loaded at the stream's last `_check`
        self._last_load = 0.0
        self._handle: asyncio.TimerHandle | None = None
        # the gc.callbacks hook while a stream or a bulk is under way (None otherwise)
        self._hook: Callable[[str, dict[str, int]], None] | None = None
        self._bulk_hooked = False  # the hook is a framed bulk's (`before_bulk`)
        self._stopped = False  # `stop`ped: no stream begins any more (the broker stops)

    @property
    def stream_loads(self) -> int:
        """How many more topics than at the last freeze make a stream of loads."""
        return max(1, self.loads_per_freeze // STREAM_DIVISOR)

    @property
    def streaming(self) -> bool:
        """Whether a stream of loads is under way (young collections end with a freeze)."""
        return self._hook is not None

    def topic_loaded(self, loaded: int) -> None:
        """A topic was loaded (built on the loop); ``loaded`` topics are loaded now. A
        stream begins once `stream_loads` more topics are loaded than the fewest since
        the last freeze: topics loaded and unloaded again (the idle-topic sweep) make
        none."""
        if self.loads_per_freeze <= 0:
            return
        self._loaded = loaded
        self._floor = min(self._floor, loaded - 1)
        self._ceiling = max(self._ceiling, loaded)
        self.loads = loaded - self._floor
        self._last_load = time.monotonic()
        if self.loads >= self.stream_loads and self._handle is None:
            self._loaded_at_check = self._floor
            self._begin_stream()
            self._handle = asyncio.get_running_loop().call_later(SETTLE_S, self._check)

    def topic_unloaded(self, loaded: int) -> None:
        """A topic was unloaded; ``loaded`` topics are loaded now. A stream begins once
        `stream_loads` fewer topics are loaded than the most since the last freeze, and
        goes on (`_check`) while unloads go on at `stream_rate` or more."""
        if self.loads_per_freeze <= 0 or self._stopped:
            return
        self._ceiling = max(self._ceiling, loaded + 1)
        self._floor = min(self._floor, loaded)
        self._loaded = loaded
        self._last_load = time.monotonic()
        if self._ceiling - loaded >= self.stream_loads and self._handle is None:
            self._loaded_at_check = self._ceiling
            self._begin_stream()
            self._handle = asyncio.get_running_loop().call_later(SETTLE_S, self._check)

    def _begin_stream(self) -> None:
        self.streams += 1
        self._hook_on()

    def _hook_on(self) -> None:
        if self._hook is None:
            self._hook = self._after_young_collection
            gc.callbacks.append(self._hook)

    def _end_stream(self) -> None:
        hook, self._hook = self._hook, None
        if hook is not None:
            with suppress(ValueError):  # (someone cleared gc.callbacks)
                gc.callbacks.remove(hook)

    def _after_young_collection(self, phase: str, info: dict[str, int]) -> None:
        """The ``gc.callbacks`` hook of a stream: once a collection is over, freeze what
        it left (its survivors, and the older generations: everything not frozen). The
        generations' counts start again from 0, so no middle-generation collection, and
        no automatic full one, comes while the stream lasts; each object a load keeps is
        walked once, by the first-generation collection after it was made."""
        if phase == "stop":
            gc.freeze()
            self.young_freezes += 1

    @property
    def stream_rate(self) -> int:
        """The fewest topics a stream must grow by per `SETTLE_S` to go on."""
        return max(1, self.stream_loads // STREAM_DIVISOR)

    def _check(self) -> None:
        """Every `SETTLE_S` of a stream: it ends (`freeze`) once loads (or unloads) pause,
        or once the loaded topics grew (or fell) by fewer than `stream_rate` since the last
        check (a trickle is no stream: every young collection's freeze keeps for good what
        is alive then, so the stream lasts only while what the loads build, or the unloads
        leave, outweighs that)."""
        self._handle = None
        moved, self._loaded_at_check = self._loaded - self._loaded_at_check, self._loaded
        if time.monotonic() - self._last_load < SETTLE_S and abs(moved) >= self.stream_rate:
            self._handle = asyncio.get_running_loop().call_later(SETTLE_S, self._check)
            return
        self.freeze()

    def freeze(self) -> None:
        """Collect the young generations, then freeze every object the collector tracks;
        ends a stream of loads. Never ask ``gc.get_freeze_count()`` here: it counts the
        permanent generation by walking it, one object at a time, holding the loop (~80 ms
        at 30,000 loaded topics, a few hundred at 100,000; once per stream of loads)."""
        started = time.perf_counter()
        self._end_stream()
        gc.collect(1)
        gc.freeze()
        self.freezes += 1
        loads, self.loads = self.loads, 0
        self._floor = self._ceiling = self._loaded
        log.debug("froze the heap after %d topic loads (%.1f ms)",
                  loads, (time.perf_counter() - started) * 1000)

    @property
    def bulk_topics(self) -> int:
        """The fewest topics a bulk is built for to be framed by a collection and a
        freeze (0: never). Below, an automatic full collection walks it in a few ms."""
        return BULK_FACTOR * self.loads_per_freeze if self.loads_per_freeze > 0 else 0

    def before_bulk(self, topics: int) -> bool:
        """A bulk of long-lived objects for ``topics`` topics is about to be built on the
        loop (a rate sample, a ``/metrics`` build). If it is large enough
        (`bulk_topics`), collect what is not frozen now, so that the freeze after it
        (`after_bulk`) has no cyclic garbage older than the bulk to keep for good: every
        generation (little: the last bulk was frozen after it), or during a stream of
        loads only the first (the stream's freezes left nothing older unfrozen: a full
        collection then would walk the loads since the last young collection for nothing,
        87-122 ms while topics were created). Outside a stream, the stream's hook is then
        on until `after_bulk`. True: call `after_bulk` once it is built."""
        least = self.bulk_topics
        if least <= 0 or topics < least:
            return False
        started = time.perf_counter()
        if self.streaming:
            gc.collect(0)  # (the stream's hook freezes what it leaves)
            self.young_sweeps += 1
        else:
            gc.collect()
            self.sweeps += 1
            self._hook_on()  # the bulk's young collections freeze too (`settle`)
            self._bulk_hooked = True
        log.debug("collected the unfrozen heap before a bulk of %d topics (%.1f ms)",
                  topics, (time.perf_counter() - started) * 1000)
        return True

    def after_bulk(self, built: bool = True) -> None:
        """The bulk `before_bulk` was true for is built: unless nothing long-lived was
        made after all (``built`` false: e.g. a ``/metrics`` build that reused every
        block), freeze it now, so that no later full collection walks it: a
        first-generation collection (the hook freezes what it leaves; a stream of loads
        goes on, the bulk's own hook goes), or `freeze` if a stream ended meanwhile."""
        hooked, self._bulk_hooked = self._bulk_hooked, False
        own = hooked and self._handle is None  # the hook is the bulk's alone (no stream)
        if not built:
            if own:
                self._end_stream()
            return
        if self.streaming:
            gc.collect(0)  # (the hook freezes what it leaves)
            if own:
                self._end_stream()
                self.freezes += 1
        else:
            self.freeze()
        self.bulk_freezes += 1

    def settle(self) -> None:
        """During a framed bulk (or a stream of loads): collect the first generation now,
        which freezes what survives it. Call it right after making a container that will
        hold every topic, while it is still small: otherwise the first young collection
        that sees it walks it whole (a list of 100,000 topics: 13-28 ms of the loop).
        Nothing otherwise."""
        if self._hook is not None:
            gc.collect(0)

    @contextmanager
    def bulk(self, topics: int) -> Iterator[Bulk]:
        """Frame the ``with`` block, which builds a bulk for ``topics`` topics:
        `before_bulk` on entry, `after_bulk` on exit (with the yielded `Bulk`'s ``built``),
        whether the block ends or raises."""
        frame = Bulk(self.before_bulk(topics))
        try:
            yield frame
        finally:
            if frame.framed:
                self.after_bulk(frame.built)

    def stop(self) -> None:
        """End a stream (no freeze); no stream of unloads begins after this (the broker
        stops: its last unloads must not leave the hook on, with no loop to end it)."""
        self._stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._end_stream()
