"""``magnetar cluster up``: a local cluster in one command.

It starts a ZooKeeper server (Debian's ``zkServer.sh`` under /usr/share/zookeeper, on its
own port, data under ``--dir``), initializes the cluster's metadata there
(``magnetar initialize-cluster-metadata``), starts N brokers (``magnetar broker``) joined
through it on consecutive ports, sharing one data directory (``--dir``/data,
``magnetarSharedStorage``), prints their URLs, and on Ctrl-C (or SIGTERM) stops the
brokers, then ZooKeeper. A broker that dies leaves the others serving (its bundles move
to them); ZooKeeper exiting stops everything. Exit status: 0 after a clean stop, 1 if a
part could not start (its log is named), 2 for bad options.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

ZK_SERVER = os.environ.get("MAGNETAR_ZK_SERVER", "/usr/share/zookeeper/bin/zkServer.sh")
#: a local cluster's ZooKeeper session: short, so that a dead broker's bundles move in
#: seconds (Pulsar's default, 30 s, is made for a ZooKeeper across a network)
SESSION_TIMEOUT_MS = 6000


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                parents: list[argparse.ArgumentParser]) -> None:
    cluster = sub.add_parser(
        "cluster", parents=parents, help="run a local cluster: ZooKeeper and N brokers",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Run a cluster on this machine: a ZooKeeper server and N brokers on consecutive ports.

Examples:
  magnetar cluster up --brokers 2          # pulsar://localhost:6650,localhost:6651
  magnetar cluster up --brokers 3 --port 7650 --http-port 9080 --dir /tmp/c3

Clients may use any broker, or all of them (pulsar://localhost:6650,localhost:6651).
Stop with Ctrl-C: the brokers stop first (their bundles released), then ZooKeeper.
See docs/cluster.md for a cluster across machines.""")
    verbs = cluster.add_subparsers(dest="cluster_command", metavar="VERB")
    up = verbs.add_parser(
        "up", parents=parents, help="start ZooKeeper and the brokers",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Start ZooKeeper and N brokers sharing one data directory; Ctrl-C stops "
                    "them.\n\nExamples:\n  magnetar cluster up --brokers 2\n"
                    "  magnetar cluster up --brokers 3 --port 7650 --http-port 9080 --dir /tmp/c3")
    up.add_argument("--brokers", type=int, default=2, help="how many brokers (default 2)")
    up.add_argument("--port", type=int, default=6650,
                    help="the first broker's binary port; the next ones follow (default 6650)")
    up.add_argument("--http-port", type=int, default=8080,
                    help="the first broker's web port; the next ones follow (default 8080)")
    up.add_argument("--zk-port", type=int, default=0,
                    help="ZooKeeper's client port (default: a free one)")
    up.add_argument("--dir", default="data/cluster",
                    help="where ZooKeeper's and the brokers' data live (default data/cluster)")
    up.add_argument("--config", metavar="FILE",
                    help="a broker.conf every broker reads (cluster keys are set on top)")
    up.add_argument("--cluster-name", default="standalone", help="clusterName (default standalone)")
    up.add_argument("--advertised-address", default="localhost",
                    help="the host name in the brokers' URLs (default localhost)")
    up.add_argument("--session-timeout-ms", type=int, default=SESSION_TIMEOUT_MS,
                    help="the brokers' ZooKeeper session timeout "
                         "(metadataStoreSessionTimeoutMillis): a broker that dies loses its "
                         f"bundles after about this long (default {SESSION_TIMEOUT_MS})")


def _ruok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Child:
    def __init__(self, name: str, cmd: list[str], log_path: Path,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log_path
        log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        log.close()

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def run_up(args: argparse.Namespace) -> int:
    if not 1 <= args.brokers <= 64:
        print("magnetar: --brokers must be between 1 and 64", file=sys.stderr)
        return 2
    if not 2000 <= args.session_timeout_ms <= 60000:  # ZooKeeper's bounds (tickTime 1 s)
        print("magnetar: --session-timeout-ms must be between 2000 and 60000", file=sys.stderr)
        return 2
    if not os.path.exists(ZK_SERVER):
        print(f"magnetar: ZooKeeper is not installed ({ZK_SERVER} is missing; on Debian: "
              "apt-get install zookeeper)", file=sys.stderr)
        return 1
    root = Path(args.dir).resolve()
    (root / "zookeeper" / "data").mkdir(parents=True, exist_ok=True)
    zk_port = args.zk_port or _free_port()
    (root / "zookeeper" / "zoo.cfg").write_text(
        f"tickTime=1000\nmaxSessionTimeout=60000\nclientPort={zk_port}\nclientPortAddress=127.0.0.1\n"
        f"dataDir={root / 'zookeeper' / 'data'}\nadmin.enableServer=false\nmaxClientCnxns=0\n"
        "4lw.commands.whitelist=ruok\n")
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    children: list[_Child] = []
    try:
        zk = _Child("zookeeper", [ZK_SERVER, "start-foreground", str(root / "zookeeper" / "zoo.cfg")],
                    root / "zookeeper" / "server.log",
                    env=dict(os.environ, ZOO_LOG_DIR=str(root / "zookeeper"), JMXDISABLE="true"))
        children.append(zk)
        if not _wait(lambda: _ruok(zk_port), zk, 120, stop):
            return _failed(zk)
        store_url = f"zk:127.0.0.1:{zk_port}"
        host = args.advertised_address
        ports = [(args.port + i, args.http_port + i) for i in range(args.brokers)]
        init = subprocess.run(
            [sys.executable, "-m", "magnetar.cli.main", "initialize-cluster-metadata",
             "--cluster", args.cluster_name, "--metadata-store", store_url,
             "--web-service-url", f"http://{host}:{ports[0][1]}",
             "--broker-service-url", "pulsar://" + ",".join(f"{host}:{p}" for p, _ in ports)],
            capture_output=True, text=True, timeout=120)
        if init.returncode != 0:
            print(f"magnetar: initialize-cluster-metadata failed: {init.stderr.strip()}",
                  file=sys.stderr)
            return 1
        base = Path(args.config).read_text() if args.config else ""
        urls = []
        for i, (port, http_port) in enumerate(ports):
            d = root / f"broker-{i}"
            d.mkdir(exist_ok=True)
            conf = d / "broker.conf"
            conf.write_text(base + f"\nmetadataStoreUrl={store_url}\nadvertisedAddress={host}\n"
                            f"clusterName={args.cluster_name}\nmagnetarSharedStorage=true\n"
                            f"metadataStoreSessionTimeoutMillis={args.session_timeout_ms}\n")
            ready = d / "ready.json"
            ready.unlink(missing_ok=True)
            broker = _Child(f"broker-{i}", [
                sys.executable, "-m", "magnetar.cli.main", "broker", "--data-dir",
                str(root / "data"), "--port", str(port), "--http-port", str(http_port),
                "--config", str(conf), "--ready-file", str(ready)], d / "broker.log")
            children.append(broker)
            if not _wait(ready.exists, broker, 120, stop):
                return _failed(broker)
            info = json.loads(ready.read_text())
            urls.append((info["brokerServiceUrl"], info["webServiceUrl"]))
        for i, (service_url, web_url) in enumerate(urls):
            print(f"broker-{i}: {service_url} {web_url}")
        print(f"service URL: pulsar://{','.join(u.split('://', 1)[1] for u, _ in urls)}")
        print(f"metadata store: {store_url}, session timeout "
              f"{args.session_timeout_ms / 1000:g} s (a broker that dies loses its bundles "
              f"after about that) (data in {root}); Ctrl-C stops everything", flush=True)
        reported: set[str] = set()
        while not stop["now"]:
            if zk.proc.poll() is not None:
                print(f"magnetar: ZooKeeper exited ({zk.proc.returncode}); see {zk.log_path}; "
                      "stopping", file=sys.stderr)
                return 1
            for child in children[1:]:  # a broker that dies leaves the others serving
                if child.proc.poll() is not None and child.name not in reported:
                    reported.add(child.name)
                    print(f"magnetar: {child.name} exited ({child.proc.returncode}); its "
                          f"bundles move to the others; see {child.log_path}",
                          file=sys.stderr, flush=True)
            time.sleep(0.2)  # idle wait for a signal; nothing to synchronise with
        return 0
    finally:
        for child in reversed(children):  # brokers first, ZooKeeper last
            child.stop()


def _wait(ready: Callable[[], bool], child: _Child, timeout: float, stop: dict[str, bool]) -> bool:
    deadline = time.monotonic() + timeout
    while not stop["now"] and time.monotonic() < deadline:
        if ready():
            return True
        if child.proc.poll() is not None:
            return False
        time.sleep(0.05)  # polling a child process, bounded by the deadline
    return False


def _failed(child: _Child) -> int:
    tail = child.log_path.read_text(errors="replace")[-2000:] if child.log_path.exists() else ""
    print(f"magnetar: {child.name} did not start; its log ({child.log_path}) ends:\n{tail}",
          file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    if getattr(args, "cluster_command", None) == "up":
        return run_up(args)
    print("magnetar: cluster needs a verb: up", file=sys.stderr)
    return 2
