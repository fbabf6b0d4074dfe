"""Replication over a link that dies silently, in network namespaces (tests/netbed.py):
clusters A and B are ``magnetar standalone`` brokers on hosts ``a`` and ``b`` with a short
keep-alive (``keepAliveIntervalSeconds=2``), replicating one namespace both ways. Every
packet between the hosts is dropped (iptables, both ways) for longer than the keep-alive:
A's replicator notices (its stats say ``connected: false``) and replication resumes once
the network heals, with nothing acknowledged lost. And a cluster record listing a broker
that never answers (its SYNs dropped) before a live one: replication goes to the live one.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from magnetar.broker.replication.remote_producer import _connect_any
from magnetar.broker.replication.remote_settings import RemoteSettings
from magnetar.testing import COMMAND
from tests.netbed import NetBed, netbed_missing_reason
from tests.replication.geobed import (
    Receiver,
    Standalone,
    produce,
    replication,
    setup_geo,
    wait,
)

pytestmark = pytest.mark.slow

NS = "geo/live"
KEEPALIVE_S = 2


@pytest.fixture(scope="module")
def geo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NetBed, Standalone, Standalone]]:
    """Hosts ``a``, ``b`` (brokers of clusters A and B) and ``c`` (silent to all: it drops
    every incoming packet); NS replicated to A and B."""
    reason = netbed_missing_reason()
    if reason:
        pytest.skip(reason)
    with NetBed(tmp_path_factory.mktemp("geo-liveness")) as bed:
        a_host, b_host, c_host = bed.add_host("a"), bed.add_host("b"), bed.add_host("c")
        c_host.sh("iptables", "-A", "INPUT", "-j", "DROP")
        short = {"keepAliveIntervalSeconds": str(KEEPALIVE_S)}
        a = Standalone(bed, a_host, "A", short).start()
        b = Standalone(bed, b_host, "B", short).start()
        setup_geo(a, b, NS)
        yield bed, a, b


def test_a_silently_dead_link_is_noticed_and_replication_resumes_after_it(
        geo: tuple[NetBed, Standalone, Standalone]) -> None:
    _, a, b = geo
    topic = f"persistent://{NS}/cut-{uuid.uuid4().hex[:8]}"
    receiver = Receiver(b, topic)
    try:
        before = [b"before-%d" % i for i in range(5)]
        produce(a, topic, before)
        assert receiver.wait_for(set(before), 60) == set(before)
        assert replication(a, topic, "B")["connected"] is True

        a.host.cut_from(b.host)  # every packet between a and b dropped, both ways
        try:
            # nothing arrives from B for a keep-alive interval after A's Ping: the link is
            # seen as dead, although no packet says so
            wait(lambda: replication(a, topic, "B")["connected"] is False, 60,
                  "A's replicator to report the dead link")
            during = [b"during-%d" % i for i in range(5)]
            produce(a, topic, during)  # stored in A meanwhile
            assert receiver.wait_for(set(during), 2 * KEEPALIVE_S) == set()
        finally:
            a.host.heal()
        assert receiver.wait_for(set(during), 90) == set(during)
        wait(lambda: replication(a, topic, "B")["connected"] is True, 30, "reconnection")
        assert replication(a, topic, "B")["replicationBacklog"] == 0
        assert sorted(set(receiver.got)) == sorted(set(before + during))
    finally:
        receiver.close()


def test_a_record_listing_a_silent_broker_before_a_live_one(
        geo: tuple[NetBed, Standalone, Standalone]) -> None:
    bed, a, b = geo
    c = bed.hosts["c"]
    listed = f"pulsar://{c.address}:6650,{b.host.address}:6650"

    # the silent host (its SYNs dropped) is tried first: the attempt times out, the next
    # host is tried
    async def connect() -> tuple[str, int]:
        conn, where = await _connect_any([(c.address, 6650), (b.host.address, 6650)], 2.0,
                                         RemoteSettings(listed), start=0)
        conn.close()
        return where

    assert a.host.call(lambda: asyncio.run(connect())) == (b.host.address, 6650)

    # A's record of B lists the silent host first (set with the CLI): replication flows
    done = subprocess.run(a.host.command(
        [*COMMAND, "admin", "--admin-url", a.web_url, "clusters", "update", "B",
         "--url", b.web_url, "--broker-url", listed]), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert a.admin("GET", "/admin/v2/clusters/B")["brokerServiceUrl"] == listed
    topic = f"persistent://{NS}/listed-{uuid.uuid4().hex[:8]}"
    receiver = Receiver(b, topic)
    try:
        sent = [b"m-%d" % i for i in range(5)]
        produce(a, topic, sent)
        assert receiver.wait_for(set(sent), 90) == set(sent)
    finally:
        receiver.close()
        a.admin("POST", "/admin/v2/clusters/B", {"serviceUrl": b.web_url, "brokerServiceUrl": b.url})
