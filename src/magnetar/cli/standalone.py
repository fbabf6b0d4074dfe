"""``magnetar standalone`` and ``magnetar broker``: build the broker configuration and run
the service until a signal. ``broker`` is one broker of a cluster: its cluster-wide metadata
lives in ``metadataStoreUrl`` (ZooKeeper); ``standalone`` keeps it in its data directory
unless its configuration names a metadata store too.

Exit codes: 0 after a clean stop (SIGINT or SIGTERM), 1 when the broker cannot start (port in
use, data directory held by another broker) or stopped because its shared data directory
lost the cluster's storage identity (unmounted, replaced), 2 for a configuration error
(``magnetar broker`` of a cluster never initialized in its metadata store: the message holds
the ``initialize-cluster-metadata`` command to run; a shared data directory that is not the
cluster's volume: the message names the mount to check).

After a clean stop (exit code 0: every ledger closed and synced, the metadata and storage
databases closed, no thread but the main one left) the process flushes its logs and output
and leaves with `os._exit` (`leave_after_clean_stop`): the interpreter's own teardown, which
frees every object one by one, took ~1 s of a stop at 100,000 loaded topics and has nothing
left to save. Any other ending (an error, a start that failed, a thread still working) exits
the ordinary way.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import errno
import fcntl
import gc
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from magnetar.broker.config import BrokerConfig, ConfigError

log = logging.getLogger(__name__)


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    overrides = {
        "metadataStoreUrl": getattr(args, "metadata_store", None),
        "configurationMetadataStoreUrl": getattr(args, "configuration_metadata_store", None),
        "magnetarDataDir": args.data_dir,
        "brokerServicePort": args.port,
        "webServicePort": args.http_port,
        "bindAddress": args.bind_address,
        "magnetarFsyncPolicy": args.fsync,
    }
    return BrokerConfig.load(args.config, **overrides)


GC_THRESHOLD_0 = 10_000  # first-generation threshold while serving (CPython's default: 700)
#: second-generation threshold while serving (CPython's default: 10): its collections walk
#: at most ~2 x 10,000 young objects, a few ms, even while topic loads keep objects alive
GC_THRESHOLD_1 = 2


def tune_gc_for_serving() -> None:
    """Once the broker serves: take everything allocated at start-up (modules, protobuf
    descriptors, configuration; it lives as long as the process) out of every later
    collection (``gc.freeze``), and collect the first generation every 10,000 new
    container objects instead of every 700. The hot path allocates a few per entry
    (futures, tuples, memoryviews), so with the defaults cyclic collections, full ones
    walking the start-up heap too, took ~15% of a broker's CPU under unbatched load
    (bench/cluster_bench.py --unbatched); cycles are still collected, only less often.
    The middle generation is collected every 2 first-generation collections instead of 10:
    while topics load, most young objects survive, and 10 x 10,000 of them took tens of ms
    to walk at once. What topic loads build is frozen later on (`magnetar.broker.heap`)."""
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD_0, GC_THRESHOLD_1, gc.get_threshold()[2])


def lock_data_dir(data_dir: str, shared: bool = False) -> IO[str] | None:
    """Hold a lock on ``data_dir`` for the life of the process; None if taken. Exclusive,
    unless ``shared`` (the brokers of a cluster sharing the directory: none of them may
    run while a broker alone holds it, and the reverse)."""
    path = Path(data_dir)
    path.mkdir(parents=True, exist_ok=True)
    handle = open(path / "magnetar.lock", "a+")  # noqa: SIM115 - kept open while serving
    try:
        fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    if shared:
        return handle
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def write_ready_file(path: str, urls: dict[str, str | None]) -> None:
    """Write the broker's URLs as JSON, atomically (a reader sees all of it or no file)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        json.dump({**urls, "pid": os.getpid()}, handle)
    os.replace(tmp, path)


def listen_error(exc: OSError, address: str, port: str, fix: str) -> str:
    """One line saying why the broker cannot listen on ``address:port``, and what to do."""
    if isinstance(exc, socket.gaierror):
        return f"magnetar: cannot listen on {address}:{port}: unknown host {address!r} (--bind-address)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return (f"magnetar: cannot listen on {address}:{port}: {address} is not an address of "
                "this machine (--bind-address)")
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno == errno.EADDRINUSE:
        return f"magnetar: cannot listen on {address}:{port}: {reason}. Is another broker running? Pick {fix}."
    return f"magnetar: cannot listen on {address}:{port}: {reason}"


def leave_after_clean_stop(code: int) -> int:
    """End the process with ``code`` once a clean stop closed everything durable, without
    the interpreter's teardown (freeing ~100 objects per loaded topic one by one: ~1 s at
    100,000 topics). First what that exit would still do that matters: the `atexit`
    functions (`logging.shutdown` among them: every handler flushed and closed) and the
    standard streams flushed. Returns ``code`` instead when a thread other than the main
    one (and daemon threads, which that exit would not wait for either) is still alive:
    the ordinary exit then waits for it."""
    if any(t is not threading.main_thread() and not t.daemon and t.is_alive()
           for t in threading.enumerate()):
        return code
    atexit._run_exitfuncs()  # (logging's shutdown among them, last: registered first)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # (a reader gone: nothing left to tell it)
            stream.flush()
    os._exit(code)


def run_standalone(args: argparse.Namespace, cluster_mode: bool = False) -> int:
    """Run the broker until SIGINT or SIGTERM; the exit code. After a clean stop the
    process ends here (`leave_after_clean_stop`)."""
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"magnetar: {exc}", file=sys.stderr)
        return 2
    if cluster_mode and not config.metadataStoreUrl:
        print("magnetar: a broker of a cluster needs metadataStoreUrl (zk:host:2181,...) in "
              "--config or --metadata-store; `magnetar standalone` runs one on its own",
              file=sys.stderr)
        return 2
    if config.magnetarSharedStorage:
        from magnetar.cli.shared_storage import refuse_unsafe_mount

        refusal = refuse_unsafe_mount(config.magnetarDataDir,
                                      config.magnetarSharedStorageVolumeOptionsConfirmed)
        if refusal is not None:
            print(refusal, file=sys.stderr)
            return 2
    from magnetar.broker.service import BrokerService, install_event_loop_policy

    try:
        lock = lock_data_dir(config.magnetarDataDir, config.magnetarSharedStorage)
    except OSError as exc:
        print(f"magnetar: cannot use data directory {config.magnetarDataDir}: {exc}", file=sys.stderr)
        return 1
    if lock is None:
        print(
            f"magnetar: data directory {config.magnetarDataDir} is in use by another magnetar "
            "process; stop it or pick another --data-dir.",
            file=sys.stderr,
        )
        return 1
    from magnetar.storage.descriptors import quiet_accept_errors, raise_open_files_limit

    raise_open_files_limit()  # soft RLIMIT_NOFILE up to the hard limit, as servers do
    install_event_loop_policy()
    started = False
    exit_code = 1  # when it does not start

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        quiet_accept_errors(loop)
        for sig in (signal.SIGINT, signal.SIGTERM):  # a signal during start-up stops after it
            loop.add_signal_handler(sig, stop.set)
        nonlocal exit_code
        cluster = None
        if config.metadataStoreUrl:
            from magnetar.broker.cluster.metadata_setup import (
                ClusterNotInitializedError,
                open_cluster_metadata,
            )
            from magnetar.broker.cluster.storage_identity import StorageIdentityError
            from magnetar.metadata import MetadataStoreError, SessionEvent

            host = config.advertisedAddress or "localhost"
            # (a port chosen at start or none: the defaults, for the command a message shows)
            web_port = config.webServicePort if config.webServicePort > 0 else 8080
            port = config.brokerServicePort if config.brokerServicePort > 0 else 6650
            try:
                cluster = await open_cluster_metadata(
                    config, web_service_url=f"http://{host}:{web_port}",
                    broker_service_url=f"pulsar://{host}:{port}",
                    require_initialized=cluster_mode)
            except MetadataStoreError as exc:
                print(f"magnetar: {exc}", file=sys.stderr)
                return
            except (ClusterNotInitializedError, StorageIdentityError) as exc:
                print(f"magnetar: {exc}", file=sys.stderr)
                exit_code = 2
                return
            if not config.magnetarSharedStorage:
                print(f"magnetar: magnetarSharedStorage=false: this broker serves only the topics "
                      f"in its own directory {config.magnetarDataDir} (no bundle ownership, no "
                      "failover); set magnetarSharedStorage=true with a directory every broker "
                      "mounts to share topics (docs/cluster.md)", file=sys.stderr, flush=True)

            def on_session(event: SessionEvent) -> None:
                if event is SessionEvent.SESSION_LOST and cluster is not None and \
                        cluster.store.session_expired_policy.value == "shutdown":
                    print("magnetar: the metadata store session expired "
                          "(zookeeperSessionExpiredPolicy=shutdown): stopping", file=sys.stderr)
                    stop.set()

            for store in cluster.stores:
                store.register_session_listener(on_session)
        try:
            await _serve_broker(config, cluster.kv if cluster is not None else None, stop,
                                cluster.identity if cluster is not None else None)
        finally:
            if cluster is not None:
                await cluster.close()

    async def _serve_broker(config: BrokerConfig, metadata: Any, stop: asyncio.Event,
                            identity: Any) -> None:
        nonlocal started, exit_code
        try:
            service = BrokerService(config, metadata)
        except ValueError as exc:  # security settings that cannot be used (keys, TLS files)
            print(f"magnetar: {exc}", file=sys.stderr)
            return
        # a broker joining a cluster binds its ports (their numbers go into its registry
        # entry) but accepts connections only once it has joined, so the first clients of
        # a restarted broker are served rather than told their bundle is not owned here
        joining = bool(config.metadataStoreUrl and config.magnetarSharedStorage)
        try:
            await service.start(accept=not joining)
        except OSError as exc:
            await service.stop()
            print(listen_error(exc, config.bindAddress, str(config.brokerServicePort),
                               "another --port"), file=sys.stderr)
            return
        admin = None
        if config.webServicePort >= 0 or config.webServicePortTls >= 0:
            from magnetar.admin import AdminServer

            admin = AdminServer(
                service, config.bindAddress,
                config.webServicePort if config.webServicePort >= 0 else None,
                tls_port=config.webServicePortTls if config.webServicePortTls >= 0 else None)
            try:
                await admin.start(accept=not joining)
            except OSError as exc:
                await admin.stop()
                await service.stop()
                if admin.http_started or config.webServicePort < 0:  # the HTTPS one failed
                    where, fix = f"{config.webServicePortTls} (HTTPS)", "another webServicePortTls"
                else:
                    where, fix = f"{config.webServicePort} (HTTP)", "another --http-port (-1: none)"
                print(listen_error(exc, config.bindAddress, where, fix), file=sys.stderr)
                return
        started = True
        host = config.advertisedAddress or "localhost"
        urls = {
            "brokerServiceUrl": f"pulsar://{host}:{service.port}" if service.port >= 0 else None,
            "brokerServiceUrlTls": f"pulsar+ssl://{host}:{service.security.tls_port}"
            if service.security.tls_port is not None else None,
            "webServiceUrl": f"http://{host}:{admin.port}"
            if admin is not None and admin.port is not None else None,
            "webServiceUrlTls": f"https://{host}:{admin.tls_port}"
            if admin is not None and admin.tls_port is not None else None,
        }
        # bundle ownership and lookup redirects need brokers that can all serve every
        # topic's data: a shared data directory (docs/cluster.md); without one, each broker
        # of a cluster serves the topics of its own directory
        if joining:
            try:
                await service.join_cluster(urls, on_shutdown=stop.set)
            except Exception as exc:
                print(f"magnetar: cannot join the cluster at {config.metadataStoreUrl}: {exc}",
                      file=sys.stderr)
                started = False
                if admin is not None:
                    await admin.stop()
                await service.stop()
                return
            await service.accept_connections()
            if admin is not None:
                await admin.accept_connections()
        watch = None
        if joining and identity is not None:
            from magnetar.broker.cluster.storage_identity import IdentityWatch
            from magnetar.storage.mounts import mount_to_check

            def lost(reason: str) -> None:
                nonlocal started, exit_code
                print(f"magnetar: shared data directory {config.magnetarDataDir}: {reason}; "
                      f"expected storage identity {identity.id}: stopping, its bundles given "
                      f"up (check {mount_to_check(config.magnetarDataDir)})",
                      file=sys.stderr, flush=True)
                started, exit_code = False, 1
                stop.set()

            watch = IdentityWatch(config.magnetarDataDir, identity,
                                  config.magnetarStorageIdentityCheckSeconds, lost)
            watch.start()
        print(
            f"magnetar {'broker' if cluster_mode else 'standalone'}: serving {' and '.join(u for u in urls.values() if u)} "
            f"(data in {config.magnetarDataDir}, fsync {config.fsync_policy})",
            file=sys.stderr,
            flush=True,
        )
        tune_gc_for_serving()
        if getattr(args, "ready_file", None):
            try:
                write_ready_file(args.ready_file, urls)
            except OSError as exc:
                print(f"magnetar: cannot write --ready-file {args.ready_file}: "
                      f"{exc.strerror or exc}", file=sys.stderr)
                started = False
                stop.set()
        await stop.wait()
        stopping = time.monotonic()
        if watch is not None:
            await watch.stop()
        await service.leave_cluster()
        if admin is not None:
            await admin.stop()
        await service.stop()
        log.info("stopped in %.2f s: every ledger closed", time.monotonic() - stopping)

    try:
        asyncio.run(serve())
    finally:
        lock.close()
    code = 0 if started else exit_code
    if code == 0:
        return leave_after_clean_stop(code)
    return code
