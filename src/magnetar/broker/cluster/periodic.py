"""`Periodic`: one coroutine function run every ``interval_s`` on the event loop until
stopped, a failed round logged and the next one tried (the registry's load report, the
leader's shedding rounds)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Periodic:
    """``start()`` schedules ``work`` every ``interval_s`` (the first run one interval after
    the start); ``stop()`` cancels it and waits for it to end. ``what`` names the work in
    the warning logged when a round raises."""

    def __init__(self, what: str, interval_s: float,
                 work: Callable[[], Awaitable[object]]) -> None:
        self.what = what
        self.interval_s = interval_s
        self.work = work
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # asyncio.wait, not `await task` under suppress(CancelledError): that would
            # swallow a cancellation aimed at whoever is stopping us, too
            await asyncio.wait([task])

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.work()
            except Exception as exc:  # the store or a peer is down: the next round retries
                log.warning("%s failed: %s", self.what, exc or type(exc).__name__)
