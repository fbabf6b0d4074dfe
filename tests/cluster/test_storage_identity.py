"""The shared volume's identity (issue 38, item 1), without GlusterFS: the first broker
writes it and records it in ZooKeeper; a shared-mode broker on a directory that lacks it or
holds another refuses to start (exit 2, the message naming the directory, its file system,
the identity expected and the mount to check); a running broker whose directory is swapped
under it stops serving, gives its bundles up (another broker serves their topics, nothing
acknowledged lost) and says so in one line. The multi-host bed runs the real case (a host
restarted without its GlusterFS mount: tests/cluster/test_multihost.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.broker.cluster.storage_identity import IDENTITY_PATH
from magnetar.metadata import create_metadata_store
from magnetar.storage.identity import IDENTITY_FILE, StorageIdentity, read_identity
from tests.cluster.brokers import QUIET, Cluster, ClusterBroker, magnetar, topic_owned_by
from tests.zkserver import ZooKeeperServer

SHARED = {"magnetarSharedStorage": "true", "magnetarStorageIdentityCheckSeconds": "0.5"}


@pytest.fixture
def one(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("ident"), zookeeper, 1, SHARED).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def recorded(zk_url: str) -> StorageIdentity:
    async def read() -> StorageIdentity:
        store = await create_metadata_store(zk_url)
        try:
            got = await store.get(IDENTITY_PATH)
        finally:
            await store.close()
        assert got is not None, "no storage identity recorded"
        return StorageIdentity.from_json(got[0])
    return asyncio.run(read())


def refused(root: Path, zk_url: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """Run a shared-mode broker of the cluster on ``data_dir``: it must exit by itself."""
    broker = ClusterBroker(root, zk_url, SHARED, data_dir)
    return subprocess.run(broker.command, capture_output=True, text=True, timeout=120)


def test_the_first_broker_records_it_and_another_directory_is_refused(
        one: Cluster, tmp_path: Path) -> None:
    shared = one.brokers[0].data_dir
    on_disk = read_identity(str(shared))
    assert on_disk is not None and on_disk == recorded(one.zk_url)

    empty = tmp_path / "not-mounted" / "data"  # a mount point's empty directory
    done = refused(tmp_path / "b1", one.zk_url, empty)
    assert done.returncode == 2, done.stderr
    err = done.stderr
    assert str(empty) in err and "holds no storage identity" in err
    assert on_disk.id in err and "it is on:" in err and "check:" in err
    assert not (empty / IDENTITY_FILE).exists()  # it wrote no identity of its own
    assert not (empty / "metadata").exists() and not (empty / "ledgers").exists()

    other = tmp_path / "other"
    other.mkdir()
    (other / IDENTITY_FILE).write_text(StorageIdentity.new("c1").to_json())
    done = refused(tmp_path / "b2", one.zk_url, other)
    assert done.returncode == 2, done.stderr
    assert "holds another storage identity" in done.stderr and on_disk.id in done.stderr

    # `magnetar check-shared-storage DIR --metadata-store URL`, as on each broker host
    done = magnetar("check-shared-storage", str(shared), "--metadata-store", one.zk_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"storage identity {on_disk.id}" in done.stdout and "the cluster's" in done.stdout
    done = magnetar("check-shared-storage", str(other), "--metadata-store", one.zk_url)
    assert done.returncode == 1 and "not its volume" in done.stdout, done.stdout
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = magnetar("check-shared-storage", str(other), str(shared))
    assert done.returncode == 1 and "not one volume" in done.stderr, done.stderr

    # initialize-cluster-metadata --shared-data-dir: the volume's identity, or a refusal
    init = ["initialize-cluster-metadata", "--cluster", "c1", "--metadata-store", one.zk_url]
    done = magnetar(*init, "--shared-data-dir", str(shared))
    assert done.returncode == 0 and on_disk.id in done.stdout, done.stderr
    done = magnetar(*init, "--shared-data-dir", str(scratch))
    assert done.returncode == 1 and "holds no storage identity" in done.stderr, done.stderr


def test_initialize_writes_the_identity_the_brokers_then_check(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    url = zookeeper.url("/ident-init")
    shared = tmp_path / "shared"
    done = magnetar("initialize-cluster-metadata", "--cluster", "c1", "--metadata-store", url,
                    "--shared-data-dir", str(shared))
    assert done.returncode == 0, done.stderr
    written = read_identity(str(shared))
    assert written is not None and written == recorded(url)
    assert f"storage identity {written.id}" in done.stdout


def test_a_broker_whose_directory_is_swapped_stops_and_gives_its_bundles_up(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, zookeeper, 2, SHARED)
    a, b = cluster.brokers
    link = tmp_path / "a-data"  # broker a reaches the shared directory through a symlink
    link.symlink_to(b.data_dir, target_is_directory=True)
    a.data_dir = link
    a.command[a.command.index("--data-dir") + 1] = str(link)
    b.data_dir.mkdir(parents=True)
    cluster.start()
    client = None
    try:
        topic = topic_owned_by(cluster, a.port, "swap")
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60, logger=QUIET)
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        for i in range(5):
            producer.send(f"before-{i}".encode())

        swapped = tmp_path / "swapped"
        swapped.mkdir()
        tmp_link = tmp_path / "a-data.new"
        tmp_link.symlink_to(swapped, target_is_directory=True)
        os.replace(tmp_link, link)  # the directory replaced under the running broker

        assert a.proc is not None
        assert a.proc.wait(timeout=120) == 1
        a.proc = None
        log = a.log_path.read_text(errors="replace")
        lines = [line for line in log.splitlines() if "expected storage identity" in line]
        assert len(lines) == 1, lines
        assert str(link) in lines[0] and "gone" in lines[0] and "Traceback" not in log

        for i in range(5):  # the topic's bundle is served by b now
            producer.send(f"after-{i}".encode())
        got = []
        deadline = time.monotonic() + 120
        while len(got) < 10 and time.monotonic() < deadline:
            msg = consumer.receive(timeout_millis=60_000)
            got.append(msg.data().decode())
            consumer.acknowledge(msg)
        assert sorted(got) == sorted([f"before-{i}" for i in range(5)]
                                     + [f"after-{i}" for i in range(5)])
        assert not (swapped / IDENTITY_FILE).exists()  # it never claimed the new directory
    finally:
        if client is not None:
            client.close()
        cluster.stop()


def test_the_watch_tells_a_loss_from_a_file_system_not_answering(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A read that fails with an I/O error is no loss (one line when it starts, one when it
    ends); the file gone is, reported once."""
    from magnetar.broker.cluster.storage_identity import IdentityWatch
    from magnetar.storage.identity import create_identity

    data = tmp_path / "data"
    expected = create_identity(str(data), "c1")
    lost: list[str] = []
    watch = IdentityWatch(str(data), expected, 0.05, lost.append)
    assert watch.check() is None
    path = data / IDENTITY_FILE
    path.rename(tmp_path / "kept")
    path.mkdir()  # reading it now fails with EISDIR: an I/O error, not a missing file
    with caplog.at_level(logging.WARNING, logger="magnetar.broker.cluster.storage_identity"):
        for _ in range(3):
            assert watch.check() is None
        path.rmdir()
        (tmp_path / "kept").rename(path)
        assert watch.check() is None
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "works again, after 3 failed checks" in said[1], said

    async def run() -> None:
        watch.start()
        path.unlink()
        deadline = time.monotonic() + 30
        while not lost:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        await watch.stop()

    asyncio.run(run())
    assert len(lost) == 1 and "gone" in lost[0]
