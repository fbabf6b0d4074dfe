"""``/metrics``: Prometheus text exposition with Pulsar's metric names.

Per topic (labels ``cluster``, ``namespace``, ``topic``): ``pulsar_rate_in``,
``pulsar_rate_out``, ``pulsar_throughput_in``, ``pulsar_throughput_out``,
``pulsar_in_messages_total``, ``pulsar_in_bytes_total``, ``pulsar_msg_backlog``,
``pulsar_storage_size``, ``pulsar_producers_count``, ``pulsar_consumers_count``,
``pulsar_subscriptions_count``; per subscription (plus ``subscription``):
``pulsar_subscription_back_log``, ``pulsar_subscription_consumers_count``,
``pulsar_subscription_msg_rate_out``; per broker: ``pulsar_topics_count``,
``pulsar_active_connections``, and Magnetar's own ``magnetar_loaded_topics``,
``magnetar_publish_buffer_bytes``, and the storage histograms ``magnetar_fsync_latency_seconds``
and ``magnetar_group_commit_size`` (write batches covered by one fdatasync round).
The values are read from the live broker at scrape time (rates: last stats interval).
"""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from magnetar.admin.disk_metrics import DiskCollector
from magnetar.admin.routing import RATES, SERVICE, RouteTable
from magnetar.broker.service import BrokerService
from magnetar.broker.topics.stats import RateTracker
from magnetar.broker.topics.topic import PersistentTopic
from magnetar.storage import metrics as storage_metrics

routes = RouteTable("metrics")

_TOPIC = ["cluster", "namespace", "topic"]
_SUB = [*_TOPIC, "subscription"]


class BrokerCollector(Collector):
    """Builds every metric family from the broker's state at collection time."""

    def __init__(self, service: BrokerService, rates: RateTracker) -> None:
        self.service = service
        self.rates = rates

    def collect(self) -> Iterator[Metric]:
        service, rates = self.service, self.rates
        cluster = service.config.clusterName
        g = {name: GaugeMetricFamily(name, doc, labels=_TOPIC) for name, doc in (
            ("pulsar_rate_in", "messages/s published to the topic"),
            ("pulsar_rate_out", "messages/s dispatched from the topic"),
            ("pulsar_throughput_in", "bytes/s published to the topic"),
            ("pulsar_throughput_out", "bytes/s dispatched from the topic"),
            ("pulsar_msg_backlog", "unacknowledged messages over all subscriptions"),
            ("pulsar_storage_size", "bytes stored for the topic"),
            ("pulsar_producers_count", "connected producers"),
            ("pulsar_consumers_count", "connected consumers"),
            ("pulsar_subscriptions_count", "subscriptions"),
        )}
        c = {name: CounterMetricFamily(name, doc, labels=_TOPIC) for name, doc in (
            ("pulsar_in_messages", "messages published since the topic was loaded"),
            ("pulsar_in_bytes", "bytes published since the topic was loaded"),
        )}
        s = {name: GaugeMetricFamily(name, doc, labels=_SUB) for name, doc in (
            ("pulsar_subscription_back_log", "unacknowledged messages of the subscription"),
            ("pulsar_subscription_consumers_count", "consumers of the subscription"),
            ("pulsar_subscription_msg_rate_out", "messages/s dispatched to the subscription"),
        )}
        for topic in list(service.topics.values()):
            labels = [cluster, topic.topic_name.namespace, topic.name]
            backlog = 0
            consumers = 0
            for name, sub in topic.subscriptions.items():
                sub_backlog = sub.backlog()
                backlog += sub_backlog
                consumers += len(sub.consumers)
                sub_labels = [*labels, name]
                s["pulsar_subscription_back_log"].add_metric(sub_labels, sub_backlog)
                s["pulsar_subscription_consumers_count"].add_metric(sub_labels, len(sub.consumers))
                s["pulsar_subscription_msg_rate_out"].add_metric(
                    sub_labels, rates.rate("sub", topic.name, name)[0])
            rate_in = rates.rate("in", topic.name)
            rate_out = rates.rate("out", topic.name)
            g["pulsar_rate_in"].add_metric(labels, rate_in[0])
            g["pulsar_throughput_in"].add_metric(labels, rate_in[1])
            g["pulsar_rate_out"].add_metric(labels, rate_out[0])
            g["pulsar_throughput_out"].add_metric(labels, rate_out[1])
            g["pulsar_msg_backlog"].add_metric(labels, backlog)
            size = topic.ledger.size_bytes() if isinstance(topic, PersistentTopic) else 0
            g["pulsar_storage_size"].add_metric(labels, size)
            g["pulsar_producers_count"].add_metric(labels, len(topic.producers))
            g["pulsar_consumers_count"].add_metric(labels, consumers)
            g["pulsar_subscriptions_count"].add_metric(labels, len(topic.subscriptions))
            c["pulsar_in_messages"].add_metric(labels, topic.msg_in)
            c["pulsar_in_bytes"].add_metric(labels, topic.bytes_in)
        yield from g.values()
        yield from c.values()
        yield from s.values()
        broker = [cluster]
        for name, doc, value in (
            ("pulsar_topics_count", "topics loaded on this broker", len(service.topics)),
            ("pulsar_active_connections", "open client connections", len(service.connections)),
            ("magnetar_loaded_topics", "topics loaded in memory", len(service.topics)),
            ("magnetar_publish_buffer_bytes", "payload bytes of sends not yet answered",
             service.publish_buffer.bytes),
        ):
            family = GaugeMetricFamily(name, doc, labels=["cluster"])
            family.add_metric(broker, value)
            yield family
        for name, doc, histogram in (
            ("magnetar_fsync_latency_seconds", "time of each fdatasync of a segment",
             storage_metrics.fsync_seconds),
            ("magnetar_group_commit_size", "write batches made durable by one fdatasync round",
             storage_metrics.group_commit_batches),
        ):
            buckets, total = histogram.snapshot()
            histogram_family = HistogramMetricFamily(name, doc, labels=["cluster"])
            histogram_family.add_metric(broker, buckets, total)
            yield histogram_family


def make_registry(service: BrokerService, rates: RateTracker) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(service, rates))
    registry.register(DiskCollector(service.config.clusterName, service.disk))
    return registry


_REGISTRY: web.AppKey[CollectorRegistry] = web.AppKey("metrics_registry", CollectorRegistry)


def install_registry(app: web.Application) -> None:
    app[_REGISTRY] = make_registry(app[SERVICE], app[RATES])


@routes.route("GET", "/metrics/", "Prometheus metrics, as /metrics (the path in Pulsar's "
              "Prometheus examples).")
@routes.route("GET", "/metrics", "Prometheus metrics (text exposition format).")
async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[_REGISTRY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
