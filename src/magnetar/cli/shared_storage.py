"""``magnetar check-shared-storage DIR1 DIR2``: the POSIX checks brokers sharing a data
directory rely on, run across two mounts of one volume (``storage/shared_checks.py``), a
verdict per check; and the start-up check of a shared data directory's mount
(``storage/mounts.py``) that ``magnetar broker`` and ``standalone`` run in shared mode.

Exit codes: 0 every check passed, 1 one failed (or the directories are not one volume),
2 a bad argument.
"""

from __future__ import annotations

import argparse
import json
import sys

from magnetar.storage import mounts


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check-shared-storage", parents=parents,
        help="check that two mounts of one volume behave as brokers sharing it need",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Run the POSIX checks brokers sharing a data directory rely on across two mounts of one
volume (on two hosts: the same directory seen through each host's mount; here, two mounts
of it on this host): a file fsynced through one is read whole through the other, stat
equal, a new inode after each replacement, atomic rename, directory fsync, new and deleted
files seen at once, fresh listings, flock across mounts, O_EXCL, appends and overwrites read
back. Each check works in a scratch directory it removes. One verdict per check; exit 1 if
any fails.

Example:
  magnetar check-shared-storage /mnt/magnetar-a/data /mnt/magnetar-b/data""")
    p.add_argument("dir1", help="the directory through the first mount")
    p.add_argument("dir2", help="the same directory through the second mount")
    p.add_argument("--output", "-o", choices=["table", "json"], default="table",
                   help="table (default) or json")


def run(args: argparse.Namespace) -> int:
    from magnetar.storage.shared_checks import run_checks, same_volume

    if args.dir1 == args.dir2:
        print("magnetar: give the directory through two mounts (two different paths), e.g. "
              "/mnt/a/data /mnt/b/data", file=sys.stderr)
        return 2
    for d in (args.dir1, args.dir2):
        mount, _ = mounts.check_data_dir(d)
        if mount is not None and args.output == "table":
            print(f"{d}: {mounts.describe(mount)}")
    try:
        why = same_volume(args.dir1, args.dir2)
    except OSError as exc:
        print(f"magnetar: cannot write in {args.dir1}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if why is not None:
        print(f"magnetar: {why}", file=sys.stderr)
        return 1
    verdicts = run_checks(args.dir1, args.dir2)
    failed = [v for v in verdicts if not v.ok]
    if args.output == "json":
        print(json.dumps([{"check": v.name, "ok": v.ok, "detail": v.detail} for v in verdicts],
                         indent=2))
    else:
        width = max(len(v.name) for v in verdicts)
        for v in verdicts:
            print(f"{'PASS' if v.ok else 'FAIL'}  {v.name.ljust(width)}  {v.detail}")
        print(f"{len(verdicts) - len(failed)} of {len(verdicts)} checks passed"
              + ("" if not failed else ": brokers must not share this volume as it is mounted"))
    return 1 if failed else 0


def refuse_unsafe_mount(data_dir: str, confirmed: str) -> str | None:
    """At a shared-mode start: None when the data directory's file system is safe as far
    as known (one line about it printed), else the message refusing it."""
    mount, found = mounts.check_data_dir(data_dir, confirmed)
    if mount is None:
        return None
    if not found:
        where = "brokers on this host only" if mount.kind == mounts.LOCAL else "brokers on any host"
        print(f"magnetar: shared data directory {data_dir} on {mounts.describe(mount)}: "
              f"for {where}", file=sys.stderr, flush=True)
        return None
    return (f"magnetar: refusing shared storage (magnetarSharedStorage=true) in {data_dir}, on "
            f"{mounts.describe(mount)}:\n  " + "\n  ".join(found)
            + "\n(docs/cluster.md, \"Across hosts\"; `magnetar check-shared-storage DIR1 DIR2` "
              "checks two mounts of the volume)")
