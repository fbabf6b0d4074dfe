"""Ledger ids of brokers sharing storage come from the metadata store, not from the shared
``storage.db``: two brokers (subprocesses, one real ZooKeeper, one data directory) roll
segments of topics each of them owns, no id is handed out twice, every id is below the
store's counter, and no SQLite file is written in the shared directory (ledger state and
the brokers' topic keys are files there); a topic moved to the broker whose ids
are lower keeps growing positions (the new owner takes a block above the ledger's ids);
a restarted broker's ids are above every block handed out before."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.broker.cluster.bundles import NamespaceBundles
from magnetar.broker.cluster.records import LEDGER_IDS_PATH
from magnetar.metadata import create_metadata_store, json_decode
from magnetar.storage.key_files import KeyFilesStore
from tests.cluster.brokers import Cluster, owner_port, topic_owned_by
from tests.cluster.test_cluster_admin import call
from tests.zkserver import ZooKeeperServer

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@pytest.fixture
def rolling(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    """Two brokers on one data directory, a segment rolled every 3 entries."""
    c = Cluster(tmp_path_factory.mktemp("ids"), zookeeper, 2,
                {"managedLedgerMaxEntriesPerLedger": "3"}, shared=True)
    c.start()
    yield c
    c.stop()


def segments(data: Path) -> dict[str, list[int]]:
    """Segment ids on disk, by ledger directory."""
    out: dict[str, list[int]] = {}
    for seg in (data / "ledgers").glob("*/*.seg"):
        out.setdefault(seg.parent.name, []).append(int(seg.name.split(".")[0]))  # <id>[.e<epoch>].seg
    return out


def counter(cluster: Cluster) -> int:
    async def read() -> int:
        store = await create_metadata_store(cluster.zk_url)
        try:
            got = await store.get(LEDGER_IDS_PATH)
        finally:
            await store.close()
        assert got is not None, "no ledger id counter in the metadata store"
        value = json_decode(got[0])
        assert isinstance(value, int)
        return value

    return asyncio.run(read())


def test_two_brokers_take_ledger_ids_from_the_store(rolling: Cluster) -> None:
    a, b = rolling.brokers
    topics = [topic_owned_by(rolling, a.port, f"ids-a{i}") for i in range(2)] + \
             [topic_owned_by(rolling, b.port, f"ids-b{i}") for i in range(2)]
    client = pulsar.Client(rolling.service_url, operation_timeout_seconds=30, logger=QUIET)
    try:
        for topic in topics:
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(10):  # 4 segments each
                producer.send(b"%d" % i)
            producer.close()
        # a topic of b (ids from b's blocks, above a's first one) moves to a
        moving = topics[2]
        producer = client.create_producer(moving, batching_enabled=False)
        before = [producer.send(b"before-%d" % i) for i in range(4)]
        bundle = NamespaceBundles.evenly(4).bundle_of(moving)
        status, _, _ = call("PUT", f"{b.web_url}/admin/v2/namespaces/public/default/{bundle}/unload")
        assert status == 204
        after = [producer.send(b"after-%d" % i) for i in range(4)]
        assert owner_port(rolling, moving) == a.port
        producer.close()
    finally:
        client.close()
    ids = [(m.ledger_id(), m.entry_id()) for m in before + after]
    assert all(x < y for x, y in itertools.pairwise(ids)), ids  # positions keep growing
    assert after[0].ledger_id() > before[-1].ledger_id()  # a took a block above b's ids

    on_disk = segments(a.data_dir)
    assert len(on_disk) == 4  # one ledger per topic (the moved one shared by both)
    every = sorted(itertools.chain.from_iterable(on_disk.values()))
    assert len(every) >= 4 * 4
    assert len(every) == len(set(every)), "a ledger id was handed out twice"
    assert max(every) < counter(rolling)  # they came from the store's counter ...
    # ... and no SQLite file is shared: ledger state and topic keys are files
    assert not (a.data_dir / "storage.db").exists()
    assert not (a.data_dir / "metadata.db").exists()
    assert all((a.data_dir / "ledgers" / d / "ledger.json").exists() for d in on_disk)
    recorded = KeyFilesStore(str(a.data_dir / "metadata")).list("topics/")
    assert {f"topics/{t}" for t in topics} <= set(recorded)

    # a restarted broker takes ids above every block handed out before, its own included
    high = counter(rolling)
    a.stop()
    a.start()
    topic = topic_owned_by(rolling, a.port, "ids-restart")
    client = pulsar.Client(rolling.service_url, operation_timeout_seconds=30, logger=QUIET)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        restarted = [producer.send(b"r%d" % i).ledger_id() for i in range(4)]
    finally:
        client.close()
    assert min(restarted) >= high
