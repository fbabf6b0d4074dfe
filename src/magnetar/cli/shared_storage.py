"""``magnetar check-shared-storage DIR1 [DIR2]``: the POSIX checks brokers sharing a data
directory rely on, run across two mounts of one volume (``storage/shared_checks.py``), a
verdict per check; with one directory (on each broker host), its file system and whether
it holds the cluster's storage identity (``--metadata-store``: the one recorded there).
Also the start-up check of a shared data directory's mount (``storage/mounts.py``) that
``magnetar broker`` and ``standalone`` run in shared mode.

Exit codes: 0 every check passed, 1 one failed (or the directories are not one volume, or
not the cluster's), 2 a bad argument.
"""

from __future__ import annotations

import argparse
import asyncio
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

With one directory (run it on each broker host): its file system, what the brokers would
refuse about it, and its storage identity (`storage-identity.json`, written by the first
broker); with --metadata-store, whether it is the identity recorded for the cluster there,
that is, whether this host's mount is the cluster's volume.

Examples:
  magnetar check-shared-storage /mnt/magnetar/data /mnt/magnetar-check/data
  magnetar check-shared-storage /mnt/magnetar/data --metadata-store zk:s1:2181/magnetar""")
    p.add_argument("dir1", help="the directory through the first mount")
    p.add_argument("dir2", nargs="?", default=None,
                   help="the same directory through a second mount (none: check DIR1 alone)")
    p.add_argument("--metadata-store", default="", metavar="URL",
                   help="the cluster's metadataStoreUrl: compare the identity recorded there")
    p.add_argument("--output", "-o", choices=["table", "json"], default="table",
                   help="table (default) or json")


def run(args: argparse.Namespace) -> int:
    from magnetar.storage.shared_checks import run_checks, same_volume

    if args.dir2 is None:
        return check_one(args.dir1, args.metadata_store, args.output)
    if args.dir1 == args.dir2:
        print("magnetar: give the directory through two mounts (two different paths), e.g. "
              "/mnt/a/data /mnt/b/data; or one directory to check it alone", file=sys.stderr)
        return 2
    for d in (args.dir1, args.dir2):
        mount, _ = mounts.check_data_dir(d)
        if mount is not None and args.output == "table":
            print(f"{d}: {mounts.describe(mount)}")
    ids = [identity_line(d) for d in (args.dir1, args.dir2)]
    if args.output == "table":
        for d, (_, line) in zip((args.dir1, args.dir2), ids, strict=True):
            print(f"{d}: {line}")
    if ids[0][0] and ids[1][0] and ids[0][0] != ids[1][0]:
        print(f"magnetar: {args.dir1} and {args.dir2} hold different storage identities: "
              "not one volume", file=sys.stderr)
        return 1
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


def identity_line(data_dir: str) -> tuple[str | None, str]:
    """(the storage identity in ``data_dir`` or None, a line saying what it holds)."""
    from magnetar.storage.identity import IDENTITY_FILE, IdentityUnreadable, read_identity

    try:
        found = read_identity(data_dir)
    except (OSError, IdentityUnreadable) as exc:
        return None, f"its {IDENTITY_FILE} cannot be read: {exc}"
    if found is None:
        return None, f"no storage identity ({IDENTITY_FILE}; the first broker writes it)"
    return found.id, f"storage identity {found.id} (cluster {found.cluster or '?'})"


def check_one(data_dir: str, metadata_store: str, output: str) -> int:
    """One directory: its file system, what is refused about it, its identity (compared
    with the cluster's recorded one given ``metadata_store``). 0 when nothing is wrong."""
    mount, found = mounts.check_data_dir(data_dir)
    ident, line = identity_line(data_dir)
    wrong = list(found)
    recorded = None
    if metadata_store:
        try:
            recorded = asyncio.run(_recorded(metadata_store))
        except Exception as exc:
            print(f"magnetar: cannot read the metadata store {metadata_store}: {exc}",
                  file=sys.stderr)
            return 1
        if recorded is None:
            line += f"; none recorded in {metadata_store} yet (no broker has started)"
        elif ident != recorded:
            wrong.append(f"the cluster's storage identity is {recorded} (in {metadata_store}): "
                         f"this is not its volume; check {mounts.mount_to_check(data_dir)}")
        else:
            line += f", the cluster's (recorded in {metadata_store})"
    if output == "json":
        print(json.dumps({"dir": data_dir, "fileSystem": mounts.describe(mount) if mount else None,
                          "identity": ident, "recordedIdentity": recorded, "problems": wrong},
                         indent=2))
    else:
        print(f"{data_dir}: {mounts.describe(mount) if mount else 'unknown file system'}")
        print(f"{data_dir}: {line}")
        for problem in wrong:
            print(f"FAIL  {problem}")
        print("ok" if not wrong else f"{len(wrong)} problem(s): brokers must not use it as it is")
    return 1 if wrong else 0


async def _recorded(url: str) -> str | None:
    from magnetar.broker.cluster.storage_identity import recorded_identity
    from magnetar.metadata import create_metadata_store

    store = await create_metadata_store(url)
    try:
        found = await recorded_identity(store)
    finally:
        await store.close()
    return found.id if found is not None else None
