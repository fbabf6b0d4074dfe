"""The admin API's route table, request helpers and error replies.

Every endpoint is declared once, with ``RouteTable.route``: method, path (aiohttp syntax,
``{name}`` or ``{name:regex}``), a one-line summary and, where it takes one, what its JSON
body is. The same declarations install the aiohttp routes and produce the OpenAPI
description (``openapi.py``), so a route cannot exist without being described.

Errors follow Pulsar's REST conventions: a JSON body ``{"reason": "..."}`` with the
status Pulsar gives (404 unknown tenant/namespace/topic/subscription, 409 already exists
or not empty, 412 precondition failed, 405 not allowed, 400 bad JSON, 503 the metadata
store unavailable). Broker and
namespace errors raised by a handler are mapped here, in ``error_middleware``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from aiohttp import web

from magnetar.broker.config import ConfigError
from magnetar.broker.errors import BrokerError
from magnetar.broker.namespaces import registry as ns_errors
from magnetar.broker.service import BrokerService
from magnetar.broker.topics.stats import RateTracker
from magnetar.metadata import StoreClosedError, StoreUnavailableError
from magnetar.protocol import pb

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_H = TypeVar("_H", bound=Handler)  # a handler, of its own precise type

SERVICE: web.AppKey[BrokerService] = web.AppKey("service", BrokerService)
RATES: web.AppKey[RateTracker] = web.AppKey("rates", RateTracker)

#: A path parameter in aiohttp syntax: ``{name}`` or ``{name:regex}``.
PATH_PARAM = re.compile(r"\{(\w+)(?::([^}]+))?\}")


def openapi_path(path: str) -> str:
    """An aiohttp path as an OpenAPI path (regex constraints dropped): how the OpenAPI
    document and the access rules (``auth.access_rule``) both name a route."""
    return PATH_PARAM.sub(lambda m: "{" + m.group(1) + "}", path)


@dataclass
class ListeningPorts:
    """The ports the admin service listens on (webServicePort, webServicePortTls): None
    until it listens there. Set after the app started, so it lives in one object the app
    holds from the start (aiohttp freezes an app's keys once it runs)."""

    web: int | None = None
    web_tls: int | None = None


PORTS: web.AppKey[ListeningPorts] = web.AppKey("ports", ListeningPorts)


def rates_of(request: web.Request) -> RateTracker:
    """The message and byte rates of the last stats interval."""
    return request.app[RATES]

#: Pulsar ServerError codes as HTTP statuses (anything else: 500)
_STATUS = {
    pb.TopicNotFound: 404,
    pb.SubscriptionNotFound: 404,
    pb.ConsumerBusy: 412,
    pb.ProducerBusy: 412,
    pb.NotAllowedError: 405,
    pb.InvalidTopicName: 412,
    pb.MetadataError: 412,
    pb.IncompatibleSchema: 409,
    pb.TopicTerminatedError: 412,
    pb.ServiceNotReady: 503,
    pb.TransactionNotFound: 404,
    pb.TransactionCoordinatorNotFound: 404,
    pb.InvalidTxnStatus: 409,
}
_NAMESPACE_STATUS: dict[type[Exception], int] = {
    ns_errors.NotFound: 404,
    ns_errors.AlreadyExists: 409,
    ns_errors.NotEmpty: 409,
    ns_errors.InvalidName: 412,
}


class RestError(Exception):
    """An HTTP error reply with Pulsar's ``{"reason": ...}`` body."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def error_response(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn the errors handlers raise into Pulsar-style JSON replies."""
    try:
        return await handler(request)
    except RestError as exc:
        return error_response(exc.status, exc.reason)
    except BrokerError as exc:
        return error_response(_STATUS.get(exc.code, 500), str(exc))
    except ns_errors.NamespaceError as exc:
        return error_response(_NAMESPACE_STATUS.get(type(exc), 500), str(exc))
    except ConfigError as exc:
        return error_response(412, str(exc))
    except (StoreUnavailableError, StoreClosedError) as exc:  # said once by the store
        return error_response(503, str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        reason = "Method Not Allowed" if exc.status == 405 else exc.reason
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return web.json_response({"reason": reason}, status=exc.status, headers=headers)
    except Exception:
        log.exception("admin request %s %s failed", request.method, request.path)
        return error_response(500, "internal error (see the broker log)")


@web.middleware
async def metadata_guard_middleware(request: web.Request, handler: Handler
                                    ) -> web.StreamResponse:
    """While a cluster's metadata store is unavailable, a request that changes something
    (anything but GET and HEAD) is answered 503 at once with the reason (``metadata store
    unavailable: ZooKeeper at HOST not connected for N s``); reads are served from the
    broker's copies."""
    if request.method not in ("GET", "HEAD"):
        reason = request.app[SERVICE].metadata.unavailable_reason()
        if reason is not None:
            return error_response(503, reason)
    return await handler(request)


async def json_body(request: web.Request, required: bool = True) -> Any:
    """The request's JSON body (400 when it is not JSON; None when empty and optional)."""
    try:
        text = (await request.read()).decode("utf-8")
    except UnicodeDecodeError:
        raise RestError(400, "Invalid JSON body: not UTF-8 text") from None
    if not text.strip():
        if required:
            raise RestError(400, "a JSON request body is required")
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise RestError(400, f"Invalid JSON body: {exc}") from None


def expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    """``value`` if it is of ``kind`` (bool is not an int here), else 400."""
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise RestError(400, f"{what} must be a number")
    if not isinstance(value, kind):
        raise RestError(400, f"{what}: unexpected JSON value {value!r}")
    return value


def int_param(request: web.Request, name: str) -> int:
    raw = request.match_info[name]
    try:
        return int(raw)
    except ValueError:
        raise RestError(400, f"{name} must be an integer, not {raw!r}") from None


@overload
def query_int(request: web.Request, name: str, default: int, *, minimum: int = 1) -> int: ...


@overload
def query_int(request: web.Request, name: str, default: None = None, *,
              minimum: int = 1) -> int | None: ...


def query_int(request: web.Request, name: str, default: int | None = None, *,
              minimum: int = 1) -> int | None:
    """The query parameter ``name`` as an integer of at least ``minimum`` (412 otherwise,
    as Pulsar answers a bad query value); ``default`` when it is absent."""
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise RestError(412, f"{name} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise RestError(412, f"{name} must be at least {minimum}, not {value}")
    return value


def query_flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


#: names per slice of a long JSON list encoded on the loop (~1.5 ms each here)
JSON_LIST_SLICE = 5000


async def json_list_response(items: list[str]) -> web.Response:
    """``web.json_response(items)`` for a list that may hold every topic of a namespace:
    encoded `JSON_LIST_SLICE` items at a time, the loop handed back between two (one
    ``json.dumps`` of 100,000 topic names held it ~30 ms)."""
    if len(items) <= JSON_LIST_SLICE:
        return web.json_response(items)
    parts = []
    for at in range(0, len(items), JSON_LIST_SLICE):
        if at:
            await asyncio.sleep(0)
        parts.append(json.dumps(items[at:at + JSON_LIST_SLICE])[1:-1])
    return web.Response(text=f"[{', '.join(parts)}]", content_type="application/json")


def no_content() -> web.Response:
    return web.Response(status=204)


@dataclass
class Endpoint:
    """One declared endpoint: what the OpenAPI description says about it."""

    method: str
    path: str
    handler: Handler
    summary: str
    body: str | None = None
    tag: str = "admin"


@dataclass
class RouteTable:
    """Endpoints of one part of the API, in declaration (= matching) order."""

    tag: str
    endpoints: list[Endpoint] = field(default_factory=list)

    def route(self, method: str, path: str, summary: str, body: str | None = None
              ) -> Callable[[_H], _H]:
        def register(handler: _H) -> _H:
            self.endpoints.append(Endpoint(method, path, handler, summary, body, self.tag))
            return handler

        return register

    def install(self, app: web.Application) -> None:
        for e in self.endpoints:
            app.router.add_route(e.method, e.path, e.handler)
