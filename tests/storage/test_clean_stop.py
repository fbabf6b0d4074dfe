"""A clean stop: idle ledgers close without writing (no index sidecar for a small
segment), the clean-stop mark says everything was synced, and the next open scans those
segments without syncing them; after a crash (no mark) the scan syncs as before."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from magnetar.storage import ManagedLedger, ManagedLedgerFactory, Position, StorageConfig, record
from magnetar.storage import segment as segment_module
from magnetar.storage.clean_stop import MARK

from .storage_testlib import run


def _files(root: Path, suffix: str) -> list[Path]:
    return sorted((root / "ledgers").rglob(f"*{suffix}"))


def _record_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    paths: list[str] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(segment_module.os, "fdatasync", fdatasync)
    return paths


def _fill(f: ManagedLedgerFactory, names: list[str], big: str | None = None) -> None:
    async def go() -> None:
        await asyncio.gather(*[f.open(n).append(b"entry of " + n.encode()) for n in names])
        if big is not None:  # a segment past INDEX_MIN_BYTES
            ml = f.open(big)
            await asyncio.gather(*[ml.append(b"b" * 1024) for _ in range(100)])

    run(go())


def test_idle_ledgers_close_without_a_write_and_reopen_without_a_sync(tmp_path, monkeypatch):
    root = tmp_path / "data"
    f = ManagedLedgerFactory(StorageConfig(data_dir=root, fsync="group"))
    names = [f"t{i}" for i in range(5)]
    _fill(f, names, big="big")
    written: list[object] = []
    real_write_index = segment_module.Segment.write_index

    def write_index(seg: segment_module.Segment) -> None:
        written.append(seg)
        real_write_index(seg)

    monkeypatch.setattr(segment_module.Segment, "write_index", write_index)
    ledgers = [f.open(n) for n in [*names, "big"]]
    closed_idle: list[str] = []
    real_close_if_idle = type(ledgers[0]).close_if_idle

    def close_if_idle(ml: ManagedLedger) -> bool:
        done = real_close_if_idle(ml)
        if done:
            closed_idle.append(ml.name)
        return done

    monkeypatch.setattr(type(ledgers[0]), "close_if_idle", close_if_idle)
    f.close()
    assert sorted(closed_idle) == sorted(names)  # (big: its sidecar is due)
    assert all(ml._state == "closed" for ml in ledgers)
    assert all(seg.fd is None for ml in ledgers for seg in ml._segments)
    assert len(written) == 1 and len(_files(root, ".idx")) == 1  # the big one's only
    assert (root / MARK).exists()

    syncs = _record_syncs(monkeypatch)
    f2 = ManagedLedgerFactory(StorageConfig(data_dir=root, fsync="group"))
    try:
        assert not (root / MARK).exists()  # taken at start: a crash from now on leaves none
        for n in names:
            assert [d for _, d in f2.open(n).read_entries(Position(-1, -1), 10)] == [
                b"entry of " + n.encode()]
        assert len(f2.open("big").read_entries(Position(-1, -1), 200)) == 100
        assert not [p for p in syncs if p.endswith(".seg")]
        assert len(_files(root, ".idx")) == 1  # a small segment gets none on open either
    finally:
        f2.close()


def test_after_a_crash_the_scan_syncs(tmp_path, monkeypatch):
    root = tmp_path / "data"
    f = ManagedLedgerFactory(StorageConfig(data_dir=root, fsync="group"))
    try:
        _fill(f, ["a", "b"])
        crashed = tmp_path / "crashed"
        shutil.copytree(root, crashed)  # what a kill leaves: no mark, no sidecar
    finally:
        f.close()
    assert not (crashed / MARK).exists()
    syncs = _record_syncs(monkeypatch)
    f2 = ManagedLedgerFactory(StorageConfig(data_dir=crashed, fsync="group"))
    try:
        for n in ("a", "b"):
            assert len(f2.open(n).read_entries(Position(-1, -1), 10)) == 1
        assert len([p for p in syncs if p.endswith(".seg")]) == 2
    finally:
        f2.close()


def test_a_segment_written_after_the_start_is_not_taken_for_synced(tmp_path, monkeypatch):
    """The mark covers what the last run wrote, not what this one writes: a ledger
    written in this run and reopened without its sidecar is scanned and synced."""
    root = tmp_path / "data"
    f = ManagedLedgerFactory(StorageConfig(data_dir=root, fsync="group"))
    _fill(f, ["old"])
    f.close()
    f2 = ManagedLedgerFactory(StorageConfig(data_dir=root, fsync="group"))
    try:
        _fill(f2, ["new"])
        ml = f2.open("new")
        ml.close()
        for idx in _files(root, ".idx"):
            idx.unlink()
        syncs = _record_syncs(monkeypatch)
        assert len(f2.open("new").read_entries(Position(-1, -1), 10)) == 1
        assert len([p for p in syncs if p.endswith(".seg")]) == 1
    finally:
        f2.close()


def test_failed_appends_bytes_keep_a_small_segment_sidecar(tmp_path):
    """Bytes a failed append left past the last entry (its truncation failed too): the
    clean stop writes the small segment's sidecar anyway, whose end keeps them out."""
    root = tmp_path / "data"
    f = ManagedLedgerFactory(StorageConfig(data_dir=root, fsync="group"))
    _fill(f, ["t"])
    seg = f.open("t")._segments[0]
    phantom = record.encode_header(b"phantom") + b"phantom"
    with open(seg.path, "ab") as fh:
        fh.write(phantom)
    seg.written = seg.end + len(phantom)  # as a failed append whose cut failed leaves it
    f.close()
    assert os.path.exists(seg.idx_path)
    f2 = ManagedLedgerFactory(StorageConfig(data_dir=root, fsync="group"))
    try:
        assert [d for _, d in f2.open("t").read_entries(Position(-1, -1), 10)] == [b"entry of t"]
    finally:
        f2.close()
