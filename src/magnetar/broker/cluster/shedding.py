"""Load shedding by the leader: which bundles to move off busy brokers, as pure choices
(Pulsar's two classic strategies, ``loadBalancerLoadSheddingStrategy``), and the leader's
periodic task that acts on them.

``OverloadShedder`` (the default): a broker's load is its most used resource in its last
load report (CPU, memory, bandwidth in, bandwidth out, each in percent of its limit:
`BrokerData.max_resource_usage`). A broker is overloaded when that is above
``loadBalancerBrokerOverloadedThresholdPercentage``; the leader then moves enough of its
traffic to bring it back under the threshold with a margin of 5 points: the share to move
is ``load - threshold + 5`` percent of the broker's message throughput (bytes/s in + out).

``ThresholdShedder``: each broker's usage is its most used resource weighted by
``loadBalancer{CPU,Memory,BandwithIn,BandwithOut}ResourceWeight``, smoothed over rounds
(``loadBalancerHistoryResourcePercentage`` of the previous value plus the rest of the new
one); a broker more than ``loadBalancerBrokerThresholdShedderPercentage`` points above the
cluster's average sheds ``usage - average - threshold + 5`` percent of its throughput,
unless that is below ``loadBalancerBundleUnloadMinThroughputThreshold`` MB/s.

Either way the traffic is taken from the broker's busiest bundles first (by their
throughput in the report's ``lastStats``), at least one bundle and never the broker's last
one; a bundle moved by shedding is left alone for ``loadBalancerSheddingGracePeriodMinutes``.
The unloaded bundles' clients follow them to the least-loaded other broker
(`ClusterCoordinator.unload`, `placement.least_loaded`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from magnetar.broker.cluster.periodic import Periodic
from magnetar.broker.cluster.records import BrokerData, BundleStats

log = logging.getLogger(__name__)

#: percentage points shed beyond the threshold, so that a broker does not sit on its edge
#: (Pulsar's OverloadShedder margin)
MARGIN_PERCENT = 5.0
#: the strategies implemented (``loadBalancerLoadSheddingStrategy``)
OVERLOAD_SHEDDER = "org.apache.pulsar.broker.loadbalance.impl.OverloadShedder"
THRESHOLD_SHEDDER = "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder"


def _pick(data: BrokerData, to_move: float, recently_moved: Mapping[str, float], now: float,
          grace_s: float) -> list[str]:
    """A broker's busiest bundles out of their grace period until ``to_move`` bytes/s are
    covered: at least one, never the last one."""

    def traffic(bundle: str) -> float:
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
    return chosen


def bundles_to_shed(brokers: Mapping[str, BrokerData], threshold_percent: float,
                    recently_moved: Mapping[str, float], now: float,
                    grace_s: float) -> list[tuple[str, str]]:
    """OverloadShedder: ``(broker id, "tenant/ns/0xL_0xU")`` to unload this round."""
    if len(brokers) < 2:
        return []  # nowhere to move anything
    out: list[tuple[str, str]] = []
    for broker_id in sorted(brokers):
        data = brokers[broker_id]
        load = data.max_resource_usage
        if load <= threshold_percent or len(data.bundles) < 2:
            continue
        share = min(load - threshold_percent + MARGIN_PERCENT, 100.0) / 100.0
        chosen = _pick(data, data.throughput * share, recently_moved, now, grace_s)
        log.debug("broker %s at %.1f%% (over %.1f%%): shedding %s", broker_id, load,
                  threshold_percent, chosen)
        out.extend((broker_id, bundle) for bundle in chosen)
    return out


@dataclass(frozen=True, slots=True)
class ThresholdSettings:
    """ThresholdShedder's keys (Pulsar's names and defaults)."""

    threshold_percent: float = 10.0  # loadBalancerBrokerThresholdShedderPercentage
    history: float = 0.9  # loadBalancerHistoryResourcePercentage
    cpu_weight: float = 1.0  # loadBalancerCPUResourceWeight
    memory_weight: float = 1.0  # loadBalancerMemoryResourceWeight
    bandwidth_in_weight: float = 1.0  # loadBalancerBandwithInResourceWeight
    bandwidth_out_weight: float = 1.0  # loadBalancerBandwithOutResourceWeight
    min_throughput: float = 10 * 2**20  # loadBalancerBundleUnloadMinThroughputThreshold, B/s

    def usage(self, data: BrokerData) -> float:
        """The broker's weighted most used resource, in percent."""
        u = data.usages
        return max(u["cpu"] * self.cpu_weight, u["memory"] * self.memory_weight,
                   u["bandwidthIn"] * self.bandwidth_in_weight,
                   u["bandwidthOut"] * self.bandwidth_out_weight)


def threshold_bundles_to_shed(brokers: Mapping[str, BrokerData], settings: ThresholdSettings,
                              history: dict[str, float], recently_moved: Mapping[str, float],
                              now: float, grace_s: float) -> list[tuple[str, str]]:
    """ThresholdShedder: the bundles to unload this round; ``history`` (each broker's
    smoothed usage) is updated in place, brokers that left are dropped from it."""
    for gone in set(history) - set(brokers):
        del history[gone]
    for broker_id, data in brokers.items():
        new = settings.usage(data)
        old = history.get(broker_id)
        history[broker_id] = new if old is None else \
            old * settings.history + (1 - settings.history) * new
    if len(brokers) < 2:
        return []
    average = sum(history.values()) / len(history)
    out: list[tuple[str, str]] = []
    for broker_id in sorted(brokers):
        data = brokers[broker_id]
        usage = history[broker_id]
        if usage <= average + settings.threshold_percent or len(data.bundles) < 2:
            continue
        share = min(usage - average - settings.threshold_percent + MARGIN_PERCENT, 100.0) / 100
        to_move = data.throughput * share
        if to_move < settings.min_throughput:
            continue
        out.extend((broker_id, b)
                   for b in _pick(data, to_move, recently_moved, now, grace_s))
    return out


class Shedder:
    """The leader's shedding rounds, every ``interval_s``; ``unload(broker_id, bundle)``
    asks that broker to unload the bundle (its admin call). ``threshold`` set: the
    ThresholdShedder with those settings; else the OverloadShedder at
    ``threshold_percent``."""

    def __init__(self, is_leader: Callable[[], bool],
                 live: Callable[[], Awaitable[dict[str, BrokerData]]],
                 unload: Callable[[str, str], Awaitable[None]], interval_s: float,
                 threshold_percent: float, grace_s: float,
                 threshold: ThresholdSettings | None = None) -> None:
        self.is_leader = is_leader
        self.live = live
        self.unload = unload
        self.threshold = threshold_percent
        self.threshold_settings = threshold
        self.grace_s = grace_s
        self.moved: dict[str, float] = {}
        self.history: dict[str, float] = {}  # ThresholdShedder's smoothed usages
        self._rounds = Periodic("load shedding round", interval_s, self.round)

    def start(self) -> None:
        self._rounds.start()

    async def stop(self) -> None:
        await self._rounds.stop()

    def choose(self, brokers: Mapping[str, BrokerData], now: float) -> list[tuple[str, str]]:
        if self.threshold_settings is not None:
            return threshold_bundles_to_shed(brokers, self.threshold_settings, self.history,
                                             self.moved, now, self.grace_s)
        return bundles_to_shed(brokers, self.threshold, self.moved, now, self.grace_s)

    async def round(self) -> list[tuple[str, str]]:
        """One shedding round (the leader only): the bundles it unloaded."""
        if not self.is_leader():
            self.history.clear()  # a new leader starts its averages afresh
            return []
        now = time.monotonic()
        brokers = await self.live()
        chosen = self.choose(brokers, now)
        for broker_id, bundle in chosen:
            log.info("shedding bundle %s off broker %s (load %.1f%%)", bundle, broker_id,
                     brokers[broker_id].max_resource_usage)
            try:
                await self.unload(broker_id, bundle)
            except Exception as exc:  # tried again next round
                log.warning("shedding %s off %s failed: %s", bundle, broker_id, exc)
            else:
                self.moved[bundle] = now
        return chosen
