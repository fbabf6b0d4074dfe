"""Transactions, counted instead of timed: the broker's instructions per message of
messages sent in transactions against the same messages sent without, under Valgrind's
callgrind, so that two source trees can be compared without this machine's noise.

The time `txn_bench.py` measures moves with the VM's state (the same code measured 1.29x
one hour and 1.40x the next); an instruction count does not, and a change that takes
instructions out of the transactional path shows in it at once. It does not see what an
instruction costs (a cold cache, a system call's kernel work: callgrind counts user space
only), so a ratio here is a floor of the timed one, not a stand-in for it: use it to
choose between versions, and `txn_bench.py` for the figure.

Each tree's ``magnetar standalone`` runs under ``valgrind --tool=callgrind`` (about 50x
slower), warmed by a few transactions; then, in turn, ``--groups`` groups of ``--per-txn``
messages of ``--size`` bytes without a transaction and in transactions (Magnetar's
client, as `txn_bench.py` sends them), the counters zeroed before each phase and dumped
after it (``callgrind_control``). Every thread of the broker is counted.

    python bench/txn_instructions.py --src base=/tmp/base/src --src new=src

Needs Valgrind (Debian's ``valgrind`` package: ``callgrind_control`` with it).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from magnetar.testing import stop_process

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from txn_bench import phase, phase_options  # (this directory's)


def total_instructions(dump: str) -> int | None:
    """The ``Ir`` total of a callgrind dump (None: its totals line is not written yet)."""
    with open(dump) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    return None


def wait_for_dump(root: str, before: set[str], timeout_s: float = 60.0) -> int:
    """The ``Ir`` total of the dump callgrind writes in ``root`` after the ones in
    ``before``, once it is written through its totals line."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = set(glob.glob(f"{root}/cg.*")) - before
        if new:
            total = total_instructions(new.pop())
            if total is not None:
                return total
        time.sleep(0.1)
    raise SystemExit(f"callgrind wrote no whole dump in {root} within {timeout_s:.0f} s")


def measure_tree(name: str, src: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """Instructions per message of each phase, ``args.rounds`` times, for tree ``src``."""
    out: dict[str, list[float]] = {"plain": [], "txn": []}
    with tempfile.TemporaryDirectory(prefix="txn-instr-") as root:
        ready = os.path.join(root, "ready.json")
        env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
        with open(os.path.join(root, "broker.log"), "wb") as log:
            proc = subprocess.Popen(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={root}/cg.%p",
                 sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir",
                 os.path.join(root, "data"), "--port", "0", "--http-port", "0",
                 "--bind-address", "127.0.0.1", "--ready-file", ready],
                stdout=log, stderr=log, env=env)

        def control(*flags: str) -> None:
            subprocess.run(["callgrind_control", *flags, str(proc.pid)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        try:
            deadline = time.monotonic() + 600
            while not os.path.exists(ready):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the broker from {src} did not start under valgrind: "
                                     f"see {root}/broker.log")
                time.sleep(0.2)
            with open(ready) as f:
                url = json.load(f)["brokerServiceUrl"].replace("localhost", "127.0.0.1")
            for in_txn in (True, False):  # warm: topics, coordinators, code paths
                asyncio.run(phase(url, proc.pid, 5, args.per_txn, args.size, in_txn))
            for i in range(args.rounds):
                for mode in ("plain", "txn"):
                    control("--zero")
                    asyncio.run(phase(url, proc.pid, args.groups, args.per_txn, args.size,
                                      mode == "txn"))
                    before = set(glob.glob(f"{root}/cg.*"))
                    control("--dump", mode)
                    value = wait_for_dump(root, before) / (args.groups * args.per_txn)
                    out[mode].append(value)
                    print(f"{name} round {i + 1} {mode}: {value:,.0f} instructions a message",
                          flush=True)
        finally:
            stop_process(proc, 120)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", metavar="NAME=PATH", required=True,
                        help="a source tree's src directory to run the broker from "
                        "(repeat to compare trees)")
    phase_options(parser)
    parser.add_argument("--rounds", type=int, default=2,
                        help="plain/transaction pairs per tree; the first plain phase of "
                        "a broker often counts its start's leftovers (default 2)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    results = {}
    for spec in args.src:
        name, _, src = spec.partition("=")
        results[name] = measure_tree(name, src, args)
    print(f"{args.groups} groups x {args.per_txn} messages of {args.size} B, "
          f"{args.rounds} rounds; instructions a message (every thread of the broker)")
    for name, got in results.items():
        plain, txn = min(got["plain"]), min(got["txn"])
        print(f"{name}: no transaction {plain:,.0f}, in transactions {txn:,.0f}: extra "
              f"{txn - plain:,.0f} a message, ratio {txn / plain:.3f}x (each phase's "
              "lowest round)")


if __name__ == "__main__":
    main()
