"""Fixtures of the cluster tests: one real ZooKeeper for the session (Debian's, on a free
port, in a temporary directory), skipped with a reason where ZooKeeper cannot run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.brokers import Cluster
from tests.zkserver import ZooKeeperServer, zk_missing_reason


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    reason = zk_missing_reason()
    if reason:
        pytest.skip(reason)
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()


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
