"""A real ``magnetar standalone`` child process for crash tests (kill -9, restart), plus helpers."""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pulsar

from tests.ports import free_port

#: Connection-refused warnings are expected while the broker is down: show errors only.
SILENT = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)

MsgId = tuple[int, int, int]


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Bounded poll: return once ``predicate()`` holds, fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def mid_tuple(mid: pulsar.MessageId) -> MsgId:
    return (mid.ledger_id(), mid.entry_id(), mid.batch_index())


class BrokerProcess:
    """``magnetar standalone`` as a child process on a fixed port and data directory."""

    def __init__(self, root: Path, config: dict[str, str] | None = None,
                 files_limit: int | None = None) -> None:
        """``files_limit``: the broker runs with RLIMIT_NOFILE soft = hard = that."""
        self.root = root
        self.files_limit = files_limit
        self.http_port = free_port()
        self.data_dir = root / "data"
        self.port = free_port()
        self.log_path = root / "broker.log"
        self.config_path: Path | None = None
        if config:
            self.config_path = root / "broker.conf"
            self.config_path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        script = Path(sys.executable).with_name("magnetar")
        cmd = [str(script)] if script.exists() else [sys.executable, "-m", "magnetar.cli.main"]
        cmd += ["standalone", "--data-dir", str(self.data_dir), "--port", str(self.port),
                "--http-port", str(self.http_port), "--bind-address", "127.0.0.1"]
        if self.config_path is not None:
            cmd += ["--config", str(self.config_path)]
        return cmd

    def start(self, timeout: float = 30.0) -> None:
        assert self.proc is None
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"---- start #{self.starts}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self._command(), stdout=log, stderr=log,
                                         preexec_fn=self._limit_files if self.files_limit else None)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"broker not listening after {timeout}s:\n{self.log()}") from None
                time.sleep(0.02)

    def _limit_files(self) -> None:  # in the child, before exec
        import resource

        assert self.files_limit is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.files_limit, self.files_limit))

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def new_topic() -> str:
    return f"persistent://public/default/dur-{uuid.uuid4().hex[:10]}"


def drain(consumer: pulsar.Consumer, last: bytes) -> list[bytes]:
    """Receive and acknowledge everything up to the message ``last`` (inclusive)."""
    got: list[bytes] = []
    while not got or got[-1] != last:
        msg = consumer.receive(timeout_millis=5000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    return got


def read_all(client: pulsar.Client, topic: str) -> list[tuple[MsgId, bytes]]:
    """Every stored message from the earliest, in order, with its message id."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        msg = reader.read_next(timeout_millis=10000)
        out.append((mid_tuple(msg.message_id()), msg.data()))
    reader.close()
    return out


class KillLoop:
    """Producers publish continuously (``send_async``, messages ``b"<n>"`` numbered across
    producers) while the broker is SIGKILLed at random moments and restarted; ``acked``
    maps each message whose receipt arrived to the message id of that receipt."""

    def __init__(self, broker: BrokerProcess, client: pulsar.Client, topic: str, seed: int) -> None:
        self.broker = broker
        self.client = client
        self.topic = topic
        self.seed = seed
        self.rng = random.Random(seed)
        self.acked: dict[int, MsgId] = {}
        self.failed: list[tuple[int, str]] = []
        self.sent = 0
        self._lock = threading.Lock()

    def _callback(self, i: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def done(res: pulsar.Result, mid: pulsar.MessageId) -> None:
            with self._lock:
                if res == pulsar.Result.Ok:
                    self.acked[i] = mid_tuple(mid)
                else:
                    self.failed.append((i, str(res)))

        return done

    def run(self, producer: pulsar.Producer, kills: int, max_receipts_between: int) -> None:
        """Kill and restart the broker ``kills`` times while ``producer`` publishes, then
        flush it (every message sent by then has its receipt or has failed)."""
        for _ in range(kills):
            stop = threading.Event()

            def pump(stop: threading.Event = stop) -> None:
                while not stop.is_set():
                    i = self.sent
                    self.sent += 1
                    producer.send_async(b"%d" % i, self._callback(i))

            pumper = threading.Thread(target=pump, daemon=True)
            pumper.start()
            # kill at a random moment: after a random number of further receipts
            target = len(self.acked) + self.rng.randint(20, max_receipts_between)
            wait_until(lambda t=target: len(self.acked) >= t, 60,
                       f"{target} receipts (seed {self.seed})")
            self.broker.kill9()
            before_restart = len(self.acked)
            self.broker.start()
            # the producer reconnects by itself and its resent messages get receipts
            wait_until(lambda b=before_restart: len(self.acked) > b + 50, 60,
                       f"receipts after restart #{self.broker.starts} (seed {self.seed})")
            stop.set()
            pumper.join(timeout=30)
            assert not pumper.is_alive()
        producer.flush()
