"""The file rule of a fenced broker, as a reusable check (issue 29, item 4): once a new
owner has fenced a ledger, the broker it fenced out creates, truncates, rewrites,
replaces or removes no file in the shared data directory.

Usage: take `snapshot(data_dir)` once the new owner has fenced (and is idle), let the
fenced broker act (resume it, heal its link, ...), take another and
`assert_untouched(before, after)`. Each file is compared by inode, size, modification
time (ns) and a digest of its content; directories by presence. ``ignore`` leaves out
paths something else may change meanwhile (the new owner's own files, a lock file).
No inotify: two walks of the tree, so it works on any file system, FUSE included.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: Files larger than this are compared without their digest (size, mtime, inode only).
DIGEST_UP_TO = 64 * 1024 * 1024


@dataclass(frozen=True)
class FileState:
    """One entry of a snapshot: a file (``kind`` "file") or a directory ("dir")."""

    kind: str
    ino: int
    size: int
    mtime_ns: int
    digest: str


def _digest(path: str, size: int) -> str:
    if size > DIGEST_UP_TO:
        return ""
    h = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError:
        return "?"
    return h.hexdigest()


def snapshot(root: str | Path) -> dict[str, FileState]:
    """Every file and directory under ``root`` (paths relative to it)."""
    out: dict[str, FileState] = {}
    base = str(root)
    for dirpath, dirnames, filenames in os.walk(base):
        rel_dir = os.path.relpath(dirpath, base)
        for name in dirnames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            out[rel] = FileState("dir", 0, 0, 0, "")
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            out[os.path.normpath(os.path.join(rel_dir, name))] = FileState(
                "file", st.st_ino, st.st_size, st.st_mtime_ns, _digest(path, st.st_size))
    return out


def changes(
    before: dict[str, FileState],
    after: dict[str, FileState],
    ignore: Callable[[str], bool] | None = None,
) -> list[str]:
    """What differs between two snapshots, one line per path (empty: nothing)."""
    out: list[str] = []
    for rel in sorted(set(before) | set(after)):
        if ignore is not None and ignore(rel):
            continue
        old, new = before.get(rel), after.get(rel)
        if old == new:
            continue
        if old is None:
            assert new is not None
            out.append(f"created {new.kind} {rel} ({new.size} bytes)")
        elif new is None:
            out.append(f"removed {old.kind} {rel}")
        elif old.kind != new.kind or old.ino != new.ino:
            out.append(f"replaced {rel} (new inode)")
        elif new.size < old.size:
            out.append(f"truncated {rel} ({old.size} -> {new.size} bytes)")
        elif new.size > old.size:
            out.append(f"grew {rel} ({old.size} -> {new.size} bytes)")
        elif new.digest != old.digest:
            out.append(f"rewrote {rel} ({new.size} bytes)")
        elif new.mtime_ns != old.mtime_ns:
            out.append(f"touched {rel} (same content, new mtime)")
    return out


def assert_untouched(
    before: dict[str, FileState],
    after: dict[str, FileState],
    ignore: Callable[[str], bool] | None = None,
    who: str = "the fenced broker",
) -> None:
    """Fail, listing every change, if anything under the snapshots' root changed."""
    found = changes(before, after, ignore)
    assert not found, f"{who} changed files after the new owner's fence:\n  " + \
        "\n  ".join(found)
