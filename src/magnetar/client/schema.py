"""Schemas: bytes, string, JSON and Avro, wire-compatible with the official client's.

The schema info sent in ``Producer`` / ``Subscribe`` commands matches what
``pulsar.schema.StringSchema`` / ``JsonSchema`` / ``AvroSchema`` send: same type, name and
definition text, so both clients can share a topic. Record classes may be the official
client's ``pulsar.schema.Record`` subclasses (anything with a ``schema()`` classmethod
returning an Avro definition), or ``dict`` with an explicit definition. An official schema
object can be passed as is; ``as_schema`` wraps it.
"""

from __future__ import annotations

import enum
import io
import json
from dataclasses import dataclass, field
from typing import Any, cast

from magnetar.protocol import pb

_RESERVED = ("_default", "_required", "_required_default")


@dataclass(frozen=True)
class TopicSchema:
    """A schema as stored for a topic (``Client.get_schema``): its type name as in
    ``pb.Schema.Type`` (``"Avro"``, ``"Json"``, ``"String"``...), its definition (an Avro
    record definition as JSON text for Avro and JSON), properties and name."""

    type: str
    definition: bytes
    properties: dict[str, str] = field(default_factory=dict)
    name: str = ""


class Schema:
    """Base: ``encode(obj) -> bytes``, ``decode(bytes) -> obj`` and the wire schema info."""

    type: int = 0
    name: str = "BYTES"

    def definition(self) -> bytes:
        return b""

    def encode(self, obj: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError

    def schema_info(self) -> pb.Schema | None:
        """The ``Schema`` sent to the broker, or ``None`` for raw bytes."""
        return pb.Schema(name=self.name, schema_data=self.definition(),
                         type=cast("pb.Schema.Type", self.type))


class BytesSchema(Schema):
    def encode(self, obj: Any) -> bytes:
        if not isinstance(obj, bytes | bytearray | memoryview):
            raise TypeError(f"BytesSchema expects bytes, got {type(obj).__name__}")
        return bytes(obj)

    def decode(self, data: bytes) -> bytes:
        return data

    def schema_info(self) -> pb.Schema | None:
        return None


class StringSchema(Schema):
    type = pb.Schema.String
    name = "STRING"

    def encode(self, obj: Any) -> bytes:
        if not isinstance(obj, str):
            raise TypeError(f"StringSchema expects str, got {type(obj).__name__}")
        return obj.encode()

    def decode(self, data: bytes) -> str:
        return data.decode()


def _record_definition(record_cls: Any, definition: dict[str, Any] | None) -> dict[str, Any]:
    if definition is not None:
        return definition
    if hasattr(record_cls, "schema"):
        found: dict[str, Any] = record_cls.schema()
        return found
    raise TypeError("a record class with schema() or an explicit definition is required")


def _record_to_dict(obj: Any) -> Any:
    if isinstance(obj, dict):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, bytes):
        return obj.decode()
    data = dict(obj.__dict__)
    for k in _RESERVED:
        data.pop(k, None)
    return data


class JsonSchema(Schema):
    """JSON payloads with an Avro-style definition, as ``pulsar.schema.JsonSchema``."""

    type = pb.Schema.Json
    name = "JSON"

    def __init__(self, record_cls: Any = dict, definition: dict[str, Any] | None = None) -> None:
        self._cls = record_cls
        self._def = _record_definition(record_cls, definition)

    def definition(self) -> bytes:
        return json.dumps(self._def, indent=True).encode()

    def encode(self, obj: Any) -> bytes:
        return json.dumps(_record_to_dict(obj), default=_record_to_dict, indent=True).encode()

    def decode(self, data: bytes) -> Any:
        values = json.loads(data)
        return values if self._cls is dict else self._cls(**cast("dict[str, Any]", values))


class AvroSchema(Schema):
    """Avro binary payloads (fastavro), as ``pulsar.schema.AvroSchema``."""

    type = pb.Schema.Avro
    name = "AVRO"

    def __init__(self, record_cls: Any = dict, definition: dict[str, Any] | None = None) -> None:
        import fastavro

        self._fastavro = fastavro
        self._cls = record_cls
        self._def = _record_definition(record_cls, definition)
        self._parsed = fastavro.parse_schema(self._def)

    def definition(self) -> bytes:
        return json.dumps(self._def, indent=True).encode()

    def encode(self, obj: Any) -> bytes:
        buf = io.BytesIO()
        self._fastavro.schemaless_writer(buf, self._parsed, _record_to_dict(obj))
        return buf.getvalue()

    def decode(self, data: bytes) -> Any:
        values = self._fastavro.schemaless_reader(io.BytesIO(data), self._parsed)
        return values if self._cls is dict else self._cls(**cast("dict[str, Any]", values))


_OFFICIAL_TYPES = {"STRING": pb.Schema.String, "JSON": pb.Schema.Json, "AVRO": pb.Schema.Avro}


def _value(attr: Any) -> Any:
    return attr() if callable(attr) else attr


class _OfficialSchema(Schema):
    """Adapter for a ``pulsar.schema`` object: its own encode/decode and schema info."""

    def __init__(self, official: Any) -> None:
        self._s = official
        info = official.schema_info()
        type_name = str(_value(info.schema_type)).rsplit(".", 1)[-1].upper()
        self._bytes = type_name in ("BYTES", "NONE")
        self.type = _OFFICIAL_TYPES.get(type_name, 0)
        self.name = _value(info.name)
        definition = _value(info.schema)
        self._definition = definition.encode() if definition else b""

    def definition(self) -> bytes:
        return self._definition

    def encode(self, obj: Any) -> bytes:
        data: bytes = self._s.encode(obj)
        return data

    def decode(self, data: bytes) -> Any:
        return self._s.decode(data)

    def schema_info(self) -> pb.Schema | None:
        return None if self._bytes else super().schema_info()


def as_schema(schema: Any) -> Schema:
    """Our schema for ``schema``: ours, an official ``pulsar.schema`` object, or None."""
    if schema is None:
        return BytesSchema()
    if isinstance(schema, Schema):
        return schema
    if hasattr(schema, "schema_info") and hasattr(schema, "encode"):
        return _OfficialSchema(schema)
    raise TypeError(f"not a schema: {schema!r}")
