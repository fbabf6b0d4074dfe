"""Keeping CPython's full garbage collections short while many topics are loaded.

A full (generation 2) collection walks every container object the collector tracks, and
holds the event loop meanwhile: with 100,000 loaded topics that was up to a second in
which no send was answered. What a topic load builds lives until the topic is unloaded,
and an unloaded topic is freed by reference counting (`PersistentTopic.release` breaks
its cycles), so the collector need not look at it: `HeapFreezer` moves what the loads
built into the permanent generation (``gc.freeze``) once a burst of loads pauses, after
collecting the young generations so that fresh garbage is not frozen with it. A full
collection then walks only what was made since the last freeze. See docs/internals.md
("Many topics").
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

log = logging.getLogger(__name__)

#: freeze once no topic has loaded for this long...
SETTLE_S = 0.5
#: ... or at the latest this long after the load that made a freeze due
MAX_WAIT_S = 3.0


class HeapFreezer:
    """Counts topic loads; once ``loads_per_freeze`` more topics are loaded than at the
    last freeze (0: never), and loads pause for `SETTLE_S` (or `MAX_WAIT_S` at the latest),
    collects the young generations and freezes what is left. Use from the event loop."""

    __slots__ = ("_due_since", "_floor", "_handle", "_last_load", "_loaded", "freezes", "loads",
                 "loads_per_freeze")

    def __init__(self, loads_per_freeze: int) -> None:
        self.loads_per_freeze = loads_per_freeze
        self.loads = 0  # topics loaded now less the fewest loaded since the last freeze
        self.freezes = 0
        self._floor = 0  # the fewest topics loaded since the last freeze
        self._loaded = 0  # topics loaded at the last load
        self._last_load = 0.0
        self._due_since = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def topic_loaded(self, loaded: int) -> None:
        """A topic was loaded (built on the loop); ``loaded`` topics are loaded now. A
        freeze becomes due once that many more topics are loaded than the fewest since the
        last freeze: topics loaded and unloaded again (the idle-topic sweep) make none."""
        if self.loads_per_freeze <= 0:
            return
        self._loaded = loaded
        self._floor = min(self._floor, loaded - 1)
        self.loads = loaded - self._floor
        now = time.monotonic()
        self._last_load = now
        if self.loads >= self.loads_per_freeze and self._handle is None:
            self._due_since = now
            self._handle = asyncio.get_running_loop().call_later(SETTLE_S, self._check)

    def _check(self) -> None:
        self._handle = None
        now = time.monotonic()
        quiet = now - self._last_load
        if quiet < SETTLE_S and now - self._due_since < MAX_WAIT_S:
            self._handle = asyncio.get_running_loop().call_later(SETTLE_S - quiet, self._check)
            return
        self.freeze()

    def freeze(self) -> None:
        """Collect the young generations, then freeze every object the collector tracks.
        Never ask ``gc.get_freeze_count()`` here: it counts the permanent generation by
        walking it, one object at a time, holding the loop (~80 ms at 30,000 loaded
        topics, a few hundred at 100,000; once per `loads_per_freeze` loads)."""
        started = time.perf_counter()
        gc.collect(1)
        gc.freeze()
        self.freezes += 1
        loads, self.loads = self.loads, 0
        self._floor = self._loaded
        log.debug("froze the heap after %d topic loads (%.1f ms)",
                  loads, (time.perf_counter() - started) * 1000)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
