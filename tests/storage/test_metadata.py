"""MetadataStore: the SQLite backend and the in-memory one behave the same."""

from __future__ import annotations

import sqlite3

import pytest

from magnetar.storage import MemoryMetadataStore, MetadataStore, SqliteMetadataStore


@pytest.fixture(params=["sqlite", "memory"])
def store(request, tmp_path):
    s = (
        SqliteMetadataStore(tmp_path / "m.db")
        if request.param == "sqlite"
        else MemoryMetadataStore()
    )
    yield s
    s.close()


def test_get_put_delete(store: MetadataStore):
    assert store.get("a") is None
    value = {"partitions": 4, "props": {"x": [1, 2.5, None, True]}, "name": "ü"}
    store.put("a", value)
    assert store.get("a") == value
    store.put("a", 3)
    assert store.get("a") == 3
    assert store.delete("a") is True
    assert store.delete("a") is False
    assert store.get("a") is None


def test_list_prefix(store: MetadataStore):
    for k in ["topics/t/a", "topics/t/b", "topics/tx", "topics/u/a", "schemas/t"]:
        store.put(k, k.upper())
    assert store.list("topics/t/") == {"topics/t/a": "TOPICS/T/A", "topics/t/b": "TOPICS/T/B"}
    assert list(store.list("topics/")) == ["topics/t/a", "topics/t/b", "topics/tx", "topics/u/a"]
    assert len(store.list("")) == 5
    assert store.list("nothing") == {}
    assert store.delete_prefix("topics/t") == 3
    assert list(store.list("")) == ["schemas/t", "topics/u/a"]


def test_put_many(store: MetadataStore):
    store.put_many({"a": 1, "b": [2]})
    assert store.list("") == {"a": 1, "b": [2]}


def test_sqlite_survives_reopen_and_uses_wal(tmp_path):
    s = SqliteMetadataStore(tmp_path / "m.db")
    s.put("policies/public/default", {"retention": [60, 100]})
    s.close()
    s = SqliteMetadataStore(tmp_path / "m.db")
    assert s.get("policies/public/default") == {"retention": [60, 100]}
    s.close()
    db = sqlite3.connect(tmp_path / "m.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_factory_exposes_metadata(make_factory):
    f = make_factory()
    f.metadata.put("topics/x", {"terminated": True})
    assert f.metadata.get("topics/x") == {"terminated": True}
    assert isinstance(f.metadata, MetadataStore)
