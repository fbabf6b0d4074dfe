"""`TurnShare`: one budget of the event loop, per turn, for the periodic rounds over every
topic.

Several rounds walk every loaded (or stored) topic on the loop: the housekeeping round,
the inactivity round, the idle-topic sweep, the rate sample. Each was sliced on its own,
handing the loop back after a slice of work; but their timers start with the broker, so
with the same interval (60 s by default) they start at the same moment, and each then
took its own slice in every turn of the loop. A turn held all of their slices: at 30,000
topics, after a burst of unloads had given the sweep work, the loop's turns were 8-23 ms
for about a second after each minute's mark, and a live send, which spans a few turns,
took 16-112 ms (session 28). Now they share one budget per turn: before each unit of
work a round awaits `pause`, which goes on at once while the turn's budget lasts, else
waits (`next_turn`) for a later turn of the loop, after that turn's ready callbacks and
I/O (the sends, the receipts). The rounds then take longer when they overlap, the same
work over more turns; a turn holds one budget of them, plus one unit for each round
woken into it (a woken round always does one, so none waits for good).

Once a budget is spent, the rounds rest `TURN_REST_S` of the loop's time before the next
(the loop serves only its clients meanwhile, as many turns as they need). Waking them in
the very next turn made every turn a busy loop took hold 2 ms of them for the seconds the
rounds last at 100,000 topics (housekeeping, sweep and rate sample at the same minute's
mark): a producer creation on a new topic, which waits for the loop's turn at each of its
hand-offs (lookup, load, the ledger's files made on threads), took 22 ms against 3 ms
(session 29). The rounds then take at most about half of a busy loop, and twice as long.

While clients' requests are under way that hand off several times on the loop (a topic
loading: a producer or consumer on a new or unloaded topic), the rounds rest on
(`busy`), up to `TURN_HOLD_S` in a row: each hand-off of such a request found a 2 ms
slice of the rounds in its turn about half the time, and a producer creation during the
rounds at 30,000 topics took 7.7 ms against 2.8 ms outside them, and 2.9 ms with the
rounds resting on (which then took 4.1 s instead of 0.7 s while creations never stopped;
session 30).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["BUSY_AFTER_S", "TURN_BUDGET_S", "TURN_HOLD_S", "TURN_REST_S", "TurnShare"]

#: the periodic rounds' work per turn of the event loop, all of them together
TURN_BUDGET_S = 0.002
#: seconds the rounds wait once a turn's budget is spent (0: the very next turn)
TURN_REST_S = 0.002
#: how long the rounds may keep resting while the broker is busy with clients' requests
TURN_HOLD_S = 0.02
#: how long the broker counts as busy after `TurnShare.busy_now`
BUSY_AFTER_S = 0.01


class TurnShare:
    """The periodic rounds' shared budget per turn of the event loop (see the module)."""

    __slots__ = ("_budget_s", "_busy_at", "_clock", "_end", "_held_since", "_waiting", "busy",
                 "hold_s", "rest_s", "turns")

    def __init__(self, budget_s: float = TURN_BUDGET_S,
                 clock: Callable[[], float] = time.perf_counter,
                 rest_s: float = TURN_REST_S, busy: Callable[[], bool] | None = None,
                 hold_s: float = TURN_HOLD_S) -> None:
        self._budget_s = budget_s
        self.rest_s = rest_s  # (real seconds of the loop's clock, whatever ``clock`` is)
        # whether clients' requests are under way (topics loading), or were within
        # `BUSY_AFTER_S` of `busy_now`: the rounds rest on, up to ``hold_s`` in a row, so
        # that those requests' hand-offs find the loop free
        self.busy = busy
        self.hold_s = hold_s
        self._held_since: float | None = None
        self._busy_at = float("-inf")
        self._clock = clock
        self._end: float | None = None  # when this turn's budget ends (None: not begun)
        self._waiting: asyncio.Future[None] | None = None  # resolved by the next turn
        self.turns = 0  # turns the rounds waited for

    @property
    def budget_s(self) -> float:
        """The rounds' work per turn of the loop, in seconds."""
        return self._budget_s

    @budget_s.setter
    def budget_s(self, value: float) -> None:
        self._budget_s = value
        self._end = None  # (this turn's budget begins again, under the new value)

    def spent(self) -> bool:
        """Whether this turn's budget is used up: the first call of a turn begins it."""
        now = self._clock()
        end = self._end
        if end is None:
            end = self._end = now + self._budget_s
        return now >= end

    async def next_turn(self) -> None:
        """Wait for a later turn of the loop, `rest_s` from now, whose budget begins
        afresh. Every round waiting meanwhile waits for the same turn (one callback
        scheduled)."""
        waiting = self._waiting
        if waiting is None:
            loop = asyncio.get_running_loop()
            waiting = self._waiting = loop.create_future()
            if self.rest_s > 0:
                loop.call_later(self.rest_s, self._advance)
            else:
                loop.call_soon(self._advance)
        await waiting

    async def pause(self) -> bool:
        """Between two units of a round's work: go on at once while this turn's budget
        lasts, else wait for a later turn (True). A round that waited does one unit at
        least in the turn it wakes in, spent or not: rounds that woke together each do
        one, and none waits for good behind the others."""
        if not self.spent():
            return False
        await self.next_turn()
        self.spent()  # (begins the new turn's budget, if no round woken before did)
        return True

    def busy_now(self) -> None:
        """A client's request was just served in part (a topic loaded; its producer or
        consumer is attached next, and a client making topics makes the next): the broker
        counts as `busy` for `BUSY_AFTER_S`."""
        self._busy_at = time.monotonic()

    def _advance(self) -> None:
        busy = self.busy
        if busy is not None and self.rest_s > 0 and (
                busy() or time.monotonic() - self._busy_at < BUSY_AFTER_S):
            loop = asyncio.get_running_loop()
            now = loop.time()
            if self._held_since is None:
                self._held_since = now
            if now - self._held_since < self.hold_s:
                loop.call_later(self.rest_s, self._advance)
                return
        self._held_since = None
        waiting, self._waiting = self._waiting, None
        self._end = None
        self.turns += 1
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    def set_clock(self, clock: Callable[[], float]) -> None:
        """Time the budget with ``clock`` (tests: a clock that moves per unit of work)."""
        self._clock = clock
        self._end = None
