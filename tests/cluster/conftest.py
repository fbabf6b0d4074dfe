"""Fixtures of the cluster tests: a session-wide cluster of two brokers (the ZooKeeper under
it is the suite's ``zookeeper`` fixture, tests/conftest.py), and a bed of network namespaces
for the partition tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.brokers import Cluster
from tests.netbed import NetBed, NsZooKeeper, netbed_missing_reason
from tests.zkserver import ZooKeeperServer, zk_missing_reason


@pytest.fixture(scope="session")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    """Two brokers (subprocesses) of one cluster sharing a data directory; topics
    auto-created with 4 partitions."""
    c = Cluster(tmp_path_factory.mktemp("cluster"), zookeeper, 2,
                {"allowAutoTopicCreationType": "partitioned", "defaultNumPartitions": "4"},
                shared=True)
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def netbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetBed]:
    """A bed of network namespaces (tests/netbed.py): hosts ``zk`` (ZooKeeper running on it,
    as ``bed.zookeeper``), ``b1``, ``b2`` (for brokers) and ``client``; skipped with the
    reason where it cannot be built (not root, no iptables, no namespaces, no ZooKeeper)."""
    reason = netbed_missing_reason() or zk_missing_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("netbed")
    with NetBed(root) as bed:
        zk = bed.add_host("zk")
        for name in ("b1", "b2", "client"):
            bed.add_host(name)
        bed.zookeeper = NsZooKeeper(bed, zk, root / "zookeeper").start()
        yield bed
