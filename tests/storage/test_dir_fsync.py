"""A new segment's name in its ledger's directory is made durable by the segment's own
first sync where the file system does that (``dir_fsync="auto"`` on ext4 or XFS), and by an
fsync of the directory before that sync otherwise (``"always"``, or a file system not known
to): recorded by wrapping the directory fsync and fdatasync the storage calls."""

from __future__ import annotations

import os

import pytest

from magnetar.storage import factory as factory_module
from magnetar.storage import segment as segment_module

from .storage_testlib import run


@pytest.mark.parametrize(("policy", "covered", "dir_synced"), [
    ("auto", True, False),  # ext4 or XFS: the segment's sync alone
    ("auto", False, True),  # any other file system: the directory first
    ("always", True, True),  # asked for everywhere
])
def test_a_new_segments_directory_is_synced_only_where_its_own_sync_does_not_cover_it(
        make_factory, monkeypatch, policy: str, covered: bool, dir_synced: bool) -> None:
    monkeypatch.setattr(factory_module, "file_sync_covers_new_entries", lambda path: covered)
    order: list[tuple[str, object]] = []
    real_fsync_dir, real_fdatasync = segment_module.fsync_dir, os.fdatasync

    def fsync_dir(path: str) -> None:
        order.append(("dir", path))
        real_fsync_dir(path)

    def fdatasync(fd: int) -> None:
        order.append(("data", fd))
        real_fdatasync(fd)

    monkeypatch.setattr(segment_module, "fsync_dir", fsync_dir)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    f = make_factory(fsync="group", dir_fsync=policy)
    assert f.file_sync_covers_entry is (policy == "auto" and covered)
    ml = f.open("topic")

    async def go() -> None:
        await ml.append(b"first")  # the new segment's first sync
        await ml.append(b"second")  # a later one: never its directory

    run(go())
    seg = ml._active
    assert seg is not None and seg.synced == seg.written
    dirs = [path for kind, path in order if kind == "dir"]
    assert (seg.directory in dirs) is dir_synced
    assert dirs.count(seg.directory) <= 1
    if dir_synced:  # before the segment's first fdatasync: both durable when it answers
        assert order.index(("dir", seg.directory)) < order.index(("data", seg.fd))
    # fresh no more, either way; its first sync went to the `fresh` pool all the same (a
    # new file's first sync writes its directory's blocks too: never on the loop)
    assert seg.dir_sync == [] and f._flusher.fresh_jobs >= 1
    assert ("data", seg.fd) in order
