"""`Deadlines`: keyed deadlines on one timer of the loop (a coordinator's transaction
timeouts): each expires once, in deadline order, unless dropped or set again; dropping
cancels nothing, and deadlines later than the earliest arm no timer."""

from __future__ import annotations

import asyncio
from typing import Any

from magnetar.broker.deadlines import Deadlines


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def wait_until(check: Any, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.005)


def test_deadlines_expire_in_order_unless_dropped_or_set_again() -> None:
    async def go() -> list[str]:
        expired: list[str] = []
        deadlines: Deadlines[str] = Deadlines(asyncio.get_running_loop(), expired.append)
        deadlines.set("late", 0.09)
        deadlines.set("early", 0.03)
        deadlines.set("dropped", 0.01)
        deadlines.set("moved", 0.02)
        deadlines.drop("dropped")
        deadlines.set("moved", 0.06)  # replaces its earlier deadline
        assert len(deadlines) == 3 and "dropped" not in deadlines
        await wait_until(lambda: len(expired) == 3)
        await asyncio.sleep(0.05)  # nothing more comes (the dropped one, a second "moved")
        assert len(deadlines) == 0
        return expired

    assert run(go()) == ["early", "moved", "late"]


def test_one_timer_for_many_deadlines_and_none_rearmed_when_dropped() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        armed: list[float] = []  # (a timer is cancelled only when another is armed)
        real_call_at = loop.call_at

        def call_at(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            if getattr(callback, "__self__", None) is deadlines:
                armed.append(when)
            return real_call_at(when, callback, *args, **kwargs)

        loop.call_at = call_at  # type: ignore[method-assign]
        expired: list[int] = []
        deadlines: Deadlines[int] = Deadlines(loop, expired.append)
        for key in range(1000):  # a coordinator's transactions, all with one timeout
            deadlines.set(key, 0.2)
            if key < 999:
                deadlines.drop(key)  # each ends before its deadline
        assert len(armed) == 1
        assert len(deadlines._heap) < 200  # the dropped ones do not pile up
        await wait_until(lambda: expired == [999])
        assert len(armed) <= 2  # no timer for the dropped ones (one more: after the
        # first deadline's time, the live one's, a few ms later)
        deadlines.set(5, 0.0)
        await wait_until(lambda: expired == [999, 5])

    run(go())


def test_clear_forgets_every_deadline() -> None:
    async def go() -> list[int]:
        expired: list[int] = []
        deadlines: Deadlines[int] = Deadlines(asyncio.get_running_loop(), expired.append)
        for key in range(5):
            deadlines.set(key, 0.01)
        deadlines.clear()
        await asyncio.sleep(0.05)
        return expired

    assert run(go()) == []
