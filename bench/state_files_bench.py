"""Cursor persistence side by side in one run: the standalone ``storage.db`` (SQLite)
against the ledger files a cluster's brokers keep (``StorageConfig.state_files``).

What is timed is one persist tick: ``--cursors`` dirty cursor states (``--ledgers``
ledgers, a typical state: a mark-delete position and 20 acknowledged ranges) written with
``put_many``, as the factory's cursor writer thread does every
``managedLedgerCursorPositionFlushSeconds``. SQLite writes them in one transaction (WAL,
``synchronous=NORMAL``: no fsync per commit); the ledger files write one file each
(temporary file, fsync, rename) on 4 threads. So what bounds the files is the data
directory's fsync latency (a file server's COMMIT round trip on NFS); what bounds SQLite
is one commit. Both run in alternation (``--rounds``), in one directory
(``--dir``: put it on the file system you mean to use); the figure is the median tick in
milliseconds and the cursors per second it allows.

    python bench/state_files_bench.py
    python bench/state_files_bench.py --cursors 2000 --dir /mnt/shared/bench
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from magnetar.storage import SqliteMetadataStore  # noqa: E402
from magnetar.storage.ledger_files import LedgerFilesStore, dir_name  # noqa: E402

STATE = {"markDelete": [123456, 789], "individuallyDeleted": [[123456, 790, 123456, 800]] * 20,
         "properties": {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cursors", type=int, default=500)
    parser.add_argument("--ledgers", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="state-bench-", dir=args.dir))
    items = {f"cursor/ledger-{i % args.ledgers}\x1fsub-{i}": STATE for i in range(args.cursors)}
    sqlite = SqliteMetadataStore(base / "storage.db")
    files = LedgerFilesStore(str(base))
    for i in range(args.ledgers):
        os.makedirs(base / "ledgers" / dir_name(f"ledger-{i}"), exist_ok=True)
    times: dict[str, list[float]] = {"storage.db": [], "ledger files": []}
    try:
        for _ in range(args.rounds):
            for name, store in (("storage.db", sqlite), ("ledger files", files)):
                start = time.perf_counter()
                store.put_many(items)
                times[name].append(time.perf_counter() - start)
    finally:
        sqlite.close()
        files.close()
    print(f"one persist tick of {args.cursors} cursors over {args.ledgers} ledgers, "
          f"{args.rounds} rounds, in {base}")
    for name, samples in times.items():
        med = statistics.median(samples)
        print(f"  {name:13s} median {med * 1000:8.1f} ms   {args.cursors / med:9.0f} cursors/s")
    ratio = statistics.median(times["ledger files"]) / statistics.median(times["storage.db"])
    print(f"  ledger files / storage.db: {ratio:.0f}x the time")


if __name__ == "__main__":
    main()
