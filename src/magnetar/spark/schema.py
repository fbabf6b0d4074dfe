"""The DataFrame schema of a topic: the connector's metadata columns, plus ``value``
(binary) or, for a topic with a JSON or Avro schema, that record's fields as columns.

``ValueFormat`` says how an executor turns a payload into column values; it is planned on
the driver (from the topic's schema) and pickled into every input partition.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

#: Metadata columns, named as in the Scala connector.
META_FIELDS: tuple[StructField, ...] = (
    StructField("__key", StringType(), True),
    StructField("__topic", StringType(), True),
    StructField("__messageId", BinaryType(), True),
    StructField("__publishTime", TimestampType(), True),
    StructField("__eventTime", TimestampType(), True),
    StructField("__messageProperties", MapType(StringType(), StringType(), True), True),
    StructField("__producerName", StringType(), True),
    StructField("__sequenceId", LongType(), True),
)
META_NAMES = frozenset(f.name for f in META_FIELDS)

#: Schema types from ``pulsar.proto`` (``Schema.Type``) this package maps to columns.
SCHEMA_JSON = 2
SCHEMA_AVRO = 4
SCHEMA_STRING = 1

_AVRO_TYPES: dict[str, DataType] = {
    "string": StringType(), "int": IntegerType(), "long": LongType(),
    "float": FloatType(), "double": DoubleType(), "boolean": BooleanType(),
    "bytes": BinaryType(),
}


@dataclass(frozen=True)
class ValueFormat:
    """How payloads become columns: ``kind`` is ``binary``, ``string``, ``json`` or
    ``avro`` (``definition`` is the Avro record definition text for the last two)."""

    kind: str = "binary"
    definition: str | None = None


def default_schema(fmt: ValueFormat) -> StructType:
    """The schema of a topic read without a user-supplied ``.schema(...)``."""
    if fmt.kind in ("json", "avro") and fmt.definition:
        value_fields = record_fields(fmt.definition)
    elif fmt.kind == "string":
        value_fields = [StructField("value", StringType(), True)]
    else:
        value_fields = [StructField("value", BinaryType(), True)]
    return StructType([*value_fields, *META_FIELDS])


def record_fields(definition: str) -> list[StructField]:
    """Spark fields for an Avro record definition (unmapped types become JSON strings)."""
    schema = json.loads(definition)
    out = []
    for f in schema.get("fields", []):
        typ = f["type"]
        if isinstance(typ, list):
            rest = [t for t in typ if t != "null"]
            typ = rest[0] if len(rest) == 1 else "string"
        if isinstance(typ, dict):
            logical = typ.get("logicalType")
            typ = "timestamp" if logical in ("timestamp-millis", "timestamp-micros") \
                else typ.get("type") if isinstance(typ.get("type"), str) else "record"
        dtype = _AVRO_TYPES.get(typ, StringType()) if typ != "timestamp" else LongType()
        out.append(StructField(f["name"], dtype, True))  # absent in old versions: null
    return out


def value_format_of(schema_type: int | None, definition: bytes | None) -> ValueFormat:
    if schema_type == SCHEMA_JSON and definition:
        return ValueFormat("json", definition.decode())
    if schema_type == SCHEMA_AVRO and definition:
        return ValueFormat("avro", definition.decode())
    if schema_type == SCHEMA_STRING:
        return ValueFormat("string")
    return ValueFormat("binary")


def check_user_schema(schema: StructType, fmt: ValueFormat) -> None:
    """A user schema may name metadata columns, ``value``, and (schema'd topics) fields."""
    known = set(META_NAMES) | {"value"}
    if fmt.kind in ("json", "avro") and fmt.definition:
        known |= {f.name for f in record_fields(fmt.definition)}
    unknown = [f.name for f in schema.fields if f.name not in known]
    if unknown:
        raise ValueError(f"schema names columns the pulsar source cannot fill: {unknown}; "
                         f"known: {sorted(known)}")


def decoder(fmt: ValueFormat) -> Any:
    """``payload -> dict`` for record formats, else ``None``."""
    if fmt.kind == "json":
        return json.loads
    if fmt.kind == "avro":
        import io

        import fastavro

        parsed = fastavro.parse_schema(json.loads(fmt.definition or "{}"))

        def decode(data: bytes) -> Any:
            return fastavro.schemaless_reader(io.BytesIO(data), parsed)

        return decode
    return None
