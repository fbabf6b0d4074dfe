"""Tenants and namespaces: which exist, created and deleted through the admin layer.

As in Pulsar, a topic lives in a namespace (``tenant/namespace``) that must exist: the
broker answers ``TopicNotFound`` for a topic of any other namespace (lookup, producer,
consumer). A fresh data directory starts with the tenant ``public`` and its namespace
``public/default``, as Pulsar's standalone does; a data directory written before namespaces
existed gets, on start, every namespace that holds one of its topics.

Clusters: this broker's own (``clusterName``) always exists; others may be registered
(``clusters/{name}`` = Pulsar's ClusterData, its service URLs) so that tenants and
namespaces may name them, as Pulsar's ``clusters create`` allows (Magnetar does not
replicate to them). Metadata keys: ``tenants/{tenant}`` = ``{"adminRoles": [...], "allowedClusters": [...]}``,
``namespaces/{tenant}/{namespace}`` = ``{"created": epoch seconds}``; the namespace's
policies live apart, under ``policies/{tenant}/{namespace}`` (see ``policies.py``). The
sets of names are kept in memory as well: the check on every lookup costs a set lookup.

In cluster mode (``metadataStoreUrl``) the store is `ClusterKeyValueStore`: the keys live
in the cluster's metadata store, and changes made through other brokers reach the sets
through its ``watch``.

A change applies in memory at once (so a second create of the same name is refused, and a
deleted namespace's topics are refused, from that moment) and is stored off the loop, in
order (`KeyWriter`): the changing methods return the write's future (None when it was
written at once), which the admin handlers await before they answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from magnetar.broker.namespaces.key_writes import KeyWriter, Write
from magnetar.protocol.naming import check_named_entity, parse_namespace

log = logging.getLogger(__name__)

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "public/default"
_BOOTSTRAPPED = "cluster/bootstrapped"


class NamespaceError(Exception):
    """A tenant or namespace operation that cannot be done as asked."""


class NotFound(NamespaceError):
    """No such tenant or namespace."""


class AlreadyExists(NamespaceError):
    """The tenant or namespace exists already."""


class NotEmpty(NamespaceError):
    """A tenant with namespaces, or a namespace with topics, cannot be deleted."""


class InvalidName(NamespaceError):
    """A name Pulsar would refuse, or a tenant that allows an unknown cluster."""


def _check_name(kind: str, name: str) -> None:
    """InvalidName unless ``name`` is a valid tenant or cluster name, or a valid
    ``tenant/namespace`` (``protocol/naming.py``'s rules, the same everywhere)."""
    try:
        if kind == "namespace":
            parse_namespace(name)
        else:  # a tenant or a cluster
            check_named_entity(kind, name)
    except ValueError as exc:
        raise InvalidName(str(exc)) from None


class NamespaceRegistry:
    """The tenants and namespaces of this broker, over the metadata store."""

    def __init__(self, metadata: Any, cluster: str, write: Write | None = None) -> None:
        self.metadata = metadata
        self.cluster = cluster
        self._writes = KeyWriter(metadata)  # at once while starting (see `start_writing_off_loop`)
        self._write = write
        self._tenants: dict[str, dict[str, Any]] = {
            key[len("tenants/"):]: dict(value) for key, value in metadata.list("tenants/").items()
        }
        self._namespaces: set[str] = {
            key[len("namespaces/"):] for key in metadata.list("namespaces/")
        }
        self._clusters: dict[str, dict[str, Any]] = {
            key[len("clusters/"):]: dict(value) for key, value in metadata.list("clusters/").items()
        }
        # in cluster mode, another broker's changes (no-op for a store only we write)
        if hasattr(metadata, "watch"):
            metadata.watch("tenants/", self._tenant_changed)
            metadata.watch("namespaces/", self._namespace_changed)
            metadata.watch("clusters/", self._cluster_changed)
        if metadata.get(_BOOTSTRAPPED) is None:
            if DEFAULT_TENANT not in self._tenants:
                self.create_tenant(DEFAULT_TENANT)
            if DEFAULT_NAMESPACE not in self._namespaces:
                self.create_namespace(DEFAULT_NAMESPACE)
            metadata.put(_BOOTSTRAPPED, {"at": time.time()})

    def _tenant_changed(self, key: str, value: Any) -> None:
        tenant = key[len("tenants/"):]
        if value is None:
            self._tenants.pop(tenant, None)
        else:
            self._tenants[tenant] = dict(value)

    def _cluster_changed(self, key: str, value: Any) -> None:
        cluster = key[len("clusters/"):]
        if value is None:
            self._clusters.pop(cluster, None)
        else:
            self._clusters[cluster] = dict(value)

    def _namespace_changed(self, key: str, value: Any) -> None:
        if value is None:
            self._namespaces.discard(key[len("namespaces/"):])
        else:
            self._namespaces.add(key[len("namespaces/"):])

    def start_writing_off_loop(self) -> None:
        """From now on, changes are stored on the metadata writer thread (start-up's
        bootstrap and `adopt` are stored at once, before the broker serves)."""
        self._writes = KeyWriter(self.metadata, self._write)

    def adopt(self, topic_names: list[str]) -> None:
        """Register the namespace of every given topic that lacks one (with its tenant)."""
        for name in topic_names:
            namespace = name.split("://", 1)[-1].rsplit("/", 1)[0]
            if namespace in self._namespaces:
                continue
            tenant = namespace.split("/", 1)[0]
            if tenant not in self._tenants:
                self._put_tenant(tenant, {"adminRoles": [], "allowedClusters": [self.cluster]})
            self._put_namespace(namespace)
            log.info("namespace %s registered: it holds existing topics", namespace)

    # ------------------------------------------------------------------ clusters

    def clusters(self) -> list[str]:
        return sorted({self.cluster, *self._clusters})

    def cluster_data(self, cluster: str) -> dict[str, Any]:
        """The stored ClusterData of a cluster ({} for our own when none was stored)."""
        if cluster != self.cluster and cluster not in self._clusters:
            raise NotFound(f"Cluster {cluster} does not exist")
        return dict(self._clusters.get(cluster, {}))

    def create_cluster(self, cluster: str, data: dict[str, Any]) -> asyncio.Future[Any] | None:
        _check_name("cluster", cluster)
        if cluster == self.cluster or cluster in self._clusters:
            raise AlreadyExists(f"Cluster {cluster} already exists")
        self._clusters[cluster] = dict(data)
        return self._writes.put(f"clusters/{cluster}", dict(data))

    def update_cluster(self, cluster: str, data: dict[str, Any]) -> asyncio.Future[Any] | None:
        self.cluster_data(cluster)
        self._clusters[cluster] = dict(data)
        return self._writes.put(f"clusters/{cluster}", dict(data))

    def delete_cluster(self, cluster: str) -> asyncio.Future[Any] | None:
        self.cluster_data(cluster)
        if cluster == self.cluster:
            raise NotEmpty(f"Cluster {cluster} is this broker's own cluster")
        users = [t for t, info in self._tenants.items() if cluster in info.get("allowedClusters", [])]
        if users:
            raise NotEmpty(f"Cluster {cluster} is allowed to tenants: {', '.join(sorted(users))}")
        del self._clusters[cluster]
        return self._writes.delete(f"clusters/{cluster}")

    # ------------------------------------------------------------------ tenants

    def tenants(self) -> list[str]:
        return sorted(self._tenants)

    def tenant(self, tenant: str) -> dict[str, Any]:
        info = self._tenants.get(tenant)
        if info is None:
            _check_name("tenant", tenant)
            raise NotFound(f"Tenant {tenant} does not exist")
        return dict(info)

    def create_tenant(
        self, tenant: str, admin_roles: list[str] | None = None,
        allowed_clusters: list[str] | None = None,
    ) -> asyncio.Future[Any] | None:
        _check_name("tenant", tenant)
        if tenant in self._tenants:
            raise AlreadyExists(f"Tenant {tenant} already exists")
        return self._put_tenant(tenant, self._tenant_info(admin_roles, allowed_clusters))

    def update_tenant(
        self, tenant: str, admin_roles: list[str] | None = None,
        allowed_clusters: list[str] | None = None,
    ) -> asyncio.Future[Any] | None:
        self.tenant(tenant)
        return self._put_tenant(tenant, self._tenant_info(admin_roles, allowed_clusters))

    def delete_tenant(self, tenant: str) -> asyncio.Future[Any] | None:
        self.tenant(tenant)
        if self.namespaces(tenant):
            raise NotEmpty(f"The tenant {tenant} still has active namespaces")
        del self._tenants[tenant]
        return self._writes.delete(f"tenants/{tenant}")

    def _tenant_info(self, admin_roles: list[str] | None, clusters: list[str] | None) -> dict[str, Any]:
        clusters = [self.cluster] if clusters is None else list(clusters)
        unknown = [c for c in clusters if c != self.cluster and c not in self._clusters]
        if unknown:
            raise InvalidName(f"Clusters do not exist: {', '.join(unknown)}")
        return {"adminRoles": list(admin_roles or []), "allowedClusters": clusters}

    def _put_tenant(self, tenant: str, info: dict[str, Any]) -> asyncio.Future[Any] | None:
        self._tenants[tenant] = info
        return self._writes.put(f"tenants/{tenant}", dict(info))

    # ------------------------------------------------------------------ namespaces

    def exists(self, namespace: str) -> bool:
        """Whether ``tenant/namespace`` exists (a set lookup: called on every lookup)."""
        return namespace in self._namespaces

    def namespaces(self, tenant: str) -> list[str]:
        """``tenant/ns`` names of a tenant's namespaces, sorted (NotFound: no such tenant)."""
        self.tenant(tenant)
        prefix = tenant + "/"
        return sorted(ns for ns in self._namespaces if ns.startswith(prefix))

    def require(self, namespace: str) -> None:
        """NotFound unless the namespace (and its tenant) exists; InvalidName for a name
        that cannot exist."""
        if namespace in self._namespaces:
            return
        _check_name("namespace", namespace)
        tenant = namespace.split("/", 1)[0]
        self.tenant(tenant)
        if namespace not in self._namespaces:
            raise NotFound(f"Namespace {namespace} does not exist")

    def create_namespace(self, namespace: str) -> asyncio.Future[Any] | None:
        _check_name("namespace", namespace)
        tenant = namespace.partition("/")[0]
        self.tenant(tenant)
        if namespace in self._namespaces:
            raise AlreadyExists(f"Namespace {namespace} already exists")
        return self._put_namespace(namespace)

    def delete_namespace(
        self, namespace: str, topics: Callable[[str], list[str]]
    ) -> asyncio.Future[Any] | None:
        """Delete an empty namespace; ``topics(namespace)`` lists the topics it holds."""
        self.require(namespace)
        held = topics(namespace)
        if held:
            raise NotEmpty(f"Cannot delete non empty namespace {namespace} ({len(held)} topics)")
        self._namespaces.discard(namespace)
        return self._writes.delete(f"namespaces/{namespace}")

    def _put_namespace(self, namespace: str) -> asyncio.Future[Any] | None:
        self._namespaces.add(namespace)
        return self._writes.put(f"namespaces/{namespace}", {"created": time.time()})
