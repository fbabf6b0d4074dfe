"""Tests for magnetar.broker.schema.registry, over a dict-backed fake store."""

from __future__ import annotations

import json
from typing import Any

import pytest

from magnetar.broker.schema.registry import (
    IncompatibleSchemaError,
    SchemaRecord,
    SchemaRegistry,
    decode_version,
    encode_version,
)

AVRO = 4
JSON = 2
STRING = 1
#: these tests store junk definitions: no compatibility check (see test_schema_compat)
LOOSE = "ALWAYS_COMPATIBLE"


class FakeStore:
    """A MetadataStore stand-in: JSON values in a dict (round-tripped through json)."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.reads = 0

    def get(self, key: str) -> Any | None:
        self.reads += 1
        raw = self.data.get(key)
        return None if raw is None else json.loads(raw)

    def put(self, key: str, value: Any) -> None:
        self.data[key] = json.dumps(value)

    def delete(self, key: str) -> None:
        self.data.pop(key, None)

    def list(self, prefix: str) -> dict[str, Any]:
        self.reads += 1
        return {k: json.loads(v) for k, v in self.data.items() if k.startswith(prefix)}


def rec(data: bytes, type_: int = AVRO, **props: str) -> SchemaRecord:
    return SchemaRecord(name="s", type=type_, data=data, properties=dict(props))


def test_versions_start_at_zero_and_identical_is_reused() -> None:
    store = FakeStore()
    reg = SchemaRegistry(store, strategy=LOOSE)
    assert reg.get("t/n/x") is None
    assert reg.versions("t/n/x") == []
    assert reg.get_or_create("t/n/x", rec(b'{"a":1}')) == 0
    assert reg.get_or_create("t/n/x", rec(b'{"a":1}')) == 0
    assert reg.get_or_create("t/n/x", rec(b'{"a":2}')) == 1
    # an older identical schema gets its old version back, no new one
    assert reg.get_or_create("t/n/x", rec(b'{"a":1}')) == 0
    assert reg.versions("t/n/x") == [0, 1]
    # type and properties are part of identity
    assert reg.get_or_create("t/n/x", rec(b'{"a":1}', JSON)) == 2
    assert reg.get_or_create("t/n/x", rec(b'{"a":1}', k="v")) == 3
    assert reg.get_or_create("t/n/x", rec(b'{"a":1}', k="v")) == 3
    # name does not count
    other_name = SchemaRecord(name="zzz", type=AVRO, data=b'{"a":2}')
    assert reg.get_or_create("t/n/x", other_name) == 1


def test_key_scheme_and_json_layout() -> None:
    store = FakeStore()
    reg = SchemaRegistry(store, strategy=LOOSE)
    reg.get_or_create("t/n/x", rec(b"\x00\xffbin", STRING, a="b"))
    assert list(store.data) == ["schemas/t/n/x/0000000000"]
    stored = json.loads(store.data["schemas/t/n/x/0000000000"])
    assert stored == {
        "name": "s",
        "type": STRING,
        "data": "AP9iaW4=",
        "properties": {"a": "b"},
        "version": 0,
    }
    assert SchemaRegistry.key("a/b/c", 12) == "schemas/a/b/c/0000000012"


def test_get_latest_and_specific() -> None:
    reg = SchemaRegistry(FakeStore(), strategy=LOOSE)
    reg.get_or_create("t", rec(b"v0"))
    reg.get_or_create("t", rec(b"v1", k="1"))
    latest = reg.get("t")
    assert latest is not None
    assert latest.version == 1 and latest.data == b"v1" and latest.properties == {"k": "1"}
    first = reg.get("t", 0)
    assert first is not None and first.data == b"v0" and first.version == 0
    assert reg.get("t", 7) is None
    # callers cannot corrupt the registry through returned records
    first.properties["evil"] = "x"
    again = reg.get("t", 0)
    assert again is not None and again.properties == {}


def test_new_registry_reads_back_from_store() -> None:
    store = FakeStore()
    reg = SchemaRegistry(store, strategy=LOOSE)
    reg.get_or_create("t/n/x", rec(b"a"))
    reg.get_or_create("t/n/x", rec(b"b"))
    fresh = SchemaRegistry(store, strategy=LOOSE)
    assert fresh.versions("t/n/x") == [0, 1]
    got = fresh.get("t/n/x", 1)
    assert got is not None and got.data == b"b" and got.type == AVRO
    assert fresh.get_or_create("t/n/x", rec(b"a")) == 0
    assert fresh.get_or_create("t/n/x", rec(b"c")) == 2


def test_reads_are_cached() -> None:
    store = FakeStore()
    reg = SchemaRegistry(store, strategy=LOOSE)
    reg.get_or_create("t", rec(b"a"))
    before = store.reads
    for _ in range(10):
        reg.get("t")
        reg.get_or_create("t", rec(b"a"))
    assert store.reads == before


def test_topics_with_shared_prefix_are_separate() -> None:
    store = FakeStore()
    reg = SchemaRegistry(store, strategy=LOOSE)
    reg.get_or_create("t/n/x", rec(b"x"))
    reg.get_or_create("t/n/xy", rec(b"xy"))
    fresh = SchemaRegistry(store, strategy=LOOSE)
    assert fresh.versions("t/n/x") == [0]
    got = fresh.get("t/n/x")
    assert got is not None and got.data == b"x"


def test_delete() -> None:
    store = FakeStore()
    reg = SchemaRegistry(store, strategy=LOOSE)
    reg.get_or_create("t/n/x", rec(b"a"))
    reg.get_or_create("t/n/x", rec(b"b"))
    reg.get_or_create("t/n/other", rec(b"o"))
    assert reg.delete("t/n/x") == 2
    assert reg.get("t/n/x") is None
    assert reg.versions("t/n/x") == []
    assert list(store.data) == ["schemas/t/n/other/0000000000"]
    assert reg.get_or_create("t/n/x", rec(b"b")) == 0
    assert reg.delete("nothing") == 0


def avro(*fields: tuple[str, str]) -> bytes:
    return json.dumps({"type": "record", "name": "R",
                       "fields": [{"name": n, "type": t} for n, t in fields]}).encode()


def test_default_strategy_is_full() -> None:
    reg = SchemaRegistry(FakeStore())
    assert reg.strategy == "FULL"
    reg.get_or_create("t", rec(avro(("a", "int"))))
    with pytest.raises(IncompatibleSchemaError, match="field b"):
        reg.get_or_create("t", rec(avro(("a", "int"), ("b", "int"))))  # no default: not BACKWARD
    with pytest.raises(IncompatibleSchemaError, match="type STRING differs from AVRO"):
        reg.get_or_create("t", rec(b"", STRING))
    assert reg.versions("t") == [0]
    # an identical existing schema needs no check, whatever the strategy
    assert reg.get_or_create("t", rec(avro(("a", "int"))), "ALWAYS_INCOMPATIBLE") == 0
    assert isinstance(IncompatibleSchemaError("x"), ValueError)


def test_strategy_per_call_and_per_registry() -> None:
    reg = SchemaRegistry(FakeStore(), strategy="backward")
    assert reg.strategy == "BACKWARD"
    reg.get_or_create("t", rec(avro(("a", "int"), ("b", "int"))))
    assert reg.get_or_create("t", rec(avro(("a", "long")))) == 1  # BACKWARD: drop b, widen a
    with pytest.raises(IncompatibleSchemaError):
        reg.get_or_create("t", rec(avro(("a", "string"))), "FORWARD")  # v1 reads a as long
    assert reg.get_or_create("t", rec(b"x", STRING), "ALWAYS_COMPATIBLE") == 2
    with pytest.raises(ValueError, match="unknown schema compatibility strategy"):
        SchemaRegistry(FakeStore(), strategy="SOMETIMES")


def test_check_consumer_stores_nothing() -> None:
    store = FakeStore()
    reg = SchemaRegistry(store)
    with pytest.raises(IncompatibleSchemaError, match="no schema"):
        reg.check_consumer("t", rec(avro(("a", "int"))))
    reg.get_or_create("t", rec(avro(("a", "int"))))
    keys = dict(store.data)
    reg.check_consumer("t", rec(avro(("a", "long"))))  # reads the latest: fine
    with pytest.raises(IncompatibleSchemaError, match="consumer's schema cannot read"):
        reg.check_consumer("t", rec(avro(("a", "string"))))
    reg.check_consumer("t", rec(avro(("a", "string"))), "ALWAYS_COMPATIBLE")
    assert store.data == keys and reg.versions("t") == [0]


def test_version_wire_encoding() -> None:
    assert encode_version(0) == b"\x00" * 8
    assert encode_version(1) == b"\x00\x00\x00\x00\x00\x00\x00\x01"
    assert encode_version(258) == b"\x00\x00\x00\x00\x00\x00\x01\x02"
    assert decode_version(encode_version(12345)) == 12345
    assert decode_version(b"") is None
    assert decode_version(None) is None
    with pytest.raises(ValueError):
        decode_version(b"\x01")


def test_record_json_round_trip() -> None:
    r = SchemaRecord(name="n", type=15, data=b"\x01\x02", properties={"a": "1"}, version=3)
    assert SchemaRecord.from_json(json.loads(json.dumps(r.to_json()))) == r
    assert r.same_schema(SchemaRecord(name="other", type=15, data=b"\x01\x02",
                                      properties={"a": "1"}))
