"""Permissions, with Pulsar's paths: what a role may do in a namespace or on a topic.

``GET .../permissions`` lists them as ``{role: [actions]}`` (a topic's are the effective
ones: its namespace's grants merged with its own and its partitioned topic's);
``POST .../permissions/{role}`` with a JSON list of actions (``["produce", "consume"]``)
grants them (replacing what the role had at that level); ``DELETE .../permissions/{role}``
revokes them. Granting and revoking need a superuser or an admin of the tenant when
authorization is on (``auth.py``); the grants live in ``AuthorizationService``.
"""

from __future__ import annotations

from aiohttp import web

from magnetar.admin.namespaces import namespace_of
from magnetar.admin.routing import SERVICE, RestError, RouteTable, expect, json_body, no_content
from magnetar.admin.topics import topic_of
from magnetar.broker.namespaces.key_writes import written
from magnetar.broker.security.authorization import AuthorizationService

routes = RouteTable("permissions")

_NS = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
_TOPIC = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}/permissions"
_ACTIONS_BODY = 'a JSON list of actions: ["produce", "consume"] (also functions, sources, sinks, packages)'


def _authz(request: web.Request) -> AuthorizationService:
    return request.app[SERVICE].security.authorization


async def _actions(request: web.Request) -> list[str]:
    body = expect(await json_body(request), list, "actions")
    for action in body:
        expect(action, str, "action")
    return list(body)


def _role(request: web.Request) -> str:
    role = request.match_info["role"]
    if not role.strip():
        raise RestError(412, "role must not be empty")
    return role


@routes.route("GET", _NS, "The roles granted actions on a namespace: {role: [actions]}.")
async def namespace_permissions(request: web.Request) -> web.Response:
    return web.json_response(_authz(request).namespace_permissions(namespace_of(request)))


@routes.route("POST", _NS + "/{role}", "Grant a role actions on a namespace.", body=_ACTIONS_BODY)
async def grant_namespace(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    actions = await _actions(request)
    try:
        stored = _authz(request).grant_namespace(namespace, _role(request), actions)
    except ValueError as exc:
        raise RestError(400, str(exc)) from None
    await written(stored)
    return no_content()


@routes.route("DELETE", _NS + "/{role}", "Revoke a role's actions on a namespace.")
async def revoke_namespace(request: web.Request) -> web.Response:
    await written(_authz(request).revoke_namespace(namespace_of(request), _role(request)))
    return no_content()


@routes.route("GET", _TOPIC, "The roles allowed actions on a topic (namespace grants included).")
async def topic_permissions(request: web.Request) -> web.Response:
    return web.json_response(_authz(request).topic_permissions(topic_of(request)))


@routes.route("POST", _TOPIC + "/{role}", "Grant a role actions on a topic.", body=_ACTIONS_BODY)
async def grant_topic(request: web.Request) -> web.Response:
    topic = topic_of(request)
    request.app[SERVICE].check_topic_name(topic)
    actions = await _actions(request)
    try:
        stored = _authz(request).grant_topic(topic, _role(request), actions)
    except ValueError as exc:
        raise RestError(400, str(exc)) from None
    await written(stored)
    return no_content()


@routes.route("DELETE", _TOPIC + "/{role}",
              "Revoke a role's actions on a topic (412 if it has none granted on the topic itself).")
async def revoke_topic(request: web.Request) -> web.Response:
    topic = topic_of(request)
    role = _role(request)
    authz = _authz(request)
    if role not in authz.topic_level_permissions(topic):
        raise RestError(412, "Permissions are not set at the topic level")
    await written(authz.revoke_topic(topic, role))
    return no_content()
