"""Transactions, timed where they run: the broker's CPU time (its event loop's thread,
``time.thread_time_ns``) spent in each of a list of functions, per group of messages, in
transactions against the same messages sent without one, so that a transaction's fixed
cost is split between the commands, the coordinator's records and the marker as it runs
in the broker, warm or cold as it really is (`txn_calls.py` counts the calls,
`txn_instructions.py` the instructions; neither sees a cache miss or the kernel).

The broker (``magnetar standalone`` from ``--src``) runs in a process that wraps each
function of ``FUNCTIONS`` (module and qualified name) with a timer, switched on for a
phase by ``SIGUSR1`` and off by ``SIGUSR2`` (which writes the totals); the phases are
`txn_bench.phase`'s, ``--rounds`` pairs. Times nest: a function's time includes the
wrapped functions it calls, and each wrapped call adds about a microsecond of its own. ``--function MODULE:QUALNAME``
(repeatable) times more (``magnetar.protocol.markers:txn_marker_part``). A function is
wrapped in the module named: one that imported it by name calls the unwrapped one (name
that module instead, as ``FUNCTIONS`` does for ``publish_in_order``).

    python bench/txn_handler_cpu.py --src src --groups 300 --per-txn 100 --rounds 2 --pin
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import importlib
import json
import os
import signal
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from txn_bench import phase, phase_options  # (this directory's)
from txn_calls import served_broker, signalled, wait_for  # (this directory's)

#: (module, qualified name) of each function timed
FUNCTIONS = (
    ("magnetar.broker.connection.base", "CnxBase.buffer_updated"),
    ("magnetar.broker.connection.base", "CnxBase._flush"),
    ("magnetar.protocol.frames", "_parse_command"),
    ("magnetar.broker.connection.transactions", "TransactionCommands.handle_new_txn"),
    ("magnetar.broker.connection.transactions", "TransactionCommands.handle_add_partition_to_txn"),
    ("magnetar.broker.connection.transactions", "TransactionCommands.handle_end_txn"),
    ("magnetar.broker.connection.transactions", "TransactionCommands._end_txn"),
    ("magnetar.broker.transactions.coordinator", "TransactionCoordinator.end_now"),
    ("magnetar.broker.transactions.coordinator", "TransactionCoordinator._store_now"),
    ("magnetar.broker.transactions.participants", "Participants.end_now"),
    ("magnetar.broker.topics.transaction_buffer", "TransactionBuffer.end_now"),
    ("magnetar.broker.topics.transaction_buffer", "TransactionBuffer._marker_stored"),
    ("magnetar.broker.topics.transaction_buffer", "TransactionBuffer.appending"),
    ("magnetar.broker.topics.transaction_buffer", "TransactionBuffer.placed"),
    ("magnetar.broker.topics.producer", "publish_in_order"),
    ("magnetar.storage.ledger.append", "LedgerAppends._on_batch_done"),
)


#: the environment variable that hands ``--function``'s to the broker's process
_MORE = "TXN_HANDLER_CPU_FUNCTIONS"


def serve(out: str, argv: list[str]) -> None:
    """Run ``magnetar`` with ``argv`` in this process, ``FUNCTIONS`` (and those named in
    ``$TXN_HANDLER_CPU_FUNCTIONS``) timed between ``SIGUSR1`` and ``SIGUSR2`` (each stop
    writes ``{name: [ns, calls]}`` to ``out.N``)."""
    spent: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    timing = [False]
    clock = time.thread_time_ns

    def timed(name: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            if not timing[0]:
                return fn(*args, **kwargs)
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += clock() - started
                calls[name] += 1
        return run

    more = [tuple(spec.split(":", 1)) for spec in json.loads(os.environ.get(_MORE, "[]"))]
    for module, qualname in (*FUNCTIONS, *more):
        owner: Any = importlib.import_module(module)
        *path, attr = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, attr, timed(qualname, getattr(owner, attr)))
    dumps = [0]

    def start(*_: object) -> None:
        spent.clear()
        calls.clear()
        timing[0] = True

    def stop(*_: object) -> None:
        timing[0] = False
        with open(f"{out}.{dumps[0]}", "w") as f:
            json.dump({name: [spent[name], calls[name]] for name in spent}, f)
        dumps[0] += 1

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from magnetar.cli.main import main as magnetar_main

    sys.argv = ["magnetar", *argv]
    magnetar_main()


def measure(args: argparse.Namespace) -> dict[str, dict[str, list[int]]]:
    """``{"plain"|"txn": {function: [ns, calls]}}`` summed over the rounds."""
    totals: dict[str, dict[str, list[int]]] = {"plain": {}, "txn": {}}
    cpus = sorted(os.sched_getaffinity(0))
    broker_cpu = cpus[-1] if args.pin and len(cpus) > 1 else None
    if broker_cpu is not None:
        os.sched_setaffinity(0, set(cpus[:-1]))
    with tempfile.TemporaryDirectory(prefix="txn-handler-cpu-") as root:
        out = os.path.join(root, "spent")
        with served_broker(__file__, out, root, args, cpu=broker_cpu, warm_groups=10,
                           env={_MORE: json.dumps(args.function)}) as (url, proc):
            dump = 0
            for i in range(args.rounds):
                for kind in ("plain", "txn"):
                    cpu, _ = asyncio.run(phase(
                        url, proc.pid, args.groups, args.per_txn, args.size, kind == "txn",
                        around=signalled(proc)))
                    path = f"{out}.{dump}"
                    wait_for(path, proc, 60, f"round {i + 1}'s {kind} times")
                    time.sleep(0.2)  # (the dump is written at once; let it finish)
                    with open(path) as f:
                        for name, (ns, n) in json.load(f).items():
                            total = totals[kind].setdefault(name, [0, 0])
                            total[0] += ns
                            total[1] += n
                    dump += 1
                    print(f"round {i + 1} {kind}: broker CPU {cpu:.1f} us/msg (every thread, "
                          "the timers included)", flush=True)
    return totals


def report(totals: dict[str, dict[str, list[int]]], args: argparse.Namespace) -> None:
    groups = args.groups * args.rounds
    plain, txn = totals["plain"], totals["txn"]
    print(f"{args.groups} groups x {args.per_txn} messages of {args.size} B, {args.rounds} "
          "rounds; the loop thread's CPU in each function, per group (a transaction, or as "
          "many messages without one); calls per group in brackets; times nest")

    def extra(name: str) -> float:
        return txn.get(name, [0, 0])[0] - plain.get(name, [0, 0])[0]

    print(f"  {'function':52s} {'without':>16s} {'in a transaction':>18s} {'extra':>9s}")
    for name in sorted(set(plain) | set(txn), key=lambda name: -extra(name)):
        p_ns, p_n = plain.get(name, [0, 0])
        t_ns, t_n = txn.get(name, [0, 0])
        print(f"  {name:52s} {p_ns / groups / 1000:8.1f} us ({p_n / groups:4.1f}) "
              f"{t_ns / groups / 1000:9.1f} us ({t_n / groups:4.1f}) "
              f"{extra(name) / groups / 1000:+8.1f}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", default="src", help="the source tree's src directory")
    phase_options(parser, groups=300)
    parser.add_argument("--rounds", type=int, default=2, help="plain/transaction phase pairs")
    parser.add_argument("--function", action="append", default=[], metavar="MODULE:QUALNAME",
                        help="time this function too (repeatable)")
    parser.add_argument("--pin", action="store_true",
                        help="the broker on the last CPU, this process on the others")
    args = parser.parse_args()
    report(measure(args), args)


if __name__ == "__main__":
    main()
