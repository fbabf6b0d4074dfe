"""A real ZooKeeper server for tests: Debian's ``zkServer.sh start-foreground`` with a
temporary ``zoo.cfg`` (free client port, data in a temporary directory, no admin server),
stopped and restarted by the fault tests. No mocks: the ZooKeeper backend is tested against
the real thing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from tests.ports import free_port

ZK_SERVER = os.environ.get("MAGNETAR_ZK_SERVER", "/usr/share/zookeeper/bin/zkServer.sh")


def zk_missing_reason() -> str | None:
    """Why a ZooKeeper server cannot be started here, or None."""
    if not os.path.exists(ZK_SERVER):
        return (f"ZooKeeper is not installed ({ZK_SERVER} missing; scripts/test installs"
                " Debian's zookeeper package when it runs as root with apt-get)")
    if shutil.which("java") is None and not os.path.exists("/usr/bin/java"):
        return "ZooKeeper needs Java, and no java is on PATH"
    return None


class ZooKeeperServer:
    """One standalone ZooKeeper on ``127.0.0.1:port`` with its data in ``root``."""

    def __init__(self, root: Path, port: int | None = None, tick_ms: int = 500) -> None:
        self.root = root
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen[bytes] | None = None
        root.mkdir(parents=True, exist_ok=True)
        (root / "data").mkdir(exist_ok=True)
        # tickTime 500 ms: sessions may be 1 s (2 ticks) to 60 s long
        (root / "zoo.cfg").write_text(
            f"tickTime={tick_ms}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "maxSessionTimeout=60000\n"
            f"dataDir={root / 'data'}\nadmin.enableServer=false\nmaxClientCnxns=0\n"
            "4lw.commands.whitelist=ruok,cons\n")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, chroot: str = "") -> str:
        return f"zk:{self.address}{chroot}"

    def start(self, timeout: float = 60.0) -> None:
        env = dict(os.environ, ZOO_LOG_DIR=str(self.root), JMXDISABLE="true",
                   JVMFLAGS="-Xmx192m -XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [ZK_SERVER, "start-foreground", str(self.root / "zoo.cfg")],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}: "
                                   + (self.root / "server.log").read_text()[-2000:])
            if self.ruok():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not answer on {self.address} in {timeout} s")

    def ruok(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def sessions(self) -> set[int]:
        """The ids of the sessions connected now (the ``cons`` command)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"cons")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return {int(sid, 16) for sid in re.findall(r"sid=0x([0-9a-f]+)", out.decode())}

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):  # (a frozen one dies on SIGCONT)
            os.killpg(proc.pid, signal.SIGCONT)
        proc.wait(timeout=30)

    def freeze(self) -> None:
        """SIGSTOP the server (its process group): connections stay open, nothing answers."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after `freeze`."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()


class Gate:
    """A TCP relay in front of a server, which the test can shut: while shut, a connection
    is accepted and closed at once (the client sees its attempt fail and tries again).

    Why: a ZooKeeper that restarts binds its port before it serves, and a client attempt
    accepted in between may go unanswered; kazoo then waits a whole session timeout
    for it, and the session can expire on the restarted server meanwhile (ZooKeeper's
    and kazoo's timing, not ours). A test that restarts the server shuts the gate until
    the server answers, so that race is out of what it tests."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.open = True
        self._links: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, chroot: str = "") -> str:
        return f"zk:{self.address}{chroot}"

    def shut(self) -> None:
        """Refuse new connections and cut the ones relayed now."""
        with self._lock:
            self.open = False
            links, self._links = self._links, []
        for s in links:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def reopen(self) -> None:
        self.open = True

    def close(self) -> None:
        self.shut()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if not self.open:
                    client.close()
                    continue
                try:
                    server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                except OSError:
                    client.close()
                    continue
                self._links += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
