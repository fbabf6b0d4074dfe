"""The cluster commands with a real ZooKeeper: ``magnetar broker`` with an unreachable or
malformed metadata store (a clear error, no traceback), ``initialize-cluster-metadata``
run twice, ``copy-standalone-metadata`` from a standalone that then grows into a cluster,
and a ZooKeeper restarted while two brokers serve."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from kazoo.client import KazooClient

from tests.cluster.brokers import BrokerProc, http_call, initialize, magnetar
from tests.zkserver import Gate, ZooKeeperServer, free_port

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def call(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    status, answer, _ = http_call(method, base + path, body)
    return status, answer


def ok(base: str, method: str, path: str, body: Any = None) -> Any:
    status, answer = call(base, method, path, body)
    assert 200 <= status < 300, (method, path, status, answer)
    return answer


def poll(predicate: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.01)


def test_unreachable_store_is_a_clear_error_without_traceback(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "b.conf").write_text("metadataStoreOperationTimeoutSeconds=2\n")
    started = time.monotonic()
    done = magnetar("broker", "--config", str(tmp_path / "b.conf"), "--data-dir",
                    str(tmp_path / "d"), "--port", "0", "--http-port", "-1",
                    "--metadata-store", f"zk:127.0.0.1:{port}")
    assert done.returncode == 1
    assert f"127.0.0.1:{port}" in done.stderr and "cannot reach ZooKeeper" in done.stderr
    assert "retrying" in done.stderr  # the back-off, logged
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("url, says", [
    ("zk:nohost", "'nohost' is not host:port"),
    ("zk:h:1/a//b", "malformed chroot"),
    ("etcd://h:2379", "expected zk:host:port"),
])
def test_malformed_url_is_a_clear_error(tmp_path: Path, url: str, says: str) -> None:
    done = magnetar("broker", "--data-dir", str(tmp_path / "d"), "--metadata-store", url)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr
    done = magnetar("initialize-cluster-metadata", "--cluster", "c1", "--metadata-store", url)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr


def test_broker_needs_a_metadata_store(tmp_path: Path) -> None:
    done = magnetar("broker", "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 2 and "metadataStoreUrl" in done.stderr


def test_initialize_twice(zookeeper: ZooKeeperServer) -> None:
    url = zookeeper.url(f"/init-{uuid.uuid4().hex[:6]}")
    first = magnetar("initialize-cluster-metadata", "--cluster", "c9", "--metadata-store", url,
                     "--web-service-url", "http://h:8080", "--broker-service-url", "pulsar://h:6650")
    assert first.returncode == 0 and "/admin/clusters/c9" in first.stdout
    assert "/admin/policies/public/default" in first.stdout
    again = magnetar("initialize-cluster-metadata", "--cluster", "c9", "--metadata-store", url)
    assert again.returncode == 0 and "already exists" in again.stdout


@pytest.mark.timeout(300)
def test_configuration_that_cannot_silently_go_wrong(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """A broker of a cluster never initialized exits with the command to run (and a broker
    of the cluster once it is initialized starts, saying in one line that without shared
    storage it serves only its own directory); initialize-cluster-metadata run again with
    other URLs changes nothing, says what is stored and exits 1, and the command it names
    (`admin clusters update`, through the running broker) makes the stored URLs the new ones."""
    chroot = f"/conf-{uuid.uuid4().hex[:6]}"
    url = zookeeper.url(chroot)
    initialize(url, "other")
    missing = magnetar("broker", "--data-dir", str(tmp_path / "x"), "--port", "0",
                       "--http-port", "-1", "--metadata-store", url)  # clusterName: standalone
    assert missing.returncode == 2, missing.stderr
    assert "cluster 'standalone' (clusterName) is not initialized" in missing.stderr
    assert "the clusters initialized there: other" in missing.stderr
    assert (f"magnetar initialize-cluster-metadata --cluster standalone --metadata-store {url} "
            "--web-service-url http://localhost:8080 --broker-service-url pulsar://localhost:6650"
            ) in missing.stderr
    assert "Traceback" not in missing.stderr
    zk = KazooClient(hosts=zookeeper.address, timeout=10.0)
    zk.start(timeout=30)
    try:
        assert zk.get_children(f"{chroot}/admin/clusters") == ["other"]  # nothing created
    finally:
        zk.stop()
        zk.close()

    first = magnetar("initialize-cluster-metadata", "--cluster", "c9", "--metadata-store", url,
                     "--web-service-url", "http://h1:8080", "--broker-service-url", "pulsar://h1:6650")
    assert first.returncode == 0, first.stderr
    again = magnetar("initialize-cluster-metadata", "--cluster", "c9", "--metadata-store", url,
                     "--web-service-url", "http://h2:8080", "--broker-service-url", "pulsar://h1:6650")
    assert again.returncode == 1
    assert "serviceUrl: stored http://h1:8080, given http://h2:8080" in again.stderr
    assert "brokerServiceUrl" not in again.stderr.splitlines()[2]  # only what differs is listed
    assert ("clusters update c9 --url http://h2:8080 --broker-url pulsar://h1:6650"
            in again.stderr)

    broker = BrokerProc(tmp_path / "b", url, cluster="c9").start()
    try:
        log = (tmp_path / "b" / "broker.log").read_text()
        notes = [line for line in log.splitlines() if "magnetarSharedStorage=false" in line]
        assert len(notes) == 1 and f"serves only the topics in its own directory {broker.data_dir}" in notes[0]
        update = magnetar("admin", "--admin-url", broker.web_url, "clusters", "update", "c9",
                          "--url", "http://h2:8080", "--broker-url", "pulsar://h1:6650")
        assert update.returncode == 0, update.stderr
    finally:
        broker.stop()
    settled = magnetar("initialize-cluster-metadata", "--cluster", "c9", "--metadata-store", url,
                       "--web-service-url", "http://h2:8080", "--broker-service-url", "pulsar://h1:6650")
    assert settled.returncode == 0 and "already exists" in settled.stdout, settled.stderr


@pytest.mark.timeout(300)
def test_standalone_grows_into_a_cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    standalone = BrokerProc(tmp_path / "s", None).start()
    web = standalone.web_url
    try:
        ok(web, "PUT", "/admin/v2/tenants/acme", {"adminRoles": ["ops"],
                                                  "allowedClusters": ["c1"]})
        ok(web, "PUT", "/admin/v2/namespaces/acme/orders")
        ok(web, "POST", "/admin/v2/namespaces/acme/orders/messageTTL", 120)
        ok(web, "POST", "/admin/v2/namespaces/acme/orders/permissions/app", ["consume"])
        ok(web, "PUT", "/admin/v2/persistent/acme/orders/parts/partitions", 2)
        ok(web, "POST", "/admin/v2/schemas/acme/orders/typed/schema",
           {"type": "STRING", "schema": "", "properties": {"k": "v"}})
        client = pulsar.Client(standalone.service_url, logger=QUIET)
        producer = client.create_producer("persistent://acme/orders/kept")
        producer.send(b"from the standalone days")
        client.close()
        url = zookeeper.url(f"/grown-{uuid.uuid4().hex[:6]}")
        running = magnetar("copy-standalone-metadata", "--data-dir",
                           str(tmp_path / "s" / "data"), "--cluster", "c1", "--metadata-store", url)
        assert running.returncode == 1 and "stop it first" in running.stderr
    finally:
        standalone.stop()

    # (the standalone's pulsar tenant, pulsar/system and its transaction coordinators' topic too)
    done = magnetar("copy-standalone-metadata", "--data-dir", str(tmp_path / "s" / "data"),
                    "--cluster", "c1", "--metadata-store", url)
    assert done.returncode == 0, done.stderr
    assert "3 tenants, 3 namespaces, 1 policies, 1 permissions, 2 partitioned, 1 schemas" in done.stdout

    # the old data directory, now a broker of the cluster, and a new broker beside it
    first = BrokerProc(tmp_path / "s", url)
    first.command[first.command.index("--data-dir") + 1] = str(tmp_path / "s" / "data")
    first.start()
    second = BrokerProc(tmp_path / "n", url).start()
    try:
        for web in (first.web_url, second.web_url):
            assert ok(web, "GET", "/admin/v2/tenants/acme")["adminRoles"] == ["ops"]
            assert ok(web, "GET", "/admin/v2/namespaces/acme/orders/messageTTL") == 120
            assert ok(web, "GET", "/admin/v2/namespaces/acme/orders/permissions") == {
                "app": ["consume"]}
            assert ok(web, "GET", "/admin/v2/persistent/acme/orders/parts/partitions") == {
                "partitions": 2}
            assert ok(web, "GET", "/admin/v2/schemas/acme/orders/typed/schema")[
                "properties"] == {"k": "v"}
        client = pulsar.Client(first.service_url, logger=QUIET)
        reader = client.create_reader("persistent://acme/orders/kept", pulsar.MessageId.earliest)
        assert reader.read_next(10_000).data() == b"from the standalone days"
        client.close()
    finally:
        first.stop()
        second.stop()


@pytest.mark.timeout(300)
def test_zookeeper_restart_while_brokers_serve(tmp_path: Path) -> None:
    zk = ZooKeeperServer(tmp_path / "zk")
    zk.start()
    # the brokers reach it through a gate shut while it restarts: a reconnection attempt
    # accepted by a server not serving yet waits a whole session timeout (zkserver.Gate)
    gate = Gate(zk.port)
    url = gate.url("/restart")
    a = b = None
    try:
        initialize(url, "c1")
        # sessions outlive the restart (a busy machine's JVM start-up included)
        a = BrokerProc(tmp_path / "a", url, metadataStoreSessionTimeoutMillis=30000).start()
        b = BrokerProc(tmp_path / "b", url, metadataStoreSessionTimeoutMillis=30000).start()
        ok(a.web_url, "PUT", "/admin/v2/tenants/before", {"adminRoles": [],
                                                          "allowedClusters": ["c1"]})
        poll(lambda: "before" in ok(b.web_url, "GET", "/admin/v2/tenants"), "tenant on B")
        client = pulsar.Client(b.service_url, logger=QUIET)
        producer = client.create_producer("persistent://public/default/during")

        gate.shut()
        zk.stop()
        producer.send(b"while ZooKeeper is down")  # the data path does not need it
        assert "before" in ok(b.web_url, "GET", "/admin/v2/tenants")  # nor do reads
        zk.start()
        gate.reopen()

        # nothing lost, and B follows A's changes again (its watches are set anew)
        poll(lambda: call(a.web_url, "PUT", "/admin/v2/tenants/after",
                          {"adminRoles": [], "allowedClusters": ["c1"]})[0] == 204,
             "A writes again", timeout=60)
        poll(lambda: "after" in ok(b.web_url, "GET", "/admin/v2/tenants"), "tenant on B")
        assert {"before", "after", "public"} <= set(ok(a.web_url, "GET", "/admin/v2/tenants"))
        producer.send(b"after the restart")
        client.close()
    finally:
        for broker in (a, b):
            if broker is not None:
                broker.stop()
        gate.close()
        zk.stop()



@pytest.mark.timeout(300)
def test_expired_session_stops_the_broker_with_the_shutdown_policy(tmp_path: Path) -> None:
    zk = ZooKeeperServer(tmp_path / "zk")
    zk.start()
    broker = None
    try:
        url = zk.url("/expiry")
        initialize(url, "c1")
        broker = BrokerProc(tmp_path / "b", url, metadataStoreSessionTimeoutMillis=4000,
                            zookeeperSessionExpiredPolicy="shutdown").start()
        assert len(zk.sessions()) == 1  # the broker's
        # a ZooKeeper that comes back without its data does not know the broker's session:
        # the broker's reconnection is told the session expired (once the server's
        # transaction id has passed the last one the broker saw: until then it refuses the
        # broker, as a server behind its client does)
        zk.stop()
        shutil.rmtree(tmp_path / "zk" / "data")
        (tmp_path / "zk" / "data").mkdir()
        zk.start()
        writer = KazooClient(hosts=zk.address, timeout=10.0)
        writer.start(timeout=30)
        for i in range(500):
            if broker.proc is not None and broker.proc.poll() is not None:
                break
            writer.create(f"/filler-{i}")
        writer.stop()
        writer.close()
        assert broker.proc is not None
        assert broker.proc.wait(timeout=90) == 0
        log = (tmp_path / "b" / "broker.log").read_text()
        assert "expired (zookeeperSessionExpiredPolicy=shutdown)" in log
        assert "session expired (zookeeperSessionExpiredPolicy=shutdown): stopping" in log
        assert "Traceback" not in log
    finally:
        if broker is not None:
            broker.stop()
        zk.stop()
