"""The broker's cluster-wide keys in a metadata store: Pulsar's paths and JSON both ways
(pure), and two `ClusterKeyValueStore`s on one store (SQLite and a real ZooKeeper) seeing
each other's changes through notifications."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from typing import Any

import pytest

from magnetar.broker.cluster.key_paths import (
    flat_keys,
    namespace_parts,
    new_namespace_node,
    node_path,
    node_to_policies,
    policies_to_node,
    with_part,
)
from magnetar.broker.cluster.key_store import ClusterKeyValueStore
from magnetar.broker.config import BrokerConfig
from magnetar.broker.namespaces.policies import PolicyStore
from magnetar.metadata import MemoryKeyValueStore, MetadataStoreError, create_metadata_store
from tests.zkserver import ZooKeeperServer

from .conftest import Backend, run

OVERRIDES: list[dict[str, Any]] = [
    {},
    {"retention_time_minutes": 60, "retention_size_mb": 100},
    {"retention_size_mb": -1},
    {"message_ttl_seconds": 30, "deduplication_enabled": True},
    {"backlog_quota_limit_bytes": 1 << 30, "backlog_quota_policy": "producer_exception"},
    {"backlog_quota_limit_seconds": 600},
    {"allow_auto_topic_creation": False, "auto_topic_creation_type": "partitioned",
     "default_num_partitions": 3},
    {"max_producers_per_topic": 2, "max_consumers_per_topic": 5,
     "schema_compatibility_strategy": "BACKWARD"},
    {"something_new": [1, 2]},
]


@pytest.mark.parametrize("overrides", OVERRIDES)
def test_policies_round_trip(overrides: dict[str, Any]) -> None:
    assert node_to_policies(policies_to_node(overrides)) == overrides


def test_pulsar_field_names() -> None:
    node = policies_to_node({"retention_time_minutes": 60, "retention_size_mb": 100,
                             "message_ttl_seconds": 30, "backlog_quota_limit_bytes": 10,
                             "backlog_quota_policy": "producer_request_hold"})
    assert node["retention_policies"] == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    assert node["message_ttl_in_seconds"] == 30
    assert node["backlog_quota_map"]["destination_storage"] == {
        "limitSize": 10, "policy": "producer_request_hold"}


def test_paths_both_ways() -> None:
    cases = {
        "tenants/acme": "/admin/policies/acme",
        "policies/acme/orders": "/admin/policies/acme/orders",
        "partitioned/persistent://acme/orders/my topic": (
            "/admin/partitioned-topics/acme/orders/persistent/my%20topic"),
        "schemas/acme/orders/t/0000000002": "/schemas/acme/orders/t/0000000002",
        "cluster/bootstrapped": "/admin/clusters/c1",
    }
    for key, path in cases.items():
        assert node_path(key, "c1") == path
        assert key in flat_keys(path, "c1")
    assert flat_keys("/admin/partitioned-topics/acme", "c1") == []
    assert flat_keys("/admin/clusters/other", "c1") == ["clusters/other"]
    assert flat_keys("/admin/clusters/c1", "c1") == ["clusters/c1", "cluster/bootstrapped"]


def test_a_namespace_node_keeps_what_it_does_not_own() -> None:
    node = {**new_namespace_node("c1"), "bundles": {"numBundles": 8}, "encryption_required": True}
    node = with_part(node, "policies", {"message_ttl_seconds": 5})
    node = with_part(node, "permissions", {"namespace": {"app": ["produce"]}, "topics": {}})
    node = with_part(node, "policies", {"retention_size_mb": 1})
    assert node["bundles"] == {"numBundles": 8} and node["encryption_required"] is True
    assert "message_ttl_in_seconds" not in node
    parts = namespace_parts(node)
    assert parts["policies"] == {"retention_size_mb": 1, "replication_clusters": ["c1"]}
    assert parts["permissions"] == {"namespace": {"app": ["produce"]}, "topics": {}}


async def two_brokers_stores(b: Backend) -> tuple[ClusterKeyValueStore, ClusterKeyValueStore]:
    """Two brokers' cluster key stores of cluster c1, on two sessions of ``b``, started."""
    stores = []
    for _ in range(2):
        kv = ClusterKeyValueStore(MemoryKeyValueStore(), await b.store(), cluster="c1")
        await kv.start()
        stores.append(kv)
    return stores[0], stores[1]


def test_two_cluster_stores_see_each_other(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        kv1, kv2 = await two_brokers_stores(b)
        seen: list[tuple[str, Any]] = []
        changed = asyncio.Event()

        def watcher(key: str, value: Any) -> None:
            seen.append((key, value))
            changed.set()

        kv2.watch("tenants/", watcher)
        kv2.watch("policies/", watcher)
        kv2.watch("partitioned/", watcher)

        async def until(key: str, value: Any) -> None:
            while (key, value) not in seen:
                changed.clear()
                await changed.wait()

        kv1.put("tenants/acme", {"adminRoles": [], "allowedClusters": ["c1"]})
        kv1.put("namespaces/acme/orders", {"created": 1})
        kv1.put("policies/acme/orders", {"message_ttl_seconds": 30})
        kv1.put("topics/local-only", {"created": 1})  # per-broker: not shared
        # a namespace's Policies always name its replication clusters, as Pulsar's do
        await asyncio.wait_for(until("policies/acme/orders", {
            "message_ttl_seconds": 30, "replication_clusters": ["c1"]}), 10)
        assert kv2.get("tenants/acme") == {"adminRoles": [], "allowedClusters": ["c1"]}
        assert "namespaces/acme/orders" in kv2.list("namespaces/")
        assert kv2.get("topics/local-only") is None and kv1.get("topics/local-only")

        # a write from a storage thread returns once the store has it
        def from_thread() -> None:
            kv1.put("partitioned/persistent://acme/orders/p", {"partitions": 4})

        thread = threading.Thread(target=from_thread)
        await asyncio.get_running_loop().run_in_executor(None, lambda: (thread.start(),
                                                                         thread.join()))
        got = await kv2.store.get("/admin/partitioned-topics/acme/orders/persistent/p")
        assert got is not None and json.loads(got[0]) == {"partitions": 4}
        await asyncio.wait_for(until("partitioned/persistent://acme/orders/p",
                                     {"partitions": 4}), 10)

        kv1.delete("policies/acme/orders")
        await asyncio.wait_for(until("policies/acme/orders", {"replication_clusters": ["c1"]}), 10)
        kv1.delete("partitioned/persistent://acme/orders/p")
        await asyncio.wait_for(until("partitioned/persistent://acme/orders/p", None), 10)
        # the writer prunes the emptied parents after the delete that kv2 was told of: a
        # bounded poll for that clean-up, not an assertion racing it
        async def pruned() -> None:
            while await kv2.store.get_children("/admin/partitioned-topics/acme/orders"):
                await asyncio.sleep(0.02)

        await asyncio.wait_for(pruned(), 10)
        await kv1.stop()
        await kv2.stop()

    run(backend, scenario)


def test_a_schema_version_is_written_once(backend: Backend) -> None:
    async def scenario(b: Backend) -> None:
        kv1, kv2 = await two_brokers_stores(b)
        key = "schemas/acme/orders/t/0000000000"
        await kv1.write_async(key, {"type": 1, "data": "QQ=="})
        await kv1.write_async(key, {"type": 1, "data": "QQ=="})  # the same again: fine
        with pytest.raises(MetadataStoreError, match="stored by another broker"):
            await kv2.write_async(key, {"type": 2, "data": "Qg=="})
        assert kv2.get(key) == {"type": 1, "data": "QQ=="}  # the mirror shows the winner
        await kv1.stop()
        await kv2.stop()

    run(backend, scenario)


def test_configuration_store_holds_admin_paths_and_metadata_store_the_schemas(
        zookeeper: ZooKeeperServer) -> None:
    async def main() -> None:
        suffix = uuid.uuid4().hex[:6]
        store = await create_metadata_store(zookeeper.url(f"/local-{suffix}"))
        config_store = await create_metadata_store(zookeeper.url(f"/global-{suffix}"))
        kv = ClusterKeyValueStore(MemoryKeyValueStore(), store, config_store, cluster="c1")
        await kv.start()
        try:
            await kv.write_async("tenants/acme", {"adminRoles": [], "allowedClusters": ["c1"]})
            await kv.write_async("schemas/acme/orders/t/0000000000", {"type": 1})
            assert await config_store.exists("/admin/policies/acme")
            assert not await store.exists("/admin/policies/acme")
            assert await store.exists("/schemas/acme/orders/t/0000000000")
            assert not await config_store.exists("/schemas/acme/orders/t/0000000000")
        finally:
            await kv.stop()
            await store.close()
            await config_store.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_topic_policies_are_cluster_wide(backend: Backend) -> None:
    """A topic's own policies (topic-level policies) go to the cluster's store, where every
    broker follows them, and leave it with the topic."""
    key = "topic-policies/persistent://acme/orders/my topic"
    path = "/admin/topic-policies/acme/orders/persistent/my%20topic"
    assert node_path(key, "c1") == path and flat_keys(path, "c1") == [key]

    async def scenario(b: Backend) -> None:
        kv1, kv2 = await two_brokers_stores(b)
        seen: list[tuple[str, Any]] = []
        changed = asyncio.Event()

        def watcher(k: str, value: Any) -> None:
            seen.append((k, value))
            changed.set()

        kv2.watch("topic-policies/", watcher)

        async def until(value: Any) -> None:
            while (key, value) not in seen:
                changed.clear()
                await changed.wait()

        kv1.put(key, {"message_ttl_seconds": 30})
        await asyncio.wait_for(until({"message_ttl_seconds": 30}), 10)
        assert kv2.list("topic-policies/") == {key: {"message_ttl_seconds": 30}}
        kv1.delete(key)
        await asyncio.wait_for(until(None), 10)
        await kv1.stop()
        await kv2.stop()

    run(backend, scenario)



def test_a_change_on_its_way_to_the_store_is_not_undone_by_an_older_remote_value(
        backend: Backend) -> None:
    """A component changes its memory, then a writer thread stores the change. Another
    broker's value arriving in that gap (here: written by the second broker while the
    thread is held back) must not replace the new value in the component: it did, and
    the broker's own write, landing after, was then taken as already known, so the
    component kept the other value for good (a namespace's replication clusters, set
    through the admin API, reverted to the creation's)."""
    async def scenario(b: Backend) -> None:
        kv1, kv2 = await two_brokers_stores(b)
        kv1.put("tenants/acme", {"adminRoles": [], "allowedClusters": ["c1"]})
        kv1.put("namespaces/acme/orders", {"created": 1})
        await kv1.settled()
        gate = threading.Event()
        loop = asyncio.get_running_loop()

        def held_back(fn: Any, *args: Any) -> asyncio.Future[Any]:
            def later() -> Any:
                gate.wait(30)
                return fn(*args)
            return asyncio.wrap_future(loop.run_in_executor(None, later))

        policies = PolicyStore(kv1, BrokerConfig(), write=held_back)
        heard: list[str] = []
        tenant_seen = asyncio.Event()

        def watcher(key: str, value: Any) -> None:
            heard.append(key)
            if key == "tenants/zeta":
                tenant_seen.set()

        kv1.watch("", watcher)
        setting = asyncio.ensure_future(policies.set_async("acme/orders", message_ttl_seconds=30))
        try:
            await asyncio.sleep(0)  # the change is in memory, its write waits at the gate
            assert policies.get("acme/orders").message_ttl_seconds == 30
            await kv2.write_async("policies/acme/orders", {"message_ttl_seconds": 99})
            await kv2.write_async("tenants/zeta", {"adminRoles": [], "allowedClusters": ["c1"]})
            # the tenant's notification comes after the namespace's (one session, in order)
            await asyncio.wait_for(tenant_seen.wait(), 20)
            assert "policies/acme/orders" not in heard, "an older remote value was applied"
            assert policies.get("acme/orders").message_ttl_seconds == 30
        finally:
            gate.set()
        await setting
        await kv1.settled()

        async def in_step() -> None:  # the store, both mirrors and the component agree
            while True:
                got = await kv2.store.get(node_path("policies/acme/orders", "c1"))
                stored = node_to_policies(json.loads(got[0])) if got else {}
                mirrors = [kv.get("policies/acme/orders") or {} for kv in (kv1, kv2)]
                if stored.get("message_ttl_seconds") == 30 and all(
                        m.get("message_ttl_seconds") == 30 for m in mirrors):
                    return
                await asyncio.sleep(0.02)

        await asyncio.wait_for(in_step(), 20)
        assert policies.get("acme/orders").message_ttl_seconds == 30
        await kv1.stop()
        await kv2.stop()

    run(backend, scenario)
