"""Fixtures: a real broker process on a free port, for the asyncio client's tests.

The broker is ``magnetar standalone`` by default; ``MAGNETAR_TEST_BROKER=pulsar-lite`` runs
pulsar-lite (a Rust broker, ``pip install pulsar-lite``, in the bench extras) instead, to
check the client against a broker that is not ours. Readiness is a bounded TCP-connect poll, never a sleep.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import pytest

from tests.ports import free_port

R = TypeVar("R")
BROKER_KIND = os.environ.get("MAGNETAR_TEST_BROKER", "magnetar")
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


def wait_listening(port: int, proc: subprocess.Popen[bytes], deadline: float = 60.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)  # polling a process we do not control; bounded by deadline
    raise RuntimeError(f"broker did not listen on {port} within {deadline}s")


class BrokerProcess:
    """A broker subprocess: ``url``, ``kind``, ``stop()``."""

    def __init__(self, kind: str, partitions: int = 0, **extra: Any) -> None:
        self.kind = kind
        self.partitions = partitions
        self.dir = Path(tempfile.mkdtemp(prefix=f"client-{kind}-"))
        self.port = free_port()
        self.log = open(self.dir / "broker.log", "wb")  # noqa: SIM115
        if kind == "magnetar":
            conf = self.dir / "broker.conf"
            lines = [f"{k}={v}" for k, v in extra.items()]
            if partitions:
                lines += ["allowAutoTopicCreationType=partitioned",
                          f"defaultNumPartitions={partitions}"]
            conf.write_text("\n".join(lines) + "\n")
            cmd = [sys.executable, "-m", "magnetar.cli.main", "standalone",
                   "--data-dir", str(self.dir / "data"), "--port", str(self.port),
                   "--http-port", "0", "--config", str(conf), "--bind-address", "127.0.0.1"]
        else:
            import pulsar_lite

            binary = Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"
            conf = self.dir / "pulsar-lite.toml"
            text = "[metrics]\nenabled = false\n"
            if partitions:
                text = f"default_partitions = {partitions}\n" + text
            conf.write_text(text)
            cmd = [str(binary), "--config", str(conf), "--addr", f"127.0.0.1:{self.port}",
                   "--db-path", str(self.dir / "db"), "--log-level", "warn"]
        self.cmd = cmd
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_listening(self.port, self.proc)
        except RuntimeError:
            self.stop()
            raise

    def kill(self) -> None:
        """Stop the process abruptly, keeping its data for ``start``."""
        self.proc.kill()
        self.proc.wait()

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def broker() -> Iterator[BrokerProcess]:
    b = BrokerProcess(BROKER_KIND)
    yield b
    b.stop()


@pytest.fixture(scope="session")
def partitioned_broker() -> Iterator[BrokerProcess]:
    """A broker on which auto-created topics get 3 partitions."""
    b = BrokerProcess(BROKER_KIND, partitions=3)
    yield b
    b.stop()


@pytest.fixture(scope="session")
def small_broker() -> Iterator[BrokerProcess]:
    """A broker with a 64 KiB message size limit (magnetar only: pulsar-lite does not
    announce its limit in Connected)."""
    if BROKER_KIND != "magnetar":
        pytest.skip("pulsar-lite does not send max_message_size in Connected")
    b = BrokerProcess(BROKER_KIND, maxMessageSize=64 * 1024)
    yield b
    b.stop()


@pytest.fixture
def own_broker() -> Iterator[BrokerProcess]:
    """A broker for this test alone (it may be killed and restarted)."""
    b = BrokerProcess(BROKER_KIND, brokerDeduplicationEnabled="true")
    yield b
    b.stop()


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def official(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.url, logger=QUIET, operation_timeout_seconds=10)
    yield c
    c.close()


def run(fn: Callable[..., Awaitable[R]], *args: Any, timeout: float = 60) -> R:
    """Run ``fn(*args)`` on a fresh event loop, bounded by ``timeout`` seconds."""

    async def bounded() -> R:
        async with asyncio.timeout(timeout):
            return await fn(*args)

    return asyncio.run(bounded())


def needs_magnetar(broker: BrokerProcess, reason: str) -> None:
    if broker.kind != "magnetar":
        pytest.skip(f"pulsar-lite: {reason}")


async def receive_unique(consumer: Any, n: int, timeout_millis: int = 5000) -> list[Any]:
    """``n`` distinct messages, in order. pulsar-lite sometimes dispatches an entry more than
    once (the official client sees the same); those repeats are dropped here."""
    seen: set[Any] = set()
    out = []
    while len(out) < n:
        msg = await consumer.receive(timeout_millis)
        if msg.message_id() in seen and BROKER_KIND != "magnetar":
            continue
        seen.add(msg.message_id())
        out.append(msg)
    return out
