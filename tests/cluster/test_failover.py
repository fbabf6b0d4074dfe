"""Failover speed: after a kill -9 of a bundle's owner, a lookup at the surviving broker is
held until the dead owner's ZooKeeper session expires and then answered with the new
owner, instead of redirecting the client to the dead broker; and a free bundle is not
placed on a broker that refuses connections (docs/cluster.md, "Failover time").

Why the bound of the first test fails without the hold: the official client (C++ inside)
retries a lost producer or consumer after 0.1, 0.2, 0.4, ... s (each delay cut by 0-9 %),
so its attempts come at about 0.1, 0.3, 0.7, 1.5, 3.1, 6.3 and then no earlier than 11.4 s
after the kill. With an 8 s session the dead owner's keys go 7-8.5 s after the kill (its
last write to ZooKeeper, a load report, is at most 1 s old; the test ZooKeeper's tick is
0.5 s): every attempt up to 6.3 s is redirected to the dead broker and fails, so without
the hold the first message from the new owner comes after 11.4 s. With it, the attempt
held at the survivor is answered the moment the keys go: about 8.5 s at worst. The test
asserts the issue's goal, under the session timeout + 5 s (13 s: room for a loaded CI
machine), and, what fails without the hold whatever the machine's speed, that a lookup at
the survivor made right after the kill is answered with the survivor, not redirected to
the dead broker.
"""

from __future__ import annotations

import asyncio
import http.client
import itertools
import threading
import time
from pathlib import Path

import pulsar

from magnetar.broker.cluster.bundles import BundleRange, NamespaceBundles
from magnetar.client.connection import Connection
from magnetar.protocol import pb
from tests.cluster.brokers import Cluster, raw_lookup, topic_owned_by
from tests.zkserver import ZooKeeperServer

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
R = pb.CommandLookupTopicResponse
T = pb.BaseCommand
SESSION_MS = 8000


async def timed_lookup(port: int, topic: str, timeout: float) -> tuple[pb.CommandLookupTopicResponse, float]:
    """A lookup at the broker on ``port`` and how long its answer took."""
    cnx = await Connection.open("127.0.0.1", port, address=f"pulsar://127.0.0.1:{port}")
    try:
        start = time.monotonic()
        resp: pb.CommandLookupTopicResponse = await cnx.request(
            T.LOOKUP, timeout=timeout, topic=topic, authoritative=False)
        return resp, time.monotonic() - start
    finally:
        cnx.close()


def test_official_client_gets_the_new_owner_within_the_session_timeout(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, zookeeper, 2,
                      {"metadataStoreSessionTimeoutMillis": str(SESSION_MS)}, shared=True)
    cluster.start()
    try:
        owner, survivor = cluster.brokers
        topic = topic_owned_by(cluster, owner.port, "failover")
        # the survivor only: every reconnection attempt is a lookup there (a multi-host URL
        # sends every other one straight to the dead broker's closed port)
        client = pulsar.Client(survivor.url, operation_timeout_seconds=60, logger=QUIET)
        try:
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic, batching_enabled=False,
                                              send_timeout_millis=60_000)
            for i in range(10):
                producer.send(f"before-{i}".encode())
            stop = threading.Event()

            def send() -> None:
                while not stop.is_set():
                    try:
                        producer.send(b"after")
                    except Exception:  # not acked: sent again
                        continue

            killed = time.monotonic()
            owner.kill()
            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            # a lookup made now, while the dead owner's key is still there, is answered
            # once the session expired: with the survivor (it took the bundle), never with
            # a redirect to the dead broker
            resp, _ = asyncio.run(timed_lookup(survivor.port, topic, 40))
            assert resp.response == R.Connect, resp
            assert resp.brokerServiceUrl == survivor.url
            received: list[bytes] = []
            try:
                while b"after" not in received:
                    msg = consumer.receive(30_000)
                    consumer.acknowledge(msg)
                    received.append(msg.data())
                took = time.monotonic() - killed
            finally:
                stop.set()
                sender.join(70)
            # nothing acked was lost (acks not yet stored at the kill: delivered again)
            assert {f"before-{i}".encode() for i in range(10)} <= set(received)
            assert took < SESSION_MS / 1000 + 5, (
                f"first message from the new owner {took:.1f} s after the kill")
        finally:
            client.close()
    finally:
        cluster.stop()


def test_a_lookup_waits_for_a_dead_owner_no_longer_than_its_bound(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """``magnetarDeadOwnerLookupWaitMillis`` bounds the wait: past it, the lookup is
    answered with the redirect after all (the owner's session has not expired yet)."""
    cluster = Cluster(tmp_path, zookeeper, 2,
                      {"metadataStoreSessionTimeoutMillis": "30000",
                       "magnetarDeadOwnerLookupWaitMillis": "1500"}, shared=True)
    cluster.start()
    try:
        owner, survivor = cluster.brokers
        topic = topic_owned_by(cluster, owner.port, "bounded")
        owner.kill()
        resp, took = asyncio.run(timed_lookup(survivor.port, topic, 20))
        assert resp.response == R.Redirect and resp.brokerServiceUrl == owner.url, resp
        assert took >= 1.4, f"answered after {took:.2f} s, without waiting"
        assert took < 15
        # the HTTP lookup waits the same way, then answers 307 to the owner
        web = http.client.HTTPConnection("127.0.0.1", survivor.http_port, timeout=20)
        try:
            start = time.monotonic()
            web.request("GET", "/lookup/v2/topic/" + topic.replace("://", "/"))
            answer = web.getresponse()
            took = time.monotonic() - start
        finally:
            web.close()
        assert answer.status == 307
        assert (answer.getheader("Location") or "").startswith(owner.web_url)
        assert 1.4 <= took < 15, f"answered after {took:.2f} s"
    finally:
        cluster.stop()


def test_a_held_lookup_ends_when_the_owner_answers_again(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """A held lookup whose owner's port accepts connections again (here: the broker
    restarted on its port, its old session not expired yet) is answered with the redirect
    then, not at the end of the wait (the session timeout + 5 s, 35 s here)."""
    cluster = Cluster(tmp_path, zookeeper, 2,
                      {"metadataStoreSessionTimeoutMillis": "30000"}, shared=True)
    cluster.start()
    try:
        owner, survivor = cluster.brokers
        topic = topic_owned_by(cluster, owner.port, "back")
        owner.kill()

        async def scenario() -> tuple[pb.CommandLookupTopicResponse, float]:
            lookup = asyncio.ensure_future(timed_lookup(survivor.port, topic, 40))
            await asyncio.to_thread(owner.start)
            return await lookup

        resp, took = asyncio.run(scenario())
        assert resp.response == R.Redirect and resp.brokerServiceUrl == owner.url, resp
        assert took < 30, f"answered after {took:.1f} s"
    finally:
        cluster.stop()


def test_a_free_bundle_is_not_placed_on_a_dead_broker(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """The killed broker's registry entry outlives it for a session timeout, and it is the
    least-loaded broker (it owned nothing): a free bundle looked up at the survivor is
    taken there, not redirected to the dead one."""
    cluster = Cluster(tmp_path, zookeeper, 2,
                      {"metadataStoreSessionTimeoutMillis": "30000"}, shared=True)
    cluster.start()
    try:
        survivor, dead = cluster.brokers
        bundles = NamespaceBundles.evenly(4)
        topics: dict[BundleRange, str] = {}
        for i in itertools.count():
            topic = f"persistent://public/default/free-{i}-partition-0"
            topics.setdefault(bundles.bundle_of(topic), topic)
            if len(topics) == 3:
                break
        first, second, free = topics.values()
        for topic in (first, second):  # the survivor takes two bundles (authoritative)
            resp = asyncio.run(raw_lookup(survivor.port, topic, authoritative=True))
            assert resp.response == R.Connect, resp
        dead.kill()
        resp, _ = asyncio.run(timed_lookup(survivor.port, free, 20))
        assert resp.response == R.Connect and resp.brokerServiceUrl == survivor.url, resp
    finally:
        cluster.stop()
