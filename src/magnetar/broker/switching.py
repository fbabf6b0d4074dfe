"""How soon a broker's own threads get the interpreter back from a busy event loop.

CPython lets one thread run Python code at a time (the GIL). A thread that wants it while
another runs asks, and the runner hands it over only once the *switch interval*
(``sys.setswitchinterval``, 5 ms by default) has passed. The broker's threads each need
it briefly after their disk call returns: the flusher after each fdatasync of a group
commit, the fresh-segment pool after each new segment's sync, the readers after each
read. While the event loop idles in ``epoll_wait`` they get it at once; while it is
busy (a periodic round over 100,000 topics working in slices: housekeeping, the rate
sample, the sweep, one after the other with no pause between them) each of those
hand-backs waited up to 5 ms, one after the other. A group commit of a few dozen fresh
segments then took 100-500 ms, and every send waiting for it as long: the stall every 60 s
while topics were created (bench/many_topics_bench.py, docs/internals.md "Fifth look").

So a running broker sets a shorter interval (``magnetarThreadSwitchIntervalMicros``, 500 µs
by default): a thread waits at most that long for each hand-back. A switch costs a few
microseconds, and one is made only when a thread is waiting. The setting is the
process's: the first broker started sets it and the last one stopped puts back what was
there before (brokers embedded in one process, as the tests run them).
"""

from __future__ import annotations

import sys

__all__ = ["ThreadSwitching"]

#: the brokers of this process that set the interval, and what was set before the first
_holders: list[ThreadSwitching] = []
_before: list[float] = []


class ThreadSwitching:
    """The switch interval one broker asks for while it runs (``interval_us`` µs; 0 or
    less: leave the interpreter's own)."""

    __slots__ = ("holding", "interval_s")

    def __init__(self, interval_us: int) -> None:
        self.interval_s = interval_us / 1_000_000
        self.holding = False

    def start(self) -> None:
        """Set the interval (the shortest any running broker asked for); idempotent."""
        if self.holding or self.interval_s <= 0:
            return
        if not _holders:
            _before.append(sys.getswitchinterval())
        _holders.append(self)
        self.holding = True
        sys.setswitchinterval(min(holder.interval_s for holder in _holders))

    def stop(self) -> None:
        """This broker no longer asks; once none does, the interval from before is back."""
        if not self.holding:
            return
        self.holding = False
        _holders.remove(self)
        if _holders:
            sys.setswitchinterval(min(holder.interval_s for holder in _holders))
        else:
            sys.setswitchinterval(_before.pop())
