"""Admin calls about a whole partitioned topic in a cluster (issue 29, item 6), on two
broker processes and a real ZooKeeper: creating, resetting and deleting a subscription on
every partition, and partitioned-stats, are asked of each partition's owner, and an owner
loads its partition on demand, so the first call on free bundles (a fresh namespace, or
the cluster just restarted) answers 200, not 503 "look it up again"."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.cluster.brokers import Cluster, http_call, owner_port
from tests.zkserver import ZooKeeperServer

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def stats_of(web_url: str, path: str) -> dict[str, Any]:
    status, stats, _ = http_call("GET", f"{web_url}{path}/partitioned-stats?perPartition=true")
    assert status == 200, stats
    assert isinstance(stats, dict)
    return stats


def test_whole_topic_subscription_calls_reach_every_partition_owner(cluster: Cluster) -> None:
    a, b = cluster.brokers
    status, body, _ = http_call("PUT", f"{a.web_url}/admin/v2/namespaces/public/whole-subs")
    assert status in (204, 409), body
    topic = "persistent://public/whole-subs/t"
    path = "/admin/v2/persistent/public/whole-subs/t"
    assert http_call("PUT", f"{b.web_url}{path}/partitions", 8)[0] == 204
    # the namespace's bundles are all free: every call below is the first on them
    status, body, _ = http_call("PUT", f"{a.web_url}{path}/subscription/s")
    assert status == 204, body
    parts = [f"{topic}-partition-{i}" for i in range(8)]
    assert {owner_port(cluster, p) for p in parts} == {a.port, b.port}  # both serve some
    for broker in (a, b):
        stats = stats_of(broker.web_url, path)
        assert sorted(stats["partitions"]) == sorted(parts)
        assert all("s" in stats["partitions"][p]["subscriptions"] for p in parts)
    # a second create: the subscription is there on every partition
    assert http_call("PUT", f"{b.web_url}{path}/subscription/s")[0] == 409
    client = pulsar.Client(a.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(40):
            producer.send(b"m", partition_key=str(i))
    finally:
        client.close()
    assert stats_of(b.web_url, path)["subscriptions"]["s"]["msgBacklog"] == 40
    # reset on every partition: to a time after the messages (nothing left), then to 0
    later = int(time.time() * 1000) + 60_000
    status, body, _ = http_call("POST", f"{b.web_url}{path}/subscription/s/resetcursor/{later}")
    assert status == 204, body
    assert stats_of(a.web_url, path)["subscriptions"]["s"]["msgBacklog"] == 0
    status, body, _ = http_call("POST", f"{a.web_url}{path}/subscription/s/resetcursor/0")
    assert status == 204, body
    assert stats_of(b.web_url, path)["subscriptions"]["s"]["msgBacklog"] == 40
    status, listed, _ = http_call("GET", f"{b.web_url}{path}/subscriptions")
    assert status == 200 and listed == ["s"]
    # deleted on every partition
    status, body, _ = http_call("DELETE", f"{b.web_url}{path}/subscription/s")
    assert status == 204, body
    stats = stats_of(a.web_url, path)
    assert not any(stats["partitions"][p]["subscriptions"] for p in parts)
    assert http_call("DELETE", f"{a.web_url}{path}/subscription/s")[0] == 404


@pytest.mark.slow
def test_first_calls_after_a_cluster_restart_answer(zookeeper: ZooKeeperServer,
                                                    tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, zookeeper, 2, shared=True).start()
    try:
        a, b = cluster.brokers
        topic = "persistent://public/default/restarted"
        path = "/admin/v2/persistent/public/default/restarted"
        assert http_call("PUT", f"{a.web_url}{path}/partitions", 8)[0] == 204
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=30, logger=QUIET)
        try:
            client.subscribe(topic, "s").close()
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(20):
                producer.send(b"m", partition_key=str(i))
        finally:
            client.close()
        cluster.stop()  # both brokers: every bundle released
        cluster.start()
        # the very first calls, at either broker: 200, each partition from its owner
        stats = stats_of(b.web_url, path)
        assert stats["subscriptions"]["s"]["msgBacklog"] == 20
        assert http_call("PUT", f"{a.web_url}{path}/subscription/t")[0] == 204
        stats = stats_of(a.web_url, path)
        assert stats["subscriptions"]["t"]["msgBacklog"] == 0
        assert stats["subscriptions"]["s"]["msgBacklog"] == 20
        owners = {owner_port(cluster, f"{topic}-partition-{i}") for i in range(8)}
        assert owners == {a.port, b.port}
    finally:
        cluster.stop()
