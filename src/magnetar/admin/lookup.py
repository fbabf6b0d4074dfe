"""HTTP topic lookup, ``/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}``: with it
(and the partitions endpoint in ``topics.py``) a client given ``http://host:8080`` as its
service URL finds the binary-protocol address of any topic. A broker alone owns every
topic, so the answer is this broker, on the host name the client used to reach it; in a
cluster a topic owned by another broker is answered with a 307 to that broker's lookup
(``authoritative=true``), as Pulsar answers it.

An HTTP lookup takes one of the broker's ``maxConcurrentLookupRequest`` slots while it runs,
as the binary lookups do; with none free it is answered 503, as Pulsar answers it."""

from __future__ import annotations

import contextlib

from aiohttp import web

from magnetar.admin.namespaces import namespace_of
from magnetar.admin.routing import PORTS, SERVICE, RouteTable, error_response
from magnetar.admin.tenants import broker_service_url, host_of, web_service_url
from magnetar.broker.errors import BrokerError

routes = RouteTable("lookup")


@routes.route("GET", "/lookup/v2/topic/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}",
              "Which broker serves a topic: brokerUrl (pulsar://) and httpUrl (?listenerName=...).")
async def lookup(request: web.Request) -> web.Response:
    limits = request.app[SERVICE].security.limits
    if not limits.acquire_lookup(str(request.remote or "?")):
        return error_response(503, "too many lookup requests in progress on the broker "
                              "(maxConcurrentLookupRequest); retry")
    try:
        cluster = request.app[SERVICE].cluster
        if cluster is not None:
            m = request.match_info
            topic = f"{m['domain']}://{m['tenant']}/{m['namespace']}/{m['topic']}"
            # a namespace created at another broker a moment ago is read from the store
            with contextlib.suppress(BrokerError, ValueError):
                await request.app[SERVICE].known_topic_name(topic)
            namespace_of(request)
            request.app[SERVICE].check_topic_name(topic)
            authoritative = request.query.get("authoritative", "false").lower() == "true"
            result = await cluster.lookup(topic, authoritative)
            if not result.connect:
                query = dict(request.query)
                query["authoritative"] = "true"
                raise web.HTTPTemporaryRedirect(
                    result.owner.web_url.rstrip("/") + str(request.rel_url.with_query(query)))
        return _lookup(request)
    finally:
        limits.release_lookups(1)


def _lookup(request: web.Request) -> web.Response:
    namespace_of(request)
    m = request.match_info
    request.app[SERVICE].check_topic_name(f"{m['domain']}://{m['tenant']}/{m['namespace']}/{m['topic']}")
    # Pulsar takes the listener name from a query parameter or a header
    listener = request.query.get("listenerName") or request.headers.get("X-Pulsar-ListenerName")
    service = request.app[SERVICE]
    broker_url = service.listeners.broker_url(listener, broker_service_url(request))
    host = host_of(request)
    tls_port = service.security.tls_port
    ports = request.app[PORTS]
    web_tls_port, web_port = ports.web_tls, ports.web
    http_url = f"http://{host}:{web_port}" if web_port is not None else web_service_url(request)
    return web.json_response({
        "brokerUrl": broker_url,
        "brokerUrlTls": f"pulsar+ssl://{host}:{tls_port}" if tls_port is not None else "",
        "httpUrl": http_url,
        "httpUrlTls": f"https://{host}:{web_tls_port}" if web_tls_port is not None else "",
        "nativeUrl": broker_url,
    })
