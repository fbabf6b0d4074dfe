"""`take_over`: how a broker that fenced a ledger (`fence.py`) opens its segments so that
nothing the previous writer still does can change what any reader reads.

Theory of operation
-------------------
The fence stops a stale writer at its next check; a write it began before the fence
moved (a check, then a pause, then the write) still lands. So every reader's view is
made independent of what a writer whose epoch is not the latest does to the files:

- **Files named by epoch.** A fenced writer names each segment it makes
  ``<id>.e<epoch>.seg`` (`segment.segment_name`), and asks its fence before making it.
- **The new owner records where each segment ends.** After fencing, it opens every
  segment that counts (below), reading it without changing it (no truncation, no
  rename, no removal: the previous writer may hold it), and writes
  ``takeover.<epoch>.json``: the end, in bytes, of each segment that holds entries. Only
  then does it serve, and its own segments carry its own epoch.
- **Which segments count**, for an owner with the latest record ``takeover.<P>.json``:
  the segments that record names, read up to the end it gives and never past it; and the
  segments named with epoch ``P`` or above not in it (made by owner ``P`` after its
  takeover, or by an owner that fenced after ``P`` and died before writing its record,
  which makes no segment before that). A segment named with an epoch below ``P`` that
  the record does not name was made by a fenced writer after ``P`` took over: nobody
  reads it (the new owner removes it). Without any record (a ledger fenced for the first
  time) every segment counts, scanned to its last whole record.
- **Nothing is cut by a writer.** A writer never truncates or rewrites a segment in
  shared storage: a failed append leaves its bytes (past the segment's index, which a
  sidecar or the next record bounds) and the writer goes on in a new segment;
  reserved space is given back only past what was written.

Why this holds for a write under way: the previous writer can, after the new owner's
fence, only (a) append to one of its own segments past the end the new owner recorded
(never read), (b) make a segment named with its older epoch (never read, removed at the
next takeover), (c) write a sidecar (`segment.Segment.write_index`), which a reader uses
only if it names the recorded end. Every byte up to a recorded end was there when the new
owner read it and nobody writes below it again, so every reader reads what the new owner
read. Acknowledged entries are there by the fence's own argument (`fence.py`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable

from .errors import StorageError
from .key_files import read_row, write_row
from .segment import Segment, parse_index_name, parse_segment_name

log = logging.getLogger(__name__)

RECORD_PREFIX = "takeover."
RECORD_SUFFIX = ".json"


def record_name(epoch: int) -> str:
    """The file of the takeover record of ``epoch``."""
    return f"{RECORD_PREFIX}{epoch}{RECORD_SUFFIX}"


def _record_epoch(name: str) -> int | None:
    if not (name.startswith(RECORD_PREFIX) and name.endswith(RECORD_SUFFIX)):
        return None
    mid = name[len(RECORD_PREFIX):-len(RECORD_SUFFIX)]
    return int(mid) if mid.isdigit() else None


def latest_record(directory: str, at_most: int) -> tuple[int, dict[int, int]] | None:
    """(epoch, {segment id: end}) of the newest takeover record of epoch ``at_most`` or
    below in ``directory``; None if there is none. A record that cannot be read is an
    error (`StorageError`): guessing which segments count would be worse."""
    epochs = sorted((e for e in map(_record_epoch, os.listdir(directory))
                     if e is not None and e <= at_most), reverse=True)
    if not epochs:
        return None
    path = os.path.join(directory, record_name(epochs[0]))
    got = read_row(path)
    if got is None:
        raise StorageError(f"takeover record {path} cannot be read")
    ends = got[1].get("ends") or {}
    return epochs[0], {int(k): int(v) for k, v in ends.items()}


def segment_files(directory: str) -> dict[int, tuple[int | None, str]]:
    """Each segment file in ``directory``: {id: (epoch or None, file name)} (if an id has
    files of several epochs, the newest one's); a sidecar index whose segment file is not
    there stands for it, under the file's name (`Segment.open_existing` finds it missing)."""
    out: dict[int, tuple[int | None, str]] = {}
    orphans: dict[int, tuple[int | None, str]] = {}
    for name in os.listdir(directory):
        parsed = parse_segment_name(name)
        found = out
        if parsed is None:
            parsed = parse_index_name(name)
            found = orphans
            if parsed is None:
                continue
            name = name[:-4] + ".seg"
        lid, epoch = parsed
        have = found.get(lid)
        if have is None or _rank(epoch) > _rank(have[0]):
            found[lid] = (epoch, name)
    for lid, orphan in orphans.items():
        out.setdefault(lid, orphan)
    return out


def _rank(epoch: int | None) -> int:
    return -1 if epoch is None else epoch


def take_over(directory: str, epoch: int,
              guard: Callable[[], None] | None = None) -> list[Segment]:
    """Open the segments of a ledger this broker fenced with ``epoch`` (see the module
    docstring), write its takeover record, and return them in id order. ``guard`` (the
    fence's check) is asked again before anything is written: a broker fenced out while
    it was opening writes no record. Blocking: a ``readers`` thread."""
    files = segment_files(directory)
    prev = latest_record(directory, epoch)
    segments: list[Segment] = []
    stale: list[str] = []
    for lid in sorted(files):
        seg_epoch, name = files[lid]
        limit: int | None = None
        if prev is not None:
            prev_epoch, ends = prev
            if lid in ends:
                limit = ends[lid]
            elif _rank(seg_epoch) < prev_epoch:
                stale.append(name)  # made by a fenced writer after that takeover
                continue
        seg = Segment.open_existing(directory, lid, seg_epoch, shared=True, limit=limit)
        if seg is not None:
            segments.append(seg)
    if guard is not None:
        guard()
    ends_now = {str(seg.ledger_id): seg.end for seg in segments}
    write_row(os.path.join(directory, record_name(epoch)), record_name(epoch),
              {"epoch": epoch, "ends": ends_now,
               "files": {str(s.ledger_id): os.path.basename(s.path) for s in segments}},
              durable=True)
    for name in os.listdir(directory):  # the records this one replaces
        old = _record_epoch(name)
        if old is not None and old < epoch:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))
    if stale:
        log.info("%s: removing %d segment file(s) a fenced writer made after the takeover "
                 "of epoch %d: %s", directory, len(stale), prev[0] if prev else -1, stale)
        for name in stale:
            for path in (os.path.join(directory, name[:-4] + ".idx"),
                         os.path.join(directory, name)):
                with contextlib.suppress(OSError):
                    os.unlink(path)
    return segments
