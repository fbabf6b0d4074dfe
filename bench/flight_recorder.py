"""A flight recorder for a running broker, read from outside the process (/proc).

Every ``--interval`` (2 ms) it reads, for each thread of the broker (found with ``pgrep -f
PATTERN``, by default `many_topics_bench.py`'s broker; the thread list is refreshed every
0.5 s), its state and current system call (``/proc/PID/task/TID/stat``, ``.../syscall``);
for the event-loop thread (tid == pid) also its scheduler figures (``.../schedstat``: CPU
time, time runnable but waiting for a core); the data disk's counters (``/proc/diskstats``:
requests in flight, flushes and writes completed) and the machine's dirty and
under-writeback pages (``/proc/vmstat``). Nothing is injected in the broker: no probe in
its loop changes its timing. Python threads all show as ``python3``: their names are in the
``py-spy`` dumps (``Thread TID ... "magnetar-storage-flusher"``).

It writes two files (times on ``time.monotonic()``, the clock of the benchmarks' sends):

- ``OUT.events``: one line per *episode* of 10 ms or more (``--note``) of any thread in one
  state and one system call other than an idle wait (the loop's epoll wait, a pool's futex
  wait; the loop's futex is the interpreter lock, so it counts), with the thread's kernel
  stack (``/proc/.../stack``, needs root: read every 10 ms while the episode lasts, the
  last one kept); each stretch of the loop thread busy (every sample on a CPU or runnable)
  for 25 ms or more with its CPU and run-queue time; each stretch in which the disk had
  requests in flight and completed none (``DISK completed nothing``); every 10 s the
  disk's writes and flushes per second; and the recorder's own gaps of 15 ms or more
  (``--gap``) with what it and the loop did meanwhile and the machine's steal time.
- ``OUT.dumps``: around each *trigger* (the loop thread ``--threshold`` (25 ms) in one
  non-idle call or busy; another thread that long in one disk call; the disk that long
  with nothing completed) the last ``--ring`` (2 s) of samples and 0.5 s after it, at most
  one dump per ring's length; with ``--py-spy BINARY``, a ``py-spy dump --nonblocking`` of
  every thread once a stall reaches ``--spy-after`` (40 ms; at most one per ring's length;
  it does not pause the process).

Run it beside the benchmark, started first: it waits for the broker and, with ``--once``,
ends when it exits. ``python3 bench/flight_recorder.py --out /tmp/rec --once`` (as root).
It costs ~15 % of one core.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import subprocess
import sys
import time
from typing import Any

#: x86-64 system call numbers worth a name in the output
NAMES = {0: "read", 1: "write", 2: "open", 3: "close", 4: "stat", 7: "poll", 17: "pread64",
         18: "pwrite64", 19: "readv", 20: "writev", 23: "select", 44: "sendto", 45: "recvfrom",
         46: "sendmsg", 47: "recvmsg", 72: "fcntl", 74: "fsync", 75: "fdatasync", 76: "truncate",
         77: "ftruncate", 82: "rename", 83: "mkdir", 87: "unlink", 202: "futex", 217: "getdents64",
         232: "epoll_wait", 257: "openat", 258: "mkdirat", 262: "newfstatat", 263: "unlinkat",
         270: "pselect6", 271: "ppoll", 281: "epoll_pwait", 285: "fallocate", 295: "preadv",
         296: "pwritev", 306: "syncfs", 316: "renameat2", 327: "preadv2", 328: "pwritev2",
         332: "statx", 441: "epoll_pwait2", 35: "nanosleep", 230: "clock_nanosleep"}
#: calls in which a thread is idle, not stalled
IDLE = {7, 23, 35, 230, 232, 270, 271, 281, 441, 202, 0, 47, 45}
#: calls in which the event loop is idle
LOOP_IDLE = {7, 23, 35, 230, 232, 270, 271, 281, 441}
IDLE_NAMES = tuple(NAMES[n] + "(" for n in IDLE)
#: calls that go to the disk (for other threads' triggers)
DISK = {3, 17, 18, 19, 20, 74, 75, 76, 77, 82, 83, 87, 257, 258, 263, 285, 295, 296, 306, 316,
        327, 328, 1, 2, 4, 262, 332, 217}


def _pid(pattern: str) -> int:
    while True:
        out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
        mine = {os.getpid(), os.getppid()}
        pids = [int(p) for p in out if int(p) not in mine]
        if pids:
            return min(pids)
        time.sleep(0.1)


def _read(fd: int) -> str:
    return os.pread(fd, 4096, 0).decode(errors="replace")


class Thread:
    """Open /proc files of one thread and its current episode."""

    def __init__(self, pid: int, tid: int) -> None:
        base = f"/proc/{pid}/task/{tid}"
        self.tid = tid
        with open(f"{base}/comm") as f:
            self.comm = f.read().strip()
        self.stat = os.open(f"{base}/stat", os.O_RDONLY)
        self.sysc = os.open(f"{base}/syscall", os.O_RDONLY)
        self.stack_path = f"{base}/stack"
        self.key: tuple[str, str] | None = None  # (state, call)
        self.nr = -1  # the call's number
        self.since = 0.0
        self.stack = ""
        self.stack_at = 0.0
        self.triggered = False

    def sample(self) -> tuple[str, str, int]:
        """(state, call text, call number or -1)."""
        stat = _read(self.stat)
        state = stat[stat.rindex(")") + 2]
        f = _read(self.sysc).split()
        if not f or f[0] == "running":
            return state, "running", -1
        nr = int(f[0])
        name = NAMES.get(nr, str(nr))
        arg = int(f[1], 16) if len(f) > 1 else 0
        return state, f"{name}({arg})", nr

    def close(self) -> None:
        for fd in (self.stat, self.sysc):
            with contextlib.suppress(OSError):
                os.close(fd)


def _stack(path: str) -> str:
    try:
        with open(path) as f:
            lines = [line.split()[1].split("+")[0] for line in f if line.strip()]
    except (OSError, IndexError):
        return "?"
    return "<".join(lines[:12])


def _steal() -> int:
    """The machine's steal time (USER_HZ ticks: time its virtual CPUs were not run)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])


def _dirty(fd: int) -> tuple[int, int]:
    """(pages dirty, pages under writeback) of the whole machine (/proc/vmstat)."""
    text = _read_all(fd)
    i = text.index("nr_dirty ")
    j = text.index("nr_writeback ")
    return int(text[i + 9:text.index("\n", i)]), int(text[j + 13:text.index("\n", j)])


def _read_all(fd: int) -> str:
    return os.pread(fd, 65536, 0).decode(errors="replace")


def _disk(dev: str) -> tuple[int, int, int]:
    """(in flight, flushes completed, writes completed) of ``dev``."""
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] == dev:
                flushes = int(p[18]) if len(p) > 18 else 0
                return int(p[11]), flushes, int(p[7])
    return 0, 0, 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pattern", default="magnetar.cli.main standalone.*many-topics-",
                        help="pgrep -f pattern of the broker (default: many_topics_bench.py's)")
    parser.add_argument("--out", default="/tmp/flight", help="prefix of the output files (.events, .dumps)")
    parser.add_argument("--interval", type=float, default=0.002, help="seconds between samples")
    parser.add_argument("--threshold", type=float, default=0.025, help="seconds that make a trigger")
    parser.add_argument("--note", type=float, default=0.010, help="shortest episode written to .events")
    parser.add_argument("--ring", type=float, default=2.0, help="seconds of samples kept for a dump")
    parser.add_argument("--gap", type=float, default=0.015,
                        help="seconds between two of its samples that it notes as its own gap")
    parser.add_argument("--disk", default="vda", help="block device in /proc/diskstats")
    parser.add_argument("--py-spy", default="", help="py-spy binary: dump the broker at each trigger")
    parser.add_argument("--spy-after", type=float, default=0.040,
                        help="seconds of one stall before py-spy is run")
    parser.add_argument("--once", action="store_true", help="stop when the first broker exits")
    args = parser.parse_args()
    with open(args.out + ".events", "a", buffering=1) as events, open(args.out + ".dumps", "a", buffering=1) as dumps:
        while True:
            record(args, _pid(args.pattern), events, dumps)
            if args.once:
                return


def record(args: Any, pid: int, events: Any, dumps: Any) -> None:
    """Sample ``pid`` until it exits."""
    print(f"# pid {pid} monotonic {time.monotonic():.3f} wall {time.time():.3f}", file=events)
    threads: dict[int, Thread] = {}
    ring: collections.deque[tuple[Any, ...]] = collections.deque()
    pending: list[tuple[float, str]] = []  # (write at, header)
    last_refresh = 0.0
    sched = os.open(f"/proc/{pid}/task/{pid}/schedstat", os.O_RDONLY)
    own = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    vmstat = os.open("/proc/vmstat", os.O_RDONLY)
    own_run0, own_wait0, _ = (int(x) for x in _read(own).split())
    steal0, last_steal_at = _steal(), time.monotonic()
    run0 = wait0 = 0
    busy_since = None  # loop on a CPU without a syscall since
    busy_run0 = busy_wait0 = 0
    delay_since = None
    last_t = time.monotonic()
    spy: subprocess.Popen[str] | None = None
    spy_header = ""
    disk_last = rate_disk = (*_disk(args.disk), *_dirty(vmstat))
    disk_since: float | None = None
    disk_fired = False
    rate_at = time.monotonic()
    last_dump = last_spy = 0.0
    while True:
        t = time.monotonic()
        if t - last_refresh > 0.5:
            last_refresh = t
            try:
                tids = {int(x) for x in os.listdir(f"/proc/{pid}/task")}
            except OSError:
                break
            for tid in list(threads):
                if tid not in tids:
                    threads.pop(tid).close()
            for tid in tids - threads.keys():
                with contextlib.suppress(OSError):
                    threads[tid] = Thread(pid, tid)
        try:
            run, wait, _ = (int(x) for x in _read(sched).split())
        except (OSError, ValueError):
            break
        disk = (*_disk(args.disk), *_dirty(vmstat))
        row: list[Any] = [t, run - run0, wait - wait0, disk]
        trigger = ""
        gap = t - last_t
        last_t = t
        # the disk: requests in flight and none completed (no write, no flush) for a while
        if disk[0] == 0 or disk[1:3] != disk_last[1:3]:
            if disk_since is not None and t - disk_since >= args.note:
                print(f"{disk_since:.3f} {1000 * (t - disk_since):6.1f} ms DISK completed nothing "
                      f"with {disk_last[0]}+ requests in flight (machine: {disk_last[3]} pages dirty, "
                      f"{disk_last[4]} under writeback)", file=events)
            disk_since = t if disk[0] else None
            disk_fired = False
        elif disk_since is not None and t - disk_since >= args.threshold and not disk_fired:
            disk_fired = True
            trigger = f"DISK completed nothing for {1000 * (t - disk_since):.0f} ms, {disk[0]} in flight"
        disk_last = disk
        if t - rate_at >= 10.0:  # the disk's pace, every 10 s
            span = t - rate_at
            print(f"{t:.3f} DISK {(disk[2] - rate_disk[2]) / span:.0f} writes/s, "
                  f"{(disk[1] - rate_disk[1]) / span:.0f} flushes/s over {span:.1f} s; now {disk[3]} pages dirty",
                  file=events)
            rate_at, rate_disk = t, disk
        # the recorder's own gaps: asleep past its time (the machine), or waiting for a core
        own_run, own_wait, _ = (int(x) for x in _read(own).split())
        if t - last_steal_at >= 0.05 or gap >= args.gap:
            steal = _steal()
            if gap >= args.gap:
                print(f"{t - gap:.3f} {1000 * gap:6.1f} ms RECORDER gap (its own CPU "
                      f"+{1e-6 * (own_run - own_run0):.1f} ms, waited for a core "
                      f"+{1e-6 * (own_wait - own_wait0):.1f} ms; machine steal +{10 * (steal - steal0):.0f} ms "
                      f"since {last_steal_at:.3f}; LOOP CPU +{1e-6 * (run - run0):.1f} ms, waited for a core "
                      f"+{1e-6 * (wait - wait0):.1f} ms; disk in flight {disk[0]})", file=events)
            steal0, last_steal_at = steal, t
        own_run0, own_wait0 = own_run, own_wait
        for th in threads.values():
            try:
                state, call, nr = th.sample()
            except (OSError, ValueError):
                continue
            loop = th.tid == pid
            row.append((th.comm if not loop else "LOOP", state, call))
            key = (state, call)
            if key != th.key:
                if th.key is not None:
                    length = t - th.since
                    if length >= args.note and _interesting(th, pid, th.key):
                        print(f"{th.since:.3f} {1000 * length:6.1f} ms {th.comm}/{th.tid} {th.key[0]} "
                              f"{th.key[1]} stack={th.stack}", file=events)
                th.key, th.nr, th.since, th.stack, th.stack_at, th.triggered = key, nr, t, "", 0.0, False
            elif _interesting(th, pid, key):
                held = t - th.since
                if held >= 0.010 and t - th.stack_at >= 0.010:
                    th.stack, th.stack_at = _stack(th.stack_path), t
                if held >= args.threshold and not th.triggered and (loop or nr in DISK or state == "D"):
                    th.triggered = True
                    trigger = f"{th.comm}/{th.tid} {state} {call} for {1000 * held:.0f} ms since {th.since:.3f}"
        # the loop thread: waiting for a core, or on one without a break
        if run0 and wait - wait0 >= 5_000_000 and delay_since is None:
            delay_since = t - gap
        if delay_since is not None and wait - wait0 < 1_000_000:
            print(f"{delay_since:.3f} {1000 * (t - delay_since):6.1f} ms LOOP waited for a core", file=events)
            delay_since = None
        loop_th = threads.get(pid)
        on_cpu = loop_th is not None and loop_th.key is not None and loop_th.key[1] == "running"
        if on_cpu and busy_since is None:
            busy_since, busy_run0, busy_wait0 = t, run, wait
        elif not on_cpu and busy_since is not None:
            if t - busy_since >= args.threshold:
                print(f"{busy_since:.3f} {1000 * (t - busy_since):6.1f} ms LOOP busy (no call seen; CPU "
                      f"{1e-6 * (run - busy_run0):.1f} ms, waited for a core {1e-6 * (wait - busy_wait0):.1f} ms)",
                      file=events)
            busy_since = None
        if (busy_since is not None and t - busy_since >= args.threshold and not trigger
                and loop_th is not None and not loop_th.triggered):
            loop_th.triggered = True
            trigger = f"LOOP running {1000 * (t - busy_since):.0f} ms since {busy_since:.3f}"
        if wait - wait0 >= 1000 * 1000 * 1000 * args.threshold and run0:
            trigger = trigger or f"LOOP waited {1e-6 * (wait - wait0):.0f} ms for a core in {1000 * gap:.0f} ms"
        run0, wait0 = run, wait
        ring.append(tuple(row))
        while ring and ring[0][0] < t - args.ring:
            ring.popleft()
        if trigger:
            print(f"{t:.3f} TRIGGER {trigger}", file=events)
        if trigger and t - last_dump >= args.ring:  # one dump per ring's length
            last_dump = t
            pending.append((t + 0.5, f"trigger at {t:.3f}: {trigger}"))
        # py-spy (~50 ms of CPU) only for a long stall, and at most every ring's length
        if args.py_spy and spy is None and t - last_spy >= args.ring and (
                (busy_since is not None and t - busy_since >= args.spy_after)
                or any(th.since and t - th.since >= args.spy_after and _interesting(th, pid, th.key)
                       and (th.tid == pid or th.nr in DISK) for th in threads.values() if th.key)):
            last_spy = t
            spy = subprocess.Popen([args.py_spy, "dump", "--nonblocking", "-p", str(pid)],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            spy_header = f"at {t:.3f}: a stall of {1000 * args.spy_after:.0f} ms or more"
        if spy is not None and spy.poll() is not None:
            out = spy.stdout.read() if spy.stdout else ""
            print(f"=== py-spy for {spy_header}\n{out}", file=dumps)
            spy = None
        if pending and pending[0][0] <= t:
            _, header = pending.pop(0)
            _dump(dumps, header, ring)
        time.sleep(max(0.0, args.interval - (time.monotonic() - t)))
    for th in threads.values():
        th.close()
    os.close(sched)
    os.close(own)
    os.close(vmstat)
    for _, header in pending:
        _dump(dumps, header, ring)
    print(f"# pid {pid} ended monotonic {time.monotonic():.3f}", file=events)


def _interesting(th: Thread, pid: int, key: tuple[str, str]) -> bool:
    """Whether ``th`` in ``key`` (its state and call, number ``th.nr``) is worth noting."""
    state, call = key
    if state == "D":
        return True
    if call == "running":
        return False
    nr = th.nr
    if th.tid == pid:
        return nr not in LOOP_IDLE  # the loop's futex is the GIL: interesting
    return nr not in IDLE


def _dump(dumps: Any, header: str, ring: collections.deque[tuple[Any, ...]]) -> None:
    print(f"=== {header}", file=dumps)
    print("# t run+ wait+ (the loop's CPU and run-queue ms since the last sample) disk=in flight/"
          "flushes/writes (completed, since boot) dirty=pages dirty/under writeback, then each thread's comm:state:call; a sample "
          "the same as the one before (disk and threads) is counted, not written", file=dumps)
    prev: tuple[Any, ...] = ()
    same = 0
    for row in ring:
        t, drun, dwait, disk, *threads = row
        if row[3:] == prev:
            same += 1
            continue
        if same:
            print(f"  ({same} samples the same)", file=dumps)
            same = 0
        summary = " ".join(f"{c}:{s}:{call}" for c, s, call in threads
                           if c == "LOOP" or s == "D" or not call.startswith(IDLE_NAMES))
        print(f"{t:.3f} run+{drun / 1e6:.1f} wait+{dwait / 1e6:.1f} disk={disk[0]}/{disk[1]}/{disk[2]} dirty={disk[3]}/{disk[4]} {summary}",
              file=dumps)
        prev = row[3:]
    if same:
        print(f"  ({same} samples the same)", file=dumps)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
