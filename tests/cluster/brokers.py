"""Broker child processes for the tests (and benches) that need real ones, all started by
`magnetar.testing.start_process` (readiness is the broker's ready file: a bounded poll,
never a sleep) and each with its config file, data directory and log under its own folder:

- `ClusterBroker`: ``magnetar standalone`` joined to a cluster through one real ZooKeeper
  (``metadataStoreUrl=zk:...``) on free ports chosen up front; `Cluster` runs several,
  optionally sharing one data directory (``magnetarSharedStorage``).
- `BrokerProc`: ``magnetar broker`` of cluster ``c1`` on a metadata store URL (or
  ``magnetar standalone`` without one), on ports it picks itself.

Plus ``magnetar`` one-shot commands (`magnetar`, `initialize`), an admin HTTP call
(`http_call`), lookups (`raw_lookup`, `owner_port`, `topic_owned_by`; `lookup_hops` and
`http_lookup_hops` follow redirects as a client does and count the hops), and what the
lookup test and bench share: `fresh_partitioned_topics`, a subscribe through the official
client (`official_subscribe`) and through Magnetar's (`magnetar_subscribe`)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Self

import pulsar

from magnetar.broker.cluster.bundles import NamespaceBundles
from magnetar.client import Client
from magnetar.client.auth import Authentication
from magnetar.client.connection import Connection
from magnetar.protocol import pb
from magnetar.testing import COMMAND, start_process, stop_process
from tests.zkserver import ZooKeeperServer, free_port

R = pb.CommandLookupTopicResponse
T = pb.BaseCommand
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def magnetar(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """A one-shot ``magnetar`` command (its output captured)."""
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=timeout)


def initialize(metadata_url: str, cluster: str) -> None:
    """``magnetar initialize-cluster-metadata`` for ``cluster`` on ``metadata_url``."""
    done = magnetar("initialize-cluster-metadata", "--cluster", cluster,
                    "--metadata-store", metadata_url, "--configuration-metadata-store",
                    metadata_url, "--web-service-url", "http://127.0.0.1:8080",
                    "--broker-service-url", "pulsar://127.0.0.1:6650")
    assert done.returncode == 0, done.stderr


def http_call(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
              follow_redirects: bool = True) -> tuple[int, Any, str]:
    """(status, JSON answer or None, Location) of an admin request with a JSON ``body``;
    an error's answer is its text."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(*([] if follow_redirects else [NoRedirect]))
    data = json.dumps(body).encode() if body is not None else b"" if method == "PUT" else None
    kind = {"Content-Type": "application/json"} if body is not None else {}
    req = urllib.request.Request(url, data=data, method=method, headers={**kind, **(headers or {})})
    try:
        with opener.open(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None, ""
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace"), err.headers.get("Location", "")


class ChildBroker:
    """One broker child process: ``magnetar <kind>`` with ``conf`` as its broker.conf."""

    def __init__(self, root: Path, conf: dict[str, Any], kind: str = "standalone",
                 data_dir: Path | None = None, port: int = 0, http_port: int = 0) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir or root / "data"
        self.port, self.http_port = port, http_port
        self.ready = root / "ready.json"
        self.log_path = root / "broker.log"
        (root / "broker.conf").write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        self.command = [*COMMAND, kind, "--config", str(root / "broker.conf"), "--data-dir",
                        str(self.data_dir), "--port", str(port), "--http-port", str(http_port),
                        "--ready-file", str(self.ready)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.urls: dict[str, Any] = {}

    @property
    def url(self) -> str:
        """The binary service URL (the one it wrote once started, else its chosen port)."""
        if "brokerServiceUrl" in self.urls:
            return str(self.urls["brokerServiceUrl"]).replace("localhost", "127.0.0.1")
        return f"pulsar://127.0.0.1:{self.port}"

    service_url = url

    @property
    def web_url(self) -> str:
        if "webServiceUrl" in self.urls:
            return str(self.urls["webServiceUrl"]).replace("localhost", "127.0.0.1")
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def broker_id(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 60.0) -> Self:
        self.proc, self.urls = start_process(self.command, self.ready, self.log_path, timeout)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, SIGKILL after ``timeout`` seconds."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process(proc, timeout)

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


class ClusterBroker(ChildBroker):
    """``magnetar standalone`` of a cluster on ZooKeeper ``zk_url``, on free ports."""

    def __init__(self, root: Path, zk_url: str, extra: dict[str, str] | None = None,
                 data_dir: Path | None = None) -> None:
        conf = {"metadataStoreUrl": zk_url, "advertisedAddress": "127.0.0.1",
                "bindAddress": "127.0.0.1", "metadataStoreSessionTimeoutMillis": "4000",
                "loadBalancerReportUpdateMinIntervalMillis": "1000", **(extra or {})}
        super().__init__(root, conf, "standalone", data_dir, free_port(), free_port())


class BrokerProc(ChildBroker):
    """``magnetar broker`` of ``cluster`` on ``metadata_url`` (``magnetar standalone``
    without one) with ``settings`` as broker.conf keys."""

    def __init__(self, root: Path, metadata_url: str | None, cluster: str = "c1",
                 **settings: Any) -> None:
        conf = {"clusterName": cluster, "bindAddress": "127.0.0.1", **settings}
        if metadata_url:
            conf["metadataStoreUrl"] = metadata_url
        super().__init__(root, conf, "broker" if metadata_url else "standalone")


class Cluster:
    def __init__(self, root: Path, zk: ZooKeeperServer, n: int,
                 extra: dict[str, str] | None = None, shared: bool = False) -> None:
        """``shared``: the brokers share one data directory (magnetarSharedStorage)."""
        self.zk_url = zk.url(f"/{root.name}")
        if shared:
            extra = {**(extra or {}), "magnetarSharedStorage": "true"}
        self.brokers = [ClusterBroker(root / f"broker-{i}", self.zk_url, extra,
                                      root / "shared-data" if shared else None)
                        for i in range(n)]

    def start(self) -> Cluster:
        try:
            for b in self.brokers:
                b.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for b in self.brokers:
            b.stop()

    @property
    def service_url(self) -> str:
        return "pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in self.brokers)


async def raw_lookup(port: int, topic: str, authoritative: bool = False,
                     auth: Authentication | None = None) -> pb.CommandLookupTopicResponse:
    cnx = await Connection.open("127.0.0.1", port, address=f"pulsar://127.0.0.1:{port}",
                                auth=auth)
    try:
        resp: pb.CommandLookupTopicResponse = await cnx.request(
            T.LOOKUP, timeout=10, topic=topic, authoritative=authoritative)
        return resp
    finally:
        cnx.close()


def owner_port(cluster: Cluster, topic: str) -> int:
    """Look ``topic`` up at the first broker, following a redirect once."""
    a = cluster.brokers[0]
    first = asyncio.run(raw_lookup(a.port, topic))
    if first.response == R.Connect:
        return a.port
    assert first.response == R.Redirect and first.authoritative
    port = int(first.brokerServiceUrl.rsplit(":", 1)[1])
    second = asyncio.run(raw_lookup(port, topic, authoritative=True))
    assert second.response == R.Connect and second.brokerServiceUrl == first.brokerServiceUrl
    return port


def topic_owned_by(cluster: Cluster, port: int, prefix: str = "probe") -> str:
    """A topic whose bundle the broker on ``port`` owns (placing free bundles meanwhile).
    Free bundles go to the least-loaded broker by message rate, so all of public/default's
    may be another broker's (in a cluster earlier tests loaded): then the first probe's
    bundle is unloaded to this broker (``destinationBroker``)."""
    first = f"persistent://public/default/{prefix}-0-partition-0"  # no partitions of its own
    for i in range(200):
        topic = f"persistent://public/default/{prefix}-{i}-partition-0"
        if owner_port(cluster, topic) == port:
            return topic
    move_bundle_of(cluster, first, port)
    deadline = time.monotonic() + 30
    while owner_port(cluster, first) != port:
        assert time.monotonic() < deadline, f"the bundle of {first} did not move to port {port}"
        time.sleep(0.1)  # bounded poll: the new owner takes the bundle at the next lookup
    return first


def move_bundle_of(cluster: Cluster, topic: str, port: int) -> None:
    """Unload ``topic``'s bundle (of public/default) from its owner to the broker on ``port``."""
    by_port = {b.port: b for b in cluster.brokers}
    owner, target = by_port[owner_port(cluster, topic)], by_port[port]
    status, listed, _ = http_call("GET", f"{owner.web_url}/admin/v2/namespaces/public/default/bundles")
    assert status == 200, (status, listed)
    bundle = NamespaceBundles.from_json(listed).bundle_of(topic)
    status, answer, _ = http_call(
        "PUT", f"{owner.web_url}/admin/v2/namespaces/public/default/{bundle.name}/unload"
               f"?destinationBroker={urllib.parse.quote(target.broker_id)}")
    assert status in (200, 204), (status, answer)


#: a lookup taking more hops than this fails (the official client gives up after 20)
MAX_HOPS = 8


async def lookup_hops(port: int, topic: str) -> tuple[int, int]:
    """(lookups made until a ``Connect``, the port that answered it), following each
    ``Redirect`` as a client does (``authoritative`` as the answer says)."""
    authoritative = False
    for hop in range(1, MAX_HOPS + 1):
        resp = await raw_lookup(port, topic, authoritative)
        if resp.response == R.Connect:
            return hop, port
        if resp.response != R.Redirect:
            raise AssertionError(f"lookup of {topic} at {port}: {resp.error} {resp.message}")
        port = int(resp.brokerServiceUrl.rsplit(":", 1)[1])
        authoritative = resp.authoritative
    raise AssertionError(f"lookup of {topic} took more than {MAX_HOPS} hops")


def http_lookup_hops(web_url: str, topic: str) -> int:
    """HTTP lookups (``/lookup/v2/topic/...``) made until a 200, each 307 followed."""
    url = f"{web_url}/lookup/v2/topic/" + topic.replace("://", "/")
    for hop in range(1, MAX_HOPS + 1):
        status, body, location = http_call("GET", url, follow_redirects=False)
        if status == 200:
            return hop
        if status != 307:
            raise AssertionError(f"HTTP lookup of {topic} at {url}: {status} {body}")
        url = urllib.parse.urljoin(url, location)
    raise AssertionError(f"HTTP lookup of {topic} took more than {MAX_HOPS} hops")


def fresh_partitioned_topics(cluster: Cluster, namespace: str, partitions: tuple[int, ...],
                             first: int = 0, accept: tuple[int, ...] = (204,)
                             ) -> list[tuple[str, int]]:
    """A new ``namespace`` (created at the first broker) and a partitioned topic ``t{n}`` of
    each count ``n`` of ``partitions``, created at the brokers in turn from ``first``:
    ``[(topic, n)]``. An answer not in ``accept`` raises AssertionError."""
    brokers = cluster.brokers
    status, body, _ = http_call("PUT", f"{brokers[0].web_url}/admin/v2/namespaces/{namespace}")
    if status not in accept:
        raise AssertionError(f"create namespace {namespace}: {status} {body}")
    topics = []
    for j, n in enumerate(partitions):
        via = brokers[(first + j) % len(brokers)]
        status, body, _ = http_call(
            "PUT", f"{via.web_url}/admin/v2/persistent/{namespace}/t{n}/partitions", n)
        if status not in accept:
            raise AssertionError(f"create {namespace}/t{n}: {status} {body}")
        topics.append((f"persistent://{namespace}/t{n}", n))
    return topics


def official_subscribe(url: str, topic: str, subscription: str) -> None:
    """Subscribe to ``topic`` through the official client at ``url``, then close."""
    client = pulsar.Client(url, operation_timeout_seconds=30, logger=QUIET)
    try:
        client.subscribe(topic, subscription).close()
    finally:
        client.close()


async def magnetar_subscribe(url: str, topic: str, subscription: str) -> None:
    """Subscribe to ``topic`` through Magnetar's client at ``url``, then close."""
    async with Client(url, operation_timeout_seconds=30) as client:
        await (await client.subscribe(topic, subscription)).close()
