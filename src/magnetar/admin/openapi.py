"""The OpenAPI 3 description of the admin API, built from the route tables themselves
(so every installed route is described) and served at ``/admin/v2/openapi.json``."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar import __version__
from magnetar.admin.auth import access_rule
from magnetar.admin.routing import PATH_PARAM, Endpoint, RouteTable, openapi_path

routes = RouteTable("openapi")

_INTEGER_PARAMS = {"count", "timestamp", "seconds", "n", "version"}


def _parameters(path: str) -> list[dict[str, Any]]:
    params = []
    for name, regex in PATH_PARAM.findall(path):
        schema: dict[str, Any] = {"type": "integer" if name in _INTEGER_PARAMS else "string"}
        if regex:
            schema["enum"] = regex.split("|")
        params.append({"name": name, "in": "path", "required": True, "schema": schema})
    return params


def _operation(e: Endpoint) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": e.summary,
        "operationId": e.handler.__name__ + "_" + e.method.lower(),
        "tags": [e.tag],
        "parameters": _parameters(e.path),
        "responses": {
            "200": {"description": "OK"},
            "204": {"description": "done"},
            "400": {"description": "bad request (e.g. malformed JSON)"},
            "401": {"description": "not authenticated (authenticationEnabled)"},
            "403": {"description": "not authorized (authorizationEnabled)"},
            "404": {"description": "unknown tenant, namespace, topic or subscription"},
            "409": {"description": "already exists, or not empty"},
            "412": {"description": "precondition failed"},
        },
    }
    # who may call it when authorizationEnabled=true (see magnetar.admin.auth)
    op["x-magnetar-access"] = access_rule(e.method, openapi_path(e.path))
    if e.body is not None:
        op["requestBody"] = {"description": e.body, "content": {"application/json": {}}}
    return op


def document(tables: list[RouteTable]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for table in tables:
        for e in table.endpoints:
            paths.setdefault(openapi_path(e.path), {})[e.method.lower()] = _operation(e)
    return {
        "openapi": "3.0.3",
        "info": {"title": "Magnetar admin API (Apache Pulsar's /admin/v2 subset)",
                 "version": __version__},
        "paths": paths,
    }


OPENAPI: web.AppKey[dict[str, Any]] = web.AppKey("openapi", dict)


@routes.route("GET", "/admin/v2/openapi.json", "This description.")
async def openapi(request: web.Request) -> web.Response:
    return web.json_response(request.app[OPENAPI])
