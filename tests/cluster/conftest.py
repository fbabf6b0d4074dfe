"""Fixtures of the cluster tests: a session-wide cluster of two brokers (the ZooKeeper under
it is the suite's ``zookeeper`` fixture, tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.brokers import Cluster
from tests.zkserver import ZooKeeperServer


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
