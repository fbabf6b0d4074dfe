"""Transactions, counted by function: which functions the broker's event loop calls, and
how often, for messages sent in transactions against the same messages sent without one,
so that what a transaction adds is a list of calls rather than a time.

A transaction of 100 messages costs the broker about 1.35 µs a message plus about 245 µs
once (bench/README.md, sessions 34 and 35); `txn_instructions.py` counts the instructions
and `txn_bench.py` times them. This names the work: the functions called once per
transaction (the three commands, the record writes, the marker) and those called once
more per message, with their counts (no timing involved).

The broker (``magnetar standalone`` from ``--src``, a source tree's ``src``) runs under a
profile hook (``sys.setprofile``) on its main thread, the event loop's: every Python
function call and every call of a built-in (C) function is counted, keyed by function
(file and first line) or by the built-in's name. Threads (the flusher, the readers) are not
counted. Each phase (``--groups`` groups of ``--per-txn`` messages of ``--size`` bytes,
as `txn_bench.py` sends them, with Magnetar's client) is counted alone: the hook is turned
on once the client is connected, the topic loaded and the coordinators connected, and
off once the last group is answered (``SIGUSR1``/``SIGUSR2`` to the broker). Plain and
transaction phases alternate ``--rounds`` times; counts are summed per kind. Two runs
differ only by what the broker's periodic rounds and timers did meanwhile (a fraction of
a call per group).

    python bench/txn_calls.py --src src --groups 50 --per-txn 100 --top 40

The hook slows the broker several times over; the counts do not depend on it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from magnetar.testing import stop_process

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from txn_bench import phase, phase_options  # (this directory's)

Key = tuple[str, int, str]


def serve(out: str, argv: list[str]) -> None:
    """Run ``magnetar`` with ``argv`` in this process, counting calls on the main thread
    between ``SIGUSR1`` and ``SIGUSR2`` (each stop writes the counts to ``out.N``)."""
    counts: collections.Counter[Key] = collections.Counter()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            counts[(code.co_filename.rpartition("/src/")[2], code.co_firstlineno,
                    code.co_qualname)] += 1
        elif event == "c_call":
            counts[("C", 0, getattr(arg, "__qualname__", repr(arg)))] += 1

    dumps = [0]

    def start(*_: object) -> None:
        counts.clear()
        sys.setprofile(hook)

    def stop(*_: object) -> None:
        sys.setprofile(None)
        with open(f"{out}.{dumps[0]}", "w") as f:
            json.dump([[*key, n] for key, n in counts.items()], f)
        dumps[0] += 1

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from magnetar.cli.main import main as magnetar_main

    sys.argv = ["magnetar", *argv]
    magnetar_main()


def wait_for(path: str, proc: subprocess.Popen[bytes], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not come (see the broker's log)")
        time.sleep(0.05)


@contextlib.contextmanager
def served_broker(script: str, out: str, root: str, args: argparse.Namespace, *,
                  cpu: int | None = None, env: dict[str, str] | None = None,
                  warm_groups: int = 5) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``script --serve out -- standalone ...`` (a tool's own broker process, from source
    tree ``args.src``, in ``root``; on ``cpu`` if given): its service URL and process once
    it is ready and warmed (a few groups of each kind: topics, coordinators, code paths);
    stopped afterwards."""
    ready = os.path.join(root, "ready.json")
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.path.abspath(args.src)}
    with open(os.path.join(root, "broker.log"), "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(script), "--serve", out, "--",
             "standalone", "--data-dir", os.path.join(root, "data"), "--port", "0",
             "--http-port", "0", "--bind-address", "127.0.0.1", "--ready-file", ready],
            stdout=log, stderr=log, env=env,
            preexec_fn=None if cpu is None else lambda: os.sched_setaffinity(0, {cpu}))
    try:
        wait_for(ready, proc, 120, "the broker's start")
        with open(ready) as f:
            url = json.load(f)["brokerServiceUrl"].replace("localhost", "127.0.0.1")
        for in_txn in (True, False):
            asyncio.run(phase(url, proc.pid, warm_groups, args.per_txn, args.size, in_txn))
        yield url, proc
    finally:
        stop_process(proc, 60)


def signalled(proc: subprocess.Popen[bytes]) -> tuple[Callable[[], None], Callable[[], None]]:
    """A phase's ``around``: ``SIGUSR1`` to ``proc`` before what is measured, ``SIGUSR2``
    after."""
    return (lambda: proc.send_signal(signal.SIGUSR1),
            lambda: proc.send_signal(signal.SIGUSR2))


def count(args: argparse.Namespace) -> dict[str, collections.Counter[Key]]:
    """Calls summed per kind of phase ("plain", "txn") over ``args.rounds`` rounds."""
    totals: dict[str, collections.Counter[Key]] = {
        "plain": collections.Counter(), "txn": collections.Counter()}
    with tempfile.TemporaryDirectory(prefix="txn-calls-") as root:
        out = os.path.join(root, "counts")
        with served_broker(__file__, out, root, args) as (url, proc):
            dump = 0
            for i in range(args.rounds):
                for kind in ("plain", "txn"):
                    asyncio.run(phase(url, proc.pid, args.groups, args.per_txn, args.size,
                                      kind == "txn", around=signalled(proc)))
                    path = f"{out}.{dump}"
                    wait_for(path, proc, 60, f"round {i + 1}'s {kind} counts")
                    time.sleep(0.2)  # (the dump is written at once; let it finish)
                    with open(path) as f:
                        for name, line, func, n in json.load(f):
                            totals[kind][(name, line, func)] += n
                    dump += 1
                    print(f"round {i + 1} {kind}: counted", flush=True)
    return totals


def report(totals: dict[str, collections.Counter[Key]], args: argparse.Namespace) -> None:
    groups = args.groups * args.rounds
    plain, txn = totals["plain"], totals["txn"]

    def per_group(counter: collections.Counter[Key], python: bool) -> float:
        return sum(n for key, n in counter.items() if (key[0] != "C") == python) / groups

    print(f"{args.groups} groups x {args.per_txn} messages of {args.size} B, {args.rounds} "
          "rounds; calls on the event loop's thread per group (a transaction, or as many "
          "messages without one)")
    for python, label in ((True, "Python functions"), (False, "built-in (C) functions")):
        p, t = per_group(plain, python), per_group(txn, python)
        print(f"  {label}: without {p:,.1f}, in a transaction {t:,.1f}, extra {t - p:,.1f}")
    rows = []
    for key in plain.keys() | txn.keys():
        extra = (txn[key] - plain[key]) / groups
        if abs(extra) >= 0.5:
            rows.append((extra, key))
    rows.sort(key=lambda r: (-abs(r[0]), r[1]))
    print(f"the {min(args.top, len(rows))} largest differences, calls per group "
          "(transaction minus plain; per message when near the message count):")
    for extra, (name, line, func) in rows[:args.top]:
        where = func if name == "C" else f"{name}:{line} {func}"
        print(f"  {extra:+8.1f}  {where}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        separator = sys.argv.index("--")
        serve(sys.argv[2], sys.argv[separator + 1:])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", default="src",
                        help="the source tree's src directory to run the broker from")
    phase_options(parser)
    parser.add_argument("--rounds", type=int, default=2,
                        help="plain/transaction pairs (default 2)")
    parser.add_argument("--top", type=int, default=40,
                        help="how many functions to list, largest difference first")
    args = parser.parse_args()
    report(count(args), args)


if __name__ == "__main__":
    main()
