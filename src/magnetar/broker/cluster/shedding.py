"""Load shedding by the leader (Pulsar's ``OverloadShedder``): which bundles to move off
overloaded brokers, as a pure choice, and the leader's periodic task that acts on it.

A broker's load is its most used resource in its last load report (CPU, memory, bandwidth
in, bandwidth out, each in percent of its limit: `BrokerData.max_resource_usage`). A broker
is overloaded when that is above ``loadBalancerBrokerOverloadedThresholdPercentage``. From
an overloaded broker, the leader unloads enough of its traffic to bring it back under the
threshold with a margin of 5 points: the share to move is ``load - threshold + 5`` percent
of the broker's message throughput (bytes/s in + out), taken from its busiest bundles first
(by their throughput in the report's ``lastStats``), at least one bundle and never the
broker's last one. A bundle moved by shedding is left alone for
``loadBalancerSheddingGracePeriodMinutes``. The unloaded bundles' clients follow them to
the least-loaded other broker (`ClusterCoordinator.unload`, `placement.least_loaded`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from magnetar.broker.cluster.periodic import Periodic
from magnetar.broker.cluster.records import BrokerData, BundleStats

log = logging.getLogger(__name__)

#: percentage points shed beyond the threshold, so that a broker does not sit on its edge
#: (Pulsar's OverloadShedder margin)
MARGIN_PERCENT = 5.0
#: the strategy implemented (``loadBalancerLoadSheddingStrategy``)
OVERLOAD_SHEDDER = "org.apache.pulsar.broker.loadbalance.impl.OverloadShedder"


def bundles_to_shed(brokers: Mapping[str, BrokerData], threshold_percent: float,
                    recently_moved: Mapping[str, float], now: float,
                    grace_s: float) -> list[tuple[str, str]]:
    """``(broker id, "tenant/ns/0xL_0xU")`` to unload this round."""
    if len(brokers) < 2:
        return []  # nowhere to move anything
    out: list[tuple[str, str]] = []
    for broker_id in sorted(brokers):
        data = brokers[broker_id]
        load = data.max_resource_usage
        if load <= threshold_percent or len(data.bundles) < 2:
            continue
        share = min(load - threshold_percent + MARGIN_PERCENT, 100.0) / 100.0
        to_move = data.throughput * share

        def traffic(bundle: str, data: BrokerData = data) -> float:
            return data.bundle_stats.get(bundle, BundleStats()).throughput

        candidates = sorted((b for b in data.bundles
                             if now - recently_moved.get(b, float("-inf")) >= grace_s),
                            key=lambda b: (-traffic(b), b))
        moved = 0.0
        chosen: list[str] = []
        for bundle in candidates:
            if len(chosen) == len(data.bundles) - 1:
                break  # the broker keeps one bundle
            if chosen and moved >= to_move:
                break
            chosen.append(bundle)
            moved += traffic(bundle)
        log.debug("broker %s at %.1f%% (over %.1f%%): shedding %s (%.0f of %.0f bytes/s)",
                  broker_id, load, threshold_percent, chosen, moved, to_move)
        out.extend((broker_id, bundle) for bundle in chosen)
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
        self.threshold = threshold_percent
        self.grace_s = grace_s
        self.moved: dict[str, float] = {}
        self._rounds = Periodic("load shedding round", interval_s, self.round)

    def start(self) -> None:
        self._rounds.start()

    async def stop(self) -> None:
        await self._rounds.stop()

    async def round(self) -> list[tuple[str, str]]:
        """One shedding round (the leader only): the bundles it unloaded."""
        if not self.is_leader():
            return []
        now = time.monotonic()
        brokers = await self.live()
        chosen = bundles_to_shed(brokers, self.threshold, self.moved, now, self.grace_s)
        for broker_id, bundle in chosen:
            log.info("shedding bundle %s off overloaded broker %s (load %.1f%%, threshold "
                     "%.1f%%)", bundle, broker_id, brokers[broker_id].max_resource_usage,
                     self.threshold)
            try:
                await self.unload(broker_id, bundle)
            except Exception as exc:  # tried again next round
                log.warning("shedding %s off %s failed: %s", bundle, broker_id, exc)
            else:
                self.moved[bundle] = now
        return chosen
