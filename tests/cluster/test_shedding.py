"""The load manager's choices, unit tested (which bundles to shed given load reports, for
both strategies; the load report's measurements; the shedding rounds), and the leader
moving bundles off an overloaded broker in real clusters: one without security (threshold
0 %: any broker with 2+ bundles is overloaded), one with token authentication,
authorization and HTTPS, where traffic overloads a broker through a 100 bit/s bandwidth
limit and the leader's unload calls must carry the brokerClient credentials."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from kazoo.client import KazooClient

from magnetar.broker.cluster.bundles import NamespaceBundles
from magnetar.broker.cluster.load_report import LoadSampler, TopicCounters, nic_speed_kbps
from magnetar.broker.cluster.membership import request_unload
from magnetar.broker.cluster.periodic import Periodic
from magnetar.broker.cluster.records import BrokerData, BundleStats
from magnetar.broker.cluster.shedding import (
    Shedder,
    ThresholdSettings,
    bundles_to_shed,
    threshold_bundles_to_shed,
)
from magnetar.broker.config import BrokerConfig
from magnetar.broker.config.broker_client import BrokerClientCredentials
from magnetar.cli.tokens import create_secret_key, create_token
from magnetar.client.auth import AuthenticationToken
from magnetar.client.errors import ServerError
from tests.cluster.brokers import Cluster, raw_lookup
from tests.security.pki import Pki
from tests.zkserver import ZooKeeperServer

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


B = ("p/d/0x00000000_0x40000000", "p/d/0x40000000_0x80000000", "p/d/0x80000000_0xc0000000",
     "p/d/0xc0000000_0xffffffff")


def loaded(cpu: float, traffic: dict[str, float], **kw: float) -> BrokerData:
    """A broker at ``cpu`` % of 2 cores whose bundles carry ``traffic`` bytes/s in each."""
    stats = {b: BundleStats(msg_throughput_in=t) for b, t in traffic.items()}
    return BrokerData("pulsar://x:6650", cpu_usage=2 * cpu, cpu_limit=200.0,
                      msg_throughput_in=sum(traffic.values()), bundles=tuple(traffic),
                      bundle_stats=stats, **kw)


def test_the_busiest_bundles_are_shed_until_the_broker_is_under_the_threshold() -> None:
    # at 95 % with threshold 85: 15 % of its 1000 bytes/s (10 points + a 5-point margin)
    hot = loaded(95.0, {B[0]: 50.0, B[1]: 100.0, B[2]: 600.0, B[3]: 250.0})
    cool = loaded(20.0, {"q/d/0x00000000_0xffffffff": 10.0})
    brokers = {"a:8080": hot, "b:8080": cool}
    assert bundles_to_shed(brokers, 85.0, {}, 100.0, 60.0) == [("a:8080", B[2])]
    # at 100 % with threshold 40: 65 % = 650 bytes/s: the two busiest
    assert bundles_to_shed({"a:8080": loaded(100.0, hot_traffic := {
        B[0]: 50.0, B[1]: 100.0, B[2]: 600.0, B[3]: 250.0}), "b:8080": cool}, 40.0, {}, 100.0,
        60.0) == [("a:8080", B[2]), ("a:8080", B[3])]
    # the busiest one in its grace period: the next ones, until 150 bytes/s are moved
    moved = {B[2]: 90.0}  # shed 10 s ago
    assert bundles_to_shed(brokers, 85.0, moved, 100.0, 60.0) == [
        ("a:8080", B[3])]
    assert bundles_to_shed(brokers, 85.0, moved, 200.0, 60.0) == [("a:8080", B[2])]
    # never the last bundle, even when all its traffic should go
    assert bundles_to_shed({"a:8080": loaded(100.0, hot_traffic), "b:8080": cool}, 0.0, {},
                           100.0, 60.0) == [("a:8080", B[2]), ("a:8080", B[3]),
                                            ("a:8080", B[1])]
    lone = loaded(99.0, {"q/d/0x00000000_0xffffffff": 900.0})
    assert bundles_to_shed({"a:8080": cool, "c:8080": lone}, 85.0, {}, 100.0, 60.0) == []
    assert bundles_to_shed({"a:8080": hot}, 85.0, {}, 100.0, 60.0) == []  # nowhere to go
    # under the threshold: nothing
    assert bundles_to_shed({"a:8080": loaded(80.0, hot_traffic), "b:8080": cool}, 85.0, {},
                           100.0, 60.0) == []


def test_any_resource_can_overload_a_broker() -> None:
    traffic = {B[0]: 10.0, B[1]: 30.0}
    cool = loaded(10.0, {"q/d/0x00000000_0xffffffff": 1.0})
    for resource in ({"memory_usage": 900.0, "memory_limit": 1000.0},
                     {"bandwidth_in_usage": 90.0, "bandwidth_in_limit": 100.0},
                     {"bandwidth_out_usage": 90.0, "bandwidth_out_limit": 100.0}):
        hot = loaded(10.0, traffic, **resource)
        assert hot.max_resource_usage == 90.0
        assert bundles_to_shed({"a:8080": hot, "b:8080": cool}, 85.0, {}, 0.0, 60.0) == [
            ("a:8080", B[1])], resource
    # idle bundles (no traffic in the report): still one goes, the first by name
    idle = BrokerData("pulsar://x:6650", cpu_usage=190.0, cpu_limit=200.0, bundles=B[:2])
    assert bundles_to_shed({"a:8080": idle, "b:8080": cool}, 85.0, {}, 0.0, 60.0) == [
        ("a:8080", B[0])]


def test_threshold_shedder_sheds_above_the_average_with_smoothed_usages() -> None:
    settings = ThresholdSettings(threshold_percent=10.0, history=0.5, min_throughput=100.0)
    mb = 2**20
    hot = loaded(70.0, {B[0]: 1 * mb, B[1]: 3 * mb, B[2]: 2 * mb})
    cool = loaded(10.0, {B[3]: 1 * mb})
    brokers = {"a:8080": hot, "b:8080": cool}
    history: dict[str, float] = {}
    # average 40: a is 30 points above, 20 past the threshold: 25 % of its 6 MB/s goes,
    # which the busiest bundle covers
    assert threshold_bundles_to_shed(brokers, settings, history, {}, 0.0, 60.0) == [
        ("a:8080", B[1])]
    assert history == {"a:8080": 70.0, "b:8080": 10.0}
    # a's usage drops to 30 but its smoothed usage is 50, b's 10 (average 30): 15 % of its
    # 3 MB/s goes
    brokers["a:8080"] = loaded(30.0, {B[0]: 1 * mb, B[2]: 2 * mb})
    assert threshold_bundles_to_shed(brokers, settings, history, {}, 0.0, 60.0) == [
        ("a:8080", B[2])]
    assert history == {"a:8080": 50.0, "b:8080": 10.0}
    # a third round at 30: smoothed 40, average 25: 5 points past the threshold, so 10 %
    # of its 3 MB/s would go: 0.3 MB/s, under a 1 MB/s minimum: nothing moves
    big = ThresholdSettings(threshold_percent=10.0, history=0.5, min_throughput=1 * mb)
    assert threshold_bundles_to_shed(brokers, big, history, {}, 0.0, 60.0) == []
    # weights: bandwidth weighted out, CPU counted
    bw = ThresholdSettings(bandwidth_in_weight=0.0)
    busy_link = BrokerData("x", bandwidth_in_usage=99.0, bandwidth_in_limit=100.0,
                           cpu_usage=20.0)
    assert bw.usage(busy_link) == 20.0 and ThresholdSettings().usage(busy_link) == 99.0
    # brokers that left are forgotten
    threshold_bundles_to_shed({"b:8080": cool}, settings, history, {}, 0.0, 60.0)
    assert set(history) == {"b:8080"}


def test_a_failed_unload_is_tried_again_and_only_the_leader_sheds() -> None:

    hot = loaded(95.0, {B[0]: 10.0, B[1]: 30.0})
    cool = loaded(10.0, {B[2]: 1.0})
    calls: list[tuple[str, str]] = []
    fail = [True]
    leader = [False]

    async def live() -> dict[str, BrokerData]:
        return {"a:8080": hot, "b:8080": cool}

    async def unload(broker_id: str, bundle: str) -> None:
        calls.append((broker_id, bundle))
        if fail[0]:
            raise RuntimeError("HTTP 401")  # what an unauthenticated call got

    async def main() -> None:
        shedder = Shedder(lambda: leader[0], live, unload, 60.0, 85.0, 600.0)
        assert await shedder.round() == [] and calls == []  # not the leader
        leader[0] = True
        assert await shedder.round() == [("a:8080", B[1])]
        assert shedder.moved == {}  # failed: not in its grace period
        fail[0] = False
        assert await shedder.round() == [("a:8080", B[1])]
        assert set(shedder.moved) == {B[1]}
        assert await shedder.round() == [("a:8080", B[0])]  # B[1] is in its grace period
        assert calls == [("a:8080", B[1])] * 2 + [("a:8080", B[0])]

    asyncio.run(main())


def test_periodic_runs_until_stopped_and_survives_a_failed_round() -> None:

    async def main() -> None:
        runs = 0
        third = asyncio.Event()

        async def work() -> None:
            nonlocal runs
            runs += 1
            if runs == 3:
                third.set()
            if runs == 1:
                raise RuntimeError("the store is down")

        periodic = Periodic("test work", 0.001, work)
        periodic.start()
        assert periodic.running
        async with asyncio.timeout(30):
            await third.wait()  # the second and third rounds ran after the failed first
        await periodic.stop()
        assert not periodic.running

    asyncio.run(main())


def test_periodic_stop_keeps_a_cancellation_of_its_caller() -> None:
    """Whoever awaits ``stop()`` and is cancelled meanwhile is cancelled (the work's own
    cancellation is not allowed to swallow it)."""

    async def main() -> None:
        started, release = asyncio.Event(), asyncio.Event()

        async def work() -> None:
            started.set()
            try:
                await release.wait()
            except asyncio.CancelledError:
                await release.wait()  # a slow stop: the round finishes its cleanup
                raise

        periodic = Periodic("slow work", 0.001, work)
        periodic.start()
        async with asyncio.timeout(30):
            await started.wait()
        stopping = asyncio.get_running_loop().create_task(periodic.stop())
        await asyncio.sleep(0.05)
        stopping.cancel()  # e.g. the broker's shutdown bound runs out
        await asyncio.sleep(0.05)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        assert stopping.cancelled()

    asyncio.run(main())


def test_load_sampler_measures_rates_over_the_interval() -> None:
    clock, cpu = [100.0], [5.0]
    sampler = LoadSampler(2, nic_kbps=1000.0, memory_limit=4096.0, cpu_seconds=lambda: cpu[0],
                          clock=lambda: clock[0], memory=lambda: 256.0)
    owned = [B[0], B[1]]

    def bundle_of(topic: str) -> str | None:
        return {"t1": B[0], "t2": B[0], "t3": B[1]}.get(topic)

    first = sampler.sample({"t1": TopicCounters(10, 1000, 5, 500, 1, 1)}, bundle_of, owned)
    assert first["cpu_usage"] == 0.0 and first["cpu_limit"] == 200.0
    clock[0], cpu[0] = 102.0, 6.0  # 2 s later, 1 CPU second used: 50 % of one core
    report = sampler.sample({"t1": TopicCounters(30, 3000, 25, 2500, 1, 1),
                             "t2": TopicCounters(4, 2048, 0, 0, 1, 0),
                             "t3": TopicCounters(0, 0, 0, 0, 0, 3),
                             "elsewhere": TopicCounters(2, 0, 0, 0, 0, 0)}, bundle_of, owned)
    assert report["cpu_usage"] == 50.0
    assert (report["msg_rate_in"], report["msg_rate_out"]) == (13.0, 10.0)
    assert (report["msg_throughput_in"], report["msg_throughput_out"]) == (2024.0, 1000.0)
    assert report["bandwidth_in_usage"] == 2024.0 / 1024 and report["bandwidth_in_limit"] == 1000
    assert (report["memory_usage"], report["memory_limit"]) == (256.0, 4096.0)
    assert (report["num_topics"], report["num_producers"], report["num_consumers"]) == (4, 2, 4)
    assert report["bundle_stats"] == {
        B[0]: BundleStats(12.0, 10.0, 2024.0, 1000.0, 2, 1, 2),  # t1's growth + t2 from 0
        B[1]: BundleStats(0.0, 0.0, 0.0, 0.0, 0, 3, 1)}


def test_nic_speed() -> None:
    assert nic_speed_kbps(1.0) == 1e9 / 8 / 1024
    assert nic_speed_kbps(0.0, Path("/nonexistent")) == 0.0


@pytest.fixture
def shedding(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("shedding"), zookeeper, 2, {
        "loadBalancerBrokerOverloadedThresholdPercentage": "0",
        "loadBalancerSheddingGracePeriodMinutes": "1",
        "magnetarLoadBalancerSheddingIntervalSeconds": "1",
        "loadBalancerReportUpdateMinIntervalMillis": "300"}, shared=True)
    c.start()
    yield c
    c.stop()


def test_the_leader_sheds_bundles_off_an_overloaded_broker(shedding: Cluster) -> None:

    a, b = shedding.brokers
    bundles = NamespaceBundles.evenly(4)
    topics: dict[object, str] = {}
    i = 0
    while len(topics) < 4:  # one topic in each of the 4 bundles
        t = f"persistent://public/default/shed-{i}"
        topics.setdefault(bundles.bundle_of(t), t)
        i += 1
    for t in topics.values():  # A takes every bundle
        assert asyncio.run(raw_lookup(a.port, t, authoritative=True)).brokerServiceUrl == a.url
    client = pulsar.Client(shedding.service_url, operation_timeout_seconds=30, logger=QUIET)
    try:
        producers = [client.create_producer(t) for t in topics.values()]
        deadline = time.monotonic() + 60
        while True:  # keep some load on; the leader moves bundles to B
            for p in producers:
                p.send(b"x")
            owners = set()
            for t in topics.values():
                try:
                    owners.add(asyncio.run(raw_lookup(b.port, t)).brokerServiceUrl)
                except ServerError:  # a bundle being moved right now: ServiceNotReady
                    continue
            if b.url in owners:
                break
            assert time.monotonic() < deadline, "no bundle was shed to the other broker"
    finally:
        client.close()


@pytest.fixture
def secured_shedding(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
                     ) -> Iterator[tuple[Cluster, str, BrokerClientCredentials]]:
    """Two brokers with token authentication and authorization on; the brokers call each
    other as the superuser ``broker-internal`` (its token in a file, as Pulsar's
    ``brokerClientAuthenticationParameters=file:///...``), over HTTPS to each other's
    ``webServicePortTls`` (a certificate of a test CA). The bandwidth limit is 100 bit/s,
    so a broker with any traffic is overloaded (bandwidth in far above 85 %) and an idle
    one is not: overload is driven by the test's sends, not by timing."""
    root = tmp_path_factory.mktemp("secured-shedding")
    key = root / "secret.key"
    key.write_bytes(create_secret_key())
    internal = root / "broker-internal.jwt"
    internal.write_text(create_token("broker-internal", secret_key=f"file://{key}"))
    pki = Pki(root / "pki")
    cert, cert_key = pki.issue("127.0.0.1", server=True, stem="broker")
    c = Cluster(root, zookeeper, 2, {
        "webServicePortTls": "0", "tlsCertificateFilePath": str(cert),
        "tlsKeyFilePath": str(cert_key), "brokerClientTlsEnabled": "true",
        "brokerClientTrustCertsFilePath": str(pki.ca_file),
        "authenticationEnabled": "true",
        "authenticationProviders":
            "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": f"file://{key}",
        "authorizationEnabled": "true",
        "superUserRoles": "broker-internal,admin",
        "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "brokerClientAuthenticationParameters": f"file://{internal}",
        "loadBalancerOverrideBrokerNicSpeedGbps": "0.0000001",
        "loadBalancerSheddingGracePeriodMinutes": "10",
        "magnetarLoadBalancerSheddingIntervalSeconds": "1",
        "loadBalancerReportUpdateMinIntervalMillis": "300"}, shared=True)
    c.start()
    credentials = BrokerClientCredentials.from_config(BrokerConfig(
        brokerClientAuthenticationPlugin="token",
        brokerClientAuthenticationParameters=f"file://{internal}",
        brokerClientTlsEnabled=True, brokerClientTrustCertsFilePath=str(pki.ca_file)))
    yield c, create_token("admin", secret_key=f"file://{key}"), credentials
    c.stop()


def test_shedding_with_authentication_moves_a_busy_bundle_and_clients_carry_on(
        secured_shedding: tuple[Cluster, str, BrokerClientCredentials]) -> None:

    cluster, token, credentials = secured_shedding
    a, b = cluster.brokers
    auth = AuthenticationToken(token)
    bundles = NamespaceBundles.evenly(4)
    topics: dict[object, str] = {}
    i = 0
    while len(topics) < 4:  # one topic in each of the 4 bundles
        t = f"persistent://public/default/secured-shed-{i}"
        topics.setdefault(bundles.bundle_of(t), t)
        i += 1
    for t in topics.values():  # A takes every bundle
        resp = asyncio.run(raw_lookup(a.port, t, authoritative=True, auth=auth))
        assert resp.brokerServiceUrl == a.url
    client = pulsar.Client(cluster.service_url, authentication=pulsar.AuthenticationToken(token),
                           operation_timeout_seconds=30, logger=QUIET)
    sent: dict[str, list[bytes]] = {t: [] for t in topics.values()}
    try:
        consumer = client.subscribe(list(topics.values()), "shed-check")
        producers = {t: client.create_producer(t) for t in topics.values()}

        def send_round(n: int) -> None:
            for t, p in producers.items():
                body = f"{t}-{n}".encode() * 8
                p.send(body)
                sent[t].append(body)

        deadline = time.monotonic() + 90
        n = 0
        while True:  # traffic on A's bundles overloads A; the leader moves some to B
            send_round(n)
            n += 1
            owners = {}
            for t in topics.values():
                try:
                    owners[t] = asyncio.run(raw_lookup(b.port, t, auth=auth)).brokerServiceUrl
                except ServerError:  # a bundle being moved right now: ServiceNotReady
                    continue
            if b.url in owners.values():
                break
            assert time.monotonic() < deadline, \
                "no bundle was shed to the other broker (see the brokers' logs)"
        kept = [t for t, url in owners.items() if url == a.url]
        assert kept  # A kept at least one bundle
        # the same call, made at B for A's bundle: B answers 307 to A's TLS web URL, which
        # is followed with the credentials (A would answer 401 without them); A releases
        # the bundle: its ownership key in ZooKeeper goes, and the next owner makes another
        bundle = f"public/default/{bundles.bundle_of(kept[0]).name}"
        hosts, chroot = cluster.zk_url.removeprefix("zk:").split("/", 1)
        key = f"/{chroot}/namespace/{bundle}"
        zk = KazooClient(hosts=hosts)
        zk.start(timeout=30)
        try:
            # A's load report carries measured rates: its traffic, per bundle too, and the
            # bandwidth that overloads it
            while True:
                send_round(n)
                n += 1
                raw, _ = zk.get(f"/{chroot}/loadbalance/brokers/{a.broker_id}")
                report = json.loads(raw)
                kept_stats = report["lastStats"].get(bundle, {})
                if (report["msgRateIn"] > 0 and report["msgThroughputIn"] > 0
                        and kept_stats.get("msgThroughputIn", 0) > 0
                        and report["bandwidthIn"]["usage"] > report["bandwidthIn"]["limit"] > 0
                        and report["cpu"]["limit"] >= 100 and report["memory"]["usage"] > 0):
                    break
                assert time.monotonic() < deadline, f"no measured load in A's report: {report}"
            _, before = zk.get(key)
            b_urls = json.loads(b.ready.read_text())
            asyncio.run(request_unload(credentials, b.web_url, b_urls["webServiceUrlTls"],
                                       bundle))
            while True:  # taken again when a client or a lookup comes back to it
                with contextlib.suppress(ServerError):  # moving right now
                    asyncio.run(raw_lookup(b.port, kept[0], auth=auth))
                stat = zk.exists(key)
                if stat is not None and stat.czxid != before.czxid:
                    break
                assert time.monotonic() < deadline, "the redirected unload freed nothing"
        finally:
            zk.stop()
            zk.close()
        for _ in range(20):  # the clients carry on, on both brokers
            send_round(n)
            n += 1
        expected = {body for bodies in sent.values() for body in bodies}
        got: set[bytes] = set()
        while got != expected:
            msg = consumer.receive(timeout_millis=30000)
            got.add(msg.data())
            consumer.acknowledge(msg)
    finally:
        client.close()
