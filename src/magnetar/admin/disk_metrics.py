"""The disk-usage gauges of ``/metrics`` (`DiskCollector`), apart from the topic metrics:
the data directory's used fraction, free bytes, and whether the broker is read-only
(`magnetar.storage.disk_usage`), as of the last check (every
``magnetarDiskCheckIntervalMillis``)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.storage.disk_usage import DiskUsage

_LABELS = ["cluster", "path"]


class DiskCollector(Collector):
    """``magnetar_disk_read_only`` (1: new writes refused), ``magnetar_disk_usage_ratio``
    and ``magnetar_disk_free_bytes`` of the data directory's file system."""

    def __init__(self, cluster: str, disk: DiskUsage) -> None:
        self.cluster = cluster
        self.disk = disk

    def collect(self) -> Iterator[Metric]:
        disk = self.disk
        labels = [self.cluster, disk.path]
        read_only = GaugeMetricFamily(
            "magnetar_disk_read_only",
            "1 while the data directory's disk is past magnetarDiskUsageThreshold (writes refused)",
            labels=_LABELS)
        read_only.add_metric(labels, 1.0 if disk.read_only else 0.0)
        yield read_only
        usage = disk.last
        if usage is None:
            return
        ratio = GaugeMetricFamily("magnetar_disk_usage_ratio",
                                  "fraction of the data directory's file system in use",
                                  labels=_LABELS)
        ratio.add_metric(labels, usage.used)
        yield ratio
        free = GaugeMetricFamily("magnetar_disk_free_bytes",
                                 "bytes free on the data directory's file system", labels=_LABELS)
        free.add_metric(labels, float(usage.free))
        yield free
