"""Authentication and authorization of the admin HTTP service (admin API, lookup, metrics).

``security_middleware`` runs before every handler. With ``authenticationEnabled`` it asks
``service.security.authentication`` who the request is (the ``Authorization`` header: a
bearer token or basic credentials; else the client certificate on ``webServicePortTls``);
a request that does not authenticate gets 401 ``{"reason": ...}``. Every path is covered,
the health check included (Pulsar's health check needs a superuser too), except
``/metrics`` unless ``authenticateMetricsEndpoint=true`` (Pulsar's default is false: the
metrics need no credential, and then no permission either), and the console's pages
under ``/console/`` (files without data; every call they make is checked as it reaches the
API).

With ``authorizationEnabled`` the request must then be allowed, by the rule ``access_rule``
gives its route:

- ``authenticated``: any authenticated role (the OpenAPI description, ``/metrics`` when
  ``authenticateMetricsEndpoint`` asks for a credential);
- ``superuser``: a role of ``superUserRoles`` (clusters, brokers, creating, updating,
  deleting and listing tenants);
- ``tenant``: a superuser or an admin of the tenant in the path (its ``adminRoles``):
  namespaces and their policies, creating and deleting topics, terminate, unload,
  compaction, schema uploads, granting and revoking permissions;
- ``namespace``: a tenant admin, or a role with some permission in the namespace (listing
  its topics);
- ``topic:lookup`` / ``topic:consume``: a tenant admin, or a role the namespace or topic
  grants ``produce``/``consume`` (lookup), or ``consume`` (subscriptions, peeking and
  examining messages), checked by ``AuthorizationService.check`` exactly as the binary
  protocol does.

A refusal is 403 (401 if the request carried no identity), logged once with the role and
the action. A proxy role acting for ``X-Original-Principal`` needs both itself and the
original principal to pass.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from magnetar.admin.routing import SERVICE, Handler, error_response, openapi_path
from magnetar.broker.errors import BrokerError
from magnetar.broker.namespaces import registry as ns_errors
from magnetar.broker.security.auth.base import AuthenticationError
from magnetar.broker.security.auth.service import Identity
from magnetar.broker.security.auth.tls import peer_certificate
from magnetar.broker.security.authorization import CONSUME, LOOKUP
from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

#: where the middleware leaves the request's Identity (None when authentication is off): a
#: typed request key where aiohttp has them (3.14+), else the plain string key
IDENTITY: Any = (web.RequestKey("magnetar.identity", object) if hasattr(web, "RequestKey")
                 else "magnetar.identity")

AUTHENTICATED = "authenticated"
SUPERUSER = "superuser"
TENANT = "tenant"
NAMESPACE = "namespace"
TOPIC_LOOKUP = "topic:" + LOOKUP
TOPIC_CONSUME = "topic:" + CONSUME

_TOPIC_PREFIX = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
_TOPIC_READS = {"/stats", "/internalStats", "/partitioned-stats", "/lastMessageId",
                "/partitions", "/compaction"}


def access_rule(method: str, path: str) -> str:
    """Who may call ``method path`` (an OpenAPI-style path: ``{name}`` without regexes)."""
    if path in ("/admin/v2/openapi.json", "/metrics"):
        return AUTHENTICATED
    if path.startswith(("/admin/v2/clusters", "/admin/v2/brokers")):
        return SUPERUSER
    if path == "/admin/v2/tenants/{tenant}" and method == "GET":
        return TENANT
    if path.startswith("/admin/v2/tenants"):
        return SUPERUSER
    if path.startswith("/lookup/v2/topic/"):
        return TOPIC_LOOKUP
    if path.startswith("/admin/v2/namespaces/"):
        return NAMESPACE if path.endswith("/topics") and method == "GET" else TENANT
    if path.startswith("/admin/v2/schemas/"):
        return TOPIC_LOOKUP if method == "GET" else TENANT
    if path in ("/admin/v2/{domain}/{tenant}/{namespace}",
                "/admin/v2/{domain}/{tenant}/{namespace}/partitioned"):
        return NAMESPACE
    if path.startswith(_TOPIC_PREFIX):
        rest = path[len(_TOPIC_PREFIX):]
        if rest.startswith(("/subscription", "/all_subscription", "/examinemessage", "/ledger/")):
            return TOPIC_CONSUME
        if method == "GET" and rest in _TOPIC_READS:
            return TOPIC_LOOKUP
        return TENANT
    return SUPERUSER  # anything not named above: the safe default


def _rule_of(request: web.Request) -> str:
    resource = request.match_info.route.resource
    canonical = resource.canonical if resource is not None else request.path
    # aiohttp's canonical form keeps regex constraints: {domain:persistent|...} -> {domain}
    return access_rule(request.method, openapi_path(canonical))


def _topic_name(request: web.Request) -> str:
    m = request.match_info
    return f"{m.get('domain', 'persistent')}://{m['tenant']}/{m['namespace']}/{m['topic']}"


def _acting_roles(service: BrokerService, identity: Identity) -> list[str]:
    """The roles that must each be allowed: a proxy's and its client's, else the role."""
    if identity.original_principal and identity.role in service.config.proxy_roles:
        return [identity.role, identity.original_principal]
    return [identity.role]


def _is_tenant_admin(service: BrokerService, role: str, tenant: str) -> bool:
    if service.security.authorization.is_super_user(role):
        return True
    try:
        info = service.namespaces.tenant(tenant)
    except ns_errors.NotFound:
        return False
    return role in info.get("adminRoles", [])


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def authorize(service: BrokerService, request: web.Request, identity: Identity | None,
              peer: str) -> None:
    """Raise ``Refused`` unless ``identity`` may make ``request`` (module docstring)."""
    rule = _rule_of(request)
    authz = service.security.authorization
    if identity is None:
        log.warning("%s: unauthenticated HTTP request refused: %s %s", peer, request.method,
                    request.path)
        raise Refused(401, "Authentication required")
    if rule == AUTHENTICATED:
        return
    roles = _acting_roles(service, identity)
    tenant = request.match_info.get("tenant")
    if all(authz.is_super_user(r) for r in roles):
        return
    if tenant is not None and rule != SUPERUSER and all(
            _is_tenant_admin(service, r, tenant) for r in roles):
        return
    action = f"{request.method} {request.path}"
    try:
        if rule.startswith("topic:"):
            authz.check(identity.role, identity.original_principal, _topic_name(request),
                        rule.removeprefix("topic:"), peer)
            return
        if rule == NAMESPACE:
            authz.check_namespace(identity.role, identity.original_principal,
                                  f"{tenant}/{request.match_info['namespace']}", peer)
            return
    except BrokerError as exc:  # already logged by the authorization service
        raise Refused(403, str(exc)) from None
    what = "superuser" if rule == SUPERUSER else f"admin of tenant {tenant}"
    who = identity.role if len(roles) == 1 else f"{identity.original_principal} (via proxy {identity.role})"
    log.warning("%s: role %s is not authorized to %s (needs %s)", peer, who, action, what)
    raise Refused(403, f"role {who} is not authorized to {action}: it needs to be {what}")


def _peer(request: web.Request) -> str:
    return str(request.remote or "?")


@web.middleware
async def security_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authenticate (401) and authorize (403) every request; a no-op with both off."""
    service: BrokerService = request.app[SERVICE]
    security = service.security
    authn, authz = security.authentication, security.authorization
    if not authn.enabled and not authz.enabled:
        return await handler(request)
    if request.path == "/metrics" and not service.config.authenticateMetricsEndpoint:
        return await handler(request)
    if request.path == "/console" or request.path.startswith("/console/"):
        # the console's files hold no data; its API calls come back with the caller's
        # credentials and are checked then (console.py)
        return await handler(request)
    peer = _peer(request)
    identity: Identity | None = None
    if authn.enabled:
        cert: Any = peer_certificate(request.transport)
        try:
            identity = await authn.authenticate_http_async(request.headers, cert, peer)
        except AuthenticationError as exc:
            authn.refused += 1
            log.warning("%s: HTTP authentication refused for %s %s: %s", peer, request.method,
                        request.path, exc)
            return error_response(401, f"Authentication required: {exc}")
    request[IDENTITY] = identity
    if authz.enabled:
        try:
            authorize(service, request, identity, peer)
        except Refused as exc:
            return error_response(exc.status, exc.reason)
    return await handler(request)
