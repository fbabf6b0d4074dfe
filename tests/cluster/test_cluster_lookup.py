"""Two brokers on one real ZooKeeper (subprocesses), driven by the official client and
Magnetar's: a lookup at A for a topic B owns redirects there (authoritative), producers and
consumers reach each topic's owner through either broker, a partitioned topic's partitions
spread over both brokers, and a producer sent to the wrong broker gets ServiceNotReady."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pulsar
import pytest

from magnetar.broker.cluster.bundles import NamespaceBundles
from magnetar.client import Client
from magnetar.client.connection import Connection
from magnetar.client.errors import ServerError
from magnetar.protocol import pb
from tests.cluster.brokers import Cluster, owner_port, raw_lookup, topic_owned_by
from tests.cluster.test_cluster_admin import ensure_namespace

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
R = pb.CommandLookupTopicResponse
T = pb.BaseCommand


def test_brokers_register_and_partitions_spread(cluster: Cluster) -> None:
    a, b = cluster.brokers
    with urllib.request.urlopen(f"{a.web_url}/admin/v2/brokers/standalone") as resp:
        assert resp.status == 200
    # a namespace of its own: its bundles are all free (other tests own some of default's)
    ensure_namespace(cluster, "public/spread")
    topic = "persistent://public/spread/spread"
    parts = [f"{topic}-partition-{i}" for i in range(4)]
    # precondition from the bundle arithmetic: the partitions fall in 2+ of the 4 bundles
    assert len({NamespaceBundles.evenly().bundle_of(p) for p in parts}) >= 2
    client = pulsar.Client(a.url, operation_timeout_seconds=20, logger=QUIET)
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            producer.send(f"m{i}".encode(), partition_key=str(i))
        got = sorted(consumer.receive(10_000).data() for _ in range(20))
        assert got == sorted(f"m{i}".encode() for i in range(20))
    finally:
        client.close()
    owners = {p: owner_port(cluster, p) for p in parts}
    assert set(owners.values()) == {a.port, b.port}  # both brokers serve some partitions
    # and any broker redirects to the owner of a partition it does not own
    for part, port in owners.items():
        other = b if port == a.port else a
        resp = asyncio.run(raw_lookup(other.port, part))
        assert resp.response == R.Redirect and resp.authoritative
        assert resp.brokerServiceUrl == f"pulsar://127.0.0.1:{port}"


def test_redirects_followed_by_both_clients(cluster: Cluster) -> None:
    a, b = cluster.brokers
    topic = topic_owned_by(cluster, b.port, "redirect")
    resp = asyncio.run(raw_lookup(a.port, topic))
    assert resp.response == R.Redirect and resp.brokerServiceUrl == b.url and resp.authoritative
    # the official client, given A, produces to B's topic through the redirect
    client = pulsar.Client(a.url, operation_timeout_seconds=20, logger=QUIET)
    try:
        producer = client.create_producer(topic)
        producer.send(b"official")
    finally:
        client.close()

    async def magnetar_client() -> None:
        async with Client(a.url, operation_timeout_seconds=20) as mc:
            consumer = await mc.subscribe(topic, "m", initial_position=pulsar.InitialPosition.Earliest)
            msg = await consumer.receive()
            assert msg.data() == b"official"
            await (await mc.create_producer(topic)).send(b"magnetar")
            assert (await consumer.receive()).data() == b"magnetar"

    asyncio.run(asyncio.wait_for(magnetar_client(), 60))
    # B served it: the subscription made through A lives at B
    name = topic.rsplit("/", 1)[1]
    with urllib.request.urlopen(f"{b.web_url}/admin/v2/persistent/public/default/{name}/stats") as r:
        assert "m" in json.load(r)["subscriptions"]


def test_producer_at_a_non_owner_gets_service_not_ready(cluster: Cluster) -> None:
    a, b = cluster.brokers
    topic = topic_owned_by(cluster, b.port, "refused")

    async def attach_at_a() -> None:
        cnx = await Connection.open("127.0.0.1", a.port, address=a.url)
        try:
            with pytest.raises(ServerError) as info:
                await cnx.request(T.PRODUCER, timeout=10, topic=topic, producer_id=1)
            assert info.value.code == pb.ServiceNotReady
            with pytest.raises(ServerError) as info:
                await cnx.request(T.SUBSCRIBE, timeout=10, topic=topic, subscription="s",
                                  subType=pb.CommandSubscribe.Shared, consumer_id=2)
            assert info.value.code == pb.ServiceNotReady
        finally:
            cnx.close()

    asyncio.run(attach_at_a())

