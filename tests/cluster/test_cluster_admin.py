"""The cluster's admin API at Pulsar's paths, on two broker subprocesses and a real
ZooKeeper: brokers list, leader, namespace bundles, HTTP lookup redirects, bundle split
(its topics keep working) and unload (the bundle is freed and placed again)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pulsar

from magnetar.broker.cluster.bundles import BundleRange, NamespaceBundles
from magnetar.client import Client
from tests.cluster.brokers import Cluster, ClusterBroker, http_call, owner_port, topic_owned_by

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def call(method: str, url: str) -> tuple[int, Any, str]:
    """(status, JSON body, Location) without following redirects."""
    return http_call(method, url, follow_redirects=False)


def ensure_namespace(cluster: Cluster, namespace: str) -> None:
    for b in cluster.brokers:  # namespaces are kept per broker today
        status, _, _ = call("PUT", f"{b.web_url}/admin/v2/namespaces/{namespace}")
        assert status in (204, 409)


def test_brokers_leader_and_bundles(cluster: Cluster) -> None:
    a, b = cluster.brokers
    for x in (a, b):
        status, listed, _ = call("GET", f"{x.web_url}/admin/v2/brokers/standalone")
        assert status == 200 and listed == sorted([a.broker_id, b.broker_id])
    leaders = [call("GET", f"{x.web_url}/admin/v2/brokers/leaderBroker")[1] for x in (a, b)]
    assert leaders[0] == leaders[1] and leaders[0]["brokerId"] in (a.broker_id, b.broker_id)
    assert leaders[0]["serviceUrl"] in (a.web_url, b.web_url)
    status, bundles, _ = call("GET", f"{a.web_url}/admin/v2/namespaces/public/default/bundles")
    assert status == 200 and bundles == NamespaceBundles.evenly(4).to_json()


def test_http_lookup_redirects_to_the_owner(cluster: Cluster) -> None:
    a, b = cluster.brokers
    topic = topic_owned_by(cluster, b.port, "http")
    path = "/lookup/v2/topic/" + topic.replace("://", "/")
    status, _, location = call("GET", a.web_url + path)
    assert status == 307 and location.startswith(b.web_url + path)
    assert "authoritative=true" in location
    with urllib.request.urlopen(a.web_url + path) as resp:  # followed: the owner answers
        assert json.load(resp)["brokerUrl"] == b.url

    async def produce_through_http() -> None:
        async with Client(f"http://127.0.0.1:{a.http_port},127.0.0.1:{b.http_port}",
                          operation_timeout_seconds=20) as client:
            await (await client.create_producer(topic)).send(b"via http")

    asyncio.run(asyncio.wait_for(produce_through_http(), 60))


def test_split_bundle_keeps_its_topics_working(cluster: Cluster) -> None:
    a, b = cluster.brokers
    ensure_namespace(cluster, "public/splits")
    topics = [f"persistent://public/splits/t{i}-partition-0" for i in range(12)]
    client = pulsar.Client(a.url, operation_timeout_seconds=20, logger=QUIET)
    try:
        consumers = {t: client.subscribe(t, "s") for t in topics}
        producers = {t: client.create_producer(t) for t in topics}
        for t in topics:
            producers[t].send(b"before")
        owners = {t: owner_port(cluster, t) for t in topics}
        # split the bundle of the first topic, asking the broker that does NOT own it
        bundle = NamespaceBundles.evenly(4).bundle_of(topics[0])
        wrong = a if owners[topics[0]] == b.port else b
        url = f"{wrong.web_url}/admin/v2/namespaces/public/splits/{bundle}/split"
        status, _, location = call("PUT", url)
        assert status == 307
        status, _, _ = call("PUT", location)
        assert status == 204
        status, after, _ = call("GET", f"{a.web_url}/admin/v2/namespaces/public/splits/bundles")
        halves = NamespaceBundles.from_json(after)
        assert len(halves) == 5
        assert BundleRange(bundle.lower, bundle.lower + (bundle.upper - bundle.lower) // 2) \
            in halves
        for t in topics:  # every topic still served, by the same owner, and still flowing
            assert owner_port(cluster, t) == owners[t]
            producers[t].send(b"after")
            assert [consumers[t].receive(10_000).data() for _ in range(2)] == [b"before", b"after"]
    finally:
        client.close()


def test_unload_frees_the_bundle_and_clients_carry_on(cluster: Cluster) -> None:
    a, b = cluster.brokers
    ensure_namespace(cluster, "public/unloads")
    topic = "persistent://public/unloads/u-partition-0"
    bundle = NamespaceBundles.evenly(4).bundle_of(topic)
    client = pulsar.Client(a.url, operation_timeout_seconds=20, logger=QUIET)
    try:
        producer = client.create_producer(topic)
        producer.send(b"one")
        owner = a if owner_port(cluster, topic) == a.port else b
        url = f"{owner.web_url}/admin/v2/namespaces/public/unloads/{bundle}/unload"
        assert call("PUT", url)[0] == 204
        producer.send(b"two")  # the client reconnects through a new lookup
        assert owner_port(cluster, topic) in (a.port, b.port)
    finally:
        client.close()


def admin_cli(broker: ClusterBroker, *args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", broker.web_url,
         *args, "--output", "json"], capture_output=True, text=True, timeout=60,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src")))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def test_admin_cli_brokers_bundles_lookup_and_split(cluster: Cluster) -> None:
    a, b = cluster.brokers
    assert admin_cli(a, "brokers", "list", "standalone") == sorted([a.broker_id, b.broker_id])
    assert admin_cli(b, "brokers", "leader-broker")["brokerId"] in (a.broker_id, b.broker_id)
    report = admin_cli(a, "broker-stats", "load-report")  # Pulsar's LocalBrokerData
    assert report["pulsarServiceUrl"] == a.url and report["webServiceUrl"] == a.web_url
    assert report["cpu"]["limit"] >= 100 and report["memory"]["usage"] > 0
    assert set(report["lastStats"]) == set(report["bundles"])
    assert {"msgRateIn", "msgThroughputOut", "bandwidthIn", "numBundles"} <= set(report)
    ensure_namespace(cluster, "public/cli")
    assert admin_cli(a, "namespaces", "bundles", "public/cli")["numBundles"] == 4
    topic = "persistent://public/cli/t-partition-0"
    served_by = admin_cli(a, "topics", "lookup", topic)["brokerUrl"]
    assert served_by in (a.url, b.url)
    owner_of_topic = a if served_by == a.url else b
    other = b if owner_of_topic is a else a
    bundle = str(NamespaceBundles.evenly(4).bundle_of(topic))
    admin_cli(other, "namespaces", "split-bundle", "public/cli", "--bundle", bundle)  # 307 followed
    assert admin_cli(a, "namespaces", "bundles", "public/cli")["numBundles"] == 5


def test_topic_admin_at_a_non_owner_redirects(cluster: Cluster) -> None:
    a, b = cluster.brokers
    topic = topic_owned_by(cluster, b.port, "stats")
    client = pulsar.Client(b.url, operation_timeout_seconds=20, logger=QUIET)
    try:
        client.create_producer(topic).send(b"x")
    finally:
        client.close()
    path = "/admin/v2/" + topic.replace("://", "/") + "/stats"
    status, _, location = call("GET", a.web_url + path)
    assert status == 307 and location.startswith(b.web_url + path)
    with urllib.request.urlopen(a.web_url + path) as resp:  # followed: B's stats
        assert json.load(resp)["msgInCounter"] == 1


def test_partitioned_topic_admin_at_any_broker_leaves_the_owners_serving(cluster: Cluster) -> None:
    """A partitioned topic created and asked for its stats at one broker while its
    partitions are spread over both: the stats of each partition come from its owner
    (summed: the same answer at either broker), and no broker opens a partition it does
    not own (which fenced the owner's ledger: its producer's sends then timed out)."""
    a, b = cluster.brokers
    ensure_namespace(cluster, "public/pstats")
    topic = "persistent://public/pstats/spread"
    path = "/admin/v2/persistent/public/pstats/spread"
    status, _, _ = http_call("PUT", a.web_url + path + "/partitions", 4)
    assert status == 204
    client = pulsar.Client(a.url, operation_timeout_seconds=20, logger=QUIET)
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=20_000)
        for i in range(40):
            producer.send(b"before", partition_key=str(i))
        owners = {owner_port(cluster, f"{topic}-partition-{i}") for i in range(4)}
        assert owners == {a.port, b.port}  # precondition: both serve some partitions
        for broker in (a, b):
            with urllib.request.urlopen(f"{broker.web_url}{path}/partitioned-stats"
                                        "?perPartition=true") as resp:
                stats = json.load(resp)
            assert stats["msgInCounter"] == 40, (broker.port, stats["partitions"])
            assert stats["subscriptions"]["s"]["msgBacklog"] == 40
        for i in range(40):  # every owner still appends
            producer.send(b"after", partition_key=str(i))
        got = [consumer.receive(20_000).data() for _ in range(80)]
        assert got.count(b"before") == 40 and got.count(b"after") == 40
    finally:
        client.close()
