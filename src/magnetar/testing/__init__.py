"""Start a throwaway Magnetar broker from a test or a script, without Docker.

    from magnetar.testing import standalone

    with standalone() as broker:
        client = pulsar.Client(broker.service_url)          # pulsar://127.0.0.1:<free port>
        requests.get(broker.web_service_url + "/admin/v2/tenants")

The broker is ``magnetar standalone`` in a **child process**, on free ports, with a
temporary data directory removed afterwards. A child process rather than a thread of the
test process because: the broker's event loop then never competes with the test for the
GIL (a test that spins in Python would otherwise slow the broker it measures); its
uvloop policy, signal handlers and logging stay out of the test process; a broker crash
cannot take the test run with it; and what runs is exactly what users run. The price is a
start-up of about a second, so the pytest fixture (``magnetar_broker``, registered through
the ``pytest11`` entry point, see ``plugin.py``) starts one broker per session.

`start_process` and `stop_process` are the child-process part on their own (start a
``magnetar`` broker command line, wait for its ready file, stop it), for harnesses that run
brokers of other kinds: this project's cluster tests start ``magnetar broker`` processes
joined through ZooKeeper with them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BrokerStartError", "StandaloneBroker", "standalone", "start_process", "stop_process"]

COMMAND = [sys.executable, "-m", "magnetar.cli.main"]


class BrokerStartError(RuntimeError):
    """The broker exited or did not come up in time; the message carries its output."""


@dataclass
class StandaloneBroker:
    """A running child broker: its URLs, data directory and process."""

    service_url: str
    web_service_url: str
    data_dir: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    log_path: Path = field(repr=False)
    #: ``pulsar+ssl://`` and ``https://`` URLs when the settings open TLS listeners
    service_url_tls: str | None = None
    web_service_url_tls: str | None = None

    def log(self) -> str:
        """The broker's output so far (its last 8,000 characters)."""
        return self.log_path.read_text(errors="replace")[-8000:]

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM (a clean stop, everything persisted), SIGKILL after ``timeout``."""
        return stop_process(self.process, timeout)


def start_process(command: list[str], ready: Path, log_path: Path,
                  timeout: float = 60.0) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """Run ``command`` (a ``magnetar`` broker command line with ``--ready-file ready``) as a
    child process, its output appended to ``log_path``, this magnetar's sources first on
    its PYTHONPATH; wait (a bounded poll) for the ready file. Returns the process and the
    URLs the broker wrote there. `BrokerStartError` (the process killed) if it exits or is
    not ready within ``timeout`` seconds."""
    ready.unlink(missing_ok=True)
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=out, env=env)
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            what = " ".join(command[3:4]) if command[:3] == COMMAND else command[0]
            raise BrokerStartError(
                f"magnetar {what} did not start (exit {proc.returncode}):\n"
                + log_path.read_text(errors="replace")[-4000:])
        time.sleep(0.02)
    urls: dict[str, Any] = json.loads(ready.read_text())
    return proc, urls


def stop_process(process: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    """SIGTERM (a clean stop), SIGKILL after ``timeout`` seconds; the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)
    return int(process.returncode)


def _command(data_dir: Path, ready: Path, config: Path | None, port: int) -> list[str]:
    cmd = [*COMMAND, "standalone", "--data-dir", str(data_dir),
           "--port", str(port), "--http-port", "0", "--bind-address", "127.0.0.1",
           "--ready-file", str(ready)]
    if config is not None:
        cmd += ["--config", str(config)]
    return cmd


@contextlib.contextmanager
def standalone(
    settings: dict[str, object] | None = None,
    data_dir: str | Path | None = None,
    timeout: float = 60.0,
    broker_port: int = 0,
) -> Iterator[StandaloneBroker]:
    """Run a broker for the duration of the ``with`` block.

    ``settings``: broker.conf keys (``{"brokerDeduplicationEnabled": True}``);
    ``data_dir``: keep the data there instead of a temporary directory (kept afterwards);
    ``timeout``: seconds to wait for the broker to listen; ``broker_port``: the binary
    protocol's port (0: a free one), for settings that must name it (advertisedListeners).
    """
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="magnetar-")))
        data = Path(data_dir) if data_dir is not None else root / "data"
        config = None
        if settings:
            config = root / "broker.conf"
            config.write_text("".join(
                f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in settings.items()))
        ready = root / "ready.json"
        log_path = root / "broker.log"
        proc, urls = start_process(_command(data, ready, config, broker_port), ready, log_path,
                                   timeout)
        broker = StandaloneBroker(
            service_url=urls["brokerServiceUrl"].replace("localhost", "127.0.0.1"),
            web_service_url=urls["webServiceUrl"].replace("localhost", "127.0.0.1"),
            data_dir=data, process=proc, log_path=log_path,
            service_url_tls=urls.get("brokerServiceUrlTls"),
            web_service_url_tls=urls.get("webServiceUrlTls"),
        )
        try:
            yield broker
        finally:
            broker.stop()
