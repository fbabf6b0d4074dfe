"""The POSIX behaviour brokers sharing a data directory rely on, checked across two mounts
of one volume (``magnetar check-shared-storage DIR1 DIR2``): what one host writes,
fsyncs, renames, locks or deletes through one mount must show through the other at once
(docs/cluster.md, "Across hosts"). Each check works in its own scratch directory under
DIR1 (seen as the same name under DIR2) and returns a verdict with what it saw; the
scratch directory is removed after.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .clean_stop import fsync_dir

#: replacements and renames each repeated check makes (issue 30: one inode seen on the other
#: mount over 20 replacements, with GlusterFS's default caches)
REPEATS = 20


@dataclass(frozen=True)
class Verdict:
    name: str
    ok: bool
    detail: str


class CheckFailed(Exception):
    """What a check saw that it should not have."""


def _write(path: str, data: bytes, *, sync: bool = True) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _replace(directory: str, name: str, data: bytes) -> None:
    """Temporary file, fsync, rename over ``name``, directory fsync: how the broker writes
    its fence and state files."""
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:8]}.tmp")
    _write(tmp, data)
    os.rename(tmp, os.path.join(directory, name))
    fsync_dir(directory)


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


# ---------------------------------------------------------------------- the checks
# each takes (a, b): the same scratch directory through the first and the second mount


def fsynced_file_seen(a: str, b: str) -> str:
    data = uuid.uuid4().bytes * 64
    _write(os.path.join(a, "f"), data)
    got = _read(os.path.join(b, "f"))
    _expect(got == data, f"read {len(got)} bytes of {len(data)} written")
    return "a file written and fsynced through one mount reads whole through the other"


def stat_equal(a: str, b: str) -> str:
    _write(os.path.join(a, "s"), b"x" * 1000)
    sa, sb = os.stat(os.path.join(a, "s")), os.stat(os.path.join(b, "s"))
    for what in ("st_ino", "st_size", "st_mtime_ns"):
        _expect(getattr(sa, what) == getattr(sb, what),
                f"{what}: {getattr(sa, what)} through one mount, {getattr(sb, what)} through the other")
    return "inode, size and mtime (ns) the same through both mounts"


def new_inode_on_replace(a: str, b: str) -> str:
    _replace(a, "fence", b"0")
    seen = {os.stat(os.path.join(b, "fence")).st_ino}
    for i in range(1, REPEATS + 1):
        before = os.stat(os.path.join(b, "fence")).st_ino
        _replace(a, "fence", str(i).encode())
        after = os.stat(os.path.join(b, "fence")).st_ino
        _expect(after != before, f"replacement {i}: the other mount still shows inode {before}")
        seen.add(after)
    return f"{REPEATS} replacements, each a new inode through the other mount ({len(seen)} seen)"


def atomic_rename(a: str, b: str) -> str:
    for i in range(REPEATS):
        data = f"{i}:".encode() + b"r" * 4096
        _replace(a, "state.json", data)
        try:
            got = _read(os.path.join(b, "state.json"))
        except FileNotFoundError:
            raise CheckFailed(f"rename {i}: the file was missing through the other mount") from None
        _expect(got == data, f"rename {i}: read {got[:12]!r}... ({len(got)} bytes), not the new file")
    return f"{REPEATS} renames over a file: the other mount read each new file whole, never none"


def directory_fsync(a: str, b: str) -> str:
    os.mkdir(os.path.join(a, "d"))
    _write(os.path.join(a, "d", "x"), b"1")
    fsync_dir(os.path.join(a, "d"))
    fsync_dir(a)
    _expect(os.listdir(os.path.join(b, "d")) == ["x"], "the new directory's file is not listed")
    return "fsync of a directory succeeds; its new entry is listed through the other mount"


def new_file_seen(a: str, b: str) -> str:
    target = os.path.join(b, "late")
    _expect(not os.path.exists(target), "a file exists before it was made")
    _write(os.path.join(a, "late"), b"here")
    _expect(os.path.exists(target), "a file made after a failed lookup through the other mount "
                                    "stays invisible there (negative lookups cached)")
    return "a file made after a failed lookup is seen at once (no negative caching)"


def listing_fresh(a: str, b: str) -> str:
    os.listdir(b)  # a listing the other mount may cache
    names = {f"n{i}" for i in range(5)}
    for name in names:
        _write(os.path.join(a, name), b"")
    fsync_dir(a)
    listed = set(os.listdir(b))
    _expect(names <= listed, f"not listed through the other mount: {sorted(names - listed)}")
    return "new files appear at once in the other mount's directory listing"


def unlink_seen(a: str, b: str) -> str:
    _write(os.path.join(a, "gone"), b"1")
    os.stat(os.path.join(b, "gone"))
    os.unlink(os.path.join(a, "gone"))
    fsync_dir(a)
    _expect(not os.path.exists(os.path.join(b, "gone")), "a deleted file is still there through "
                                                          "the other mount")
    return "a deleted file is gone at once through the other mount"


def flock_excludes(a: str, b: str) -> str:
    _write(os.path.join(a, "fence.lock"), b"")
    fa = os.open(os.path.join(a, "fence.lock"), os.O_RDWR)
    fb = os.open(os.path.join(b, "fence.lock"), os.O_RDWR)
    try:
        fcntl.flock(fa, fcntl.LOCK_EX)
        try:
            fcntl.flock(fb, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            _expect(exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES),
                    f"flock through the other mount failed with {errno.errorcode.get(exc.errno or 0)}")
        else:
            raise CheckFailed("both mounts held the exclusive flock at once")
        fcntl.flock(fa, fcntl.LOCK_UN)
        fcntl.flock(fb, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free now: taken at once
        fcntl.flock(fb, fcntl.LOCK_UN)
    finally:
        os.close(fa)
        os.close(fb)
    return "an exclusive flock through one mount keeps the other out, and is free after unlock"


def exclusive_create(a: str, b: str) -> str:
    fd = os.open(os.path.join(a, "excl"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.close(fd)
    try:
        fd = os.open(os.path.join(b, "excl"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return "O_EXCL create through the other mount of a file just made fails (EEXIST)"
    os.close(fd)
    raise CheckFailed("O_EXCL created the same file through both mounts")


def append_read_back(a: str, b: str) -> str:
    chunks = [os.urandom(1000) for _ in range(10)]
    path_a, path_b = os.path.join(a, "seg"), os.path.join(b, "seg")
    fd = os.open(path_a, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for i, chunk in enumerate(chunks):
            os.write(fd, chunk)
            os.fdatasync(fd)
            got = _read(path_b)
            _expect(got == b"".join(chunks[:i + 1]),
                    f"after append {i + 1}: read {len(got)} bytes of {1000 * (i + 1)}")
    finally:
        os.close(fd)
    more = os.urandom(1000)
    fd = os.open(path_b, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, more)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    _expect(_read(path_a) == b"".join(chunks) + more, "an append through the second mount is not "
                                                       "read back through the first")
    return "10 appends with fdatasync read back at once through the other mount, and back"


def overwrite_seen(a: str, b: str) -> str:
    path_a, path_b = os.path.join(a, "o"), os.path.join(b, "o")
    _write(path_a, b"a" * 8192)
    _expect(_read(path_b) == b"a" * 8192, "first contents not read")  # now in its cache
    fd = os.open(path_a, os.O_WRONLY)
    try:
        os.pwrite(fd, b"b" * 100, 4000)
        os.fsync(fd)
    finally:
        os.close(fd)
    got = _read(path_b)
    _expect(got[4000:4100] == b"b" * 100, "an overwrite in place is not seen through the other "
                                          "mount (stale data cache)")
    return "an fsynced overwrite inside a file read before is seen (no stale data cache)"


CHECKS: list[tuple[str, Callable[[str, str], str]]] = [
    ("fsynced file seen at once", fsynced_file_seen),
    ("stat equal", stat_equal),
    ("new inode on replace", new_inode_on_replace),
    ("atomic rename", atomic_rename),
    ("directory fsync", directory_fsync),
    ("new file seen at once", new_file_seen),
    ("listing fresh", listing_fresh),
    ("unlink seen at once", unlink_seen),
    ("flock across mounts", flock_excludes),
    ("exclusive create", exclusive_create),
    ("append read-back", append_read_back),
    ("overwrite seen at once", overwrite_seen),
]


@contextmanager
def scratch(dir1: str, dir2: str) -> Iterator[tuple[str, str]]:
    """A new directory under ``dir1`` and its name under ``dir2``, removed after."""
    name = f".magnetar-check-{uuid.uuid4().hex[:12]}"
    a, b = os.path.join(dir1, name), os.path.join(dir2, name)
    os.mkdir(a)
    fsync_dir(dir1)
    try:
        yield a, b
    finally:
        shutil.rmtree(a, ignore_errors=True)


def same_volume(dir1: str, dir2: str) -> str | None:
    """None when ``dir1`` and ``dir2`` show one volume (a marker made in one is seen in the
    other), else why not."""
    for d in (dir1, dir2):
        if not os.path.isdir(d):
            return f"{d} is not a directory"
    with scratch(dir1, dir2) as (_, b):
        if not os.path.isdir(b):
            return (f"a directory made in {dir1} does not show in {dir2}: they are not two "
                    "mounts of one volume (or the second does not see new entries at all)")
    return None


def run_checks(dir1: str, dir2: str) -> list[Verdict]:
    """Every check, each in a scratch directory of its own; an unexpected OSError is that
    check's failure."""
    verdicts = []
    for name, check in CHECKS:
        try:
            with scratch(dir1, dir2) as (a, b):
                detail = check(a, b)
            verdicts.append(Verdict(name, True, detail))
        except CheckFailed as exc:
            verdicts.append(Verdict(name, False, str(exc)))
        except OSError as exc:
            verdicts.append(Verdict(name, False, f"{type(exc).__name__}: {exc}"))
    return verdicts
