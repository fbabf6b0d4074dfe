"""Cheap, read-only looks at a ledger that is not open: its segment files, from the directory.

The broker's sweep over unloaded topics uses this to skip, without opening anything, the
ledgers on which retention cannot delete anything yet (one segment, or the oldest one still
inside the retention window). Nothing here opens, locks or changes a ledger, so it may run
in a worker thread while the event loop opens the same ledger; a file that disappears in
the meantime (trimmed, deleted) is simply left out.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .factory import ManagedLedgerFactory
from .ledger_files import LEDGER_PREFIX
from .segment import parse_segment_name


class SegmentFile(NamedTuple):
    """One segment file on disk: its ledger id, modification time (epoch s) and size."""

    ledger_id: int
    mtime: float
    size: int


def segment_files(factory: ManagedLedgerFactory, name: str) -> list[SegmentFile] | None:
    """The segment files of ledger ``name``, oldest first; None if there is no such ledger.

    Read from the directory (one ``scandir``), not from the index, so a segment whose
    entries are all gone may still be listed until the ledger is next opened."""
    meta = factory._store.get(LEDGER_PREFIX + name)
    if meta is None:
        return None
    directory = os.path.join(factory._root, meta["dir"])
    out: list[SegmentFile] = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    for entry in entries:
        parsed = parse_segment_name(entry.name)
        if parsed is None:
            continue
        try:
            st = entry.stat()
        except FileNotFoundError:
            continue
        out.append(SegmentFile(parsed[0], st.st_mtime, st.st_size))
    out.sort()
    return out
