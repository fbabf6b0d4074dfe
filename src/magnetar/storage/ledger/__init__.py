"""`ManagedLedger`: one topic's append-only log of opaque entries over segment files.

The ledger is one class made of parts with one job each (mixins: no delegation layer
on the append and read paths, one object and one attribute lookup as before):

- `state.py`: `LedgerState`, the fields every part shares, the segment list and positions.
- `append.py`: `LedgerAppends`, appends, write batches and group commit, segment roll-over.
- `reads.py`: `LedgerReads`, reads from the read cache and from disk, positions by predicate.
- `retention.py`: `LedgerRetention`, trimming consumed segments past retention.
- `lifecycle.py`: `LedgerLifecycle`, terminate, flush, close (blocking and async), delete.
- `segment_files.py`: the disk work on segment files that runs on ``readers`` threads,
  and `scan_segments`, the recovery scan of a ledger directory.
- `managed_ledger.py`: `ManagedLedger`, the parts put together, and its cursors.

Theory of operation. The ledger is a list of segments (one per ledger id, ascending); the
last one may be *active* (appendable). `append` runs on the event loop thread: it assigns
the position at once, indexes the record, puts the payload in the shared read cache and
queues header + payload in a write buffer. Once per loop iteration (or when the buffer is
big) the buffer goes to the file in one ``pwritev``. Then, per fsync policy, the waiters
are told at once (``never``) or the batch goes to the factory's flusher (``group``), which
tells them after its fdatasync; ``always`` writes and syncs inside `append`. A waiter is
a future (`append`) or a callback (`append_then`: called in order as the batch completes,
then the owner's `after_appends` once per batch, so a broker answers a batch's sends in
one write, in the same loop turn as the sync).

Readers only ever see *confirmed* entries (durable per policy), so an entry whose append
fails is never visible. On a write or fsync error the failed entries, and every unconfirmed entry
behind them, are removed from the index (and from the file, best effort); their futures
fail with `StorageError` in append order; the segment is sealed and the next append
starts a new segment: the ledger stays readable and usable. A segment rolls over by size,
entry count or age; a reopened ledger always starts a new segment for new appends, like a
new Pulsar ledger after a restart.

Roll-over off the loop: the next segment exists in memory at once (positions, index,
cache), its file is made on a ``readers`` thread (`_roll`, `_file_made`) and the write
batches meant for it are held in order (`_unwritten`) until then; the old segment's
sealing (reserve cut, index sidecar) runs on a ``readers`` thread once every entry of it
is confirmed (`_seal_later`). Close, delete and trim wait for these file jobs.

Closing: `close` flushes (fdatasyncs every dirty segment) and seals the segments (cuts the
reserved space, writes the index sidecars) on the calling thread; `close_async`, what the
broker uses, refuses appends at once, lets the flusher commit what is pending and seals on
a ``readers`` thread, while an open of the same name waits for it (see the factory).
"""

from .managed_ledger import ManagedLedger
from .reads import PositionsRead
from .segment_files import scan_segments
from .state import AppendCallback, Waiter

__all__ = ["AppendCallback", "ManagedLedger", "PositionsRead", "Waiter", "scan_segments"]
