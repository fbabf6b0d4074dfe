"""The clean-stop mark: a file saying that every segment in the data directory was synced.

A segment opened without its index sidecar is scanned, and the scan fdatasyncs the file
before its entries are exposed (after a crash its last writes may still be only in the
page cache). A clean stop syncs every segment it closes, so it writes no sidecar for small
segments (`clean_stop.INDEX_MIN_BYTES`) and, once everything is closed, leaves this mark
(made durable). The next start takes the mark away (durably, before anything is written)
and remembers its time: a segment file last changed at or before it is known synced, and
its scan syncs nothing. After a crash there is no mark, and every scan syncs as before.
"""

from __future__ import annotations

import contextlib
import logging
import os

log = logging.getLogger(__name__)

MARK = "clean-stop"

#: At a clean stop a segment no bigger than this gets no index sidecar (its scan when the
#: ledger opens again reads as little as the sidecar would), unless bytes of failed
#: appends lie past its last entry (the sidecar's end keeps them out): with 100,000 idle
#: topics one sidecar each (a file made and renamed) was most of the stop.
INDEX_MIN_BYTES = 64 * 1024


def fsync_dir(path: str) -> None:
    """Make a directory's entries durable (also `segment.fsync_dir`, `shared_checks`)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def take_mark(root: str) -> int | None:
    """At start: the time (ns) of the mark the last clean stop left in ``root``, removed
    durably; None when there is none (a crash, or the first start)."""
    path = os.path.join(root, MARK)
    try:
        when = os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None
    os.unlink(path)
    fsync_dir(root)
    return when


def leave_mark(root: str) -> None:
    """At the end of a clean stop (every segment closed and synced): leave the mark."""
    path = os.path.join(root, MARK)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(root)
    except OSError as exc:  # only a saving lost: the next start scans and syncs
        log.warning("cannot leave the clean-stop mark in %s: %s", root, exc)
        with contextlib.suppress(OSError):
            os.unlink(path)
