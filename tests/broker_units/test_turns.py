"""`TurnShare`: the periodic rounds' one budget per turn of the event loop (pure asyncio,
timed by a clock that moves one unit per unit of work)."""

from __future__ import annotations

import asyncio
from itertools import pairwise

from magnetar.broker.turns import BUSY_AFTER_S, TurnShare


def _turns_of(rounds: int, units: int, budget: float) -> tuple[list[list[str]], TurnShare]:
    """Run ``rounds`` rounds of ``units`` units each on one share; the units done in each
    turn of the loop (a marker callback rescheduled every turn), by round."""
    ticks = [0.0]
    share = TurnShare(budget, clock=lambda: ticks[0])
    log: list[str] = []

    async def one_round(tag: str) -> None:
        for _ in range(units):
            await share.pause()
            ticks[0] += 1.0
            log.append(tag)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = asyncio.gather(*(one_round(chr(ord("a") + i)) for i in range(rounds)))

        def mark() -> None:
            log.append("|")
            if not done.done():
                loop.call_soon(mark)

        loop.call_soon(mark)
        await done

    asyncio.run(main())
    per_turn = [list(part) for part in "".join(log).split("|")]
    return per_turn, share


def test_rounds_running_at_once_share_one_budget_per_turn() -> None:
    """Three rounds started together: a turn holds the budget's units (3 of 2.5) and one
    more per round woken into it, never a budget per round; every round gets on."""
    per_turn, share = _turns_of(3, 30, 2.5)
    assert sum(len(t) for t in per_turn) == 90
    assert max(len(t) for t in per_turn) <= 3 + 2, per_turn
    assert share.turns >= 90 // 5
    # every round gets on in every turn the rounds work in until it is done: the first
    # woken may take the budget, the others still do one unit each (none waits for good)
    for tag in "abc":
        last = max(i for i, t in enumerate(per_turn) if tag in t)
        assert all(tag in t for t in per_turn[1:last] if t), (tag, per_turn)


def test_a_budget_of_nothing_is_one_unit_per_round_and_turn() -> None:
    """Budget 0: each round does one unit per turn (and never waits for good)."""
    per_turn, _ = _turns_of(2, 10, 0.0)
    assert sum(len(t) for t in per_turn) == 20
    assert all(len(t) <= 2 and len(set(t)) == len(t) for t in per_turn), per_turn


def test_a_round_alone_within_its_budget_never_waits() -> None:
    per_turn, share = _turns_of(1, 5, 100.0)
    assert share.turns == 0 and sum(len(t) for t in per_turn) == 5
    assert max(len(t) for t in per_turn) == 5


def test_once_the_budget_is_spent_the_rounds_rest_while_the_loop_serves_others() -> None:
    """After a spent budget the rounds wait `rest_s` of the loop's time, in which other
    work runs as many turns as it needs (a chain of callbacks here): a client's request
    that takes several turns is not held up by a budget of rounds in each of them."""
    async def main() -> tuple[list[float], int]:
        loop = asyncio.get_running_loop()
        share = TurnShare(0.0, rest_s=0.02)
        woke: list[float] = []
        others = [0]
        done = asyncio.Event()

        def other() -> None:
            others[0] += 1
            if not done.is_set():
                loop.call_soon(other)

        loop.call_soon(other)
        for _ in range(3):
            await share.pause()
            woke.append(loop.time())
        done.set()
        return woke, others[0]

    woke, others = asyncio.run(main())
    assert all(b - a >= 0.015 for a, b in pairwise(woke)), woke
    assert others >= 10  # (the other work went on, turn after turn, meanwhile)


def test_while_the_broker_is_busy_the_rounds_rest_on_up_to_the_hold() -> None:
    """While ``busy`` says clients' requests are under way (topics loading), a rested
    round does not wake: it rests again, until ``busy`` is false or it has held
    ``hold_s`` in a row (then it takes its turn: it never waits for good)."""
    async def main() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        busy = [True]
        share = TurnShare(0.0, rest_s=0.005, busy=lambda: busy[0], hold_s=0.1)
        await share.pause()  # (the first pause begins a turn's budget of nothing)
        started = loop.time()
        await share.pause()  # busy throughout: held until hold_s
        held = loop.time() - started
        loop.call_later(0.03, busy.__setitem__, 0, False)
        started = loop.time()
        await share.pause()  # busy for 30 ms, then not: woken at the next rest after it
        freed = loop.time() - started
        share.busy_now()  # a request served in part: busy for BUSY_AFTER_S from now
        started = loop.time()
        await share.pause()
        after = loop.time() - started
        return held, freed, after

    held, freed, after = asyncio.run(main())
    assert held >= 0.095, held
    assert 0.025 <= freed < 0.09, freed
    assert BUSY_AFTER_S - 0.001 <= after < 0.09, after  # (not woken by the first rest)
