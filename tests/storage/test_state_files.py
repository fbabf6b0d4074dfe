"""``StorageConfig.state_files`` (brokers sharing storage across hosts): each ledger's row
and its cursors are files in the ledger's own directory, not rows of the shared
storage.db. Another factory on the same directory (another broker) takes the ledger over
with its cursors; a deleted ledger takes its state with it; a storage.db written before
(standalone) is moved into the files once. The broker's own per-topic keys are files too
(`KeyFilesStore`), moved in from metadata.db once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from magnetar.storage import SqliteMetadataStore, StorageError
from magnetar.storage.key_files import KeyFilesStore
from magnetar.storage.ledger_files import MIGRATED, LedgerFilesStore, dir_name
from tests.storage.storage_testlib import IdCounter as Counter
from tests.storage.storage_testlib import append_all, run


def broker(make_factory, counter: Counter, epoch: int | None = None, **kw):
    """A factory as a cluster's broker sets it up."""
    f = make_factory(shared=True, state_files=True, **kw)
    f.use_ledger_id_source(counter.reserve, 10)
    if epoch is not None:
        f.fence_epoch = lambda name: epoch
    return f


def test_rows_are_files_in_the_ledger_directory(tmp_path: Path) -> None:
    store = LedgerFilesStore(str(tmp_path))
    os.makedirs(tmp_path / "ledgers" / dir_name("t/x"))
    name = "a sub/with \x1f odd \u00e9 chars " + "x" * 300  # any name fits a file name
    store.put_many({"ledger/t/x": {"dir": dir_name("t/x")}, f"cursor/t/x\x1f{name}": {"p": 1},
                    "cursor/t/x\x1fs2": {"p": 2}}, durable=True)
    assert store.get("ledger/t/x") == {"dir": dir_name("t/x")}
    assert store.get(f"cursor/t/x\x1f{name}") == {"p": 1}
    assert (tmp_path / "ledgers" / dir_name("t/x") / "ledger.json").exists()
    assert store.list("ledger/") == {"ledger/t/x": {"dir": dir_name("t/x")}}
    assert store.list("cursor/t/x\x1f") == {f"cursor/t/x\x1f{name}": {"p": 1},
                                            "cursor/t/x\x1fs2": {"p": 2}}
    assert store.list("cursor/t/x\x1fs") == {"cursor/t/x\x1fs2": {"p": 2}}
    assert store.list("cursor/other\x1f") == {}
    assert store.delete_prefix("cursor/t/x\x1f") == 2
    assert store.list("cursor/") == {} and store.delete("ledger/t/x")
    assert store.get("ledger/t/x") is None and not store.delete("ledger/t/x")
    assert not any(p.name.startswith(".") for p in tmp_path.rglob("*"))  # no temp left
    with pytest.raises(StorageError, match="metadata store"):
        store.reserve("ids", 10)


def test_a_takeover_finds_the_cursors_and_no_storage_db(make_factory, tmp_path: Path) -> None:
    counter = Counter()
    a = broker(make_factory, counter, 1)
    ml = a.open("t")
    kept = run(append_all(ml, [b"m%d" % i for i in range(5)]))
    cursor = run(ml.open_cursor_async("sub", "earliest"))
    cursor.mark_delete(kept[2])
    a.persist_cursors()
    b = broker(make_factory, counter, 2)  # another broker takes the ledger over
    new = b.open("t")
    assert new.cursor("sub").mark_delete_position == kept[2]
    assert b.list() == ["t"] and b.exists("t")
    assert not (tmp_path / "data" / "storage.db").exists()
    # the stale owner's later cursor state does not overwrite the new owner's
    cursor.mark_delete(kept[4])
    a.persist_cursors()
    c = broker(make_factory, counter, 3)
    b.close()
    assert c.open("t").cursor("sub").mark_delete_position == kept[2]


def test_a_deleted_ledger_takes_its_state_along(make_factory, tmp_path: Path) -> None:
    counter = Counter()
    a = broker(make_factory, counter)
    ml = a.open("gone")
    run(append_all(ml, [b"x"]))
    run(ml.open_cursor_async("sub", "earliest"))
    a.persist_cursors()
    a.delete("gone")
    assert not (tmp_path / "data" / "ledgers" / dir_name("gone")).exists()
    b = broker(make_factory, counter)
    assert not b.exists("gone") and b.list() == []
    assert b.open("gone").cursor("sub") is None  # a new, empty ledger of that name


def test_a_standalone_storage_db_is_moved_into_the_files_once(make_factory,
                                                              tmp_path: Path) -> None:
    alone = make_factory()
    ml = alone.open("old")
    kept = run(append_all(ml, [b"a", b"b", b"c"]))
    cursor = run(ml.open_cursor_async("sub", "earliest"))
    cursor.mark_delete(kept[1])
    alone.close()
    counter = Counter()
    a = broker(make_factory, counter)  # the directory joins a cluster
    assert (tmp_path / "data" / MIGRATED).exists()
    ml = a.open("old")
    assert ml.cursor("sub").mark_delete_position == kept[1]
    after = run(append_all(ml, [b"d"]))[0]
    assert after.ledger_id > kept[-1].ledger_id  # ids above storage.db's (its limit: 1000)
    assert after.ledger_id >= 1000
    a.delete("old")
    b = broker(make_factory, counter)  # a later start reads storage.db no more
    assert not b.exists("old")


def test_key_files_store_and_its_move_from_sqlite(tmp_path: Path) -> None:
    old = SqliteMetadataStore(tmp_path / "metadata.db")
    old.put_many({"topics/persistent://t/n/a": {"created": 1}, "dedup/persistent://t/n/a":
                  {"p": {"x": 3}}, "tenants/t": {"admin": []}, "plain": 7})
    old.close()
    store = KeyFilesStore(str(tmp_path / "metadata"))
    marker = str(tmp_path / "metadata.db.migrated")
    moved = store.migrate_from(str(tmp_path / "metadata.db"), marker,
                               keep=lambda key: not key.startswith("tenants/"))
    assert moved == 3
    assert store.list("") == {"dedup/persistent://t/n/a": {"p": {"x": 3}}, "plain": 7,
                              "topics/persistent://t/n/a": {"created": 1}}
    assert store.list("topics/persistent://") == {"topics/persistent://t/n/a": {"created": 1}}
    assert (tmp_path / "metadata" / "topics").is_dir()  # one folder per kind
    long = "topics/persistent://t/n/" + "é" * 400  # any key fits a file name
    store.put(long, {"created": 2})
    assert store.get(long) == {"created": 2}
    assert store.delete("topics/persistent://t/n/a") and store.get("topics/persistent://t/n/a") is None
    assert store.migrate_from(str(tmp_path / "metadata.db"), marker) == 0  # once only
    assert store.get("topics/persistent://t/n/a") is None  # deleted stays deleted


def test_a_cursor_of_a_deleted_ledger_is_left_out(tmp_path: Path) -> None:
    store = LedgerFilesStore(str(tmp_path))
    os.makedirs(tmp_path / "ledgers" / dir_name("kept"))
    store.put_many({"cursor/gone\x1fs": {"p": 1}, "cursor/kept\x1fs": {"p": 2},
                    "cursor/kept\x1ft": {"p": 3}})  # several: written on the store's threads
    assert store.list("cursor/") == {}  # no ledger.json: no ledger to list them under
    assert store.list("cursor/kept\x1f") == {"cursor/kept\x1fs": {"p": 2},
                                             "cursor/kept\x1ft": {"p": 3}}
    assert not (tmp_path / "ledgers" / dir_name("gone")).exists()  # not made again
    store.close()
    store.put_many({"cursor/kept\x1fs": {"p": 4}, "cursor/kept\x1fu": {"p": 5}})  # closed
    assert store.get("cursor/kept\x1fs") == {"p": 4}


def test_a_stale_owners_late_cursor_write_is_never_read(make_factory, tmp_path: Path) -> None:
    """The fence is checked when cursor states are taken for writing; a stale owner paused
    right after that check writes later, into its own epoch's folder, which the newer
    owner stopped reading when it took the ledger over."""
    counter = Counter()
    a = broker(make_factory, counter, 1)
    ml = a.open("t")
    kept = run(append_all(ml, [b"m%d" % i for i in range(4)]))
    run(ml.open_cursor_async("sub", "earliest")).mark_delete(kept[1])
    a.persist_cursors()
    b = broker(make_factory, counter, 2)
    assert b.open("t").cursor("sub").mark_delete_position == kept[1]
    key = a._cursor_key("t", "sub")
    late = ml.cursor("sub").to_state(100)
    ml.cursor("sub").mark_delete(kept[3])
    a._store.put_many({key: ml.cursor("sub").to_state(100)})  # past its fence check
    assert b._store.get(key) == late  # the newer owner's state stands
    b.close()
    c = broker(make_factory, counter, 3)
    assert c.open("t").cursor("sub").mark_delete_position == kept[1]
    folders = sorted(p.name for p in (tmp_path / "data" / "ledgers" / dir_name("t")).iterdir()
                     if p.is_dir())
    assert folders == ["cursors.3"]  # the older ones removed by the last takeover
