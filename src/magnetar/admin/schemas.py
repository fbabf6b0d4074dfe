"""Schemas: ``/admin/v2/schemas/{tenant}/{namespace}/{topic}/...`` (get, versions, upload,
delete, compatibility check) over the broker's SchemaRegistry. The official client's HTTP
lookup also reads a topic's schema here.

Pulsar's REST form of a schema is ``{"type": "AVRO", "schema": "<definition>",
"properties": {...}}`` on upload and ``{"version", "type", "timestamp", "data",
"properties"}`` on read; types are the upper-case names of the wire enum (``KeyValue`` is
``KEY_VALUE``, ``Bool`` is ``BOOLEAN``, ``None`` is ``BYTES``).
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from magnetar.admin.namespaces import namespace_of
from magnetar.admin.routing import SERVICE, RestError, RouteTable, expect, int_param, json_body
from magnetar.broker.schema.compat import check_new_version, definition_problem
from magnetar.broker.schema.registry import IncompatibleSchemaError, SchemaRecord
from magnetar.broker.service import BrokerService
from magnetar.protocol import pb

routes = RouteTable("schemas")

S = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"

_SPECIAL = {"None": "BYTES", "Bool": "BOOLEAN"}


def type_name(value: int) -> str:
    """The REST name of a wire schema type."""
    name = pb.Schema.Type.Name(value)
    return _SPECIAL.get(name) or re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).upper()


_BY_NAME = {type_name(v): v for v in pb.Schema.Type.values()}
_BY_NAME["NONE"] = 0


async def schema_base(request: web.Request) -> str:
    """Pulsar's schema id of the request's topic: ``tenant/namespace/topic`` (no partition);
    its stored versions are read into memory (off the loop) if they are not there."""
    namespace_of(request)
    name = f"persistent://{request.match_info['tenant']}/{request.match_info['namespace']}/{request.match_info['topic']}"
    service = request.app[SERVICE]
    base: str = service.check_topic_name(name).schema_name
    await service.schemas.load_async(base)
    return base


def schema_doc(record: SchemaRecord) -> dict[str, Any]:
    return {
        "version": record.version or 0,
        "type": type_name(record.type),
        "timestamp": 0,
        "data": record.data.decode("utf-8", errors="replace"),
        "properties": dict(record.properties),
    }


def record_from(body: Any) -> SchemaRecord:
    expect(body, dict, "schema")
    kind = str(expect(body.get("type", ""), str, "type")).upper()
    if kind not in _BY_NAME:
        raise RestError(400, f"unknown schema type {kind!r}")
    properties = body.get("properties") or {}
    expect(properties, dict, "properties")
    data = body.get("schema", "")
    expect(data, str, "schema")
    problem = definition_problem(_BY_NAME[kind], data.encode())
    if problem:  # Pulsar: 422 for schema data it cannot use
        raise RestError(422, f"Invalid schema definition for a {kind} schema: {problem}")
    return SchemaRecord(name="", type=_BY_NAME[kind], data=data.encode(), properties={
        str(k): str(v) for k, v in properties.items()})


def strategy(service: BrokerService, base: str) -> str:
    """The compatibility strategy of the topic's namespace (its policy, else the broker's)."""
    namespace = base.rsplit("/", 1)[0]
    chosen = service.policies.get(namespace).schema_compatibility_strategy
    default: str = getattr(service.config, "schemaCompatibilityStrategy", "FULL")
    return chosen or default


def is_compatible(service: BrokerService, base: str, record: SchemaRecord) -> bool:
    """The one place the admin API asks the broker whether ``record`` may follow the
    topic's schemas (true without a schema, or for one already stored), by the broker's
    strategy-aware check (``schema_compat.check_new_version``)."""
    registry = service.schemas
    history = [r for v in registry.versions(base) if (r := registry.get(base, v)) is not None]
    if not history or any(r.same_schema(record) for r in history):
        return True
    try:
        check_new_version(history, record, strategy(service, base))
    except IncompatibleSchemaError:
        return False
    return True


async def store(service: BrokerService, base: str, record: SchemaRecord) -> int:
    """Store an uploaded schema (an explicit upload: allowed even with auto-update off),
    checked with the namespace's strategy; off the loop, stored when this returns."""
    return await service.schemas.get_or_create_async(base, record, strategy(service, base),
                                                     upload=True)


@routes.route("GET", S + "/schema", "The topic's latest schema (404 without one).")
async def get_schema(request: web.Request) -> web.Response:
    record = request.app[SERVICE].schemas.get(await schema_base(request))
    if record is None:
        raise RestError(404, "Schema not found")
    return web.json_response(schema_doc(record))


@routes.route("GET", S + "/schema/{version}", "One version of the topic's schema.")
async def get_schema_version(request: web.Request) -> web.Response:
    record = request.app[SERVICE].schemas.get(await schema_base(request), int_param(request, "version"))
    if record is None:
        raise RestError(404, "Schema not found")
    return web.json_response(schema_doc(record))


@routes.route("GET", S + "/schemas", "Every version of the topic's schema.")
async def all_versions(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    base = await schema_base(request)
    docs = [schema_doc(r) for v in service.schemas.versions(base)
            if (r := service.schemas.get(base, v)) is not None]
    return web.json_response({"getSchemaResponses": docs})


@routes.route("POST", S + "/schema", "Upload a schema (a new version unless identical to one).",
              body='{"type": "AVRO"|"JSON"|"STRING"|..., "schema": "<definition>", "properties": {}}')
async def post_schema(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    base = await schema_base(request)
    record = record_from(await json_body(request))
    if not is_compatible(service, base, record):
        raise RestError(409, f"Incompatible schema for {base} (strategy {strategy(service, base)})")
    try:
        version = await store(service, base, record)
    except IncompatibleSchemaError as exc:
        raise RestError(409, str(exc)) from None
    return web.json_response({"version": {"version": version}})


@routes.route("DELETE", S + "/schema", "Delete every version of the topic's schema.")
async def delete_schema(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    base = await schema_base(request)
    versions = service.schemas.versions(base)
    if not versions:
        raise RestError(404, "Schema not found")
    await service.schemas.delete_async(base)
    return web.json_response({"version": versions[-1]})


@routes.route("POST", S + "/compatibility", "Would this schema be accepted for the topic?",
              body='{"type": ..., "schema": "<definition>", "properties": {}}')
async def compatibility(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    base = await schema_base(request)
    record = record_from(await json_body(request))
    return web.json_response({"isCompatible": is_compatible(service, base, record),
                              "schemaCompatibilityStrategy": strategy(service, base)})
