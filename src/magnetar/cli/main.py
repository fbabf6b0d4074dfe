"""The ``magnetar`` command: argument parsing and dispatch to the sub-commands."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from magnetar import __version__

DESCRIPTION = """\
Magnetar: an Apache Pulsar-compatible message broker in Python.

Any Pulsar client (for instance the official `pulsar-client` package) can point at
pulsar://localhost:6650 once `magnetar standalone` runs.

Quick start:
  magnetar standalone                                  # pulsar://localhost:6650, http://localhost:8080
  magnetar standalone --data-dir /var/lib/magnetar --port 6651
  magnetar standalone --config standalone.conf         # Pulsar broker.conf key names
  magnetar broker --config broker.conf                 # one broker of a cluster (ZooKeeper)
  magnetar cluster up --brokers 2                      # ZooKeeper + 2 brokers (docs/cluster.md)
  magnetar tokens --help                               # keys and tokens for authentication
  magnetar admin topics create-partitioned-topic my-topic -p 4   # like pulsar-admin
  magnetar client produce my-topic -m hello -n 10      # like pulsar-client
  magnetar client consume my-topic -s sub -n 10 -p Earliest
  magnetar perf produce my-topic --rate 1000 --time 30 # like pulsar-perf
  magnetar COMMAND --help                              # every option, with examples
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="magnetar",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"magnetar {__version__}")
    log_level = argparse.ArgumentParser(add_help=False)
    log_level.add_argument(
        "--log-level",
        default=argparse.SUPPRESS,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="how much the process logs to stderr (default: WARNING)",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="how much the process logs to stderr (default: WARNING)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument(
        "--output", "-o", choices=["table", "json"], default="table",
        help="table (for people, the default) or json (for scripts)",
    )
    from magnetar.cli import admin, client_cmd, perf

    admin.add_parser(sub, [log_level, output])
    client_cmd.add_parser(sub, [log_level, output])
    perf.add_parser(sub, [log_level, output])

    standalone = sub.add_parser(
        "standalone",
        parents=[log_level],
        help="run a single broker with embedded storage",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Run one broker that serves the Pulsar binary protocol, storing topics on local disk.

Examples:
  magnetar standalone                       # ./data/standalone, port 6650
  magnetar standalone --data-dir /var/lib/magnetar --port 6651
  magnetar standalone --config standalone.conf   # Pulsar broker.conf key names

Settings come from, in increasing priority: built-in defaults, --config FILE (Pulsar's
broker.conf names, e.g. brokerDeduplicationEnabled=true; unknown keys are reported once and
ignored), then these flags. Stop with Ctrl-C (SIGINT) or SIGTERM: pending writes are
flushed first. Every SendReceipt is sent only after its entry is fsynced (group commit),
unless magnetarFsyncPolicy=never or journalSyncData=false.

Exit status: 0 after a clean stop, 1 if the broker cannot start (port in use, data
directory held by another broker), 2 for a bad option or configuration value.""",
    )
    _broker_options(standalone)
    broker = sub.add_parser(
        "broker",
        parents=[log_level],
        help="run one broker of a cluster (metadata in ZooKeeper)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Run one broker of a cluster: its tenants, namespaces, policies, permissions, partitioned
topics and schemas live in the cluster's metadata store (metadataStoreUrl, ZooKeeper), so
every broker of the cluster sees and enforces them; topics' data stays in --data-dir.

Examples:
  magnetar initialize-cluster-metadata --cluster c1 --metadata-store zk:zk1:2181 \\
      --web-service-url http://b1:8080 --broker-service-url pulsar://b1:6650   # once
  magnetar broker --config broker.conf      # metadataStoreUrl=zk:zk1:2181,zk2:2181/pulsar
  magnetar broker --metadata-store zk:zk1:2181 --data-dir /var/lib/magnetar --port 6650

Same options and exit status as `magnetar standalone`; 1 also when the metadata store
cannot be reached (after retrying for metadataStoreOperationTimeoutSeconds).""",
    )
    _broker_options(broker)
    broker.add_argument("--metadata-store", metavar="URL",
                        help="metadataStoreUrl, e.g. zk:zk1:2181,zk2:2181/chroot")
    broker.add_argument("--configuration-metadata-store", metavar="URL",
                        help="configurationMetadataStoreUrl (default: the metadata store)")
    from magnetar.cli import cluster

    cluster.add_parsers(sub, [log_level])
    from magnetar.cli import cluster_up

    cluster_up.add_parsers(sub, [log_level])
    from magnetar.cli import shared_storage

    shared_storage.add_parsers(sub, [log_level])
    from magnetar.cli.tokens import add_parser as add_tokens_parser

    add_tokens_parser(sub, [log_level])
    from magnetar.cli import console

    console.add_parser(sub, [log_level])
    return parser


def _broker_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        help="where topics, cursors and metadata live (default: data/standalone, "
        "or magnetarDataDir from --config)",
    )
    parser.add_argument(
        "--port", type=int, help="binary protocol port (default 6650, brokerServicePort)"
    )
    parser.add_argument(
        "--http-port",
        type=int,
        help="admin HTTP port: REST admin API, HTTP lookup, /metrics (default 8080, "
        "webServicePort; 0 picks a free port, -1 disables it)",
    )
    parser.add_argument(
        "--ready-file",
        metavar="PATH",
        help="once serving, write {\"brokerServiceUrl\", \"webServiceUrl\", \"pid\"} as JSON "
        "to PATH (for scripts and tests that start a broker on free ports: --port 0 --http-port 0)",
    )
    parser.add_argument("--config", metavar="FILE", help="a Pulsar-style broker.conf file")
    parser.add_argument(
        "--bind-address", help="address to listen on (default 0.0.0.0, bindAddress)"
    )
    parser.add_argument(
        "--fsync",
        choices=["always", "group", "never"],
        help="durability of SendReceipts (default group: one fsync per batch of arrivals)",
    )


#: the exit code of a command whose output's reader went away (a shell's for SIGPIPE)
BROKEN_PIPE_EXIT = 141


def main(argv: list[str] | None = None) -> int:
    """Run one command; its output's reader gone (``magnetar ... | head -1``), it stops
    quietly with `BROKEN_PIPE_EXIT`, as Unix tools do, instead of a traceback."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # (the last of the output, while the broken pipe can be caught)
        return code
    except BrokenPipeError:
        # stdout pointed at /dev/null: the interpreter's own flush at exit fails no more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE_EXIT


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "standalone":
        from magnetar.cli.standalone import run_standalone

        return run_standalone(args)
    if args.command == "broker":
        from magnetar.cli.standalone import run_standalone

        return run_standalone(args, cluster_mode=True)
    if args.command == "console":
        from magnetar.cli.console import run as run_console

        return run_console(args)
    if args.command == "cluster":
        from magnetar.cli.cluster_up import run as run_cluster_up

        return run_cluster_up(args)
    if args.command in ("initialize-cluster-metadata", "copy-standalone-metadata"):
        from magnetar.cli.cluster import run

        return run(args)
    if args.command == "check-shared-storage":
        from magnetar.cli.shared_storage import run as run_checks

        return run_checks(args)
    if args.command == "tokens":
        from magnetar.cli.tokens import run_tokens

        return run_tokens(args)
    if args.command == "admin":
        from magnetar.cli.admin import run

        return run(args)
    if args.command == "client":
        from magnetar.cli.client_cmd import run as run_client

        return run_client(args)
    if args.command == "perf":
        from magnetar.cli.perf import run as run_perf

        return run_perf(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
