"""A network of "hosts" on one machine, for partition tests: each host a network namespace
with its own address, all joined by a bridge that lives in a namespace of its own (the
machine's own network and addresses are never touched), plus the processes the tests run
on those hosts (ZooKeeper, brokers) and the faults they inject (a host's link down, a host
cut from some peers with ``iptables``, a process frozen with SIGSTOP).

- `NetBed`: builds the namespaces, the bridge and one veth pair per host; starts processes
  inside a host (``nsenter --net``: the mount namespace stays the machine's, so files and
  mounts are shared as on one host); tears everything down on `close` (processes first,
  then the namespaces, which takes their veths and firewall rules with them), also when a
  test fails half-way (`defer` adds undo steps, such as unmounting). A crashed earlier run's namespaces (their names carry the dead pid)
  are removed when the next bed is built.
- `Host`: one namespace; `call` / `thread` run Python code of the test process inside it (a
  thread that entered the namespace: its sockets, and the threads it starts, such as the
  official client's, live there), `link_down` / `cut_from` the faults (and `NetBed.lose`:
  a whole host, its link and every process on it).
- `NsZooKeeper`, `NsBroker`: Debian's ZooKeeper and a ``magnetar standalone`` broker of a
  cluster on a host, on fixed ports (each host has its own port space).

`netbed_missing_reason` says why a bed cannot be built here (not root, no ``ip`` or
``nsenter``, namespaces refused); tests skip with it. Traffic only flows between these
namespaces: addresses are in 10.213.0.0/24 on interfaces that exist only inside them.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.cluster.brokers import ChildBroker
from tests.zkserver import ZK_SERVER, zk_missing_reason

log = logging.getLogger(__name__)

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")
SUBNET = "10.213.0"  # /24, only on interfaces inside the bed's own namespaces
PREFIX = "mnb"  # namespace names: mnb<pid of the test process>-<host>
_libc = ctypes.CDLL(None, use_errno=True)


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command of the bed (``ip``, ``iptables``); its error output in the exception."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def netbed_missing_reason(needs_iptables: bool = True) -> str | None:
    """Why a bed of network namespaces cannot be built here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs, iptables); CI runs as root"
    for tool in ("ip", "nsenter", *(["iptables"] if needs_iptables else [])):
        if shutil.which(tool) is None:
            return (f"{tool} is not installed (scripts/test installs Debian's iproute2,"
                    " util-linux and iptables when it runs as root with apt-get)")
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"network namespaces are refused here: {made.stderr.strip()}"
    try:
        if needs_iptables:
            rules = subprocess.run(["ip", "netns", "exec", probe, "iptables", "-S"],
                                   capture_output=True, text=True)
            if rules.returncode != 0:
                return f"iptables does not work in a namespace here: {rules.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _enter(ns: str) -> None:
    """Move the calling thread into network namespace ``ns``."""
    fd = os.open(NETNS_DIR / ns, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {ns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _remove_stale_namespaces() -> None:
    """Delete the namespaces of earlier beds whose test process is gone (a crashed run)."""
    if not NETNS_DIR.is_dir():
        return
    for entry in NETNS_DIR.iterdir():
        m = re.fullmatch(rf"{PREFIX}(\d+)-.+", entry.name)
        if m and int(m.group(1)) != os.getpid() and not Path(f"/proc/{m.group(1)}").exists():
            sh("ip", "netns", "del", entry.name, check=False)


class Host:
    """One namespace of the bed: ``name``, its namespace ``ns``, its ``address``."""

    def __init__(self, bed: NetBed, name: str, address: str) -> None:
        self.bed, self.name, self.address = bed, name, address
        self.ns = f"{bed.prefix}-{name}"
        self.port_name = f"h-{name}"  # its veth's end on the bridge (in the switch namespace)

    def __repr__(self) -> str:
        return f"Host({self.name}, {self.address})"

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run in this host's network namespace (same mounts as the machine)."""
        return ["nsenter", f"--net={NETNS_DIR / self.ns}", *argv]

    def sh(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return sh(*self.command(list(argv)), check=check)

    def thread(self, target: Callable[[], object], name: str = "") -> threading.Thread:
        """A started daemon thread running ``target`` inside this host's namespace."""
        def run() -> None:
            _enter(self.ns)
            target()

        t = threading.Thread(target=run, name=name or f"in-{self.name}", daemon=True)
        t.start()
        return t

    def call(self, fn: Callable[..., T], *args: Any, timeout: float = 120.0) -> T:
        """``fn(*args)`` run inside this host's namespace (in a thread of its own)."""
        out: list[T] = []
        err: list[BaseException] = []

        def run() -> None:
            try:
                _enter(self.ns)
                out.append(fn(*args))
            except BaseException as e:  # handed to the caller
                err.append(e)

        t = threading.Thread(target=run, name=f"in-{self.name}", daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            raise TimeoutError(f"{fn!r} in {self.name} did not return in {timeout} s")
        if err:
            raise err[0]
        return out[0]

    # faults
    def link_down(self) -> None:
        """Pull the host's cable: its veth's end on the bridge goes down (the host sees no
        carrier; nothing reaches it, nothing leaves it)."""
        sh("ip", "-n", self.bed.switch, "link", "set", self.port_name, "down")

    def link_up(self) -> None:
        sh("ip", "-n", self.bed.switch, "link", "set", self.port_name, "up")

    def cut_from(self, *peers: Host) -> None:
        """Drop every packet between this host and ``peers`` (iptables in this host)."""
        for peer in peers:
            self.sh("iptables", "-A", "INPUT", "-s", peer.address, "-j", "DROP")
            self.sh("iptables", "-A", "OUTPUT", "-d", peer.address, "-j", "DROP")

    def heal(self) -> None:
        """Undo `cut_from` and `link_down`."""
        self.sh("iptables", "-F", check=False)
        self.link_up()

    def reachable(self, address: str, port: int, timeout: float = 1.0) -> bool:
        """Whether a TCP connection from this host to ``address:port`` succeeds."""
        def attempt() -> bool:
            try:
                with socket.create_connection((address, port), timeout=timeout):
                    return True
            except OSError:
                return False

        return self.call(attempt)


class NetBed:
    """Namespaces joined by a bridge; see the module's docstring. Use as a context manager
    (or call `close`): everything it made goes, whatever happened in between."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.prefix = f"{PREFIX}{os.getpid()}"
        self.switch = f"{self.prefix}-sw"
        self.hosts: dict[str, Host] = {}
        self.processes: list[tuple[Host | None, subprocess.Popen[bytes]]] = []
        self._deferred: list[Callable[[], object]] = []
        self._namespaces: list[str] = []
        self.zookeeper: NsZooKeeper | None = None  # set by whoever starts one on the bed
        _remove_stale_namespaces()
        try:
            self._add_namespace(self.switch)
            sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> NetBed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _add_namespace(self, ns: str) -> None:
        sh("ip", "netns", "del", ns, check=False)  # a leftover of this very process
        sh("ip", "netns", "add", ns)
        self._namespaces.append(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")

    def add_host(self, name: str) -> Host:
        """A new host on the bridge, with the next address (10.213.0.10, .11, ...)."""
        if len(name) > 12 or not re.fullmatch(r"[a-z0-9]+", name):
            raise ValueError(f"host name {name!r}: 1-12 lower-case letters or digits")
        host = Host(self, name, f"{SUBNET}.{10 + len(self.hosts)}")
        self._add_namespace(host.ns)
        sh("ip", "-n", self.switch, "link", "add", host.port_name, "type", "veth",
           "peer", "name", "eth0", "netns", host.ns)
        sh("ip", "-n", self.switch, "link", "set", host.port_name, "master", "br0", "up")
        sh("ip", "-n", host.ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        sh("ip", "-n", host.ns, "link", "set", "eth0", "up")
        self.hosts[name] = host
        return host

    def popen(self, host: Host, argv: list[str], log_path: Path,
              env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """``argv`` started on ``host`` in a process group of its own (so a signal reaches
        its children too), output appended to ``log_path``; stopped by `close`."""
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(host.command(argv), stdout=out, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
        self.processes.append((host, proc))
        return proc

    def track(self, proc: subprocess.Popen[bytes], host: Host | None = None) -> None:
        """Have `close` (and `lose` of ``host``) kill ``proc``, a process started some other
        way, if it still runs."""
        self.processes.append((host, proc))

    def defer(self, undo: Callable[[], object]) -> None:
        """Have `close` call ``undo`` (last deferred first, before the processes are killed):
        for what a test sets up beyond processes, such as a mount."""
        self._deferred.append(undo)

    def lose(self, host: Host) -> None:
        """Lose ``host`` as a whole: its link down, then every process started on it killed."""
        host.link_down()
        for on, proc in self.processes:
            if on is host:
                _kill(proc)

    def close(self) -> None:
        deferred, self._deferred = self._deferred, []
        for undo in reversed(deferred):
            try:
                undo()
            except Exception:  # the rest is undone anyway
                log.exception("netbed: undoing %r failed", undo)
        procs, self.processes = self.processes, []
        for _, proc in procs:
            _kill(proc)
        names, self._namespaces = self._namespaces, []
        for ns in reversed(names):
            sh("ip", "netns", "del", ns, check=False)
        self.hosts.clear()


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    """``sig`` to ``proc``'s process group if it leads one (`NetBed.popen`), else to it."""
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` (its group: see `_signal`), thawed first: a frozen process cannot die."""
    if proc.poll() is None:
        _signal(proc, signal.SIGCONT)
        _signal(proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)


def freeze(proc: subprocess.Popen[bytes]) -> None:
    """SIGSTOP ``proc`` (with its children if it leads a group: `NetBed.popen`)."""
    _signal(proc, signal.SIGSTOP)


def thaw(proc: subprocess.Popen[bytes]) -> None:
    _signal(proc, signal.SIGCONT)


class NsZooKeeper:
    """Debian's ZooKeeper, standalone, on ``host``:``port`` with its files in ``root``."""

    def __init__(self, bed: NetBed, host: Host, root: Path, port: int = 2181,
                 tick_ms: int = 1000) -> None:
        reason = zk_missing_reason()
        if reason:
            raise RuntimeError(reason)
        self.bed, self.host, self.root, self.port = bed, host, root, port
        self.proc: subprocess.Popen[bytes] | None = None
        (root / "data").mkdir(parents=True, exist_ok=True)
        # sessions may be 2 to 20 ticks long
        (root / "zoo.cfg").write_text(
            f"tickTime={tick_ms}\nclientPort={port}\nclientPortAddress={host.address}\n"
            f"dataDir={root / 'data'}\nadmin.enableServer=false\nmaxClientCnxns=0\n"
            "4lw.commands.whitelist=ruok,dump\n")

    @property
    def address(self) -> str:
        return f"{self.host.address}:{self.port}"

    def url(self, chroot: str = "") -> str:
        return f"zk:{self.address}{chroot}"

    def start(self, timeout: float = 90.0) -> NsZooKeeper:
        env = dict(os.environ, ZOO_LOG_DIR=str(self.root), JMXDISABLE="true",
                   JVMFLAGS="-Xmx192m -XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        self.proc = self.bed.popen(self.host, [ZK_SERVER, "start-foreground",
                                               str(self.root / "zoo.cfg")],
                                   self.root / "server.log", env)
        deadline = time.monotonic() + timeout
        while not self.host.call(self._ruok):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}: "
                                   + (self.root / "server.log").read_text()[-2000:])
            if time.monotonic() > deadline:
                raise RuntimeError(f"ZooKeeper did not answer on {self.address} in {timeout} s")
            time.sleep(0.1)
        return self

    def _ruok(self) -> bool:
        try:
            with socket.create_connection((self.host.address, self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def sessions(self) -> set[int]:
        """The sessions the server tracks now (the ``dump`` command, from its own host:
        this works with the host's link down)."""
        def dump() -> str:
            with socket.create_connection((self.host.address, self.port), timeout=5) as s:
                s.sendall(b"dump")
                out = b""
                while chunk := s.recv(65536):
                    out += chunk
            return out.decode()

        found = {int(sid, 16) for sid in re.findall(r"0x([0-9a-f]+)", self.host.call(dump))}
        return found - {0}  # 0: the connection asking, which has no session

    def wait_expired(self, sessions: set[int], timeout: float) -> bool:
        """Whether none of ``sessions`` is tracked any more within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while self.sessions() & sessions:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def freeze(self) -> None:
        assert self.proc is not None
        freeze(self.proc)

    def thaw(self) -> None:
        assert self.proc is not None
        thaw(self.proc)


class NsBroker(ChildBroker):
    """``magnetar standalone`` of the cluster on ZooKeeper ``zk_url``, on ``host`` (binary
    port 6650, web port 8080, both on the host's address), its files under ``root``."""

    def __init__(self, bed: NetBed, host: Host, root: Path, zk_url: str,
                 extra: dict[str, str] | None = None, data_dir: Path | None = None) -> None:
        conf = {"metadataStoreUrl": zk_url, "advertisedAddress": host.address,
                "bindAddress": host.address, "metadataStoreSessionTimeoutMillis": "4000",
                "loadBalancerReportUpdateMinIntervalMillis": "1000", **(extra or {})}
        super().__init__(root, conf, "standalone", data_dir, 6650, 8080)
        self.bed, self.host = bed, host
        self.command = host.command(self.command)

    @property
    def url(self) -> str:
        return f"pulsar://{self.host.address}:{self.port}"

    service_url = url

    @property
    def web_url(self) -> str:
        return f"http://{self.host.address}:{self.http_port}"

    def start(self, timeout: float = 60.0) -> NsBroker:
        super().start(timeout)
        assert self.proc is not None
        self.bed.track(self.proc, self.host)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def freeze(self) -> None:
        assert self.proc is not None
        freeze(self.proc)

    def thaw(self) -> None:
        assert self.proc is not None
        thaw(self.proc)

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        super().stop(timeout)
