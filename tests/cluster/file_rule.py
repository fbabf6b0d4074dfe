"""The file rule of a fenced broker, as a reusable check (issue 29, item 4): once a new
owner has fenced a ledger, the broker it fenced out creates, truncates, rewrites,
replaces or removes no file in the shared data directory.

Usage: take `snapshot(data_dir)` once the new owner has fenced (and is idle), let the
fenced broker act (resume it, heal its link, ...), take another and
`assert_untouched(before, after, root=data_dir)`. Each file is compared by inode, size,
modification time (ns) and a digest of its content; directories by presence. With
``root``, the changes a write already under way when the fence moved may still make,
and that no reader sees (`unread`: a segment named by the stale epoch, bytes past a
recorded end), are allowed and returned; anything else fails. ``ignore`` leaves out
paths something else may change meanwhile (the new owner's own files, a lock file).
No inotify: two walks of the tree, so it works on any file system, FUSE included.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.storage.errors import StorageError
from magnetar.storage.segment import IDX_HEADER, parse_segment_name
from magnetar.storage.takeover import latest_record

#: Files larger than this are compared without their digest (size, mtime, inode only).
DIGEST_UP_TO = 64 * 1024 * 1024
#: Segment files up to this size are kept whole in a snapshot, so that a later change
#: can be told to lie past the end a takeover recorded (`unread`).
KEEP_SEGMENTS_UP_TO = 16 * 1024 * 1024


@dataclass(frozen=True)
class FileState:
    """One entry of a snapshot: a file (``kind`` "file") or a directory ("dir")."""

    kind: str
    ino: int
    size: int
    mtime_ns: int
    digest: str
    #: A segment file's bytes (small ones only; not compared: ``digest`` is).
    data: bytes | None = field(default=None, compare=False, repr=False)


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
            data = None
            if name.endswith(".seg") and st.st_size <= KEEP_SEGMENTS_UP_TO:
                try:
                    data = Path(path).read_bytes()
                except OSError:
                    data = None
            out[os.path.normpath(os.path.join(rel_dir, name))] = FileState(
                "file", st.st_ino, st.st_size, st.st_mtime_ns, _digest(path, st.st_size), data)
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


def unread(root: str | Path) -> Callable[[str, FileState | None, FileState | None], bool]:
    """A judge of changes by what the design lets a write under way do (`takeover.py`),
    read from the takeover records now under ``root``: True for a change no reader sees,
    a segment file (or its sidecar) named with an epoch below its ledger's newest
    takeover record and not named in it (a stale writer's new segment, never read); a
    recorded segment (same file) whose bytes up to its recorded end are unchanged; a
    recorded segment's sidecar that names another end (readers then ignore it) or holds
    the same bytes as before."""
    records: dict[str, tuple[int, dict[int, int]] | None] = {}

    def judge(rel: str, old: FileState | None, new: FileState | None) -> bool:
        parent, name = os.path.split(rel)
        seg_name = name[:-4] + ".seg" if name.endswith(".idx") else name
        parsed = parse_segment_name(seg_name)
        if parsed is None:
            return False
        if parent not in records:
            try:
                records[parent] = latest_record(os.path.join(str(root), parent), 1 << 62)
            except (OSError, StorageError):
                records[parent] = None
        record = records[parent]
        if record is None:
            return False
        epoch, ends = record
        lid, seg_epoch = parsed
        if lid not in ends:
            return seg_epoch is not None and seg_epoch < epoch
        end = ends[lid]
        path = os.path.join(str(root), rel)
        if name != seg_name:  # a sidecar: unread unless it names the recorded end
            if old is not None and new is not None and old.digest not in ("", "?") \
                    and old.digest == new.digest:
                # the same bytes again (a sidecar write under way at the pause, renamed
                # into place after it): readers read the same index
                return True
            try:
                with open(path, "rb") as f:
                    head = f.read(IDX_HEADER.size)
            except OSError:
                return new is None
            return len(head) == IDX_HEADER.size and IDX_HEADER.unpack(head)[2] != end
        if old is None or new is None or old.ino != new.ino or old.data is None:
            return False
        try:
            with open(path, "rb") as f:
                now = f.read(end)
        except OSError:
            return False
        return len(old.data) >= end and now == old.data[:end]

    return judge


def assert_untouched(
    before: dict[str, FileState],
    after: dict[str, FileState],
    ignore: Callable[[str], bool] | None = None,
    who: str = "the fenced broker",
    root: str | Path | None = None,
) -> list[str]:
    """Fail, listing every change, if anything under the snapshots' root changed. With
    ``root`` (the snapshots' root), a change `unread` finds no reader sees (what a write
    under way when the fence moved may still do) is allowed, and returned."""
    judge = unread(root) if root is not None else None
    allowed = []
    found = []
    for line, rel in zip(changes(before, after, ignore), _changed(before, after, ignore),
                         strict=True):
        if judge is not None and judge(rel, before.get(rel), after.get(rel)):
            allowed.append(line)
        else:
            found.append(line)
    assert not found, f"{who} changed files after the new owner's fence:\n  " + \
        "\n  ".join(found)
    return allowed


def _changed(before: dict[str, FileState], after: dict[str, FileState],
             ignore: Callable[[str], bool] | None) -> list[str]:
    """The paths `changes` reports, in its order."""
    return [rel for rel in sorted(set(before) | set(after))
            if not (ignore is not None and ignore(rel)) and before.get(rel) != after.get(rel)]
