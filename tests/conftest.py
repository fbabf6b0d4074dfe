"""Suite-wide fixtures.

The official client frees its I/O threads' descriptors (epoll, eventfd, timerfd) only when
its Python object is collected, and a closed client often sits in a reference cycle until
the cyclic collector runs. Over the whole suite that left hundreds of descriptors open in
the test process, enough to push new sockets past 1024, where py4j's ``select()`` (the
Spark tests' callback server) fails. Collecting after each module keeps the count flat.

``zookeeper``: one real ZooKeeper for the session (Debian's, on a free port, in a temporary
directory), for the metadata and cluster tests; skipped with a reason where ZooKeeper cannot
run. Each test works under a chroot of its own.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tests.zkserver import ZooKeeperServer, zk_missing_reason


@pytest.fixture(autouse=True, scope="module")
def _collect_closed_clients() -> Iterator[None]:
    yield
    gc.collect()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    reason = zk_missing_reason()
    if reason:
        pytest.skip(reason)
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()
