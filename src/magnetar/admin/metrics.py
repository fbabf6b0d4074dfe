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
``magnetar_publish_buffer_bytes``, ``magnetar_open_segment_files``, the data directory's
disk (``magnetar_disk_read_only``, ``magnetar_disk_usage_ratio``,
``magnetar_disk_free_bytes``), the storage histograms ``magnetar_fsync_latency_seconds``
and ``magnetar_group_commit_size``, and what the last build of the per-topic part cost the
event loop (`BuildTimes`: ``magnetar_metrics_build_seconds``,
``magnetar_metrics_build_cpu_seconds``, ``magnetar_metrics_longest_slice_seconds``,
``magnetar_metrics_longest_slice_cpu_seconds``).

Theory of operation. A scrape of 10,000 topics is over 100,000 lines: built in one go on
the event loop it held every producer up for over a second. `MetricsBuilder` works in
units of a block of ``CHUNK * LINES_PER_CHUNK`` (1,000) topics (its values read, or the
labels of its new topics made) or one family's lines of a block (one piece), and gives the
loop back once another unit as long as the last would end past `SLICE_S` (5 ms) from the
slice's start: the first build after 100,000 topics were made gave it back after every
unit, ~650 times, and each give-back costs a pause and, on a busy machine, a wait for a
core. The response is written piece
by piece, the loop given back every `WRITE_YIELD_BYTES` (`write_pieces`). At each yield
the build sleeps `PAUSE_S` (1 ms): with ``sleep(0)`` the process
never blocks during a build, and on a busy machine (2 cores, load 4-5) the kernel then
queued it behind other processes: a send that arrived during a scrape waited 50-120 ms,
with 1 ms pauses 10 ms against 6 without a scrape. The topics are grouped by namespace
(the grouping and each topic's label text kept while the same topics stay loaded, in
dicts of strings, which the collector never tracks; a new topic's label made in C by a
``%`` template). A family's column of one value (an idle topic's rates, counts and
counters, alike across topics made alike) is written as one join of the labels.
`_gather_block` reads a block's values with C-level loops (``map`` over attribute getters
and the rates' ``dict.get``; `storage.ledger.state.sizes_bytes` for the segment files), so
an idle topic costs no Python frame: only topics with subscriptions are walked in Python.
Both levels read only what changed: the broker notes the name of each topic whose
figures may have changed (`broker.topics.changes`: appends, cursor moves, trims,
consumers, producers, subscriptions, loads, unloads, rates that moved). The namespace
level keeps its sums between builds (`metrics_totals.NamespaceTotals`) and reads again
only the noted topics, taking their last figures out of their namespace's sums and
putting the new ones in (no text per topic, no walk over the idle ones). The topic level
keeps each block's names, columns and lines (`_Block`): a block of the same topics none
of which was noted is taken as it is, unread; a block with a noted topic is read, and a
family's lines of it rendered again only when its column differs from the last build's.
Blocks whose topics moved (a topic loaded or unloaded before them in their namespace)
are read and written again. Whether the loaded topics are the ones last grouped is told
by the registry's count of its changes (`TopicRegistry.version`), never by a walk over
them (every topic object touched: 10-23 ms of the loop at 100,000 topics), and a build
that is to make caches for few topics is not framed as a bulk (`_bulk_topics`). Nothing
is allocated per topic that the collector tracks (the columns are a few lists per block): a first version kept a list and a tuple per
topic, and its survivors set off full garbage collections of the broker's heap in the
middle of scrapes. The per-topic part is kept for ``magnetarMetricsCacheSeconds``
(Prometheus scrapes every 15-30 s; rates change every ``statsUpdateFrequencyInSecs``), and
scrapes that arrive while it is being built wait for that one build. The per-broker part
is read at every scrape (`broker_tail`: the transaction gauges' walk over the topics, in
C-level loops and slices too).

Adding a series: a broker-wide gauge is one `BrokerGauge` appended to `BROKER_GAUGES` (a
name, its help, a function of the `BrokerService`); a per-topic one is a `Series` in
`TOPIC_SERIES` and its column in `_gather_block`, in the same position.
"""

from __future__ import annotations

import asyncio
import math
import operator
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from itertools import compress, islice, repeat
from operator import attrgetter

from aiohttp import web

from magnetar.admin.metrics_totals import NamespaceTotals
from magnetar.admin.routing import RATES, SERVICE, RouteTable
from magnetar.admin.transaction_participants import (
    add_participants,
    no_participants,
    participant_totals,
)
from magnetar.admin.transactions import txn_metrics
from magnetar.broker.heap import loaded_slices, topic_names
from magnetar.broker.service import BrokerService
from magnetar.broker.topics.stats import KindTable, RateTracker, rate_key, replication_stats
from magnetar.broker.topics.topic import PersistentTopic, Topic
from magnetar.storage import metrics as storage_metrics
from magnetar.storage.ledger.state import sizes_bytes

routes = RouteTable("metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: a unit of the build's work: labels made per yield for newly loaded topics (about 1 ms)
CHUNK = 250
#: topics per block, in chunks: a block's values are read in one slice (C-level loops, 1-3
#: ms for 1,000 idle topics read the first time), each family's lines of a block are one
#: piece (under 1 ms). Blocks of 2,000 made units of 6-12 ms in the first build after
#: 100,000 topics were made (every topic read and labelled), and a send, which waits for
#: two or three slices, 27-31 ms throughout it
LINES_PER_CHUNK = 4
#: a slice of the build goes on to its next unit of work (a block read, a family's lines of
#: a block, labels for a block of new topics) while that unit, reckoned as long as the last
#: one, would end within this many seconds of the slice's start; then the loop is given back
SLICE_S = 0.005
#: seconds the build sleeps at each yield: a loop that only ever yields with sleep(0) stays
#: runnable for the whole build, and on a busy machine the kernel then makes it wait its
#: turn behind other processes while sends queue up; sleeping lets them through at once
PAUSE_S = 0.001
#: bytes of the exposition written to the response between two yields of the loop (each a
#: copy into the socket's buffer, about a ms a MB on a loaded machine)
WRITE_YIELD_BYTES = 1 << 19


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
#: transactions, participant side (admin/transaction_participants.py), over the loaded
#: topics: (name, help, key of `participant_totals`), read once per scrape after `BROKER_GAUGES`
PARTICIPANT_GAUGES = (
    ("pulsar_txn_tb_active_total", "transactions open in the topics' buffers", "tb_active"),
    ("pulsar_txn_tb_committed_total", "transactions committed on the topics", "tb_committed"),
    ("pulsar_txn_tb_aborted_total", "transactions aborted on the topics", "tb_aborted"),
    ("pulsar_txn_tp_active_total", "transactions holding acks on subscriptions", "tp_active"),
    ("pulsar_txn_tp_committed_count_total",
     "transactions whose acks were committed on subscriptions", "tp_committed"),
    ("pulsar_txn_tp_aborted_count_total",
     "transactions whose acks were aborted on subscriptions", "tp_aborted"),
)
#: help of the last build's gauges (`BuildTimes`)
BUILD_DOCS = (
    "event-loop time of the last build of the per-topic part (its slices added up)",
    "CPU time of the loop thread in the last build of the per-topic part",
    "longest hold of the event loop in the last build of the per-topic part",
    "CPU time of that build's most expensive slice",
)
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


def _escaped(values: list[str]) -> list[str]:
    """`_esc` of each of ``values``: the same list when none needs it (one C-level scan)."""
    text = "".join(values)
    if "\\" in text or '"' in text or "\n" in text:
        return list(map(_esc, values))
    return values


def _num(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isfinite(value):
        return repr(value)
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def _texts(values: list[float]) -> Iterable[str]:
    """``values`` as exposition text: ``repr`` (an int's digits, a float's shortest
    round-trip form) unless one is not finite (then NaN, +Inf, -Inf as the format spells them)."""
    try:
        finite = math.isfinite(sum(values))  # NaN and infinities propagate into the sum
    except OverflowError:  # an int too large for a float
        finite = False
    return map(repr, values) if finite else map(_num, values)


class _Rows:
    """Samples gathered for some families: one label text per row (``...} ``, the closing
    brace and the space included) and one plain list of numbers per family: no container
    per row for the garbage collector to count and walk."""

    def __init__(self, families: int) -> None:
        self.labels: list[str] = []
        self.columns: list[list[float]] = [[] for _ in range(families)]

    def __len__(self) -> int:
        return len(self.labels)


_NAME = attrgetter("name")
_SUBS = attrgetter("subscriptions")
_NAMESPACE = attrgetter("topic_name.namespace")
_PRODUCERS = attrgetter("producers")
_LEDGER = attrgetter("ledger")
_MSG_IN = attrgetter("msg_in")
_BYTES_IN = attrgetter("bytes_in")


def _gather_block(topics: list[Topic], live: dict[str, Topic], rates: KindTable,
                  subscribed: list[Topic]) -> tuple[list[str], list[list[float]], bool]:
    """The `TOPIC_SERIES` values of ``topics`` (those still loaded): their names, one column
    per family and whether all were still loaded; topics with subscriptions are appended to
    ``subscribed``. Each column is read in C-level loops (``map`` over attribute getters):
    only a topic with subscriptions costs Python work (an idle topic: ~1-2 µs of memory reads)."""
    names = list(map(_NAME, topics))
    loaded = list(map(operator.is_, map(live.get, names), topics))
    whole = all(loaded)
    if not whole:  # unloaded while the loop had the hand
        topics, names = list(compress(topics, loaded)), list(compress(names, loaded))
    in_msgs, out_msgs = rates.msgs["in"].get, rates.msgs["out"].get
    in_bytes, out_bytes = rates.bytes["in"].get, rates.bytes["out"].get
    subs = list(map(_SUBS, topics))
    backlog: list[float]
    consumers: list[float]
    if any(subs):
        backlog, consumers = [], []
        for topic, group in zip(topics, subs, strict=True):
            held = active = 0
            if group:
                subscribed.append(topic)
                for sub in group.values():
                    held += sub.backlog()
                    active += len(sub.consumers)
            backlog.append(held)
            consumers.append(active)
    else:
        backlog = consumers = [0] * len(topics)
    if all(map(isinstance, topics, repeat(PersistentTopic))):
        sizes: list[float] = list(sizes_bytes(map(_LEDGER, topics)))
    else:
        sizes = [topic.ledger.size_bytes() if isinstance(topic, PersistentTopic) else 0
                 for topic in topics]
    return names, [list(map(in_msgs, names, repeat(0.0))),
                   list(map(out_msgs, names, repeat(0.0))),
                   list(map(in_bytes, names, repeat(0.0))),
                   list(map(out_bytes, names, repeat(0.0))), backlog, sizes,
                   list(map(len, map(_PRODUCERS, topics))), consumers, list(map(len, subs)),
                   list(map(_MSG_IN, topics)), list(map(_BYTES_IN, topics))], whole


def _lines(series: Series, labels: list[str], column: list[float]) -> bytes:
    """One family's lines for some rows: its sample name, ``{``, the row's label text (its
    closing brace and space included) and the value's text. A column of one value (of one
    type: ``0`` and ``0.0`` are written apart) is one join of the labels, in C: most of an
    idle topic's figures are the same as its neighbours' (no rate, no producer, the
    message counts of the topics made alike), and the first build after many topics were
    made writes every line."""
    if not labels:
        return b""
    head = series.sample + "{"
    first = column[0]
    if column.count(first) == len(column) and len(set(map(type, column))) == 1:
        text = _num(first)
        body = f"{text}\n{head}".join(labels)
        return f"{head}{body}{text}\n".encode()
    body = ("\n" + head).join(map(operator.add, labels, _texts(column)))
    return f"{head}{body}\n".encode()


class _Block:
    """A run of one namespace's topics as the last build rendered them: the topics (same
    objects, same order) and their names, each family's column of values and its lines,
    the topics with subscriptions. The next build takes it as it is when none of its
    topics was noted as changed, and otherwise re-renders a family's lines only when its
    column differs (an idle topic's figures do not change, so its lines are reused)."""

    __slots__ = ("columns", "names", "pieces", "subscribed", "topics")

    def __init__(self, topics: list[Topic], names: list[str], columns: list[list[float]],
                 pieces: list[bytes], subscribed: list[Topic]) -> None:
        self.topics = topics
        self.names = names
        self.columns = columns
        self.pieces = pieces
        self.subscribed = subscribed


def _gather_subscriptions(topics: list[Topic], rates: KindTable,
                          labels: dict[str, str], subs_rows: _Rows,
                          consumer_rows: _Rows | None) -> None:
    """`SUBSCRIPTION_SERIES` (and `CONSUMER_SERIES` when ``consumer_rows``) of ``topics``."""
    sub_label = subs_rows.labels.append
    backlog_col, consumers_col, rate_col = (column.append for column in subs_rows.columns)
    get = rates.msgs["sub"].get
    for topic in topics:
        prefix = labels[topic.name][:-2]  # without its "} "
        for name, sub in topic.subscriptions.items():
            sub_labels = f'{prefix},subscription="{_esc(name)}"'
            sub_label(sub_labels + "} ")
            backlog_col(sub.backlog())
            consumers_col(len(sub.consumers))
            rate_col(get(rate_key("sub", topic.name, name), 0.0))
            if consumer_rows is None:
                continue
            for consumer in sub.consumers:
                consumer_rows.labels.append(
                    f'{sub_labels},consumer_name="{_esc(consumer.name or "")}",'
                    f'consumer_id="{consumer.consumer_id}"}} ')
                permits, unacked, blocked = consumer_rows.columns
                permits.append(consumer.permits)
                unacked.append(consumer.unacked_messages)
                blocked.append(1 if consumer.blocked_on_unacked else 0)


def replication_rows(topic: Topic, rates: RateTracker) -> list[tuple[str, list[float]]]:
    """(remote cluster, `REPLICATION_SERIES` values) of each of ``topic``'s replicators."""
    return [(remote, [s["msgRateIn"], s["msgRateOut"], s["msgThroughputIn"],
                      s["msgThroughputOut"], s["replicationBacklog"], int(s["connected"]),
                      s["msgRateExpired"], s["replicationDelayInSeconds"]])
            for remote, s in replication_stats(topic, rates).items()]


def add_replication(rows: _Rows, totals: dict[tuple[str, str], list[float]] | None,
                    labels: str, namespace: str, replicated: list[tuple[str, list[float]]]
                    ) -> None:
    """Note a topic's `replication_rows`: as rows labelled ``labels`` plus the remote
    cluster, or (``totals`` given: the namespace level) added into its namespace's totals
    (each series summed, the delay the largest)."""
    for remote, values in replicated:
        if totals is None:
            rows.labels.append(f'{labels},remote_cluster="{_esc(remote)}"}} ')
            for column, value in zip(rows.columns, values, strict=True):
                column.append(value)
            continue
        total = totals.setdefault((namespace, remote), [0] * len(values))
        for k, value in enumerate(values):
            total[k] = max(total[k], value) if k in _REPLICATION_MAX else total[k] + value


def _gather_replication(topics: list[Topic], rates: RateTracker, cluster: str,
                        topic_level: bool) -> _Rows:
    """`REPLICATION_SERIES` of the geo-replicated ``topics``: a row per topic and remote
    cluster, or (not ``topic_level``) per namespace and remote cluster."""
    rows = _Rows(len(REPLICATION_SERIES))
    totals: dict[tuple[str, str], list[float]] | None = None if topic_level else {}
    for topic in topics:
        namespace = _esc(topic.topic_name.namespace)
        add_replication(rows, totals, f'cluster="{cluster}",namespace="{namespace}",'
                        f'topic="{_esc(topic.name)}"', namespace, replication_rows(topic, rates))
    for (namespace, remote), values in (totals or {}).items():
        add_replication(rows, None, f'cluster="{cluster}",namespace="{namespace}"', namespace,
                        [(remote, values)])
    return rows


class BuildTimes:
    """What a build cost the event loop: its slices (from one yield to the next) added up
    and the longest, in wall-clock and in the loop thread's CPU seconds (wall minus CPU:
    the time the process waited for a core)."""

    def __init__(self) -> None:
        self.wall = self.cpu = self.longest_wall = self.longest_cpu = 0.0
        self._wall = self._cpu = 0.0
        self.mark = 0.0  # (perf_counter) the end of the last unit of work in this slice

    def resume(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.thread_time()
        self.mark = self._wall

    def spent(self, slice_s: float) -> bool:
        """A unit of work ended now: whether another as long would end ``slice_s`` or more
        after the slice's start (`resume`), i.e. the loop is to be given back."""
        now = time.perf_counter()
        unit, self.mark = now - self.mark, now
        return (now - self._wall) + unit >= slice_s

    def lap(self) -> None:
        wall, cpu = time.perf_counter() - self._wall, time.thread_time() - self._cpu
        self.wall += wall
        self.cpu += cpu
        self.longest_wall = max(self.longest_wall, wall)
        self.longest_cpu = max(self.longest_cpu, cpu)


class MetricsBuilder:
    """Builds the exposition for one broker (module docstring)."""

    def __init__(self, service: BrokerService, rates: RateTracker, chunk: int = CHUNK,
                 pause: float = PAUSE_S, slice_s: float = SLICE_S) -> None:
        self.service = service
        self.rates = rates
        self.chunk = chunk  # topics per unit of work; LINES_PER_CHUNK x that per block
        self.pause = pause
        self.slice_s = slice_s  # (0: the loop given back after every unit of work)
        config = service.config
        self.topic_level = bool(config.exposeTopicLevelMetricsInPrometheus)
        self.consumer_level = bool(config.exposeConsumerLevelMetricsInPrometheus) and self.topic_level
        self.cache_s = float(config.magnetarMetricsCacheSeconds)
        self._cached: tuple[float, list[bytes]] | None = None
        self._building: asyncio.Future[list[bytes]] | None = None
        # topic name -> its escaped namespace, and -> its label text: kept between builds,
        # for the topics still loaded (strings only: dicts the collector never tracks)
        self._spaces: dict[str, str] = {}
        self._labels: dict[str, str] = {}
        self._topics: list[Topic] = []  # the topics of the last grouping, and the grouping
        self._groups: dict[str, list[Topic]] = {}
        # the loaded topics' `TopicRegistry.version` when the last grouping took their names
        # (the same: the same topics, grouped as then, with no walk over them to tell)
        self._grouped_version: int | None = None
        # topic level: (namespace, first index) -> that block as the last build rendered it
        self._blocks: dict[tuple[str, int], _Block] = {}
        # namespace level: the totals kept between builds (metrics_totals.py; None: to make)
        self.totals: NamespaceTotals | None = None
        self.rendered = 0  # block families whose lines the last build rendered (not reused)
        self.read_blocks = 0  # blocks whose values the last build read (topic level)
        self.regrouped = False  # the last build grouped the topics again (topic level)
        self.folded = 0  # topics the last build folded into the totals (namespace level)
        self.builds = 0  # per-topic parts built (the rest of the scrapes used the cache)
        self.yields = 0  # times the last build gave the loop back
        self.times = BuildTimes()  # the last build's
        self.tail_names: tuple[str, ...] = ()  # what `broker_tail` walks, while it does

    async def scrape(self) -> str:
        """The whole exposition: the per-topic part (cached) and the per-broker part."""
        return b"".join([*await self.topic_part(), await self.broker_tail()]).decode()

    async def broker_tail(self) -> bytes:
        """`broker_part`, its walk over the loaded topics (the transaction gauges) made
        ``chunk * LINES_PER_CHUNK`` topics at a time (C-level loops, ~1 µs a topic on a
        loaded machine: slices of 32,000 held the loop 26-33 ms), the loop given back
        once another such walk would not end within `slice_s` of the slice's start. It
        walks a tuple of the names (`tail_names`, `heap.topic_names`), not a list of the
        topics: a list of 100,000 topics is a container each collection walks while it
        lives, the tuple is untracked by the first young one."""
        live = self.service.topics
        participants = no_participants()
        step = self.chunk * LINES_PER_CHUNK
        clock = BuildTimes()  # (only its slice clock: the tail is no part of the build's times)
        clock.resume()

        async def pause() -> None:  # (after a walk: give the loop back if no other fits)
            if clock.spent(self.slice_s):
                await asyncio.sleep(self.pause)
                clock.resume()

        names = self.tail_names = topic_names(live)  # (the build's copy, unless one changed)
        await pause()  # (a copy made now is a unit of its own)
        async for topics in loaded_slices(live, step, pause, names):
            add_participants(participants, topics)
        self.tail_names = ()
        return self.broker_part(participants).encode()

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
        """A unit of work is done: give the loop back unless another as long would still
        end within `slice_s` of the slice's start (`SLICE_S`)."""
        times = self.times
        if not times.spent(self.slice_s):
            return
        times.lap()
        self.yields += 1
        await asyncio.sleep(self.pause)
        self.times.resume()

    async def _group(self, live: dict[str, Topic]) -> dict[str, list[Topic]]:
        """The ``live`` topics by escaped namespace (the last build's grouping when the same
        topics are loaded, in the same order); notes each one's (namespace, label text),
        made once per topic while it stays loaded. Done a block of topics per slice. The
        same topics are told by the registry's `version` (changes.py), without a walk over
        them: comparing the topics by address, in C, still touched every topic object (10-23
        ms of the loop in one slice at 100,000 topics, in every build), and a fresh list of
        them at every build was a young container that each young collection walked."""
        version = getattr(live, "version", None)  # (noted before the names are copied)
        self.regrouped = self._grouping_stale(live)
        if not self.regrouped:
            return self._groups
        # the list kept is made a block at a time from a tuple of the names (heap.py): a
        # list of 100,000 topics made at once was walked whole by the young collections of
        # the build (the list grown by blocks is walked while it is small, then it is old)
        topics: list[Topic] = []
        groups: dict[str, list[Topic]] = {}
        settle = self.service.heap.settle
        settle()  # (frozen while empty: a young collection would walk them whole later)
        cluster = _esc(self.service.config.clusterName).replace("%", "%%")
        template = f'cluster="{cluster}",namespace="%s",topic="%s"}} '
        known_spaces, known_labels = self._spaces, self._labels
        spaces: dict[str, str] = {}
        labels: dict[str, str] = {}
        step = self.chunk * LINES_PER_CHUNK
        names = topic_names(live)  # (copied now, the registry's version changed: a unit)
        await self._pause()
        async for block in loaded_slices(live, step, self._pause, names):
            if not block:  # (unloaded meanwhile)
                continue
            topics.extend(block)
            held = list(map(_NAME, block))
            # each dict pass over 100,000 names costs 40-80 ms on a busy machine (memory
            # reads): the topics' namespaces and labels go once into the new dicts, those
            # of topics grouped before copied, those of new topics made in C
            known = list(map(known_labels.__contains__, held)) if known_labels else []
            kept = known.count(True)
            if kept:
                old = held if kept == len(held) else list(compress(held, known))
                spaces.update(zip(old, map(known_spaces.__getitem__, old), strict=True))
                labels.update(zip(old, map(known_labels.__getitem__, old), strict=True))
            if kept < len(held):
                fresh, made = (block, held) if not kept else (
                    list(compress(block, map(operator.not_, known))),
                    list(compress(held, map(operator.not_, known))))
                fresh_spaces = _escaped(list(map(_NAMESPACE, fresh)))
                spaces.update(zip(made, fresh_spaces, strict=True))
                labels.update(zip(made, map(template.__mod__, zip(
                    fresh_spaces, _escaped(made), strict=True)), strict=True))
            held_spaces = (fresh_spaces if not kept
                           else list(map(spaces.__getitem__, held)))
            first = held_spaces[0]
            if held_spaces.count(first) == len(held_spaces):
                group = groups.get(first)
                if group is None:
                    group = groups[first] = []
                    settle()
                group.extend(block)  # one namespace (the usual case)
                continue
            grouped = len(groups)
            for space, topic in zip(held_spaces, block, strict=True):
                group = groups.get(space)
                if group is None:
                    groups[space] = [topic]
                else:
                    group.append(topic)
            if len(groups) > grouped:
                settle()  # the new groups, while small (once a slice, however many)
        # (unloaded ones left out)
        self._spaces, self._labels, self._topics, self._groups = spaces, labels, topics, groups
        self._grouped_version = version
        return groups

    def _grouping_stale(self, live: dict[str, Topic]) -> bool:
        """Whether topics were loaded, unloaded or replaced since the last grouping (the
        registry's `version` moved; a plain dict has none: always)."""
        version = getattr(live, "version", None)
        return (version is None or version != self._grouped_version
                or len(live) != len(self._topics))

    async def _build(self) -> list[bytes]:
        """`_build_part`, framed as a bulk (broker/heap.py) when it is to make caches for
        many topics (`_bulk_topics`), which are frozen once made unless it reused them."""
        with self.service.heap.bulk(self._bulk_topics()) as bulk:
            bulk.built = False  # (a build that fails keeps nothing)
            if bulk.framed:  # (its collection, a turn of its own)
                await asyncio.sleep(self.pause)
            parts = await self._build_part()
            bulk.built = self.regrouped or self.read_blocks > 0 or self.folded > 0
            return parts

    def _bulk_topics(self) -> int:
        """How many topics the coming build makes caches for, as far as can be told before
        it: every loaded one when it groups them again (topic level: loaded or unloaded
        since the last grouping, or no blocks kept), makes new totals (namespace level), or
        must read them all (`TopicChanges.backlog`); else the topics of the blocks those
        noted as changed may fall in (topic level), or those noted (namespace level). A
        build that reuses nearly everything is then no bulk: no full collection before it
        (up to 30 ms of the loop at 100,000 topics, for nothing to freeze after it)."""
        live = self.service.topics
        noted = self.service.topic_changes.backlog(self)
        if self.topic_level:
            fresh = self._grouping_stale(live) or not self._blocks
            per_name = self.chunk * LINES_PER_CHUNK  # (a block read for each, at most)
        else:
            fresh, per_name = self.totals is None, 1
        if fresh or noted is None:
            return len(live)
        return min(len(live), noted * per_name)

    async def _build_part(self) -> list[bytes]:
        started = time.monotonic()
        self.times = BuildTimes()
        self.times.resume()
        self.builds += 1
        self.yields = 0
        service, live = self.service, self.service.topics
        step = self.chunk * LINES_PER_CHUNK  # topics per block
        rates = self.rates.rates
        parts: list[bytes] = []
        subscribed: list[Topic] = []
        if not self.topic_level:
            kept = await self._fold_changes(step)
            cluster = _esc(service.config.clusterName)
            namespaces = _Rows(len(TOPIC_SERIES))
            for namespace, totals in kept.table():
                namespaces.labels.append(f'cluster="{cluster}",namespace="{_esc(namespace)}"}} ')
                for column, total in zip(namespaces.columns, totals, strict=True):
                    column.append(total)
            await self._render(parts, TOPIC_SERIES, namespaces)
        else:
            changed, overflowed = await self.service.topic_changes.take_in_slices(
                self, pause=self._pause)
            groups = await self._group(live)
            await self._pause()
            await self._topic_rows(parts, groups, step, subscribed, None if overflowed else changed)
            subs = _Rows(len(SUBSCRIPTION_SERIES))
            consumers = _Rows(len(CONSUMER_SERIES)) if self.consumer_level else None
            for start in range(0, len(subscribed), self.chunk):
                _gather_subscriptions(subscribed[start:start + self.chunk], rates, self._labels,
                                      subs, consumers)
                await self._pause()
            await self._render(parts, SUBSCRIPTION_SERIES, subs)
            if consumers is not None:
                await self._render(parts, CONSUMER_SERIES, consumers)
        replicated = [live[name] for name, running in service.replication.replicators.items()
                      if running and name in live]
        if replicated:  # the replicators' series, after the topics' (few topics, one piece)
            replication = _gather_replication(replicated, self.rates,
                                              _esc(service.config.clusterName), self.topic_level)
            await self._render(parts, REPLICATION_SERIES, replication)
        self._cached = (started, parts)
        self.times.lap()
        return parts

    def gather(self, topics: list[Topic]) -> tuple[list[str], list[list[float]]]:
        """`_gather_block` of loaded ``topics`` (`metrics_totals.Gather`)."""
        names, columns, _ = _gather_block(topics, self.service.topics, self.rates.rates, [])
        return names, columns

    async def _fold_changes(self, step: int) -> NamespaceTotals:
        """Namespace level: the topics changed since the last build (all loaded topics the
        first time) folded into `totals`, half of ``step`` topics per slice (the first
        build after 20,000 topics were made held the loop 50 ms of CPU a slice of 2,000)."""
        live = self.service.topics
        changed, overflowed = await self.service.topic_changes.take_in_slices(
            self, pause=self._pause)
        totals = self.totals
        if overflowed or totals is None:  # (new totals: only the loaded topics to read)
            totals = self.totals = NamespaceTotals(len(TOPIC_SERIES))
            changed.update(live)
        names = iter(changed)  # (no list of them: `TopicChanges.take`'s copy is enough)
        self.folded = len(changed)
        step = max(1, step // 2)  # a topic folded costs Python work (~3 µs): 500 a slice
        try:
            for start in range(0, len(changed), step):
                if start:
                    await self._pause()
                totals.fold(islice(names, step), live, self.gather)
        except BaseException:
            self.totals = None  # names not folded are lost: recount at the next build
            raise
        if len(changed) > step // 8:  # (a few topics read: go on in the same slice)
            await self._pause()
        return totals

    async def _topic_rows(self, parts: list[bytes], groups: dict[str, list[Topic]], step: int,
                          subscribed: list[Topic], changed: set[str] | None) -> None:
        """The `TOPIC_SERIES` families, a row per topic: a block of the same topics as in
        the last build none of which changed since (``changed``: the names noted meanwhile,
        `broker.topics.changes`; None: unknown) is taken as it is, without reading it; the
        others' values are read in one slice, and only the families whose values changed
        rendered again (`_Block`); the families' lines then joined in order."""
        live, rates, names = self.service.topics, self.rates.rates, self._labels
        settle = self.service.heap.settle
        previous, blocks = self._blocks, {}
        self._blocks = {}  # (a build that fails leaves nothing half-made behind)
        pieces: list[list[bytes]] = [[] for _ in TOPIC_SERIES]
        self.rendered = self.read_blocks = 0
        same = not self.regrouped  # (the groups the last build's blocks were cut from)
        for namespace, topics in groups.items():
            for start in range(0, len(topics), step):
                old = previous.get((namespace, start))
                block = None if same and old is not None else topics[start:start + step]
                if block is not None and old is not None and old.topics != block:
                    old = None  # (identical objects, in C: touches each topic)
                if old is not None and changed is not None and (
                        not changed or changed.isdisjoint(old.names)):
                    subscribed.extend(old.subscribed)  # nothing noted: as the last build
                    for family, piece in zip(pieces, old.pieces, strict=True):
                        family.append(piece)
                    blocks[(namespace, start)] = old
                    # (each block taken touches its 1,000 names: 0.05-0.15 ms; 50 of 2,000
                    # in one slice held the loop 14-21 ms at 100,000 topics)
                    await self._pause()
                    continue
                if block is None:
                    block = topics[start:start + step]
                had = len(subscribed)
                self.read_blocks += 1
                held, columns, whole = _gather_block(block, live, rates, subscribed)
                await self._pause()
                labels: list[str] | None = None
                made: list[bytes] = []
                for k, (series, column) in enumerate(zip(TOPIC_SERIES, columns, strict=True)):
                    if whole and old is not None and old.columns[k] == column:
                        made.append(old.pieces[k])  # unchanged since the last build
                        continue
                    if labels is None:
                        labels = list(map(names.__getitem__, held))
                    made.append(_lines(series, labels, column))
                    self.rendered += 1
                    await self._pause()
                for family, piece in zip(pieces, made, strict=True):
                    family.append(piece)
                if whole:
                    blocks[(namespace, start)] = _Block(block, held, columns, made,
                                                        subscribed[had:])
                # a block read leaves ~15 young lists of its topics' values, and floats
                # count as no allocation: with nothing else collecting between blocks, the
                # first build's 50 blocks (770 lists, 1.5 million values) were walked by one
                # young collection of ~20 ms; collected now, each is walked alone (< 1 ms)
                settle()
        for series, family in zip(TOPIC_SERIES, pieces, strict=True):
            parts.append(series.header().encode())
            parts.extend(family)
        self._blocks = blocks

    async def _render(self, parts: list[bytes], families: Iterable[Series], rows: _Rows) -> None:
        """Each family's header and its lines, ``LINES_PER_CHUNK x chunk`` lines a piece, the
        loop given back after each such many lines (a few namespaces' families: one slice)."""
        labels, step = rows.labels, self.chunk * LINES_PER_CHUNK
        written = 0
        for series, column in zip(families, rows.columns, strict=True):
            parts.append(series.header().encode())
            for start in range(0, len(labels), step):
                parts.append(_lines(series, labels[start:start + step], column[start:start + step]))
                written += min(step, len(labels) - start)
                if written >= step:
                    written = 0
                    await self._pause()

    def broker_part(self, participants: dict[str, float] | None = None) -> str:
        """The per-broker part, read now (``participants``: `participant_totals`, if read
        already)."""
        service = self.service
        labels = f'cluster="{_esc(service.config.clusterName)}"'
        out = []
        for gauge in BROKER_GAUGES:
            out.append(f"# HELP {gauge.name} {gauge.doc}\n# TYPE {gauge.name} gauge\n"
                       f"{gauge.name}{{{labels}}} {_num(gauge.value(service))}\n")
        if participants is None:
            participants = participant_totals(service)  # one pass for the six
        for name, doc, key in PARTICIPANT_GAUGES:
            out.append(f"# HELP {name} {doc}\n# TYPE {name} gauge\n"
                       f"{name}{{{labels}}} {_num(participants[key])}\n")
        times = self.times
        for name, doc, value in (
                ("magnetar_metrics_build_seconds", BUILD_DOCS[0], times.wall),
                ("magnetar_metrics_build_cpu_seconds", BUILD_DOCS[1], times.cpu),
                ("magnetar_metrics_longest_slice_seconds", BUILD_DOCS[2], times.longest_wall),
                ("magnetar_metrics_longest_slice_cpu_seconds", BUILD_DOCS[3], times.longest_cpu)):
            out.append(f"# HELP {name} {doc}\n# TYPE {name} gauge\n{name}{{{labels}}} {_num(value)}\n")
        for name, doc, histogram in BROKER_HISTOGRAMS:
            buckets, total = histogram.snapshot()
            out.append(f"# HELP {name} {doc}\n# TYPE {name} histogram\n")
            out.extend(f'{name}_bucket{{{labels},le="{le}"}} {count}\n' for le, count in buckets)
            out.append(f"{name}_count{{{labels}}} {buckets[-1][1]}\n"
                       f"{name}_sum{{{labels}}} {_num(total)}\n")
        out.append(txn_metrics(service))  # the transaction coordinators' (transactions.py)
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
    """Streamed piece by piece (`write_pieces`): a 133 MB exposition (100,000 topics) is
    never joined into one buffer, nor written in one hold of the loop."""
    builder = request.app[_BUILDER]
    pieces = await builder.topic_part()
    tail = await builder.broker_tail()
    response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE})
    response.content_length = sum(map(len, pieces)) + len(tail)
    await response.prepare(request)
    await write_pieces(response.write, [*pieces, tail])
    await response.write_eof()
    return response


async def write_pieces(write: Callable[[bytes], Awaitable[None]], pieces: Iterable[bytes],
                       every: int = WRITE_YIELD_BYTES) -> int:
    """Write ``pieces`` in order, giving the loop back after each ``every`` bytes; how many
    times it was given back. ``StreamResponse.write`` waits only while the transport is
    paused (the client's socket buffer full): a client that reads as fast as it is written
    to (a local Prometheus) never pauses it, and the whole exposition went out in one hold
    of the loop (133 MB copied into the socket: tens of ms of the loop, sends queued)."""
    written = yields = 0
    for piece in pieces:
        await write(piece)
        written += len(piece)
        if written >= every:
            written = 0
            yields += 1
            await asyncio.sleep(0)
    return yields
