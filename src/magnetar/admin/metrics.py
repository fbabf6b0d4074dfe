"""``/metrics``: Prometheus text exposition with Pulsar's metric names, built in pieces.

Per topic (labels ``cluster``, ``namespace``, ``topic``; `TOPIC_SERIES`): ``pulsar_rate_in``,
``pulsar_rate_out``, ``pulsar_throughput_in``, ``pulsar_throughput_out``,
``pulsar_msg_backlog``, ``pulsar_storage_size``, ``pulsar_producers_count``,
``pulsar_consumers_count``, ``pulsar_subscriptions_count``, ``pulsar_in_messages_total``,
``pulsar_in_bytes_total``; per subscription (plus ``subscription``; `SUBSCRIPTION_SERIES`):
``pulsar_subscription_back_log``, ``pulsar_subscription_consumers_count``,
``pulsar_subscription_msg_rate_out``; per geo-replicated topic and remote cluster (plus
``remote_cluster``; `REPLICATION_SERIES`): ``pulsar_replication_rate_in``, ``_rate_out``,
``_throughput_in``, ``_throughput_out``, ``_backlog``, ``_connected_count``,
``_rate_expired``, ``_delay_in_seconds``. With ``exposeTopicLevelMetricsInPrometheus=false``
the topic series are summed per namespace (labels ``cluster``, ``namespace``; the
replication series per namespace and ``remote_cluster``, the delay as the largest) and the
subscription series left out, as Pulsar does. With
``exposeConsumerLevelMetricsInPrometheus=true`` (topic level only), per consumer (plus
``consumer_name``, ``consumer_id``; `CONSUMER_SERIES`): ``pulsar_consumer_available_permits``,
``pulsar_consumer_unacked_messages``, ``pulsar_consumer_blocked_on_unacked_messages``.

Per broker (label ``cluster``; `BROKER_GAUGES`, `BROKER_HISTOGRAMS`): ``pulsar_topics_count``,
``pulsar_active_connections``, Magnetar's ``magnetar_loaded_topics``,
``magnetar_publish_buffer_bytes``, ``magnetar_open_segment_files``, the data directory's disk
(``magnetar_disk_read_only``, ``magnetar_disk_usage_ratio``, ``magnetar_disk_free_bytes``), and the storage histograms
``magnetar_fsync_latency_seconds`` and ``magnetar_group_commit_size``.

Theory of operation. A scrape of 10,000 topics is over 100,000 lines: built in one go on
the event loop it held every producer up for over a second. `MetricsBuilder` reads the
topics `CHUNK` at a time and writes the text `CHUNK` lines at a time, giving the loop back
(``await asyncio.sleep(0)``) between pieces, so sends are answered meanwhile, and the
response is written piece by piece; the per-topic part is kept for ``magnetarMetricsCacheSeconds`` (Prometheus scrapes every 15-30 s; rates
change every ``statsUpdateFrequencyInSecs``), and scrapes that arrive while it is being
built wait for that one build. The per-broker part is read at every scrape.

Adding a series: a broker-wide gauge is one `BrokerGauge` appended to `BROKER_GAUGES` (a
name, its help, a function of the `BrokerService`); a per-topic one is a `Series` in
`TOPIC_SERIES` and its value in `_topic_row`, in the same position.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiohttp import web

from magnetar.admin.routing import RATES, SERVICE, RouteTable
from magnetar.broker.service import BrokerService
from magnetar.broker.topics.stats import RateTracker, replication_stats
from magnetar.broker.topics.topic import PersistentTopic, Topic
from magnetar.storage import metrics as storage_metrics

routes = RouteTable("metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: topics read, or lines written, between two yields to the event loop
CHUNK = 250


@dataclass(frozen=True)
class Series:
    """One metric family: its name (a counter's samples add ``_total``), help and type."""

    name: str
    doc: str
    kind: str = "gauge"

    def header(self) -> str:
        return f"# HELP {self.name} {self.doc}\n# TYPE {self.name} {self.kind}\n"

    @property
    def sample(self) -> str:
        return f"{self.name}_total" if self.kind == "counter" else self.name


#: per-topic series, in the order of `_topic_row`'s values (every one sums per namespace)
TOPIC_SERIES = (
    Series("pulsar_rate_in", "messages/s published to the topic"),
    Series("pulsar_rate_out", "messages/s dispatched from the topic"),
    Series("pulsar_throughput_in", "bytes/s published to the topic"),
    Series("pulsar_throughput_out", "bytes/s dispatched from the topic"),
    Series("pulsar_msg_backlog", "unacknowledged messages over all subscriptions"),
    Series("pulsar_storage_size", "bytes stored for the topic"),
    Series("pulsar_producers_count", "connected producers"),
    Series("pulsar_consumers_count", "connected consumers"),
    Series("pulsar_subscriptions_count", "subscriptions"),
    Series("pulsar_in_messages", "messages published since the topic was loaded", "counter"),
    Series("pulsar_in_bytes", "bytes published since the topic was loaded", "counter"),
)
SUBSCRIPTION_SERIES = (
    Series("pulsar_subscription_back_log", "unacknowledged messages of the subscription"),
    Series("pulsar_subscription_consumers_count", "consumers of the subscription"),
    Series("pulsar_subscription_msg_rate_out", "messages/s dispatched to the subscription"),
)
#: per topic and remote cluster (plus ``remote_cluster``), for geo-replicated topics, in the
#: order of `replication_rows`' values
REPLICATION_SERIES = (
    Series("pulsar_replication_rate_in", "messages/s received from the remote cluster"),
    Series("pulsar_replication_rate_out", "messages/s replicated to the remote cluster"),
    Series("pulsar_replication_throughput_in", "bytes/s received from the remote cluster"),
    Series("pulsar_replication_throughput_out", "bytes/s replicated to the remote cluster"),
    Series("pulsar_replication_backlog", "messages not yet replicated to the remote cluster"),
    Series("pulsar_replication_connected_count",
           "1 while the replicator's producer is connected to the remote cluster"),
    Series("pulsar_replication_rate_expired",
           "messages/s dropped for the remote cluster (message TTL, backlog quota)"),
    Series("pulsar_replication_delay_in_seconds",
           "age of the oldest message sent and not yet acknowledged by the remote cluster"),
)
#: namespace level: each series summed over the namespace's topics, but the delay (the largest)
_REPLICATION_MAX = {len(REPLICATION_SERIES) - 1}
CONSUMER_SERIES = (
    Series("pulsar_consumer_available_permits", "permits the consumer has left"),
    Series("pulsar_consumer_unacked_messages", "messages sent to the consumer, not acknowledged"),
    Series("pulsar_consumer_blocked_on_unacked_messages",
           "1 while the consumer is blocked at maxUnackedMessagesPerConsumer"),
)


@dataclass(frozen=True)
class BrokerGauge:
    """A broker-wide gauge (label ``cluster``), read at every scrape."""

    name: str
    doc: str
    value: Callable[[BrokerService], float]


BROKER_GAUGES: list[BrokerGauge] = [
    BrokerGauge("pulsar_topics_count", "topics loaded on this broker", lambda s: len(s.topics)),
    BrokerGauge("pulsar_active_connections", "open client connections",
                lambda s: len(s.connections)),
    BrokerGauge("magnetar_loaded_topics", "topics loaded in memory", lambda s: len(s.topics)),
    BrokerGauge("magnetar_publish_buffer_bytes", "payload bytes of sends not yet answered",
                lambda s: s.publish_buffer.bytes),
    BrokerGauge("magnetar_open_segment_files", "segment file descriptors open",
                lambda s: s.storage.open_file_count()),
    # the data directory's disk as of the last check (magnetarDiskCheckIntervalMillis)
    BrokerGauge("magnetar_disk_read_only",
                "1 while the data directory's disk is past magnetarDiskUsageThreshold "
                "(writes refused)", lambda s: 1.0 if s.disk.read_only else 0.0),
    BrokerGauge("magnetar_disk_usage_ratio", "fraction of the data directory's file system in use",
                lambda s: s.disk.last.used if s.disk.last else math.nan),
    BrokerGauge("magnetar_disk_free_bytes", "bytes free on the data directory's file system",
                lambda s: float(s.disk.last.free) if s.disk.last else math.nan),
]
BROKER_HISTOGRAMS: list[tuple[str, str, storage_metrics.Histogram]] = [
    ("magnetar_fsync_latency_seconds", "time of each fdatasync of a segment",
     storage_metrics.fsync_seconds),
    ("magnetar_group_commit_size", "write batches made durable by one fdatasync round",
     storage_metrics.group_commit_batches),
]


def _esc(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _num(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isfinite(value):
        return repr(value)
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def _topic_row(topic: Topic, rates: RateTracker) -> tuple[list[float], list[tuple[str, list[float]]]]:
    """A topic's `TOPIC_SERIES` values, and (name, `SUBSCRIPTION_SERIES` values) per subscription."""
    backlog = consumers = 0
    subs = []
    for name, sub in topic.subscriptions.items():
        sub_backlog = sub.backlog()
        backlog += sub_backlog
        consumers += len(sub.consumers)
        subs.append((name, [sub_backlog, len(sub.consumers), rates.rate("sub", topic.name, name)[0]]))
    rate_in = rates.rate("in", topic.name)
    rate_out = rates.rate("out", topic.name)
    size = topic.ledger.size_bytes() if isinstance(topic, PersistentTopic) else 0
    return [rate_in[0], rate_out[0], rate_in[1], rate_out[1], backlog, size,
            len(topic.producers), consumers, len(topic.subscriptions), topic.msg_in,
            topic.bytes_in], subs


def replication_rows(topic: Topic, rates: RateTracker) -> list[tuple[str, list[float]]]:
    """(remote cluster, `REPLICATION_SERIES` values) of each of ``topic``'s replicators."""
    return [(remote, [s["msgRateIn"], s["msgRateOut"], s["msgThroughputIn"],
                      s["msgThroughputOut"], s["replicationBacklog"], int(s["connected"]),
                      s["msgRateExpired"], s["replicationDelayInSeconds"]])
            for remote, s in replication_stats(topic, rates).items()]


def add_replication(lines: list[tuple[str, list[float]]],
                    namespaces: dict[tuple[str, str], list[float]] | None, labels: str,
                    namespace: str, rows: list[tuple[str, list[float]]]) -> None:
    """Note a topic's `replication_rows`: as lines labelled ``labels`` plus the remote
    cluster, or (``namespaces`` given) added into its namespace's totals."""
    for remote, values in rows:
        if namespaces is None:
            lines.append((f'{labels},remote_cluster="{_esc(remote)}"', values))
            continue
        total = namespaces.get((namespace, remote))
        if total is None:
            namespaces[(namespace, remote)] = list(values)
            continue
        for k, v in enumerate(values):
            total[k] = max(total[k], v) if k in _REPLICATION_MAX else total[k] + v


class MetricsBuilder:
    """Builds the exposition for one broker (module docstring)."""

    def __init__(self, service: BrokerService, rates: RateTracker, chunk: int = CHUNK) -> None:
        self.service = service
        self.rates = rates
        self.chunk = chunk
        config = service.config
        self.topic_level = bool(config.exposeTopicLevelMetricsInPrometheus)
        self.consumer_level = bool(config.exposeConsumerLevelMetricsInPrometheus) and self.topic_level
        self.cache_s = float(config.magnetarMetricsCacheSeconds)
        self._cached: tuple[float, list[bytes]] | None = None
        self._building: asyncio.Future[list[bytes]] | None = None
        self.builds = 0  # per-topic parts built (the rest of the scrapes used the cache)
        self.yields = 0  # times the last build gave the loop back

    async def scrape(self) -> str:
        """The whole exposition: the per-topic part (cached) and the per-broker part."""
        return b"".join([*await self.topic_part(), self.broker_part().encode()]).decode()

    async def topic_part(self) -> list[bytes]:
        """The per-topic part, in pieces of UTF-8 text (shared with other scrapes: do not
        change the list)."""
        now = time.monotonic()
        if self._cached is not None and now - self._cached[0] < self.cache_s:
            return self._cached[1]
        building = self._building
        if building is None or building.done():  # (done: its scrapes were all cancelled)
            building = self._building = asyncio.ensure_future(self._build())
        try:
            return await asyncio.shield(building)  # a scrape that goes away leaves it be
        finally:
            if self._building is building and building.done():
                self._building = None

    async def _pause(self) -> None:
        self.yields += 1
        await asyncio.sleep(0)

    async def _build(self) -> list[bytes]:
        started = time.monotonic()
        self.builds += 1
        self.yields = 0
        service, rates, chunk = self.service, self.rates, self.chunk
        cluster = _esc(service.config.clusterName)
        topic_labels: list[str] = []
        topic_rows: list[list[float]] = []
        sub_lines: list[tuple[str, list[float]]] = []
        consumer_lines: list[tuple[str, list[float]]] = []
        namespaces: dict[str, list[float]] = {}
        repl_lines: list[tuple[str, list[float]]] = []
        repl_namespaces: dict[tuple[str, str], list[float]] | None = (
            None if self.topic_level else {})
        for i, topic in enumerate(list(service.topics.values())):
            if i and i % chunk == 0:
                await self._pause()
            if service.topics.get(topic.name) is not topic:
                continue  # unloaded while we gave the loop back
            values, subs = _topic_row(topic, rates)
            namespace = _esc(topic.topic_name.namespace)
            labels = f'cluster="{cluster}",namespace="{namespace}",topic="{_esc(topic.name)}"'
            if getattr(topic, "replicators", None):  # geo-replicated
                add_replication(repl_lines, repl_namespaces, labels, namespace,
                                replication_rows(topic, rates))
            if not self.topic_level:
                total = namespaces.get(namespace)
                if total is None:
                    namespaces[namespace] = values
                else:
                    for k, v in enumerate(values):
                        total[k] += v
                continue
            topic_labels.append(labels)
            topic_rows.append(values)
            for name, sub_values in subs:
                sub_labels = f'{labels},subscription="{_esc(name)}"'
                sub_lines.append((sub_labels, sub_values))
                if self.consumer_level:
                    for consumer in topic.subscriptions[name].consumers:
                        consumer_lines.append((
                            f'{sub_labels},consumer_name="{_esc(consumer.name or "")}",'
                            f'consumer_id="{consumer.consumer_id}"',
                            [consumer.permits, consumer.unacked_messages,
                             int(consumer.blocked_on_unacked)]))
        if not self.topic_level:
            topic_labels = [f'cluster="{cluster}",namespace="{ns}"' for ns in namespaces]
            topic_rows = list(namespaces.values())
            repl_lines = [(f'cluster="{cluster}",namespace="{ns}",remote_cluster="{_esc(remote)}"',
                           values) for (ns, remote), values in (repl_namespaces or {}).items()]
        parts: list[bytes] = []
        await self._render(parts, TOPIC_SERIES, list(zip(topic_labels, topic_rows, strict=True)))
        if repl_lines:
            await self._render(parts, REPLICATION_SERIES, repl_lines)
        if self.topic_level:
            await self._render(parts, SUBSCRIPTION_SERIES, sub_lines)
        if self.consumer_level:
            await self._render(parts, CONSUMER_SERIES, consumer_lines)
        self._cached = (started, parts)
        return parts

    async def _render(self, parts: list[bytes], families: Iterable[Series],
                      rows: list[tuple[str, list[float]]]) -> None:
        written = 0
        for k, series in enumerate(families):
            parts.append(series.header().encode())
            sample = series.sample
            for start in range(0, len(rows), self.chunk):
                parts.append("".join(f"{sample}{{{labels}}} {_num(values[k])}\n"
                                     for labels, values in rows[start:start + self.chunk]
                                     ).encode())
                written += 1
                if written % 2 == 0:  # two pieces (2 x chunk lines) per turn
                    await self._pause()

    def broker_part(self) -> str:
        service = self.service
        labels = f'cluster="{_esc(service.config.clusterName)}"'
        out = []
        for gauge in BROKER_GAUGES:
            out.append(f"# HELP {gauge.name} {gauge.doc}\n# TYPE {gauge.name} gauge\n"
                       f"{gauge.name}{{{labels}}} {_num(gauge.value(service))}\n")
        for name, doc, histogram in BROKER_HISTOGRAMS:
            buckets, total = histogram.snapshot()
            out.append(f"# HELP {name} {doc}\n# TYPE {name} histogram\n")
            out.extend(f'{name}_bucket{{{labels},le="{le}"}} {count}\n' for le, count in buckets)
            out.append(f"{name}_count{{{labels}}} {buckets[-1][1]}\n"
                       f"{name}_sum{{{labels}}} {_num(total)}\n")
        return "".join(out)


_BUILDER: web.AppKey[MetricsBuilder] = web.AppKey("metrics_builder", MetricsBuilder)


def install_registry(app: web.Application) -> None:
    app[_BUILDER] = MetricsBuilder(app[SERVICE], app[RATES])


def builder(app: web.Application) -> MetricsBuilder:
    return app[_BUILDER]


@routes.route("GET", "/metrics/", "Prometheus metrics, as /metrics (the path in Pulsar's "
              "Prometheus examples).")
@routes.route("GET", "/metrics", "Prometheus metrics (text exposition format).")
async def metrics(request: web.Request) -> web.StreamResponse:
    """Streamed piece by piece: a 13 MB exposition is never joined into one buffer."""
    builder = request.app[_BUILDER]
    pieces = await builder.topic_part()
    tail = builder.broker_part().encode()
    response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE})
    response.content_length = sum(map(len, pieces)) + len(tail)
    await response.prepare(request)
    for piece in pieces:
        await response.write(piece)  # waits while the client's socket buffer is full
    await response.write(tail)
    await response.write_eof()
    return response
