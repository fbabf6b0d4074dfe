"""`LoadSampler`: the measured part of this broker's load report (Pulsar's
``LocalBrokerData``): CPU, memory and bandwidth as ``{usage, limit}``, message rates and
throughputs in and out over the interval since the previous report, and the same per owned
bundle (``lastStats``), which is what the leader ranks bundles by when it sheds load.

Counters come from the broker's topics (messages and bytes published to each topic, and
dispatched to its subscriptions' consumers and sent by its geo-replicators: the counters
the topic stats use); a rate is
the growth of a counter since the previous sample over the time between the two. A topic
first seen counts from zero (its counters start when it loads here), so a bundle that has
just moved in shows its traffic at once. What is measured where Pulsar reads the OS:

- CPU: this process's CPU time over wall time, 100 per core (``cpu.limit`` = 100 x cores);
- memory: the process's resident set in MB; the limit is the machine's memory;
- bandwidth: the broker's message bytes in and out in KB/s (not the NIC's total traffic);
  the limit is ``loadBalancerOverrideBrokerNicSpeedGbps`` when set, else the speed the
  kernel reports for the physical network interfaces, else 0 (unknown: not counted).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.broker.cluster.records import BundleStats
from magnetar.broker.topics.stats import subscription_counters

if TYPE_CHECKING:
    from magnetar.broker.topics.topic import Topic

__all__ = ["LoadSampler", "TopicCounters", "memory_limit_mb", "nic_speed_kbps", "rss_mb",
           "topic_counters"]


@dataclass(frozen=True, slots=True)
class TopicCounters:
    """A loaded topic's totals since it loaded here."""

    msg_in: int = 0
    bytes_in: int = 0
    msg_out: int = 0
    bytes_out: int = 0
    producers: int = 0
    consumers: int = 0


def topic_counters(topic: Topic) -> TopicCounters:
    """A loaded topic's counters (published, what other clusters' replicators sent
    included; dispatched to its subscriptions, the consumers gone included, as the topic
    stats count them, and sent by its geo-replicators, as Pulsar counts replication in a
    bundle's rates)."""
    out_msgs = out_bytes = consumers = 0
    for sub in topic.subscriptions.values():
        msgs, size = subscription_counters(sub)
        out_msgs += msgs
        out_bytes += size
        consumers += len(sub.consumers)
    for replicator in getattr(topic, "replicators", {}).values():
        out_msgs += replicator.msg_out
        out_bytes += replicator.bytes_out
    return TopicCounters(topic.msg_in, topic.bytes_in, out_msgs, out_bytes,
                         len(topic.producers), consumers)


def rss_mb() -> float:
    """This process's resident set size in MB (0 where /proc is missing)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory_limit_mb() -> float:
    """The machine's memory in MB (0 when it cannot be read)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return 0.0


def nic_speed_kbps(override_gbps: float = 0.0, sys_net: Path = Path("/sys/class/net")) -> float:
    """The bandwidth limit in KB/s: ``override_gbps`` when positive, else the summed speed
    (Mbit/s) of the physical interfaces the kernel lists, else 0."""
    if override_gbps > 0:
        return override_gbps * 1e9 / 8 / 1024
    total = 0.0
    try:
        interfaces = list(sys_net.iterdir())
    except OSError:
        return 0.0
    for iface in interfaces:
        if not (iface / "device").exists():  # loopback, bridges, veths: not a NIC
            continue
        try:
            speed = int((iface / "speed").read_text().strip())
        except (OSError, ValueError):  # a link that is down answers EINVAL
            continue
        if speed > 0:
            total += speed * 1e6 / 8 / 1024
    return total


class LoadSampler:
    """Turns counters read at each report into the report's measured fields.

    ``sample(topics, bundle_of)``: ``topics`` maps each loaded topic to its counters,
    ``bundle_of`` names the owned bundle (``tenant/ns/0xL_0xU``) a topic belongs to (None:
    not an owned bundle's). ``cpu_seconds``, ``clock``, ``memory`` are injectable for tests.
    """

    def __init__(self, cores: int, nic_kbps: float, memory_limit: float,
                 cpu_seconds: Callable[[], float] = time.process_time,
                 clock: Callable[[], float] = time.monotonic,
                 memory: Callable[[], float] = rss_mb) -> None:
        self.cores = max(cores, 1)
        self.nic_kbps = nic_kbps
        self.memory_limit = memory_limit
        self._cpu_seconds = cpu_seconds
        self._clock = clock
        self._memory = memory
        self._last_cpu = cpu_seconds()
        self._last_time = clock()
        self._previous: dict[str, TopicCounters] = {}

    def sample(self, topics: Mapping[str, TopicCounters],
               bundle_of: Callable[[str], str | None],
               owned: Iterable[str] = ()) -> dict[str, Any]:
        """BrokerData fields measured since the previous sample (``owned``: the owned
        bundles, listed in ``lastStats`` even when idle)."""
        now, cpu = self._clock(), self._cpu_seconds()
        elapsed = max(now - self._last_time, 1e-6)
        cpu_used = 100.0 * (cpu - self._last_cpu) / elapsed
        self._last_time, self._last_cpu = now, cpu
        per_bundle: dict[str, list[float]] = {name: [0.0] * 7 for name in owned}
        msg_in = msg_out = bytes_in = bytes_out = 0.0
        producers = consumers = 0
        zero = TopicCounters()
        previous = self._previous
        for name, c in topics.items():
            before = previous.get(name, zero)
            # counters only grow while a topic stays loaded; max() guards a reload
            r_msg_in = max(0, c.msg_in - before.msg_in) / elapsed
            r_msg_out = max(0, c.msg_out - before.msg_out) / elapsed
            r_bytes_in = max(0, c.bytes_in - before.bytes_in) / elapsed
            r_bytes_out = max(0, c.bytes_out - before.bytes_out) / elapsed
            msg_in += r_msg_in
            msg_out += r_msg_out
            bytes_in += r_bytes_in
            bytes_out += r_bytes_out
            producers += c.producers
            consumers += c.consumers
            bundle = bundle_of(name)
            if bundle is None:
                continue
            acc = per_bundle.get(bundle)
            if acc is None:
                acc = per_bundle[bundle] = [0.0] * 7
            acc[0] += r_msg_in
            acc[1] += r_msg_out
            acc[2] += r_bytes_in
            acc[3] += r_bytes_out
            acc[4] += c.producers
            acc[5] += c.consumers
            acc[6] += 1
        self._previous = dict(topics)
        return {
            "cpu_usage": cpu_used, "cpu_limit": 100.0 * self.cores,
            "memory_usage": self._memory(), "memory_limit": self.memory_limit,
            "bandwidth_in_usage": bytes_in / 1024, "bandwidth_in_limit": self.nic_kbps,
            "bandwidth_out_usage": bytes_out / 1024, "bandwidth_out_limit": self.nic_kbps,
            "msg_rate_in": msg_in, "msg_rate_out": msg_out,
            "msg_throughput_in": bytes_in, "msg_throughput_out": bytes_out,
            "num_topics": len(topics), "num_producers": producers, "num_consumers": consumers,
            "bundle_stats": {name: BundleStats(a[0], a[1], a[2], a[3], int(a[4]), int(a[5]),
                                               int(a[6]))
                             for name, a in sorted(per_bundle.items())},
        }
