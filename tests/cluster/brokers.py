"""Brokers of a test cluster: ``magnetar standalone`` child processes joined through one real
ZooKeeper (``metadataStoreUrl=zk:...``), each on free ports with its own data directory.
Readiness is the broker's ready file (a bounded poll), never a sleep."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from magnetar.client.auth import Authentication
from magnetar.client.connection import Connection
from magnetar.protocol import pb
from tests.zkserver import ZooKeeperServer, free_port

R = pb.CommandLookupTopicResponse
T = pb.BaseCommand


class ClusterBroker:
    def __init__(self, root: Path, zk_url: str, extra: dict[str, str] | None = None,
                 data_dir: Path | None = None) -> None:
        self.root = root
        self.data_dir = data_dir or root / "data"
        root.mkdir(parents=True, exist_ok=True)
        self.port, self.http_port = free_port(), free_port()
        self.ready = root / "ready.json"
        conf = {"metadataStoreUrl": zk_url, "advertisedAddress": "127.0.0.1",
                "metadataStoreSessionTimeoutMillis": "4000",
                "loadBalancerReportUpdateMinIntervalMillis": "1000", **(extra or {})}
        (root / "broker.conf").write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def broker_id(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 60.0) -> None:
        self.ready.unlink(missing_ok=True)
        log = open(self.root / "broker.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir",
             str(self.data_dir), "--port", str(self.port), "--http-port",
             str(self.http_port), "--bind-address", "127.0.0.1", "--config",
             str(self.root / "broker.conf"), "--ready-file", str(self.ready)],
            stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src")))
        log.close()
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("broker did not start: "
                                   + (self.root / "broker.log").read_text()[-3000:])
            time.sleep(0.02)  # polling a child process; bounded by the deadline
        json.loads(self.ready.read_text())

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


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
    """A topic whose bundle the broker on ``port`` owns (placing free bundles meanwhile)."""
    for i in range(200):
        topic = f"persistent://public/default/{prefix}-{i}-partition-0"  # no partitions of its own
        if owner_port(cluster, topic) == port:
            return topic
    raise AssertionError(f"no topic of a bundle owned by the broker on port {port}")
