"""Storage benchmark: managed-ledger append/read throughput vs the raw disk.

For 100 B, 1 KB and 1 MB entries under each fsync policy (always, group, never) it
measures appends (entries/s, MB/s, until every future resolved; us/call is the time
spent inside `append` on the loop thread) and reads (tail reads served by the read cache,
which hands out references, so their MB/s is not a copy rate; cold reads through a
factory without cache, from the OS page cache). In the same run it measures the raw disk:
sequential 4 MiB writes each followed by fdatasync, the same writes with one fdatasync at
the end (MB/s), and the latency of a small write + fdatasync. Ratios relate the two.

With ``--parts`` each entry is a payload part (magic, CRC32C, the rest) appended with its
CRC, as the broker stores a producer's SEND: a part record, whose CRC `append` does not
compute (`magnetar.storage.record`); without, a plain entry whose CRC it computes.

    python bench/storage_bench.py [--quick] [--dir DIR] [--parts]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import crc32c

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from magnetar.storage import ManagedLedgerFactory, Position, StorageConfig

MB = 1024 * 1024


def raw_disk(directory: str, total_mb: int, syncs: int) -> dict[str, float]:
    """Sequential 4 MiB writes each followed by fdatasync; then small-write fsync latency."""
    path = os.path.join(directory, "raw.bin")
    block = os.urandom(4 * MB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(max(1, total_mb // 4)):
            os.write(fd, block)
            os.fdatasync(fd)
        seq = (total_mb // 4 * 4) / (time.perf_counter() - t0)
        os.ftruncate(fd, 0)
        t0 = time.perf_counter()
        for _ in range(max(1, total_mb // 4)):
            os.write(fd, block)
        os.fdatasync(fd)
        stream = (total_mb // 4 * 4) / (time.perf_counter() - t0)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        lat = []
        small = b"x" * 512
        for _ in range(syncs):
            os.write(fd, small)
            t = time.perf_counter()
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    lat.sort()
    return {
        "seq_mb_s": seq,
        "stream_mb_s": stream,
        "fsync_ms_median": statistics.median(lat) * 1e3,
        "fsync_ms_p99": lat[int(len(lat) * 0.99) - 1] * 1e3,
    }


async def _append(
    ml, payload: bytes, n: int, window: int, part_crc: int | None = None
) -> tuple[float, float]:
    """Append n entries, at most ``window`` outstanding; returns (total s, s inside append)."""
    futs: list[asyncio.Future] = []
    in_append = 0.0
    t0 = time.perf_counter()
    chunk = 256 if len(payload) < 64 * 1024 else 4
    sent = 0
    oldest = 0
    while sent < n:
        t = time.perf_counter()
        for _ in range(min(chunk, n - sent)):
            futs.append(ml.append(payload, part_crc))
        in_append += time.perf_counter() - t
        sent = len(futs)
        while sent - oldest > window:
            await futs[oldest + chunk - 1]
            oldest += chunk
        await asyncio.sleep(0)
    await futs[-1]  # futures resolve in append order: the last one done means all are
    elapsed = time.perf_counter() - t0
    assert all(f.done() and f.exception() is None for f in futs)
    return elapsed, in_append


def _read_all(ml, n: int, batch: int) -> float:
    t0 = time.perf_counter()
    got = 0
    pos: Position | None = Position(-1, -1)
    while pos is not None and got < n:
        entries = ml.read_entries(pos, batch)
        if not entries:
            break
        got += len(entries)
        pos = ml.next_position(entries[-1][0])
    assert got == n, (got, n)
    return time.perf_counter() - t0


def bench_case(root: str, policy: str, size: int, n: int, parts: bool = False) -> dict[str, float]:
    d = tempfile.mkdtemp(dir=root)
    payload = os.urandom(size)
    part_crc = None
    if parts:  # a payload part of the same size: 0x0e01, CRC32C of what follows, the rest
        part_crc = crc32c.crc32c(payload[6:])
        payload = b"\x0e\x01" + part_crc.to_bytes(4, "big") + payload[6:]
    # no age limit on the read cache: the tail-read figure is about reads served from it
    cfg = dict(data_dir=d, fsync=policy, read_cache_bytes=max(64 * MB, 2 * n * size),
               read_cache_max_age_s=0.0)
    f = ManagedLedgerFactory(StorageConfig(**cfg))
    ml = f.open("bench")
    window = max(4, min(20_000, (64 * MB) // size))
    total, in_append = asyncio.run(_append(ml, payload, n, window, part_crc))
    batch = 100 if size < 64 * 1024 else 4
    tail = _read_all(ml, n, batch)
    f.close()
    cfg["read_cache_bytes"] = 0
    f = ManagedLedgerFactory(StorageConfig(**cfg))
    cold = _read_all(f.open("bench"), n, batch)
    f.close()
    shutil.rmtree(d)
    return {
        "n": n,
        "append_eps": n / total,
        "append_mb_s": n * size / total / MB,
        "append_call_us": in_append / n * 1e6,
        "tail_read_eps": n / tail,
        "tail_read_mb_s": n * size / tail / MB,
        "cold_read_eps": n / cold,
        "cold_read_mb_s": n * size / cold / MB,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short run")
    ap.add_argument("--dir", default=None, help="directory on the disk to measure")
    ap.add_argument("--parts", action="store_true",
                    help="entries are payload parts appended with their CRC (as the broker's)")
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
        loop_name = "uvloop"
    except ImportError:
        loop_name = "asyncio"
    root = tempfile.mkdtemp(prefix="magnetar-bench-", dir=args.dir)
    q = args.quick
    try:
        raw = raw_disk(root, 64 if q else 512, 50 if q else 300)
        kind = "payload parts with their CRC" if args.parts else "plain entries"
        print(f"event loop: {loop_name}; data dir: {root}; entries: {kind}")
        print(
            f"raw disk: sequential write+fdatasync per 4 MiB block {raw['seq_mb_s']:.0f} MB/s; "
            f"write all then one fdatasync {raw['stream_mb_s']:.0f} MB/s; "
            f"fdatasync latency median {raw['fsync_ms_median']:.2f} ms, "
            f"p99 {raw['fsync_ms_p99']:.2f} ms"
        )
        sizes = {100: 50_000 if q else 300_000, 1024: 50_000 if q else 300_000, MB: 64 if q else 512}
        always_n = {100: 200 if q else 2000, 1024: 200 if q else 2000, MB: 16 if q else 64}
        head = (
            f"{'policy':7} {'size':>6} {'n':>7} | {'append/s':>10} {'MB/s':>7} {'us/call':>7} |"
            f" {'tail rd/s':>10} {'MB/s':>7} | {'cold rd/s':>10} {'MB/s':>7} | ratios"
        )
        print(head)
        print("-" * len(head))
        for policy in ("group", "always", "never"):
            for size, n in sizes.items():
                if policy == "always":
                    n = always_n[size]
                r = bench_case(root, policy, size, n, args.parts)
                label = {100: "100B", 1024: "1KB", MB: "1MB"}[size]
                ratios = (
                    f"append/raw-seq {r['append_mb_s'] / raw['seq_mb_s']:.2f}"
                    f", /raw-stream {r['append_mb_s'] / raw['stream_mb_s']:.2f}"
                )
                if policy == "always":
                    per_sync = 1e3 / raw["fsync_ms_median"]
                    ratios += f"; append/(1/fsync) {r['append_eps'] / per_sync:.2f}"
                print(
                    f"{policy:7} {label:>6} {r['n']:>7} | {r['append_eps']:>10.0f}"
                    f" {r['append_mb_s']:>7.1f} {r['append_call_us']:>7.2f} |"
                    f" {r['tail_read_eps']:>10.0f} {r['tail_read_mb_s']:>7.1f} |"
                    f" {r['cold_read_eps']:>10.0f} {r['cold_read_mb_s']:>7.1f} | {ratios}"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
