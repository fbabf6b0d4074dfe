"""Tests for magnetar.broker.schema.compat: Avro resolution and Pulsar's strategies."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from magnetar.broker.schema.compat import (
    STRATEGIES,
    IncompatibleSchemaError,
    check_consumer,
    check_new_version,
    read_problem,
    validate_strategy,
)

STRING, JSON, AVRO, INT32, INT64 = 1, 2, 4, 8, 9


def record(*fields: Any, name: str = "R", **extra: Any) -> dict[str, Any]:
    """A record; a field is (name, type) or (name, type, default)."""
    out = []
    for f in fields:
        spec: dict[str, Any] = {"name": f[0], "type": f[1]}
        if len(f) > 2:
            spec["default"] = f[2]
        out.append(spec)
    return {"type": "record", "name": name, "fields": out, **extra}


def can_read(reader: Any, writer: Any) -> bool:
    return read_problem(reader, writer) is None


# ------------------------------------------------------------------ resolution rules


@pytest.mark.parametrize(("writer", "readers"), [
    ("int", {"int", "long", "float", "double"}),
    ("long", {"long", "float", "double"}),
    ("float", {"float", "double"}),
    ("double", {"double"}),
    ("string", {"string", "bytes"}),
    ("bytes", {"bytes", "string"}),
    ("boolean", {"boolean"}),
    ("null", {"null"}),
])
def test_primitive_promotions(writer: str, readers: set[str]) -> None:
    every = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
    for reader in every:
        assert can_read(record(("f", reader)), record(("f", writer))) == (reader in readers), (
            reader, writer)


def test_the_issue_example_int_read_as_string() -> None:
    producer = record(("a", "int"), ("b", "int"))
    consumer = record(("a", "string"), ("b", "int"))
    assert read_problem(consumer, producer) == "field a: int cannot be read as string"
    assert not can_read(producer, consumer)


def test_fields_by_name_defaults_and_aliases() -> None:
    old = record(("a", "int"))
    assert can_read(record(("a", "int"), ("b", "string", "x")), old)  # added with default
    problem = read_problem(record(("a", "int"), ("b", "string")), old)
    assert problem is not None and "field b" in problem and "no default" in problem
    assert can_read(record(("a", "int"), ("b", ["null", "int"], None)), old)  # default null
    assert can_read(old, record(("a", "int"), ("b", "int")))  # writer's extra field skipped
    assert can_read(record(("z", "int"), ("a", "int")), record(("a", "int"), ("z", "int")))
    renamed = {"type": "record", "name": "R",
               "fields": [{"name": "b", "type": "int", "aliases": ["a"]}]}
    assert can_read(renamed, old)
    assert not can_read(record(("b", "int")), old)


def test_record_names_are_not_compared() -> None:
    # as in Pulsar's check (Avro's resolving grammar): renaming the record class is fine
    assert can_read(record(("a", "int"), name="V2"), record(("a", "int"), name="V1"))


def test_unions() -> None:
    nullable = record(("a", ["null", "int"]))
    plain = record(("a", "int"))
    assert can_read(nullable, plain)  # int matches a branch
    assert not can_read(plain, nullable)  # a written null cannot be read as int
    assert can_read(record(("a", ["null", "long"])), nullable)  # branch by branch, promoted
    assert not can_read(record(("a", ["null", "string"])), record(("a", ["int", "string"])))
    assert can_read(record(("a", ["string", "null", "int"])), record(("a", ["int", "null"])))
    assert can_read(record(("a", "double")), record(("a", ["int", "float"])))


def test_enums() -> None:
    def enum(*symbols: str, name: str = "E", **extra: Any) -> dict[str, Any]:
        return record(("e", {"type": "enum", "name": name, "symbols": list(symbols), **extra}))

    assert can_read(enum("A", "B", "C"), enum("A", "B"))  # reader knows more symbols
    problem = read_problem(enum("A"), enum("A", "B"))
    assert problem is not None and "lacks B" in problem
    assert can_read(enum("A", "X", default="X"), enum("A", "B"))  # unknown B reads as X
    assert not can_read(enum("A", name="F"), enum("A"))
    assert can_read(enum("A", name="F", aliases=["E"]), enum("A"))


def test_fixed_arrays_maps() -> None:
    def fixed(size: int, name: str = "F") -> dict[str, Any]:
        return record(("f", {"type": "fixed", "name": name, "size": size}))

    assert can_read(fixed(4), fixed(4))
    assert not can_read(fixed(8), fixed(4))
    assert not can_read(fixed(4, "G"), fixed(4))
    assert can_read(record(("l", {"type": "array", "items": "long"})),
                    record(("l", {"type": "array", "items": "int"})))
    assert not can_read(record(("l", {"type": "array", "items": "int"})),
                        record(("l", {"type": "array", "items": "long"})))
    assert not can_read(record(("l", {"type": "array", "items": "int"})),
                        record(("l", {"type": "map", "values": "int"})))
    problem = read_problem(record(("m", {"type": "map", "values": "int"})),
                           record(("m", {"type": "map", "values": "string"})))
    assert problem == "field m{}: string cannot be read as int"


def test_nested_named_and_recursive_types() -> None:
    inner_v1 = record(("x", "int"), name="Inner", namespace="ns")
    inner_v2 = record(("x", "int"), ("y", "int"), name="Inner", namespace="ns")
    outer = lambda inner: record(("p", inner), ("q", ["null", "ns.Inner"]), name="Outer")  # noqa: E731
    problem = read_problem(outer(inner_v2), outer(inner_v1))
    assert problem is not None and "field p.y" in problem
    assert can_read(outer(inner_v1), outer(inner_v2))

    def node(value: str) -> dict[str, Any]:
        return record(("v", value), ("next", ["null", "Node"]), name="Node")

    assert can_read(node("long"), node("int"))
    assert not can_read(node("int"), node("long"))


def test_logical_types_resolve_as_their_base() -> None:
    date = record(("d", {"type": "int", "logicalType": "date"}))
    assert can_read(date, record(("d", "int")))
    assert can_read(record(("d", "long")), date)


def test_what_pulsars_official_python_client_sends() -> None:
    pulsar_schema = pytest.importorskip("pulsar.schema")

    class V1(pulsar_schema.Record):
        a = pulsar_schema.Integer()

    class V2(pulsar_schema.Record):
        a = pulsar_schema.Integer()
        b = pulsar_schema.String(required_default=True)

    class V3(pulsar_schema.Record):
        a = pulsar_schema.Integer()
        b = pulsar_schema.String()  # nullable, but no "default"

    def definition(cls: type) -> Any:
        return json.loads(pulsar_schema.JsonSchema(cls).schema_info().schema())

    v1, v2, v3 = definition(V1), definition(V2), definition(V3)
    assert can_read(v2, v1) and can_read(v1, v2)
    assert not can_read(v3, v1) and can_read(v1, v3)


# ------------------------------------------------------------------ strategies


@dataclass
class S:
    type: int
    data: bytes
    version: int | None = None


def avro(*fields: Any, type_: int = AVRO, version: int | None = None) -> S:
    return S(type_, json.dumps(record(*fields)).encode(), version)


V1 = avro(("a", "int"), version=0)
V2 = avro(("a", "int"), ("b", "int", 0), version=1)  # adds b with a default
V3 = avro(("a", "int"), ("b", "int"), version=2)  # drops b's default


def ok(history: list[S], new: S, strategy: str) -> bool:
    try:
        check_new_version(history, new, strategy)
    except IncompatibleSchemaError:
        return False
    return True


def test_validate_strategy() -> None:
    assert validate_strategy(" full_transitive ") == "FULL_TRANSITIVE"
    assert len(STRATEGIES) == 8
    with pytest.raises(ValueError, match="one of ALWAYS_COMPATIBLE"):
        validate_strategy("UNDEFINED")


def test_first_schema_always_accepted() -> None:
    for strategy in STRATEGIES:
        check_new_version([], V1, strategy)


@pytest.mark.parametrize(("strategy", "add_with_default", "add_without", "remove_without",
                          "change_type"), [
    ("ALWAYS_COMPATIBLE", True, True, True, True),
    ("ALWAYS_INCOMPATIBLE", False, False, False, False),
    ("BACKWARD", True, False, True, False),
    ("FORWARD", True, True, False, False),
    ("FULL", True, False, False, False),
    ("BACKWARD_TRANSITIVE", True, False, True, False),
    ("FORWARD_TRANSITIVE", True, True, False, False),
    ("FULL_TRANSITIVE", True, False, False, False),
])
def test_each_strategy_single_step(strategy: str, add_with_default: bool, add_without: bool,
                                   remove_without: bool, change_type: bool) -> None:
    base = avro(("a", "int"), ("c", "int"), version=0)
    assert ok([base], avro(("a", "int"), ("c", "int"), ("b", "int", 0)), strategy) == add_with_default
    assert ok([base], avro(("a", "int"), ("c", "int"), ("b", "int")), strategy) == add_without
    assert ok([base], avro(("a", "int")), strategy) == remove_without  # c had no default
    assert ok([base], avro(("a", "string"), ("c", "int")), strategy) == change_type


def test_transitive_checks_every_version_non_transitive_the_latest() -> None:
    # V3 reads V2 (b present in both) but not V1 (b missing, no default any more)
    assert ok([V1, V2], V3, "BACKWARD")
    with pytest.raises(IncompatibleSchemaError, match="cannot read version 0: field b"):
        check_new_version([V1, V2], V3, "BACKWARD_TRANSITIVE")
    assert ok([V1, V2], V3, "FULL")  # V2 also reads V3's data
    assert not ok([V1, V2], V3, "FULL_TRANSITIVE")
    # FORWARD: old readers must read the new data; V0 = {a: long}, V1' = {a: long} -> ...
    w0 = avro(("a", "int"), version=0)
    w1 = avro(("a", "long"), version=1)
    new = avro(("a", "long"), ("z", "int"))
    assert ok([w0, w1], new, "FORWARD")  # w1 reads long a
    assert not ok([w0, w1], new, "FORWARD_TRANSITIVE")  # w0 cannot read a long as int


def test_types_must_match_except_always_compatible() -> None:
    json_v1 = avro(("a", "int"), type_=JSON, version=0)
    for strategy in STRATEGIES:
        expected = strategy == "ALWAYS_COMPATIBLE"
        assert ok([json_v1], V1, strategy) == expected, strategy
        assert ok([S(STRING, b"")], S(INT32, b""), strategy) == expected, strategy


def test_primitive_schemas_same_type_compatible() -> None:
    for strategy in STRATEGIES:
        assert ok([S(INT64, b"")], S(INT64, b"x"), strategy) == (strategy != "ALWAYS_INCOMPATIBLE")


def test_json_schemas_use_avro_rules_and_old_format() -> None:
    old = avro(("a", "int"), ("b", "int"), type_=JSON, version=0)
    assert not ok([old], avro(("a", "string"), ("b", "int"), type_=JSON), "FULL")
    assert ok([old], avro(("a", "int"), ("b", "int"), ("c", "int", 1), type_=JSON), "FULL")
    jackson = S(JSON, json.dumps({"type": "object", "id": "urn:jsonschema:R"}).encode(), 0)
    assert ok([jackson], old, "FULL")  # the Avro-based format replaces the old one
    assert ok([jackson], S(JSON, json.dumps({"type": "object", "id": "urn:jsonschema:R",
                                             "x": 1}).encode()), "FULL")
    assert not ok([jackson], S(JSON, json.dumps({"type": "object", "id": "other"}).encode()),
                  "FULL")


def test_invalid_definition_is_incompatible() -> None:
    with pytest.raises(IncompatibleSchemaError, match="not a valid schema definition"):
        check_new_version([V1], S(AVRO, b"{not json"), "FULL")
    with pytest.raises(IncompatibleSchemaError, match="not a valid schema definition"):
        check_new_version([V1], avro(("a", "nosuchtype")), "FULL")


def test_consumer_checks_pip_44() -> None:
    # a consumer only has to read: the latest version, or all for BACKWARD/FULL transitive
    reads_latest_only = avro(("a", "int"), ("b", "int"))  # cannot read V1 (no b, no default)
    for strategy in STRATEGIES:
        expected = strategy not in ("ALWAYS_INCOMPATIBLE", "BACKWARD_TRANSITIVE",
                                    "FULL_TRANSITIVE")
        try:
            check_consumer([V1, V2], reads_latest_only, strategy)
            accepted = True
        except IncompatibleSchemaError:
            accepted = False
        assert accepted == expected, strategy
    # FORWARD does not ask the latest schema to read the consumer's
    check_consumer([V2], avro(("a", "long")), "FORWARD")
    with pytest.raises(IncompatibleSchemaError, match="consumer's schema cannot read"):
        check_consumer([V2], avro(("a", "string"), ("b", "int")), "FULL")
    check_consumer([V1, V2], S(V2.type, V2.data), "ALWAYS_INCOMPATIBLE")  # the latest, exactly
    with pytest.raises(IncompatibleSchemaError, match="no schema"):
        check_consumer([], V1, "FULL")
    check_consumer([], V1, "ALWAYS_COMPATIBLE")
