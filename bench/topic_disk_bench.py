#!/usr/bin/env python3
"""What a new topic's files cost the disk (issue 40): write requests, device flushes and
dirty metadata per topic, for the layout the storage uses and for the alternatives.

Each layout makes ``--topics`` topics one after the other in a scratch directory on the
file system under test (``--dir``), the way a topic's first message is stored:

  dir-per-topic    a directory per topic (``ledgers/<topic>/``) with its first segment in
                   it; fsync of ``ledgers/``, of the topic's directory, fdatasync of the
                   segment (the storage's order with ``magnetarDirectoryFsync=always``,
                   and on file systems other than ext4 and XFS: `ManagedLedgerFactory._prepare`,
                   `Segment.sync`);
  dir-file-covers  the same files and syncs without the topic directory's fsync, which
                   the segment's own fdatasync covers on ext4 and XFS (the storage's way
                   there, ``magnetarDirectoryFsync=auto``: session 32);
  dir-data-first   the same files, the segment's fdatasync first, then the two
                   directories (one journal commit instead of three on ext4);
  shared-dir       every topic's first segment in one shared directory (fdatasync of the
                   segment, fsync of the directory): what a layout with fewer directories
                   per new topic would cost.

Per topic it reports the block device's completed write requests and flush requests
(``/sys/block/DEV/stat``: the device holding ``--dir``), the dirty memory left behind
(``Dirty`` in ``/proc/meminfo``: metadata the file system writes back later, in bulk,
which is what stalls a live topic's fdatasync while many topics are made) and the time.
Other activity on the machine counts too: run it on a quiet machine, and compare the
layouts side by side (they alternate, ``--rounds`` times).

``--storm SECONDS`` instead makes topics without a pause for that long (``--threads``
threads, at most ``--rate`` topics a second in all, in the first of ``--layouts``) while a
live topic appends 1.1 KB and fdatasyncs it every 5 ms, and reports the live syncs'
latency (p50, p99, p999, max) and each one over 30 ms with the dirty memory at the time;
``--syncfs-every S`` adds a thread that syncs the whole file system every S seconds
meanwhile (so that dirty metadata never piles up).

    python3 bench/topic_disk_bench.py --topics 3000 --rounds 2
    python3 bench/topic_disk_bench.py --storm 60 --rate 720 --layouts dir-per-topic
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable

SEGMENT = b"\x0e\x01" + b"x" * 1098  # a first segment's header and one 1 KB message


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def block_device(path: str) -> str:
    """The ``/sys/block`` name of the disk holding ``path`` (a partition's disk)."""
    dev = os.stat(path).st_dev
    sys_dev = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    real = os.path.realpath(sys_dev)
    if os.path.exists(os.path.join(real, "partition")):
        real = os.path.dirname(real)
    return os.path.basename(real)


def device_counts(dev: str) -> tuple[int, int]:
    """(write requests, flush requests) completed by ``dev`` so far."""
    with open(f"/sys/block/{dev}/stat") as f:
        fields = f.read().split()
    return int(fields[4]), (int(fields[15]) if len(fields) > 15 else 0)


def dirty_kb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Dirty:"):
                return int(line.split()[1])
    return 0


def write_segment(path: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    os.pwrite(fd, SEGMENT, 0)
    return fd


def dir_per_topic(root: str, i: int, data_first: bool, ledger_dir_synced: bool = True) -> None:
    ledger = os.path.join(root, f"topic-{i}")
    os.mkdir(ledger)
    if not data_first:
        fsync_dir(root)
    fd = write_segment(os.path.join(ledger, "000000000000.seg"))
    try:
        if data_first:
            os.fdatasync(fd)
            fsync_dir(ledger)
            fsync_dir(root)
        else:
            if ledger_dir_synced:
                fsync_dir(ledger)
            os.fdatasync(fd)
    finally:
        os.close(fd)


def shared_dir(root: str, i: int) -> None:
    fd = write_segment(os.path.join(root, f"topic-{i}.000000000000.seg"))
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)
    fsync_dir(root)


LAYOUTS: dict[str, Callable[[str, int], None]] = {
    "dir-per-topic": lambda root, i: dir_per_topic(root, i, data_first=False),
    "dir-file-covers": lambda root, i: dir_per_topic(root, i, data_first=False,
                                                     ledger_dir_synced=False),
    "dir-data-first": lambda root, i: dir_per_topic(root, i, data_first=True),
    "shared-dir": shared_dir,
}


def run(layout: str, base: str, topics: int, dev: str) -> dict[str, float]:
    root = tempfile.mkdtemp(prefix=f"{layout}-", dir=base)
    try:
        fsync_dir(base)
        os.sync()  # what came before is not counted
        dirty0, (writes0, flushes0) = dirty_kb(), device_counts(dev)
        started = time.perf_counter()
        make = LAYOUTS[layout]
        for i in range(topics):
            make(root, i)
        elapsed = time.perf_counter() - started
        dirty1, (writes1, flushes1) = dirty_kb(), device_counts(dev)
        return {"ms": elapsed / topics * 1000, "writes": (writes1 - writes0) / topics,
                "flushes": (flushes1 - flushes0) / topics,
                "dirty_kb": (dirty1 - dirty0) / topics}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def storm(layout: str, base: str, seconds: float, threads: int, rate: float,
          syncfs_every: float) -> None:
    """Topics made for ``seconds`` while a live topic syncs every 5 ms (``--storm``)."""
    root = tempfile.mkdtemp(prefix=f"storm-{layout}-", dir=base)
    stop = threading.Event()
    made = [0] * threads
    make = LAYOUTS[layout]

    def creator(k: int) -> None:
        i, due = k, time.monotonic()
        while not stop.is_set():
            if rate > 0:
                due += threads / rate
                time.sleep(max(0.0, due - time.monotonic()))
            make(root, i)
            i += threads
            made[k] += 1

    def syncer() -> None:
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            while not stop.wait(syncfs_every):
                syncfs(fd)
        finally:
            os.close(fd)

    workers = [threading.Thread(target=creator, args=(k,)) for k in range(threads)]
    if syncfs_every > 0:
        workers.append(threading.Thread(target=syncer))
    live_path = os.path.join(root, "live.seg")
    fd = os.open(live_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    latencies: list[float] = []
    slow: list[tuple[float, float, int]] = []
    try:
        os.posix_fallocate(fd, 0, 64 << 20)
        for worker in workers:
            worker.start()
        started = time.monotonic()
        offset = 0
        while time.monotonic() - started < seconds:
            t = time.perf_counter()
            os.pwrite(fd, SEGMENT, offset)
            os.fdatasync(fd)
            ms = (time.perf_counter() - t) * 1000
            offset += len(SEGMENT)
            latencies.append(ms)
            if ms > 30:
                slow.append((time.monotonic() - started, ms, dirty_kb()))
            time.sleep(0.005)
    finally:
        stop.set()
        for worker in workers:
            if worker.is_alive():
                worker.join()
        os.close(fd)
        shutil.rmtree(root, ignore_errors=True)
    latencies.sort()
    n = len(latencies)

    def at(q: float) -> float:
        return latencies[min(n - 1, int(n * q))]

    print(f"{layout}, {sum(made) / seconds:.0f} topics/s, syncfs every "
          f"{syncfs_every or '-'} s: live sync p50 {at(0.5):.2f}, p99 {at(0.99):.2f}, "
          f"p999 {at(0.999):.2f}, max {latencies[-1]:.1f} ms ({n} syncs)")
    for when, ms, dirty in slow:
        print(f"  at {when:.1f} s: {ms:.1f} ms, {dirty / 1024:.1f} MB dirty")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=tempfile.gettempdir(),
                        help="a directory on the file system under test (default: the "
                             "temporary directory)")
    parser.add_argument("--topics", type=int, default=3000, help="topics per layout and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds (the layouts alternate)")
    parser.add_argument("--layouts", default=",".join(LAYOUTS),
                        help=f"comma-separated, of {', '.join(LAYOUTS)}")
    parser.add_argument("--storm", type=float, default=0.0, metavar="SECONDS",
                        help="make topics for this long beside a live topic's syncs")
    parser.add_argument("--threads", type=int, default=8, help="--storm: creator threads")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="--storm: topics a second in all (0: as fast as they go)")
    parser.add_argument("--syncfs-every", type=float, default=0.0, metavar="S",
                        help="--storm: sync the whole file system every S seconds (0: never)")
    args = parser.parse_args()
    layouts = [name.strip() for name in args.layouts.split(",") if name.strip()]
    unknown = [name for name in layouts if name not in LAYOUTS]
    if unknown:
        parser.error(f"unknown layout(s) {', '.join(unknown)}: choose from {', '.join(LAYOUTS)}")
    if args.storm > 0:
        storm(layouts[0], args.dir, args.storm, max(1, args.threads), args.rate,
              args.syncfs_every)
        return
    dev = block_device(args.dir)
    print(f"{args.topics} topics per layout and round in {args.dir} (device {dev})")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in layouts}
    for round_ in range(args.rounds):
        order = layouts if round_ % 2 == 0 else layouts[::-1]
        for name in order:
            r = run(name, args.dir, args.topics, dev)
            results[name].append(r)
            print(f"round {round_ + 1} {name}: {r['ms']:.2f} ms, {r['writes']:.2f} writes, "
                  f"{r['flushes']:.2f} flushes, {r['dirty_kb']:.2f} KB left dirty per topic",
                  flush=True)
    for name in layouts:
        rs = results[name]
        print(f"{name}: per topic (median of {len(rs)} rounds) "
              + ", ".join(f"{key} {statistics.median(r[key] for r in rs):.2f}"
                          for key in ("ms", "writes", "flushes", "dirty_kb")))


if __name__ == "__main__":
    main()
