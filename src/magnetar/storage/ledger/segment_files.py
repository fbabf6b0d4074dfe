"""The disk work on a ledger's segment files, run on a ``readers`` thread (or on the
calling thread of a blocking close): making a new segment's file, sealing, modification
times, removal of trimmed segments; and `scan_segments`, the recovery scan that opens a
ledger directory's segments. Functions of files only: no ledger state is touched.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..segment import Segment
from ..takeover import segment_files


def seal_files(segments: list[Segment], fds: list[int]) -> None:
    """The disk work of sealing a closed ledger's segments (a ``readers`` thread, for
    `ManagedLedger.close_async`; nothing writes them any more): give back the space
    reserved past the last record, write the index sidecars still missing, close the
    descriptors `_detach_files` took."""
    for seg in segments:
        seg.cut_reserve()
        if seg.confirmed == seg.count and not seg.dirty and not seg.index_written:
            seg.write_index()
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def make_file(seg: Segment, block: Future[Any] | None) -> int:
    """A new segment's file (a ``readers`` thread): once ``block``, the storage.db write
    of its id block, is done (failed: no file)."""
    if block is not None:
        block.result()
    return seg.create_file()


def segment_mtimes(paths: list[str]) -> dict[str, float | None]:
    """The modification time of each file (None: it cannot be stat'ed). Touches only the
    files: safe on a ``readers`` thread, where `ManagedLedger.trim_async` runs it."""
    out: dict[str, float | None] = {}
    for path in paths:
        try:
            out[path] = os.stat(path).st_mtime
        except OSError:
            out[path] = None
    return out


def sealing_jobs(segments: list[Segment]) -> list[Future[None]]:
    """The sealing jobs (`ManagedLedger._seal_later`) of ``segments`` still under way."""
    return [s.sealing for s in segments if s.sealing is not None and not s.sealing.done()]


def remove_segment_files(removals: list[tuple[str, str, int | None]],
                         guard: Callable[[], None] | None = None) -> None:
    """Close the descriptors and unlink the files (segment, index sidecar) of segments a
    trim dropped (`ManagedLedger._drop_segment`; a ``readers`` thread for `trim_async`).
    A file already gone is no error; the first other error is raised once every removal
    was tried. ``guard`` (a fenced ledger's check) is asked first: if it raises, the
    descriptors are closed and nothing is unlinked (the files are a new owner's now)."""
    first: OSError | None = None
    for _path, _idx, fd in removals:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    if guard is not None and removals:
        guard()
    for path, idx_path, _fd in removals:
        for p in (idx_path, path):  # the sidecar first: see `Segment.missing`
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
            except OSError as exc:
                first = first or exc
    if first is not None:
        raise first


def scan_segments(directory: str, synced_before: int | None = None) -> list[Segment]:
    """Open (and, after a crash, recover) the segments a ledger directory holds, in id order
    (a ledger that is not fenced; a fenced one is opened by `takeover.take_over`); a
    segment whose file is missing but whose sidecar index is there as `Segment.missing`.
    ``synced_before``: see `Segment.open_existing` (the last clean stop's time).
    Touches only those files, never state shared with other ledgers: safe in a worker
    thread, which is where `ManagedLedgerFactory.open_async` runs it."""
    segments = []
    for lid, (epoch, _name) in sorted(segment_files(directory).items()):
        seg = Segment.open_existing(directory, lid, epoch, synced_before=synced_before)
        if seg is not None:
            segments.append(seg)
    return segments
