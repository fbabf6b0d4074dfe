"""Setting up a cluster's metadata: connecting a broker to its metadata store(s)
(`open_cluster_metadata`), ``initialize-cluster-metadata`` (`initialize_cluster_metadata`),
and copying a standalone's metadata into a cluster's store (`copy_standalone_metadata`).

The configuration store (``configurationMetadataStoreUrl``, Pulsar's split) holds the
``/admin/...`` paths; the metadata store (``metadataStoreUrl``) the ``/schemas/...`` ones.
Without a configuration store URL, or with the same URL, one store holds both.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.cluster.key_paths import (
    BOOTSTRAPPED,
    CLUSTERS_ROOT,
    POLICIES_ROOT,
    cluster_data,
    encode,
    is_cluster_key,
    new_namespace_node,
    node_path,
)
from magnetar.broker.cluster.key_store import ClusterKeyValueStore
from magnetar.broker.config.broker_config import BrokerConfig
from magnetar.metadata import (
    BadVersionError,
    KeyValueStore,
    MemoryKeyValueStore,
    MetadataStore,
    SessionExpiredPolicy,
    create_metadata_store,
)
from magnetar.storage import SqliteMetadataStore
from magnetar.storage.key_files import KeyFilesStore

log = logging.getLogger(__name__)

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "public/default"
#: the transaction coordinators' assign topic (broker/transactions/manager.py)
TXN_ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"


@dataclass
class ClusterMetadata:
    """A broker's connection to its cluster's metadata: the store(s) and the flat key store
    the broker's components use over them."""

    store: MetadataStore
    config_store: MetadataStore
    kv: ClusterKeyValueStore
    stores: list[MetadataStore] = field(default_factory=list)

    async def close(self) -> None:
        await self.kv.stop()
        self.kv.close()
        for store in self.stores:
            await store.close()


def store_options(config: BrokerConfig) -> dict[str, Any]:
    return {
        "session_timeout_s": config.metadataStoreSessionTimeoutMillis / 1000,
        "session_expired_policy": SessionExpiredPolicy.parse(config.zookeeperSessionExpiredPolicy),
        "operation_timeout_s": float(config.metadataStoreOperationTimeoutSeconds),
        "connect_timeout_s": float(config.metadataStoreOperationTimeoutSeconds),
    }


async def connect_stores(metadata_url: str, configuration_url: str = "",
                         **options: Any) -> tuple[MetadataStore, MetadataStore, list[MetadataStore]]:
    """The metadata store and the configuration store (the same one without a distinct
    URL), started; `MetadataStoreError` naming the address when one cannot be reached."""
    store = await create_metadata_store(metadata_url, **options)
    if not configuration_url or configuration_url.strip() == metadata_url.strip():
        return store, store, [store]
    try:
        config_store = await create_metadata_store(configuration_url, **options)
    except BaseException:
        await store.close()
        raise
    return store, config_store, [config_store, store]


class ClusterNotInitializedError(Exception):
    """A broker's ``clusterName`` has no entry in its configuration store; the message
    holds the command that makes one."""


def initialize_command(config: BrokerConfig, web_service_url: str, broker_service_url: str) -> str:
    """The ``magnetar initialize-cluster-metadata`` command line for ``config``'s cluster."""
    parts = ["magnetar initialize-cluster-metadata", f"--cluster {config.clusterName}",
             f"--metadata-store {config.metadataStoreUrl}"]
    if config.configurationMetadataStoreUrl and \
            config.configurationMetadataStoreUrl.strip() != config.metadataStoreUrl.strip():
        parts.append(f"--configuration-metadata-store {config.configurationMetadataStoreUrl}")
    parts += [f"--web-service-url {web_service_url}", f"--broker-service-url {broker_service_url}"]
    return " ".join(parts)


async def stored_cluster_data(config_store: MetadataStore, cluster: str) -> dict[str, Any] | None:
    """The ClusterData stored for ``cluster`` (None when it was never initialized)."""
    got = await config_store.get(f"{CLUSTERS_ROOT}/{cluster}")
    if got is None:
        return None
    try:
        value = json.loads(got[0]) if got[0] else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def open_cluster_metadata(config: BrokerConfig, *, web_service_url: str = "",
                                broker_service_url: str = "",
                                require_initialized: bool = False) -> ClusterMetadata:
    """Connect to ``config``'s metadata store(s) and load the broker's view of them.
    ``require_initialized`` (``magnetar broker``, as Pulsar's broker): the cluster must have
    been initialized (``ClusterNotInitializedError`` naming the command otherwise); without
    it (``magnetar standalone`` with a metadata store, as Pulsar's standalone) the first
    broker creates the cluster's entry."""
    store, config_store, stores = await connect_stores(
        config.metadataStoreUrl, config.configurationMetadataStoreUrl, **store_options(config))
    if require_initialized:
        try:
            missing = await stored_cluster_data(config_store, config.clusterName) is None
            known = await config_store.get_children(CLUSTERS_ROOT) if missing else []
        except BaseException:
            for s in stores:
                await s.close()
            raise
        if missing:
            for s in stores:
                await s.close()
            others = (f"; the clusters initialized there: {', '.join(known)}" if known
                      else "; no cluster is initialized there")
            raise ClusterNotInitializedError(
                f"cluster {config.clusterName!r} (clusterName) is not initialized in "
                f"{config.configurationMetadataStoreUrl or config.metadataStoreUrl}{others}. "
                "Run once, before the cluster's brokers start:\n  "
                + initialize_command(config, web_service_url, broker_service_url))
    os.makedirs(config.magnetarDataDir, exist_ok=True)
    local = local_store(config)
    kv = ClusterKeyValueStore(local, store, config_store, cluster=config.clusterName,
                              cluster_info=cluster_data(web_service_url, broker_service_url),
                              write_timeout_s=float(config.metadataStoreOperationTimeoutSeconds))
    try:
        await kv.start()
    except BaseException:
        local.close()
        for s in stores:
            await s.close()
        raise
    return ClusterMetadata(store, config_store, kv, stores)


def local_store(config: BrokerConfig) -> KeyValueStore:
    """The store of the broker's own keys (those not cluster-wide: a topic's record, its
    dedup snapshot, its compacted view). Brokers sharing a data directory, possibly across
    hosts, keep them as one file per key in ``<data dir>/metadata/`` (written by the
    topic's owner), never in one SQLite file all of them write (docs/cluster.md, "Across
    hosts"); a ``metadata.db`` written before is moved in once. Otherwise ``metadata.db``."""
    data = config.magnetarDataDir
    if not config.magnetarSharedStorage:
        return SqliteMetadataStore(os.path.join(data, "metadata.db"))
    store = KeyFilesStore(os.path.join(data, "metadata"))
    store.migrate_from(os.path.join(data, "metadata.db"),
                       os.path.join(data, "metadata.db.migrated"),
                       keep=lambda key: not is_cluster_key(key))
    return store


async def _create(store: MetadataStore, path: str, value: dict[str, Any]) -> bool:
    try:
        await store.put(path, encode(value), -1)
    except BadVersionError:
        return False
    return True


async def initialize_cluster_metadata(
    config_store: MetadataStore, cluster: str, *, web_service_url: str = "",
    web_service_url_tls: str = "", broker_service_url: str = "",
    broker_service_url_tls: str = "", transaction_coordinators: int = 16,
) -> list[str]:
    """Create the cluster, the tenant ``public`` and the namespace ``public/default``, as
    Pulsar's ``initialize-cluster-metadata`` does, and (``transaction_coordinators`` > 0)
    the tenant ``pulsar``, the namespace ``pulsar/system`` and the transaction coordinators'
    assign topic with that many partitions; what exists already is left as it is.
    Returns the paths created."""
    created = []
    items = [
        (f"{CLUSTERS_ROOT}/{cluster}", cluster_data(
            web_service_url, broker_service_url, web_service_url_tls, broker_service_url_tls)),
        (f"{POLICIES_ROOT}/{DEFAULT_TENANT}",
         {"adminRoles": [], "allowedClusters": [cluster]}),
        (f"{POLICIES_ROOT}/{DEFAULT_NAMESPACE}", new_namespace_node(cluster)),
    ]
    if transaction_coordinators > 0:
        items += [
            (f"{POLICIES_ROOT}/pulsar", {"adminRoles": [], "allowedClusters": [cluster]}),
            (f"{POLICIES_ROOT}/pulsar/system", new_namespace_node(cluster)),
            (node_path(f"partitioned/{TXN_ASSIGN_TOPIC}", cluster),
             {"partitions": transaction_coordinators}),
        ]
    for path, value in items:
        if await _create(config_store, path, value):
            created.append(path)
    return created


#: the order a copy writes flat keys in (a namespace before its policies and permissions)
_ORDER = ("tenants/", "namespaces/", "policies/", "permissions/", "partitioned/", "schemas/")


async def copy_standalone_metadata(
    data_dir: str, store: MetadataStore, config_store: MetadataStore, cluster: str,
) -> dict[str, int]:
    """Copy the cluster-wide metadata of a standalone's data directory (its tenants,
    namespaces, policies, permissions, partitioned topics and schemas) into a cluster's
    store(s); returns how many keys of each kind were copied. Topics' data and cursors stay
    in the data directory (a broker of the cluster started on it serves them)."""
    path = os.path.join(data_dir, "metadata.db")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no standalone metadata at {path}")
    source = SqliteMetadataStore(path)
    try:
        flat = source.list("")
    finally:
        source.close()
    kv = ClusterKeyValueStore(MemoryKeyValueStore(), store, config_store, cluster=cluster)
    await kv.start()
    counts: dict[str, int] = {}
    try:
        await _create(config_store, f"{CLUSTERS_ROOT}/{cluster}", cluster_data())
        for prefix in _ORDER:
            for key, value in flat.items():
                if key.startswith(prefix) and is_cluster_key(key):
                    if prefix == "tenants/":  # the standalone's cluster is this one now
                        value = {**value, "allowedClusters": [cluster]}
                    await kv.write_async(key, value)
                    counts[prefix.rstrip("/")] = counts.get(prefix.rstrip("/"), 0) + 1
        await kv.write_async(BOOTSTRAPPED, {"at": 0})
        await kv.settled()
    finally:
        await kv.stop()
    return counts
