"""Brokers of a cluster as child processes (``magnetar broker`` on free ports, each with its
own data directory), and ``magnetar initialize-cluster-metadata``; for the two-broker tests
and ``bench/metadata_bench.py``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

COMMAND = [sys.executable, "-m", "magnetar.cli.main"]


def magnetar(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=timeout)


def initialize(metadata_url: str, cluster: str) -> None:
    done = magnetar("initialize-cluster-metadata", "--cluster", cluster,
                    "--metadata-store", metadata_url, "--configuration-metadata-store",
                    metadata_url, "--web-service-url", "http://127.0.0.1:8080",
                    "--broker-service-url", "pulsar://127.0.0.1:6650")
    assert done.returncode == 0, done.stderr


class BrokerProc:
    """One ``magnetar broker`` (or ``standalone`` without a metadata URL) child process."""

    def __init__(self, root: Path, metadata_url: str | None, cluster: str = "c1",
                 **settings: Any) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.ready = root / "ready.json"
        conf = {"clusterName": cluster, "bindAddress": "127.0.0.1", **settings}
        if metadata_url:
            conf["metadataStoreUrl"] = metadata_url
        (root / "broker.conf").write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        self.command = [*COMMAND, "broker" if metadata_url else "standalone",
                        "--config", str(root / "broker.conf"), "--data-dir", str(root / "data"),
                        "--port", "0", "--http-port", "0", "--ready-file", str(self.ready)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.urls: dict[str, Any] = {}

    @property
    def service_url(self) -> str:
        return str(self.urls["brokerServiceUrl"]).replace("localhost", "127.0.0.1")

    @property
    def web_url(self) -> str:
        return str(self.urls["webServiceUrl"]).replace("localhost", "127.0.0.1")

    def start(self, timeout: float = 60.0) -> BrokerProc:
        self.ready.unlink(missing_ok=True)
        with open(self.root / "broker.log", "ab") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=log,
                                         env=dict(os.environ))
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}: "
                                   + (self.root / "broker.log").read_text()[-3000:])
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("broker did not start: "
                                   + (self.root / "broker.log").read_text()[-3000:])
            time.sleep(0.02)
        self.urls = json.loads(self.ready.read_text())
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
