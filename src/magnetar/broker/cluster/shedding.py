"""Load shedding by the leader (Pulsar's ``OverloadShedder``): which bundles to move off
overloaded brokers, as a pure choice, and the leader's periodic task that acts on it.

A broker is overloaded when its CPU use in its last load report (percent of all its
cores) is above ``loadBalancerBrokerOverloadedThresholdPercentage``. From each overloaded
broker that owns more than one bundle, one bundle is unloaded per round (its clients
follow it to the least-loaded other broker, see `ClusterCoordinator.unload`); a bundle
moved by shedding is left alone for ``loadBalancerSheddingGracePeriodMinutes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from magnetar.broker.cluster.records import BrokerData

log = logging.getLogger(__name__)


def bundles_to_shed(brokers: Mapping[str, BrokerData], threshold_percent: float,
                    recently_moved: Mapping[str, float], now: float,
                    grace_s: float) -> list[tuple[str, str]]:
    """``(broker id, "tenant/ns/0xL_0xU")`` to unload this round."""
    if len(brokers) < 2:
        return []  # nowhere to move anything
    out = []
    for broker_id in sorted(brokers):
        data = brokers[broker_id]
        if data.cpu_percent <= threshold_percent or len(data.bundles) < 2:
            continue
        for bundle in sorted(data.bundles):
            if now - recently_moved.get(bundle, float("-inf")) >= grace_s:
                out.append((broker_id, bundle))
                break
    return out


class Shedder:
    """The leader's shedding rounds, every ``interval_s``; ``unload(broker_id, bundle)``
    asks that broker to unload the bundle (its admin call)."""

    def __init__(self, is_leader: Callable[[], bool],
                 live: Callable[[], Awaitable[dict[str, BrokerData]]],
                 unload: Callable[[str, str], Awaitable[None]], interval_s: float,
                 threshold_percent: float, grace_s: float) -> None:
        self.is_leader = is_leader
        self.live = live
        self.unload = unload
        self.interval_s = interval_s
        self.threshold = threshold_percent
        self.grace_s = grace_s
        self.moved: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def round(self) -> list[tuple[str, str]]:
        """One shedding round (the leader only): the bundles it unloaded."""
        if not self.is_leader():
            return []
        now = time.monotonic()
        chosen = bundles_to_shed(await self.live(), self.threshold, self.moved, now,
                                 self.grace_s)
        for broker_id, bundle in chosen:
            log.info("shedding bundle %s off overloaded broker %s", bundle, broker_id)
            self.moved[bundle] = now
            try:
                await self.unload(broker_id, bundle)
            except Exception as exc:
                log.warning("shedding %s off %s failed: %s", bundle, broker_id, exc)
        return chosen

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.round()
            except Exception as exc:
                log.warning("load shedding round failed: %s", exc)
