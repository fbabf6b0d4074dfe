"""Clusters, brokers and tenants: ``/admin/v2/clusters``, ``/admin/v2/brokers``,
``/admin/v2/tenants``. A standalone broker is one cluster (``clusterName``, by default
``standalone``) with one broker; tenants live in the broker's NamespaceRegistry."""

from __future__ import annotations

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
    if cluster != request.app[SERVICE].config.clusterName:
        raise RestError(404, f"Cluster {cluster} does not exist")
    return cluster


@routes.route("GET", "/admin/v2/clusters", "List the clusters (this broker's only).")
async def list_clusters(request: web.Request) -> web.Response:
    return web.json_response([request.app[SERVICE].config.clusterName])


@routes.route("GET", "/admin/v2/clusters/{cluster}", "The service URLs of a cluster.")
async def get_cluster(request: web.Request) -> web.Response:
    _cluster(request)
    return web.json_response({
        "serviceUrl": web_service_url(request),
        "brokerServiceUrl": broker_service_url(request),
    })


@routes.route("GET", "/admin/v2/brokers/health", "Broker health check: 200 'ok' when serving.")
async def health(request: web.Request) -> web.Response:
    if not request.app[SERVICE].serving():
        raise RestError(503, "the broker is not serving")
    return web.Response(text="ok")


@routes.route("GET", "/admin/v2/brokers/{cluster}", "The active brokers of a cluster.")
async def list_brokers(request: web.Request) -> web.Response:
    _cluster(request)
    host = request.app[SERVICE].config.advertisedAddress or request.url.host or "localhost"
    return web.json_response([f"{host}:{request.url.port}"])


@routes.route("GET", "/admin/v2/tenants", "List the tenants.")
async def list_tenants(request: web.Request) -> web.Response:
    return web.json_response(request.app[SERVICE].namespaces.tenants())


def _tenant_info(body: object) -> tuple[list[str] | None, list[str] | None]:
    if body is None:
        return None, None
    expect(body, dict, "tenant info")
    assert isinstance(body, dict)
    roles = body.get("adminRoles")
    clusters = body.get("allowedClusters")
    if roles is not None:
        expect(roles, list, "adminRoles")
    if clusters is not None:
        expect(clusters, list, "allowedClusters")
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
