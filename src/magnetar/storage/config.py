"""`StorageConfig`: every tunable of the storage layer in one dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FSYNC_POLICIES = ("always", "group", "never")
DIR_FSYNC_POLICIES = ("auto", "always")


@dataclass
class StorageConfig:
    """Settings of a `ManagedLedgerFactory`.

    fsync:
      - ``"group"`` (default): appends are written from the event loop thread once per loop
        iteration; one background thread per factory fdatasyncs every dirty segment and then
        resolves, in order, every append that was written before that fdatasync started.
        While that thread is idle, a small batch (at most 8 entries and 1 MiB; at most one
        per loop iteration) is synced on the loop thread instead (``inline_sync_when_idle``):
        same guarantee, no thread hand-off. A sync slower than ``inline_sync_slow_s`` (on
        the loop or the thread) turns that off for ``inline_sync_backoff_s``, so a stalled
        disk blocks the event loop once per episode, not once per send.
      - ``"always"``: every append is written and fdatasynced before `append` returns
        (simple and slow: it blocks the event loop for one fdatasync per entry).
      - ``"never"``: the future resolves as soon as the entry is written to the OS.
    """

    data_dir: str | Path
    fsync: str = "group"
    #: A segment (one ledger id) is rolled over once it holds this many bytes ...
    segment_max_bytes: int = 128 * 1024 * 1024
    #: ... or this many entries ...
    segment_max_entries: int = 50_000
    #: ... or is this old (seconds since its first append).
    segment_max_age_s: float = 4 * 3600.0
    #: The data directory is shared by the brokers of a cluster (one host's directory or a
    #: shared file system): ledger ids are then reserved in storage.db across processes,
    #: and a ledger opened after another broker wrote to it gets ids above all of its own.
    shared: bool = False
    #: Keep each ledger's stored state (its row and its cursors) as files in its own
    #: directory rather than in the shared ``storage.db`` (`LedgerFilesStore`): what
    #: brokers sharing storage across hosts need, since SQLite is not dependable when
    #: hosts write one file at once. Ledger ids must then come from an id source
    #: (`ManagedLedgerFactory.use_ledger_id_source`).
    state_files: bool = False
    #: Read cache shared by every ledger of the factory (bytes of entry payload).
    read_cache_bytes: int = 64 * 1024 * 1024
    #: Entries older than this leave the read cache (seconds; 0: no age limit).
    read_cache_max_age_s: float = 1.0
    #: Bound on the open segment file descriptors of the factory (LRU; idle ones are closed).
    max_open_files: int = 512
    #: Dirty cursors are persisted at most this long after a change (and on close).
    cursor_persist_interval_s: float = 1.0
    #: Individually-deleted ranges and batch ack sets persisted per cursor, at most.
    cursor_max_persisted_ranges: int = 10_000
    #: A write buffer is handed to the OS before the end of the loop iteration past this size.
    write_buffer_bytes: int = 4 * 1024 * 1024
    #: ``group`` only: sync a small lone batch on the loop thread while the flusher idles.
    inline_sync_when_idle: bool = True
    #: ... unless a sync took longer than this (seconds) in the last ... (a healthy disk
    #: syncs a small write in ~0.2 ms; a busy shared VM's tail reaches 10-20 ms; a stalled
    #: disk takes hundreds of ms: the threshold sits between the last two)
    inline_sync_slow_s: float = 0.020
    #: ... this many seconds (then the next lone batch is synced inline again: a probe).
    inline_sync_backoff_s: float = 10.0
    #: A new segment's name in its ledger's directory is made durable by an fsync of the
    #: directory before the segment's first sync (``"always"``), or, where the file system
    #: makes it durable with the segment's own sync, by that sync alone (``"auto"``: ext4
    #: and XFS, `mounts.file_sync_covers_new_entries`; elsewhere as ``"always"``): a device
    #: flush fewer per new topic and per segment roll-over.
    dir_fsync: str = "auto"

    def __post_init__(self) -> None:
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {FSYNC_POLICIES}, not {self.fsync!r}")
        if self.dir_fsync not in DIR_FSYNC_POLICIES:
            raise ValueError(
                f"dir_fsync must be one of {DIR_FSYNC_POLICIES}, not {self.dir_fsync!r}")
        if self.max_open_files < 1:
            raise ValueError("max_open_files must be >= 1")
        self.data_dir = Path(self.data_dir)
