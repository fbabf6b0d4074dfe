"""Clusters, brokers and tenants: ``/admin/v2/clusters``, ``/admin/v2/brokers``,
``/admin/v2/tenants``. A standalone broker is one cluster (``clusterName``, by default
``standalone``) with one broker; tenants live in the broker's NamespaceRegistry. Also the
broker's health check and its runtime configuration."""

from __future__ import annotations

import dataclasses
from typing import Any

from aiohttp import web

from magnetar.admin.routing import (
    SERVICE,
    RestError,
    RouteTable,
    expect,
    json_body,
    no_content,
)
from magnetar.broker.namespaces.key_writes import written

routes = RouteTable("clusters, brokers, tenants")


def web_service_url(request: web.Request) -> str:
    """``http://host:port`` (or ``https://``) of this admin service as the client reached it."""
    service = request.app[SERVICE]
    host = service.config.advertisedAddress or request.url.host or "localhost"
    return f"{'https' if request.secure else 'http'}://{host}:{request.url.port}"


def host_of(request: web.Request) -> str:
    """The host name clients should use: advertisedAddress, else the one they reached."""
    return request.app[SERVICE].config.advertisedAddress or request.url.host or "localhost"


def broker_service_url(request: web.Request) -> str:
    """``pulsar://host:port`` of the binary protocol, on the host the client reached."""
    service = request.app[SERVICE]
    host = service.config.advertisedAddress or request.url.host or "localhost"
    return f"pulsar://{host}:{service.port}"


def _cluster(request: web.Request) -> str:
    cluster = request.match_info["cluster"]
    request.app[SERVICE].namespaces.cluster_data(cluster)  # 404 when unknown
    return cluster


_CLUSTER_STRINGS = ("serviceUrl", "serviceUrlTls", "brokerServiceUrl", "brokerServiceUrlTls",
                    "proxyServiceUrl", "authenticationPlugin", "authenticationParameters",
                    "proxyProtocol", "brokerClientTlsTrustStoreType", "brokerClientTlsTrustStore",
                    "brokerClientTlsTrustStorePassword", "brokerClientTrustCertsFilePath",
                    "brokerClientCertificateFilePath", "brokerClientKeyFilePath", "listenerName",
                    "brokerClientTlsKeyStoreType", "brokerClientTlsKeyStore",
                    "brokerClientTlsKeyStorePassword", "brokerClientSslFactoryPlugin",
                    "brokerClientSslFactoryPluginParams")
_CLUSTER_FLAGS = ("brokerClientTlsEnabled", "tlsAllowInsecureConnection",
                  "brokerClientTlsEnabledWithKeyStore")
_URL_SCHEMES = {"serviceUrl": ("http://", "https://"), "serviceUrlTls": ("https://",),
                "brokerServiceUrl": ("pulsar://", "pulsar+ssl://"),
                "brokerServiceUrlTls": ("pulsar+ssl://",)}


def cluster_data(body: object) -> dict[str, object]:
    """Pulsar's ClusterData from a request body: the fields it knows, type-checked (400),
    service URLs with the schemes they must have; fields it does not know are ignored, as
    Pulsar's JSON reader ignores them."""
    expect(body, dict, "cluster data")
    assert isinstance(body, dict)
    data: dict[str, object] = {}
    for key in _CLUSTER_STRINGS:
        if body.get(key) is not None:
            data[key] = expect(body[key], str, key)
    for key in _CLUSTER_FLAGS:
        if body.get(key) is not None:
            data[key] = expect(body[key], bool, key)
    peers = body.get("peerClusterNames")
    if peers is not None:
        data["peerClusterNames"] = [expect(p, str, "peerClusterNames") for p in expect(peers, list, "peerClusterNames")]
    for key, schemes in _URL_SCHEMES.items():
        url = data.get(key)
        if isinstance(url, str) and url and not url.startswith(schemes):
            raise RestError(400, f"{key} must start with {' or '.join(schemes)}: {url!r}")
    return data


@routes.route("GET", "/admin/v2/clusters", "List the clusters (this broker's and any registered).")
async def list_clusters(request: web.Request) -> web.Response:
    return web.json_response(request.app[SERVICE].namespaces.clusters())


@routes.route("GET", "/admin/v2/clusters/{cluster}", "A cluster's data (its service URLs).")
async def get_cluster(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    cluster = request.match_info["cluster"]
    data = service.namespaces.cluster_data(cluster)
    if cluster == service.config.clusterName:  # what this broker serves on, unless set
        data = {"serviceUrl": web_service_url(request), "brokerServiceUrl": broker_service_url(request),
                **data}
    return web.json_response(data)


@routes.route("PUT", "/admin/v2/clusters/{cluster}",
              "Register a cluster (409 if it exists; 400 for a body that is not ClusterData).",
              body='ClusterData: {"serviceUrl": ..., "brokerServiceUrl": ..., ...}')
async def create_cluster(request: web.Request) -> web.Response:
    data = cluster_data(await json_body(request))
    await written(request.app[SERVICE].namespaces.create_cluster(request.match_info["cluster"], data))
    return no_content()


@routes.route("POST", "/admin/v2/clusters/{cluster}", "Update a cluster's data (404 if unknown).",
              body='ClusterData: {"serviceUrl": ..., "brokerServiceUrl": ..., ...}')
async def update_cluster(request: web.Request) -> web.Response:
    data = cluster_data(await json_body(request))
    await written(request.app[SERVICE].namespaces.update_cluster(request.match_info["cluster"], data))
    return no_content()


@routes.route("DELETE", "/admin/v2/clusters/{cluster}",
              "Remove a registered cluster (409 for this broker's own or one a tenant allows).")
async def delete_cluster(request: web.Request) -> web.Response:
    await written(request.app[SERVICE].namespaces.delete_cluster(request.match_info["cluster"]))
    return no_content()


@routes.route("GET", "/admin/v2/brokers/health",
              "Broker health check: 200 'ok' when serving; 503 when not, or when its disk is "
              "full (read-only: reads and acknowledgements go on, writes are refused).")
async def health(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    if not service.serving():
        raise RestError(503, "the broker is not serving")
    refusal = service.disk.refusal()
    if refusal is not None:  # Pulsar's check writes a message: it would fail here too
        raise RestError(503, f"the broker is read-only: {refusal}")
    return web.Response(text="ok")


#: configuration keys whose values are credentials: shown as ``******`` when set
_SECRET_KEYS = frozenset({"tokenSecretKey", "brokerClientAuthenticationParameters", "basicAuthConf"})


def runtime_config(config: Any) -> dict[str, str]:
    """Every setting of a broker's configuration as Pulsar's runtime-config map (key to
    its value as text), credentials masked."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(config):
        if f.name.startswith("_"):
            continue
        value = getattr(config, f.name)
        if isinstance(value, bool):
            text = str(value).lower()
        else:
            text = "" if value is None else str(value)
        secret = f.name in _SECRET_KEYS or any(w in f.name.lower() for w in ("password", "secret"))
        out[f.name] = "******" if secret and text else text
    return dict(sorted(out.items()))


@routes.route("GET", "/admin/v2/brokers/configuration/runtime",
              "This broker's configuration as it runs: every key and its value (credentials "
              "masked).")
async def runtime_configuration(request: web.Request) -> web.Response:
    return web.json_response(runtime_config(request.app[SERVICE].config))


@routes.route("GET", "/admin/v2/brokers/{cluster}", "The active brokers of a cluster.")
async def list_brokers(request: web.Request) -> web.Response:
    if _cluster(request) != request.app[SERVICE].config.clusterName:
        return web.json_response([])  # a registered cluster: none of its brokers is known here
    return await list_local_brokers(request)


@routes.route("GET", "/admin/v2/brokers", "The active brokers of this broker's cluster.")
async def list_local_brokers(request: web.Request) -> web.Response:
    cluster = request.app[SERVICE].cluster
    if cluster is not None:  # the brokers registered under /loadbalance/brokers
        return web.json_response(sorted(await cluster.registry.live()))
    host = request.app[SERVICE].config.advertisedAddress or request.url.host or "localhost"
    return web.json_response([f"{host}:{request.url.port}"])


@routes.route("GET", "/admin/v2/tenants", "List the tenants.")
async def list_tenants(request: web.Request) -> web.Response:
    return web.json_response(request.app[SERVICE].namespaces.tenants())


def _tenant_info(body: object) -> tuple[list[str] | None, list[str] | None]:
    """Pulsar's TenantInfo: ``adminRoles`` and ``allowedClusters``, lists of strings (400
    otherwise); other fields are ignored, as Pulsar's JSON reader ignores them."""
    if body is None:
        return None, None
    expect(body, dict, "tenant info")
    assert isinstance(body, dict)
    roles = body.get("adminRoles")
    clusters = body.get("allowedClusters")
    if roles is not None:
        roles = [expect(r, str, "adminRoles") for r in expect(roles, list, "adminRoles")]
    if clusters is not None:
        clusters = [expect(c, str, "allowedClusters")
                    for c in expect(clusters, list, "allowedClusters")]
    return roles, clusters


@routes.route("GET", "/admin/v2/tenants/{tenant}", "A tenant's admin roles and allowed clusters.")
async def get_tenant(request: web.Request) -> web.Response:
    return web.json_response(request.app[SERVICE].namespaces.tenant(request.match_info["tenant"]))


@routes.route("PUT", "/admin/v2/tenants/{tenant}",
              "Create a tenant (409 if it exists, 412 for an unknown cluster).",
              body='TenantInfo: {"adminRoles": [...], "allowedClusters": [...]} (optional)')
async def create_tenant(request: web.Request) -> web.Response:
    roles, clusters = _tenant_info(await json_body(request, required=False))
    await written(request.app[SERVICE].namespaces.create_tenant(request.match_info["tenant"], roles, clusters))
    return no_content()


@routes.route("POST", "/admin/v2/tenants/{tenant}", "Update a tenant's info.",
              body='TenantInfo: {"adminRoles": [...], "allowedClusters": [...]}')
async def update_tenant(request: web.Request) -> web.Response:
    roles, clusters = _tenant_info(await json_body(request))
    await written(request.app[SERVICE].namespaces.update_tenant(request.match_info["tenant"], roles, clusters))
    return no_content()


@routes.route("DELETE", "/admin/v2/tenants/{tenant}",
              "Delete a tenant without namespaces (409 if it has some).")
async def delete_tenant(request: web.Request) -> web.Response:
    await written(request.app[SERVICE].namespaces.delete_tenant(request.match_info["tenant"]))
    return no_content()
