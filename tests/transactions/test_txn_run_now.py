"""`run_now`'s hand-over: a coordinator command started at once and suspended goes on in a
task exactly as if the task had run it from its start (results, wake-ups, cancellation)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.broker.connection.transactions import _resume


def test_a_started_coroutine_goes_on_in_a_task() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        first: asyncio.Future[int] = loop.create_future()
        seen: list[object] = []

        async def work() -> None:
            seen.append("start")
            seen.append(await first)
            await asyncio.sleep(0)  # a bare turn of the loop (yields None)
            second: asyncio.Future[str] = loop.create_future()
            loop.call_soon(second.set_result, "later")
            seen.append(await second)

        coro = work()
        waiting = coro.send(None)
        assert waiting is first and seen == ["start"]
        task = loop.create_task(_resume(coro, waiting))
        await asyncio.sleep(0)
        assert not task.done()
        first.set_result(7)
        await asyncio.wait_for(task, 10)
        assert seen == ["start", 7, "later"]

    asyncio.run(main())


def test_cancelling_the_task_cancels_the_coroutine_where_it_waits() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        first: asyncio.Future[int] = loop.create_future()
        seen: list[str] = []

        async def work() -> None:
            try:
                await first
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        coro = work()
        task = loop.create_task(_resume(coro, coro.send(None)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        assert seen == ["cancelled"] and first.cancelled()

    asyncio.run(main())


def test_a_failure_after_the_hand_over_reaches_the_task() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        first: asyncio.Future[int] = loop.create_future()

        async def work() -> None:
            await first
            raise ValueError("after the wait")

        coro = work()
        task = loop.create_task(_resume(coro, coro.send(None)))
        first.set_result(1)
        with pytest.raises(ValueError, match="after the wait"):
            await asyncio.wait_for(task, 10)

    asyncio.run(main())
