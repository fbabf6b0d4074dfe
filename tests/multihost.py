"""A cluster spread over hosts, on the partition test bed (tests/netbed.py): a ZooKeeper
ensemble of three servers on ``zk1``-``zk3``, a GlusterFS replica-3 volume whose three
bricks are served by three glusterd peers on ``s1``-``s3``, and broker hosts ``b1``, ``b2``
each with its own FUSE mount of that volume (a broker's data directory), plus ``client``.

- `NsEnsembleMember`: one ZooKeeper server of the ensemble (``server.N`` lines and ``myid``),
  `wait_quorum` waits for the ensemble and names its leader (the ``srvr`` command).
- `NsGlusterd`: glusterd on a storage host. Three glusterd on one machine would share
  ``/var/lib/glusterd``, ``/run/gluster`` and ``/var/log/glusterfs`` (peer identity, brick
  and self-heal daemon pid files and sockets): each runs in a mount namespace of its own
  where those three are bind mounts of the host's own directories, and in a PID namespace
  of its own, so losing the host (`NsGlusterd.kill`) ends glusterd with its brick and
  self-heal processes at once, as a power cut would. The bricks' files stay visible from
  the test (they are ordinary directories) for the heal check.
- `MultiHost`: builds the whole (timing each step in ``timings``), mounts the volume on the
  broker hosts with the FUSE options the brokers need, starts the brokers, and undoes
  everything through the bed (`NetBed.defer`) also when a step fails.
- Every step is docs/deploy.md's own (`recipe`: its blocks under ``<!-- deploy:NAME -->``
  markers): its zoo.cfg and myid command, its ``gluster`` commands, its /etc/fstab line, its
  ``initialize-cluster-metadata`` command, its broker.conf and its unit's ``ExecStart``,
  with the bed's addresses and directories put in place of the recipe's names and paths
  (`place`), so the recipe cannot drift from what the tests run.

`multihost_missing_reason` says why it cannot be built here (root, namespaces, FUSE,
GlusterFS, ZooKeeper). Traffic stays inside the bed's namespaces.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from magnetar.testing import COMMAND
from tests.netbed import Host, NetBed, NsBroker, NsZooKeeper, netbed_missing_reason, sh
from tests.zkserver import ZK_SERVER, zk_missing_reason

DEPLOY = Path(__file__).resolve().parent.parent / "docs" / "deploy.md"
VOLUME = "magnetar"  # the recipe's volume name
BRICK = "/srv/gluster/brick"  # the recipe's brick directory
GLUSTER_DIRS = ("/var/lib/glusterd", "/run/gluster", "/var/log/glusterfs")


def recipe(path: Path = DEPLOY) -> dict[str, str]:
    """docs/deploy.md's blocks by marker name (``<!-- deploy:NAME -->`` then a fenced block)."""
    found = re.findall(r"<!-- deploy:([\w.]+) -->\n```[a-z]*\n(.*?)```", path.read_text(),
                       re.S)
    return dict(found)


def place(text: str, names: dict[str, str]) -> str:
    """``text`` with the recipe's machine names (``s1``...) replaced as ``names`` says."""
    return re.sub(r"\b(s\d)\b", lambda m: names.get(m.group(1), m.group(1)), text)


def broker_conf(text: str) -> dict[str, str]:
    """A broker.conf's keys and values."""
    return dict(line.split("=", 1) for line in text.splitlines()
                if line.strip() and not line.startswith("#"))


def multihost_missing_reason() -> str | None:
    """Why the multi-host bed cannot be built here, or None."""
    reason = netbed_missing_reason() or zk_missing_reason()
    if reason:
        return reason
    for tool in ("glusterd", "gluster", "mount.glusterfs", "unshare"):
        if shutil.which(tool) is None and not os.path.exists(f"/sbin/{tool}"):
            return (f"{tool} is not installed (scripts/test installs Debian's glusterfs-server"
                    " when it runs as root with apt-get)")
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse: the GlusterFS client mounts the volume with FUSE"
    return None


class NsEnsembleMember(NsZooKeeper):
    """Server ``myid`` of a ZooKeeper ensemble whose members are ``peers`` (in id order)."""

    def __init__(self, bed: NetBed, host: Host, root: Path, myid: int, peers: list[Host],
                 port: int = 2181, tick_ms: int = 1000) -> None:
        super().__init__(bed, host, root, port, tick_ms)
        self.myid = myid
        steps = recipe()
        names = {f"s{i}": p.address for i, p in enumerate(peers, 1)}
        data = str(root / "data")
        cfg = place(steps["zoo.cfg"], names).replace("/var/lib/zookeeper", data)
        assert f"clientPort={port}\n" in cfg, cfg
        (root / "zoo.cfg").write_text(cfg + f"clientPortAddress={host.address}\n")
        # the recipe's myid command (shown for server 2), for this server
        myid_cmd = steps["myid"].strip().replace("echo 2 ", f"echo {myid} ")
        sh("bash", "-c", myid_cmd.replace("/var/lib/zookeeper", data))
        assert (root / "data" / "myid").read_text().strip() == str(myid)

    def start(self, timeout: float = 90.0) -> NsEnsembleMember:
        """Start the server (not waiting: a member answers only once a quorum runs)."""
        env = dict(os.environ, ZOO_LOG_DIR=str(self.root), JMXDISABLE="true",
                   JVMFLAGS="-Xmx192m -XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        self.proc = self.bed.popen(self.host, [ZK_SERVER, "start-foreground",
                                               str(self.root / "zoo.cfg")],
                                   self.root / "server.log", env)
        return self

    def mode(self) -> str | None:
        """``leader``, ``follower``, or None when it does not serve (no quorum, stopped)."""
        def srvr() -> str:
            try:
                with socket.create_connection((self.host.address, self.port), timeout=2) as s:
                    s.sendall(b"srvr")
                    out = b""
                    while chunk := s.recv(4096):
                        out += chunk
                return out.decode(errors="replace")
            except OSError:
                return ""

        m = re.search(r"Mode: (\w+)", self.host.call(srvr))
        return m.group(1) if m else None

    def kill(self) -> None:
        """Lose this server: SIGKILL (its port closes; no goodbye to the others)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


def wait_quorum(members: list[NsEnsembleMember], timeout: float = 90.0) -> NsEnsembleMember:
    """The leader, once every running member serves (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        running = [m for m in members if m.proc is not None and m.proc.poll() is None]
        modes = [m.mode() for m in running]
        if all(modes) and "leader" in modes:
            return running[modes.index("leader")]
        if time.monotonic() > deadline:
            raise RuntimeError(f"no ZooKeeper quorum in {timeout} s: modes {modes}")
        time.sleep(0.2)


class NsGlusterd:
    """glusterd on ``host`` with its state under ``root`` and a brick directory
    ``root/brick`` (see the module's docstring)."""

    def __init__(self, bed: NetBed, host: Host, root: Path) -> None:
        self.bed, self.host, self.root = bed, host, root
        self.brick = root / "brick"
        self.socket = root / "glusterd.socket"
        self.proc: subprocess.Popen[bytes] | None = None
        for d in ("lib", "run", "log"):
            (root / d).mkdir(parents=True, exist_ok=True)
        for keep in ("groups", "hooks"):  # the package's files glusterd reads
            src = Path("/var/lib/glusterd") / keep
            if src.is_dir() and not (root / "lib" / keep).exists():
                shutil.copytree(src, root / "lib" / keep)

    def start(self, timeout: float = 60.0) -> NsGlusterd:
        return self.launch().wait_ready(timeout)

    def launch(self) -> NsGlusterd:
        """Start glusterd (not waiting for it: `wait_ready`)."""
        binds = " && ".join(f"mkdir -p {d} && mount --bind {self.root / n} {d}"
                            for n, d in zip(("lib", "run", "log"), GLUSTER_DIRS, strict=True))
        script = (f"{binds} && exec glusterd -N --xlator-option "
                  f"management.glusterd-sockfile={self.socket} "
                  f"-l {self.root / 'log' / 'glusterd.log'}")
        self.socket.unlink(missing_ok=True)
        self.proc = self.bed.popen(
            self.host, ["unshare", "--pid", "--fork", "--kill-child", "--mount",
                        "--propagation", "private", "--mount-proc", "sh", "-c", script],
            self.root / "glusterd.out")
        return self

    def wait_ready(self, timeout: float = 60.0) -> NsGlusterd:
        """Once glusterd answers its command line (bounded)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while self.cli("peer", "status", check=False).returncode != 0:
            if self.proc.poll() is not None:
                raise RuntimeError(f"glusterd on {self.host.name} exited with "
                                   f"{self.proc.returncode}: "
                                   + (self.root / "glusterd.out").read_text()[-2000:])
            if time.monotonic() > deadline:
                raise RuntimeError(f"glusterd on {self.host.name} did not answer in {timeout} s")
            time.sleep(0.1)
        return self

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``gluster ARGS`` asked of this glusterd (its own socket)."""
        return sh("gluster", f"--glusterd-sock={self.socket}", "--mode=script", *args,
                  check=check)

    def kill(self) -> None:
        """Lose the host's storage: glusterd, its brick and self-heal processes, at once."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None


def wait_usable(data: Path, timeout: float = 60.0) -> None:
    """Make directory ``data`` on a mount whose client may still be reconnecting to its
    bricks (ENOTCONN after its host's link came back): bounded retries."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            data.mkdir(exist_ok=True)
            return
        except OSError as err:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{data}: the mount did not come back in {timeout} s: "
                                   f"{err}") from err
            time.sleep(0.5)


class MultiHost:
    """The cluster of the module's docstring on ``bed``; ``timings`` says how long each
    step took to build. Undone by the bed's `close`."""

    def __init__(self, bed: NetBed, root: Path, brokers: int = 2) -> None:
        self.bed, self.root = bed, root
        self.timings: dict[str, float] = {}
        t0 = time.monotonic()
        zk_hosts = [bed.add_host(f"zk{i}") for i in (1, 2, 3)]
        s_hosts = [bed.add_host(f"s{i}") for i in (1, 2, 3)]
        self.broker_hosts = [bed.add_host(f"b{i}") for i in range(1, brokers + 1)]
        self.client = bed.add_host("client")
        self.zookeepers = [NsEnsembleMember(bed, h, root / h.name, i, zk_hosts)
                           for i, h in enumerate(zk_hosts, 1)]
        for z in self.zookeepers:
            z.start()
        self.glusterds = [NsGlusterd(bed, h, root / h.name) for h in s_hosts]
        bed.defer(self._stop_glusterds)
        for g in self.glusterds:
            g.launch()
        for g in self.glusterds:
            g.wait_ready()
        self.timings["hosts_and_glusterd_s"] = time.monotonic() - t0
        t = time.monotonic()
        self._make_volume()
        self.timings["volume_s"] = time.monotonic() - t
        t = time.monotonic()
        self.mounts = [self._mount(h) for h in self.broker_hosts]
        self.timings["mounts_s"] = time.monotonic() - t
        t = time.monotonic()
        wait_quorum(self.zookeepers)
        self.timings["zookeeper_quorum_s"] = time.monotonic() - t
        self.timings["total_s"] = time.monotonic() - t0
        self.brokers: list[NsBroker] = []

    @property
    def zk_connect(self) -> str:
        return ",".join(z.address for z in self.zookeepers)

    def zk_url(self, chroot: str = "") -> str:
        return f"zk:{self.zk_connect}{chroot}"

    def _stop_glusterds(self) -> None:
        for g in self.glusterds:
            g.kill()

    def _make_volume(self) -> None:
        """The recipe's ``gluster`` commands, asked of the first glusterd (the recipe's
        ``s1``), with ``force`` added to the create (the bricks are on the root file
        system)."""
        first = self.glusterds[0]
        text = place(recipe()["volume"],
                     {f"s{i}": g.host.address for i, g in enumerate(self.glusterds, 1)})
        for g in self.glusterds:
            text = text.replace(f"{g.host.address}:{BRICK}", f"{g.host.address}:{g.brick}")
        for line in text.splitlines():
            argv = shlex.split(line)
            assert argv[0] == "gluster", line
            if argv[1:3] == ["volume", "create"]:
                self._wait_peers()
                # a peer may not know the others' addresses yet: bounded retries
                deadline = time.monotonic() + 60
                while (made := first.cli(*argv[1:], "force", check=False)).returncode != 0:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{line}: {made.stdout} {made.stderr}")
                    time.sleep(0.5)
            else:
                first.cli(*argv[1:])

    def _wait_peers(self) -> None:
        first = self.glusterds[0]
        deadline = time.monotonic() + 60
        while first.cli("pool", "list").stdout.count("Connected") < len(self.glusterds):
            if time.monotonic() > deadline:
                raise RuntimeError("glusterd peers not connected: "
                                   + first.cli("pool", "list").stdout)
            time.sleep(0.2)

    def _mount(self, host: Host) -> Path:
        """The recipe's /etc/fstab line, mounted on ``host`` (its FUSE client there)."""
        mnt = self.root / host.name / "mnt"
        mnt.mkdir(parents=True, exist_ok=True)
        line = place(recipe()["fstab"].strip(),
                     {f"s{i}": g.host.address for i, g in enumerate(self.glusterds, 1)})
        device, where, fstype, options, *_ = line.split()
        assert where == "/mnt/magnetar", line
        opts = [o for o in options.split(",") if o not in ("defaults", "_netdev")]
        opts.append(f"log-file={self.root / host.name / 'fuse.log'}")
        self.bed.defer(lambda: sh("umount", "-l", str(mnt), check=False))
        host.sh("mount", "-t", fstype, "-o", ",".join(opts), device, str(mnt))
        return mnt

    def start_brokers(self, chroot: str, extra: dict[str, str] | None = None
                      ) -> list[NsBroker]:
        """The recipe's cluster on the ensemble's chroot ``/chroot``: its
        ``initialize-cluster-metadata`` command, then one broker per broker host with the
        recipe's broker.conf (``extra`` over it) run as its unit's ``ExecStart`` says, each
        over its own mount (a directory ``chroot`` in the volume)."""
        steps = recipe()
        zk = {f"s{i}": z.host.address for i, z in enumerate(self.zookeepers, 1)}
        brokers = {f"s{i}": h.address for i, h in enumerate(self.broker_hosts, 1)}
        init = re.sub(r"(--(?:web|broker)-service-url\S*) (\S+)",  # every broker, by its host
                      lambda m: f"{m.group(1)} {place(m.group(2), brokers)}", steps["init"].strip())
        init = place(init.replace("2181/magnetar", f"2181/{chroot}"), zk)
        argv = shlex.split(init)
        assert argv[:2] == ["magnetar", "initialize-cluster-metadata"], init
        self.broker_hosts[0].sh(*COMMAND, *argv[1:])
        exec_start = re.search(r"^ExecStart=(.*)$", steps["unit"], re.M)
        assert exec_start, steps["unit"]
        unit_argv = shlex.split(exec_start.group(1))
        assert unit_argv[1:] == ["broker", "--config", "/etc/magnetar/broker.conf"], unit_argv
        self.brokers = []
        for host, mnt in zip(self.broker_hosts, self.mounts, strict=True):
            data = mnt / chroot
            wait_usable(data)
            conf = broker_conf(place(steps["broker.conf"], zk))
            conf["metadataStoreUrl"] = conf["metadataStoreUrl"].replace(
                "2181/magnetar", f"2181/{chroot}")
            conf["advertisedAddress"] = host.address
            conf["magnetarDataDir"] = str(data)
            conf.update(extra or {})
            broker = NsBroker(self.bed, host, self.root / host.name / chroot,
                              conf["metadataStoreUrl"], conf, data)
            broker.command[broker.command.index("standalone")] = unit_argv[1]
            self.brokers.append(broker)
        for b in self.brokers:
            b.start(timeout=90)
        return self.brokers

    def stop_brokers(self) -> None:
        for b in self.brokers:
            b.host.heal()
            b.stop(timeout=15)
        self.brokers = []

    def heal_info(self) -> int:
        """Entries the volume still has to heal, summed over the bricks that answer."""
        out = self.glusterds[0].cli("volume", "heal", VOLUME, "info", check=False).stdout
        return sum(int(n) for n in re.findall(r"Number of entries: (\d+)", out))
