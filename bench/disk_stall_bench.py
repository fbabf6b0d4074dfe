"""The disk's own stalls under topic creation's sync pattern, without a broker.

A "live" writer appends 1 KB and fdatasyncs it every 5 ms (as `many_topics_bench.py`'s live
producer makes the broker do), while ``--threads`` (8) threads make "new ledgers" at
``--rate`` (450) a second in all (the broker's pace at 100,000 topics): each a directory
with a 1 KB file in it, made durable by one of three patterns (the mode):

- ``dir``: as a new ledger now is: a shared fsync of the parent every 10 ledgers, an fsync
  of the new directory and an fdatasync of the file (~1,070 flushes a second here);
- ``file2``: no directory synced, but as many flushes: the file fdatasynced twice (three
  times every 10th ledger), a write between;
- ``file``: the file's fdatasync alone (~620 flushes a second);
- ``idle``: no new ledgers at all, the live writer alone (~200 flushes a second): how often
  the disk stalls with nothing but the live topic on it.

Each round runs every mode for ``--seconds`` (45), alternating their order from round to
round, and prints the live syncs' p50 / p99 / p999 / max and the disk's flushes per second
(``/proc/diskstats`` of ``--disk``), and each live sync of 50 ms or more with its time
of day. Everything goes under ``--dir`` (a fresh directory,
removed at the end of each mode). Run it under the benchmark lock.
"""

from __future__ import annotations

import argparse
import os
import shutil
import threading
import time


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _maker(mode: str, stop: threading.Event, base: str, k: int, rate: float) -> None:
    """Make new ledgers in ``base`` at ``rate`` a second until ``stop``."""
    n = 0
    while not stop.is_set():
        t = time.monotonic()
        d = f"{base}/l{k}-{n}"
        os.mkdir(d)
        fd = os.open(f"{d}/seg", os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, b"x" * 1024)
        if mode == "dir":
            if n % 10 == 0:
                _fsync_dir(base)
            _fsync_dir(d)
        elif mode == "file2":
            os.fdatasync(fd)
            os.write(fd, b"z" * 1024)
            if n % 10 == 0:
                os.fdatasync(fd)
                os.write(fd, b"w" * 1024)
        os.fdatasync(fd)
        os.close(fd)
        n += 1
        time.sleep(max(0.0, 1 / rate - (time.monotonic() - t)))


def _flushes(disk: str) -> int:
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] == disk:
                return int(p[18])
    return 0


def run(mode: str, args: argparse.Namespace) -> str:
    """One mode for ``args.seconds``: the live syncs' figures, as a line."""
    base = f"{args.dir}/{mode}-{time.time_ns()}"
    os.makedirs(base)
    stop = threading.Event()
    makers = [] if mode == "idle" else [
        threading.Thread(target=_maker, args=(mode, stop, base, k, args.rate / args.threads))
        for k in range(args.threads)]
    for maker in makers:
        maker.start()
    fd = os.open(f"{base}/live", os.O_RDWR | os.O_CREAT, 0o644)
    offset, lat, slow = 0, [], []
    flushes0, start = _flushes(args.disk), time.monotonic()
    while time.monotonic() < start + args.seconds:
        t = time.monotonic()
        os.pwrite(fd, b"y" * 1024, offset)
        offset += 1024
        os.fdatasync(fd)
        lat.append(1000 * (time.monotonic() - t))
        if lat[-1] >= 50.0:
            slow.append(f"{lat[-1]:.0f} ms at {time.strftime('%H:%M:%S')}")
        time.sleep(0.005)
    stop.set()
    for maker in makers:
        maker.join()
    rate = (_flushes(args.disk) - flushes0) / (time.monotonic() - start)
    os.close(fd)
    shutil.rmtree(base)
    lat.sort()

    def q(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))]

    return (f"{mode:5} syncs {len(lat)} p50 {q(.5):.2f} p99 {q(.99):.2f} p999 {q(.999):.2f} "
            f"max {lat[-1]:.1f} ms; {rate:.0f} flushes/s; load {os.getloadavg()[0]:.1f}; "
            f"over 50 ms: {', '.join(slow) or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default="/tmp/disk-stall-bench", help="where the files go")
    parser.add_argument("--modes", default="dir,file2,file", help="comma-separated: dir, file2, file, idle")
    parser.add_argument("--seconds", type=float, default=45.0, help="seconds per mode and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8, help="threads making new ledgers")
    parser.add_argument("--rate", type=float, default=450.0, help="new ledgers a second, in all")
    parser.add_argument("--disk", default="vda", help="block device in /proc/diskstats")
    args = parser.parse_args()
    modes = args.modes.split(",")
    for r in range(args.rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            print(run(mode, args), flush=True)


if __name__ == "__main__":
    main()
