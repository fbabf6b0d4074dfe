"""Schema compatibility: Pulsar's strategies, decided by Avro's schema-resolution rules.

Theory of operation
-------------------
A topic's schemas form a history of versions. When a producer brings a schema that is not
stored yet, or a consumer subscribes with a schema, the new schema is checked against that
history with the topic's *strategy* (Pulsar's ``SchemaCompatibilityStrategy``):

==========================  ==============================================================
``ALWAYS_COMPATIBLE``       anything goes, even a different schema type
``ALWAYS_INCOMPATIBLE``     nothing new is accepted once the topic has a schema
``BACKWARD``                the new schema can read data written with the latest version
``FORWARD``                 the latest version can read data written with the new schema
``FULL``                    both (Pulsar's default)
``*_TRANSITIVE``            the same, against every stored version instead of the latest
==========================  ==============================================================

"A can read data written with B" is Avro's schema resolution with A as the reader and B
as the writer (:func:`read_problem`): records match fields by name (or reader alias),
a reader field absent from the writer needs a default and a writer field absent from
the reader is skipped; ``int`` promotes to ``long``, ``float`` and ``double``, ``long`` to
``float`` and ``double``, ``float`` to ``double``, and ``string`` and ``bytes`` read each
other; every writer enum symbol must be a reader symbol unless the reader enum has a
default; arrays and maps resolve their items and values; each branch of a writer union
must resolve against the reader (against some branch when the reader is a union too);
enums and fixed types must have the same name (fixed: and size). Record names are not
compared, as in the check Pulsar runs (Avro's resolving grammar), so renaming a record
class between versions is accepted. Logical types resolve as their underlying types.

AVRO and JSON schemas are checked this way: Pulsar's JSON schema is an Avro record
definition in JSON (what the official clients send). A JSON schema in the pre-2.1 format
(a Jackson JSON schema, which has no ``"type": "record"``) is accepted next to an Avro
one and compared with another of its kind by its ``id``, as Pulsar does. Schemas of
other types are compatible when they have the same type (their data is not compared),
except under ``ALWAYS_INCOMPATIBLE``. Different types are incompatible except under
``ALWAYS_COMPATIBLE``.

Consumers are checked differently from producers (Pulsar's PIP-44): a consumer's schema
only has to *read* what is stored: the latest version for ``BACKWARD``, ``FORWARD``,
``FORWARD_TRANSITIVE`` and ``FULL``, every version for ``BACKWARD_TRANSITIVE`` and
``FULL_TRANSITIVE``. Under ``ALWAYS_INCOMPATIBLE`` a consumer needs the latest schema
exactly.

The functions here are pure: they take the schemas (anything with an integer ``type`` and
bytes ``data``, like ``SchemaRecord``) and raise :class:`IncompatibleSchemaError` with the
reason, or return ``None``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import fastavro

from magnetar.protocol import pb

__all__ = [
    "DEFAULT_STRATEGY",
    "STRATEGIES",
    "IncompatibleSchemaError",
    "SchemaLike",
    "check_consumer",
    "check_new_version",
    "definition_problem",
    "read_problem",
    "validate_strategy",
]

STRATEGIES = (
    "ALWAYS_COMPATIBLE",
    "ALWAYS_INCOMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
)
DEFAULT_STRATEGY = "FULL"

# Schema.Type values on the wire (pulsar.proto)
JSON = 2
AVRO = 4
_AVRO_BASED = (JSON, AVRO)

# reader type -> writer types it can read besides its own (Avro's promotions)
_PROMOTIONS: dict[str, frozenset[str]] = {
    "long": frozenset({"int"}),
    "float": frozenset({"int", "long"}),
    "double": frozenset({"int", "long", "float"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class IncompatibleSchemaError(ValueError):
    """The new schema may not be used on the topic (the broker answers IncompatibleSchema)."""


class SchemaLike(Protocol):
    type: int
    data: bytes


def validate_strategy(name: str) -> str:
    """``name`` in upper case if it is one of :data:`STRATEGIES`, else ``ValueError``."""
    upper = name.strip().upper()
    if upper not in STRATEGIES:
        raise ValueError(f"unknown schema compatibility strategy {name!r}; "
                         f"one of {', '.join(STRATEGIES)}")
    return upper


# ------------------------------------------------------------------ strategies


def check_new_version(history: Sequence[SchemaLike], new: SchemaLike, strategy: str) -> None:
    """May ``new`` be stored after ``history`` (oldest first)? Raises if not."""
    strategy = validate_strategy(strategy)
    if not history or strategy == "ALWAYS_COMPATIBLE":
        return
    if strategy == "ALWAYS_INCOMPATIBLE":
        raise IncompatibleSchemaError("the schema compatibility strategy is ALWAYS_INCOMPATIBLE")
    against = history if strategy.endswith("_TRANSITIVE") else history[-1:]
    backward = strategy.startswith(("BACKWARD", "FULL"))
    forward = strategy.startswith(("FORWARD", "FULL"))
    for old in reversed(against):
        if backward:
            _check_pair(new, old, old, "the new schema cannot read")
        if forward:
            _check_pair(old, new, old, "data of the new schema cannot be read by")


def check_consumer(history: Sequence[SchemaLike], schema: SchemaLike, strategy: str) -> None:
    """May a consumer with ``schema`` subscribe to a topic with ``history``? (PIP-44)"""
    strategy = validate_strategy(strategy)
    if strategy == "ALWAYS_COMPATIBLE":
        return
    if not history:
        raise IncompatibleSchemaError("the topic has no schema to check the consumer's against")
    latest = history[-1]
    if strategy == "ALWAYS_INCOMPATIBLE":
        if latest.type == schema.type and bytes(latest.data) == bytes(schema.data):
            return
        raise IncompatibleSchemaError("the schema compatibility strategy is ALWAYS_INCOMPATIBLE")
    against = history if strategy in ("BACKWARD_TRANSITIVE", "FULL_TRANSITIVE") else [latest]
    for old in reversed(against):
        _check_pair(schema, old, old, "the consumer's schema cannot read")


def _check_pair(reader: SchemaLike, writer: SchemaLike, old: SchemaLike, what: str) -> None:
    """Raise unless data written with ``writer`` can be read with ``reader``."""
    version = getattr(old, "version", None)
    label = f"version {version}" if version is not None else "the stored schema"
    if reader.type != writer.type:
        raise IncompatibleSchemaError(
            f"{what} {label}: schema type {_type_name(reader.type)} differs from "
            f"{_type_name(writer.type)}")
    if reader.type not in _AVRO_BASED or bytes(reader.data) == bytes(writer.data):
        return
    problem = _definition_problem(bytes(reader.data), bytes(writer.data), reader.type)
    if problem is not None:
        raise IncompatibleSchemaError(f"{what} {label}: {problem}")


def _type_name(value: int) -> str:
    try:
        return str(pb.Schema.Type.Name(value)).upper()
    except ValueError:
        return str(value)


def _definition_problem(reader_data: bytes, writer_data: bytes, type_: int) -> str | None:
    reader, reader_err = _parse(reader_data)
    writer, writer_err = _parse(writer_data)
    if reader is not None and writer is not None:
        return read_problem(reader, writer)
    if type_ == JSON:  # Pulsar's pre-2.1 JSON schemas (Jackson format)
        reader_json, writer_json = _loads(reader_data), _loads(writer_data)
        if isinstance(reader_json, dict) and isinstance(writer_json, dict):
            if reader is not None or writer is not None:
                return None  # one old, one Avro-based: accepted (the new format replaces it)
            if reader_json.get("id") == writer_json.get("id"):
                return None
            return "JSON schemas with different ids"
    return f"not a valid schema definition ({reader_err or writer_err})"


def definition_problem(type_: int, data: bytes) -> str | None:
    """Why ``data`` is not a usable definition for a schema of wire type ``type_`` (None
    when it is): an AVRO definition must parse as an Avro schema, a JSON one as JSON (Avro
    based, or Pulsar's older Jackson form). Other types are not checked."""
    if type_ == AVRO:
        parsed, problem = _parse(data)
        return None if parsed is not None else f"not a valid Avro schema definition ({problem})"
    if type_ == JSON and not isinstance(_loads(data), dict):
        return "not a valid JSON schema definition (expected a JSON object)"
    return None


def _loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _parse(data: bytes) -> tuple[Any, str | None]:
    """The Avro schema in ``data``, parsed (names made full), or ``(None, reason)``."""
    obj = _loads(data)
    if obj is None:
        return None, "not JSON"
    try:
        named: dict[str, Any] = {}
        parsed = fastavro.parse_schema(obj, named_schemas=named, _write_hint=False,
                                       _ignore_default_error=True)
    except Exception as exc:  # fastavro raises several kinds for a bad definition
        return None, str(exc) or type(exc).__name__
    return _Parsed(parsed, named), None


# ------------------------------------------------------------------ Avro resolution


class _Parsed:
    """A parsed Avro schema with the named types it defines (full name -> definition)."""

    def __init__(self, root: Any, named: Mapping[str, Any]) -> None:
        self.root = root
        self.named = named


def read_problem(reader: Any, writer: Any) -> str | None:
    """Why data written with ``writer`` cannot be read with ``reader``, or ``None``.

    Both are Avro schemas, either as parsed by :func:`_parse` or as plain JSON values
    (dicts, lists, strings) with named types defined before they are referenced.
    """
    if not isinstance(reader, _Parsed):
        reader = _parse(json.dumps(reader).encode())[0] or _Parsed(reader, {})
    if not isinstance(writer, _Parsed):
        writer = _parse(json.dumps(writer).encode())[0] or _Parsed(writer, {})
    return _Resolver(reader.named, writer.named).problem(reader.root, writer.root, "")


class _Resolver:
    def __init__(self, reader_named: Mapping[str, Any], writer_named: Mapping[str, Any]) -> None:
        self.reader_named = reader_named
        self.writer_named = writer_named
        # pairs of named types under comparison: assumed to resolve (recursive types)
        self.assumed: set[tuple[str, str]] = set()

    @staticmethod
    def _deref(schema: Any, named: Mapping[str, Any]) -> Any:
        """Follow references to named types and ``{"type": <schema>}`` wrappers."""
        while True:
            if isinstance(schema, str) and schema in named:
                schema = named[schema]
            elif isinstance(schema, dict) and (
                not isinstance(schema.get("type"), str) or schema["type"] in named
            ):
                schema = schema["type"]
            else:
                return schema

    @staticmethod
    def _kind(schema: Any) -> str:
        if isinstance(schema, list):
            return "union"
        if isinstance(schema, dict):
            return str(schema["type"])
        return str(schema)

    def problem(self, reader: Any, writer: Any, path: str) -> str | None:
        reader = self._deref(reader, self.reader_named)
        writer = self._deref(writer, self.writer_named)
        r_kind, w_kind = self._kind(reader), self._kind(writer)
        where = path or "the top level"
        if w_kind == "union":
            for branch in writer:
                if self.problem(reader, branch, path) is not None:
                    b_kind = self._kind(self._deref(branch, self.writer_named))
                    return f"{where}: a written {b_kind} cannot be read as {_show(r_kind)}"
            return None
        if r_kind == "union":
            if any(self.problem(branch, writer, path) is None for branch in reader):
                return None
            return f"{where}: a written {w_kind} matches no branch of the reader's union"
        if r_kind != w_kind:
            if w_kind in _PROMOTIONS.get(r_kind, ()):
                return None
            return f"{where}: {w_kind} cannot be read as {r_kind}"
        if r_kind in _PRIMITIVES:
            return None
        if r_kind == "array":
            return self.problem(reader["items"], writer["items"], f"{path}[]")
        if r_kind == "map":
            return self.problem(reader["values"], writer["values"], f"{path}{{}}")
        if r_kind == "fixed":
            if not self._same_name(reader, writer):
                return f"{where}: fixed {writer['name']} cannot be read as {reader['name']}"
            if reader.get("size") != writer.get("size"):
                return f"{where}: fixed size {writer.get('size')} cannot be read as {reader.get('size')}"
            return None
        if r_kind == "enum":
            if not self._same_name(reader, writer):
                return f"{where}: enum {writer['name']} cannot be read as {reader['name']}"
            if "default" in reader:
                return None
            missing = [s for s in writer.get("symbols", []) if s not in reader.get("symbols", [])]
            if missing:
                return f"{where}: the reader's enum {reader['name']} lacks {', '.join(missing)}"
            return None
        if r_kind == "record":
            return self._record_problem(reader, writer, path)
        return f"{where}: unknown type {r_kind}"  # pragma: no cover (fastavro rejects these)

    @staticmethod
    def _same_name(reader: Mapping[str, Any], writer: Mapping[str, Any]) -> bool:
        full = writer.get("name")
        short = str(full).rsplit(".", 1)[-1]
        aliases = set(reader.get("aliases") or ())
        return reader.get("name") == full or full in aliases or short in aliases

    def _record_problem(self, reader: Mapping[str, Any], writer: Mapping[str, Any],
                        path: str) -> str | None:
        pair = (str(reader.get("name")), str(writer.get("name")))
        if pair in self.assumed:
            return None
        self.assumed.add(pair)
        written = {f["name"]: f for f in writer.get("fields", [])}
        for field in reader.get("fields", []):
            name = field["name"]
            match = written.get(name)
            if match is None:
                match = next((written[a] for a in field.get("aliases") or () if a in written), None)
            field_path = f"{path}.{name}" if path else f"field {name}"
            if match is None:
                if "default" in field:
                    continue
                problem: str | None = f"{field_path}: missing in the written data, no default"
            else:
                problem = self.problem(field["type"], match["type"], field_path)
            if problem is not None:
                self.assumed.discard(pair)
                return problem
        return None


def _show(kind: str) -> str:
    return "the reader's union" if kind == "union" else kind
