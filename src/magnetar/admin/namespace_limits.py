"""A namespace's multi-tenant limits at Pulsar's paths and in Pulsar's JSON shapes:
``/admin/v2/namespaces/{tenant}/{namespace}/publishRate`` (``PublishRate``: messages and
bytes per second per topic).

As for the other policies (namespaces.py), a GET answers what applies to the namespace's
topics (its own value, else the broker default: ``maxPublishRatePerTopicInMessages`` ...),
JSON ``null`` when no limit applies; a POST sets the namespace's own value, applied at once
to its loaded topics; a DELETE goes back to the broker default. A limit of 0 or less is no
limit, as in Pulsar.
"""

from __future__ import annotations

from aiohttp import web

from magnetar.admin.namespaces import NS, namespace_of, policies_set
from magnetar.admin.policies_body import publish_rate_doc, read_publish_rate
from magnetar.admin.routing import SERVICE, RouteTable, json_body
from magnetar.broker.namespaces.policies import Policies

routes = RouteTable("namespaces")

def _policies(request: web.Request) -> Policies:
    return request.app[SERVICE].policies.get(namespace_of(request))


@routes.route("GET", NS + "/publishRate",
              "The publish rate per topic (PublishRate; null: no limit).")
async def get_publish_rate(request: web.Request) -> web.Response:
    return web.json_response(publish_rate_doc(_policies(request)))


@routes.route("POST", NS + "/publishRate",
              "Limit the publish rate of each topic: producers' connections are read no "
              "faster (0 or -1: no limit).",
              body='{"publishThrottlingRateInMsg": int, "publishThrottlingRateInByte": long}')
async def set_publish_rate(request: web.Request) -> web.Response:
    changes = read_publish_rate(await json_body(request))
    return await policies_set(request, **changes)


@routes.route("DELETE", NS + "/publishRate", "Back to the broker's publish rate "
              "(maxPublishRatePerTopicInMessages, maxPublishRatePerTopicInBytes).")
async def remove_publish_rate(request: web.Request) -> web.Response:
    return await policies_set(request, publish_rate_msgs=None, publish_rate_bytes=None)
