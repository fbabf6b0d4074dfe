"""``magnetar initialize-cluster-metadata`` and ``magnetar copy-standalone-metadata``: the
one-off commands that set up a cluster's metadata store (ZooKeeper).

Exit codes: 0 done, 1 the store cannot be reached, the copy's source is missing, or the
cluster is initialized already with other URLs than those given (what is stored and the
command that changes it are printed), 2 a bad option (a malformed URL).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from magnetar.metadata import InvalidUrlError, MetadataStoreError


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                parents: list[argparse.ArgumentParser]) -> None:
    init = sub.add_parser(
        "initialize-cluster-metadata",
        parents=parents,
        help="create a cluster's metadata in ZooKeeper (once, before its brokers start)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Create the cluster, the tenant public and the namespace public/default in the metadata
store, as Pulsar's `pulsar initialize-cluster-metadata` does. What exists is left as it is,
so running it twice is harmless; run again with other URLs than those stored, it changes
nothing, shows both and exits 1: `magnetar admin clusters update` changes them.

Example:
  magnetar initialize-cluster-metadata --cluster c1 \\
      --metadata-store zk:zk1:2181,zk2:2181/pulsar \\
      --configuration-metadata-store zk:zk1:2181,zk2:2181/pulsar \\
      --web-service-url http://broker1:8080 --broker-service-url pulsar://broker1:6650""",
    )
    init.add_argument("--cluster", required=True, help="the cluster's name (clusterName)")
    _store_options(init)
    init.add_argument("--web-service-url", default="", help="the cluster's HTTP URL")
    init.add_argument("--web-service-url-tls", default="", help="its HTTPS URL")
    init.add_argument("--broker-service-url", default="", help="its pulsar:// URL")
    init.add_argument("--broker-service-url-tls", default="", help="its pulsar+ssl:// URL")
    init.add_argument("--initial-num-transaction-coordinators", type=int, default=16,
                      dest="transaction_coordinators",
                      help="partitions of persistent://pulsar/system/"
                           "transaction_coordinator_assign, one coordinator each (default 16; "
                           "0: none)")

    copy = sub.add_parser(
        "copy-standalone-metadata",
        parents=parents,
        help="copy a standalone's tenants, namespaces, policies, permissions, partitioned "
             "topics and schemas into a cluster's metadata store",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Copy the cluster-wide metadata of a `magnetar standalone` data directory into a cluster's
metadata store, so a deployment that started small can grow: stop the standalone, copy,
then run `magnetar broker --data-dir SAME_DIR --metadata-store ...` (its topics' data and
cursors stay in the data directory) and more brokers beside it.

Example:
  magnetar copy-standalone-metadata --data-dir data/standalone --cluster c1 \\
      --metadata-store zk:zk1:2181/pulsar""",
    )
    copy.add_argument("--data-dir", required=True, help="the standalone's data directory")
    copy.add_argument("--cluster", required=True, help="the cluster's name (clusterName)")
    _store_options(copy)


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata-store", required=True, metavar="URL",
                        help="metadataStoreUrl, e.g. zk:zk1:2181,zk2:2181/chroot")
    parser.add_argument("--configuration-metadata-store", "--configuration-store",
                        default="", metavar="URL",
                        help="configurationMetadataStoreUrl (default: the metadata store)")


def run(args: argparse.Namespace) -> int:
    from magnetar.metadata import parse_store_url
    from magnetar.protocol.naming import check_named_entity

    try:
        check_named_entity("cluster", args.cluster)  # the broker's own rule for the name
    except ValueError as exc:
        print(f"magnetar: {exc}", file=sys.stderr)
        return 2
    try:
        parse_store_url(args.metadata_store)
        if args.configuration_metadata_store:
            parse_store_url(args.configuration_metadata_store)
    except InvalidUrlError as exc:
        print(f"magnetar: {exc}", file=sys.stderr)
        return 2
    lock = None
    if args.command == "copy-standalone-metadata":
        from magnetar.cli.standalone import lock_data_dir

        if not os.path.isdir(args.data_dir):
            print(f"magnetar: no data directory {args.data_dir}", file=sys.stderr)
            return 1
        lock = lock_data_dir(args.data_dir)
        if lock is None:
            print(f"magnetar: {args.data_dir} is in use by a running magnetar; stop it first, "
                  "so that the copy is complete", file=sys.stderr)
            return 1
    try:
        return asyncio.run(_run(args))
    except MetadataStoreError as exc:
        print(f"magnetar: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"magnetar: {exc}", file=sys.stderr)
        return 1
    finally:
        if lock is not None:
            lock.close()


async def _run(args: argparse.Namespace) -> int:
    from magnetar.broker.cluster.metadata_setup import (
        connect_stores,
        copy_standalone_metadata,
        initialize_cluster_metadata,
        stored_cluster_data,
    )

    store, config_store, stores = await connect_stores(
        args.metadata_store, args.configuration_metadata_store)
    try:
        if args.command == "initialize-cluster-metadata":
            created = await initialize_cluster_metadata(
                config_store, args.cluster, web_service_url=args.web_service_url,
                web_service_url_tls=args.web_service_url_tls,
                broker_service_url=args.broker_service_url,
                broker_service_url_tls=args.broker_service_url_tls,
                transaction_coordinators=args.transaction_coordinators)
            cluster_path = f"/admin/clusters/{args.cluster}"
            if created:
                print(f"cluster {args.cluster}: created {', '.join(created)}")
            if cluster_path in created:
                return 0
            stored = await stored_cluster_data(config_store, args.cluster) or {}
            return _compare_stored(args, stored)
        counts = await copy_standalone_metadata(args.data_dir, store, config_store, args.cluster)
        summary = ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "nothing"
        print(f"copied {summary} from {args.data_dir} into {args.metadata_store}")
        return 0
    finally:
        for s in stores:
            await s.close()


#: initialize-cluster-metadata's URL options and the ClusterData fields they set, with the
#: ``magnetar admin clusters update`` flag for each
_URL_FIELDS = (("web_service_url", "serviceUrl", "--url"),
               ("web_service_url_tls", "serviceUrlTls", "--url-secure"),
               ("broker_service_url", "brokerServiceUrl", "--broker-url"),
               ("broker_service_url_tls", "brokerServiceUrlTls", "--broker-url-secure"))


def _compare_stored(args: argparse.Namespace, stored: dict[str, object]) -> int:
    """0 when the URLs given (those not empty) are the ones stored; else what differs, how
    to change it, and 1."""
    differ = [(field, stored.get(field) or "", getattr(args, option))
              for option, field, _ in _URL_FIELDS
              if getattr(args, option) and getattr(args, option) != (stored.get(field) or "")]
    if not differ:
        print(f"cluster {args.cluster}: metadata already exists, left as it is")
        return 0
    lines = [f"magnetar: cluster {args.cluster} is initialized already, with other URLs; "
             "nothing was changed:"]
    lines += [f"  {field}: stored {have or '(none)'!s}, given {want}" for field, have, want in differ]
    flags = " ".join(f"{flag} {getattr(args, option) or stored.get(field) or ''}"
                     for option, field, flag in _URL_FIELDS
                     if getattr(args, option) or stored.get(field))
    lines.append("To change them, with a broker of the cluster running:")
    lines.append(f"  magnetar admin --admin-url {stored.get('serviceUrl') or 'http://BROKER:8080'} "
                 f"clusters update {args.cluster} {flags}")
    print("\n".join(lines), file=sys.stderr)
    return 1
