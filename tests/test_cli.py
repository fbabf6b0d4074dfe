"""The ``magnetar`` command and its configuration: real processes, the official client.

Broker processes are started with ``subprocess`` and stopped with SIGTERM; readiness is a
bounded poll of the TCP port, never a sleep.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.cli.main import build_parser
from magnetar.cli.standalone import config_from_args
from tests.ports import free_port

from .broker.rawclient import RawClient

MAGNETAR = [sys.executable, "-m", "magnetar.cli.main"]
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0


class Broker:
    """A ``magnetar standalone`` child process."""

    def __init__(self, *args: str, cwd: Path | None = None, port: int) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            [*MAGNETAR, "standalone", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr = ""

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def wait_ready(self) -> Broker:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stderr = self.proc.communicate()[1]
                raise AssertionError(f"broker exited with {self.proc.returncode}: {self.stderr}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)  # bounded poll for the port to open
        raise AssertionError("broker did not start listening in time")

    def terminate(self) -> int:
        """SIGTERM, then the exit code (the process must stop within STOP_TIMEOUT)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, self.stderr = self.proc.communicate(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise AssertionError("broker did not stop within the timeout after SIGTERM") from None
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def wait_until(done: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Bounded poll until ``done()``."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def run_magnetar(*args: str, cwd: Path | None = None, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MAGNETAR, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def brokers() -> Iterator[list[Broker]]:
    """Every broker a test starts; killed at the end whatever happened."""
    started: list[Broker] = []
    yield started
    for b in started:
        b.kill()


# ---------------------------------------------------------------------- help


def test_help_teaches_the_options() -> None:
    top = run_magnetar("--help")
    assert top.returncode == 0
    for text in ("standalone", "--data-dir", "--port", "--config"):
        assert text in top.stdout
    sub = run_magnetar("standalone", "--help")
    assert sub.returncode == 0
    for text in ("--data-dir", "--port", "--http-port", "--config", "SIGTERM", "broker.conf"):
        assert text in sub.stdout


def test_console_script_is_installed() -> None:
    out = subprocess.run(["magnetar", "--version"], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0
    assert out.stdout.startswith("magnetar ")


def test_bad_option_exits_2() -> None:
    out = run_magnetar("standalone", "--port", "not-a-port")
    assert out.returncode == 2
    assert "--port" in out.stderr


# ---------------------------------------------------------------------- standalone


class AckedSends:
    """Sends on one topic from a thread until stopped, keeping what the broker acknowledged
    (the send callback's Ok), in order."""

    def __init__(self, client: pulsar.Client, topic: str) -> None:
        self.producer = client.create_producer(topic, batching_enabled=False,
                                               block_if_queue_full=True)
        self.acked: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        lock = threading.Lock()
        i = 0
        while not self.stop.is_set():
            payload = b"during-stop-%d" % i

            def done(res: pulsar.Result, _msg_id: object, payload: bytes = payload) -> None:
                if res == pulsar.Result.Ok:
                    with lock:
                        self.acked.append(payload)

            try:
                self.producer.send_async(payload, done)
            except Exception:  # the broker gone, the client closing: nothing more is sent
                return
            i += 1
            self.stop.wait(0.002)


def test_standalone_serves_stops_cleanly_and_keeps_data(tmp_path: Path, brokers: list[Broker]) -> None:
    """A clean stop (SIGTERM) with clients attached, a producer sending through it and
    stored subscriptions: the process leaves without its interpreter's teardown
    (`leave_after_clean_stop`) only once everything durable is closed, so after the restart
    every message the broker acknowledged is there and every cursor kept its place."""
    data = tmp_path / "data"
    port = free_port()
    args = ("--data-dir", str(data), "--port", str(port), "--http-port", "0")
    first = Broker(*args, "--log-level", "INFO", port=port)
    brokers.append(first)
    first.wait_ready()

    client = pulsar.Client(first.url, operation_timeout_seconds=10, logger=QUIET)
    topic = "persistent://public/default/cli-restart"
    live = client.subscribe(topic, "live")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before-restart")
    msg = live.receive(timeout_millis=5000)
    assert msg.data() == b"before-restart"
    live.acknowledge(msg)
    producer.send(b"unacked")
    # more topics, each with a stored subscription that acknowledged its first 3 of 6
    others = [f"persistent://public/default/cli-restart-{i}" for i in range(4)]
    for name in others:
        kept = client.subscribe(name, "kept", consumer_type=pulsar.ConsumerType.Shared)
        other_producer = client.create_producer(name, batching_enabled=False)
        for k in range(6):
            other_producer.send(b"%s-%d" % (name.encode(), k))
        for _ in range(3):
            got = kept.receive(timeout_millis=5000)
            assert got.data().endswith((b"-0", b"-1", b"-2"))
            kept.acknowledge(got)
        kept.close()
        other_producer.close()
    during = AckedSends(client, "persistent://public/default/cli-restart-during")
    wait_until(lambda: len(during.acked) >= 20, "the first sends of the stop-time producer")

    # a second broker on the same data directory is refused while the first one runs
    other = run_magnetar("standalone", "--data-dir", str(data), "--port", str(free_port()),
                         "--http-port", "0")
    assert other.returncode == 1
    assert "in use" in other.stderr

    # SIGTERM while the client is still connected
    started = time.monotonic()
    assert first.terminate() == 0
    assert time.monotonic() - started < STOP_TIMEOUT
    assert "Traceback" not in first.stderr
    # its last log line reached stderr (the logs are flushed before the process leaves),
    # and the stop got as far as the clean-stop mark (every ledger closed and synced)
    assert "stopped in" in first.stderr.splitlines()[-1]
    assert (data / "clean-stop").exists()
    during.stop.set()
    client.close()
    during.thread.join(timeout=30)
    acked = list(during.acked)
    assert len(acked) >= 20

    second = Broker(*args, port=port)
    brokers.append(second)
    second.wait_ready()
    client = pulsar.Client(second.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        earliest = client.subscribe(topic, "after", initial_position=pulsar.InitialPosition.Earliest)
        assert [earliest.receive(timeout_millis=5000).data() for _ in range(2)] == [
            b"before-restart", b"unacked"
        ]
        # the durable subscription kept its acknowledgement across the restart
        live = client.subscribe(topic, "live")
        assert live.receive(timeout_millis=5000).data() == b"unacked"
        for name in others:  # each cursor resumes after what it acknowledged
            kept = client.subscribe(name, "kept", consumer_type=pulsar.ConsumerType.Shared)
            got = sorted(kept.receive(timeout_millis=5000).data() for _ in range(3))
            assert got == [b"%s-%d" % (name.encode(), k) for k in (3, 4, 5)]
            kept.close()
        # every send the broker acknowledged before it stopped is there, in order
        reader = client.subscribe("persistent://public/default/cli-restart-during", "check",
                                  initial_position=pulsar.InitialPosition.Earliest)
        stored: list[bytes] = []
        while not stored or stored[-1] != acked[-1]:
            stored.append(reader.receive(timeout_millis=5000).data())
        assert [m for m in stored if m in set(acked)] == acked
    finally:
        client.close()
    assert second.terminate() == 0


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("0.0.0.0", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        out = run_magnetar("standalone", "--data-dir", str(tmp_path / "d"), "--port", str(port),
                           "--http-port", "0")
    assert out.returncode == 1
    assert f":{port}" in out.stderr
    assert "already in use" in out.stderr.lower()
    assert "Traceback" not in out.stderr


def test_default_data_dir_is_under_the_working_directory(tmp_path: Path, brokers: list[Broker]) -> None:
    port = free_port()
    broker = Broker("--port", str(port), "--http-port", "0", cwd=tmp_path, port=port)
    brokers.append(broker)
    broker.wait_ready()
    assert (tmp_path / "data" / "standalone").is_dir()
    assert broker.terminate() == 0


# ---------------------------------------------------------------------- configuration


def write_conf(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_config_file_applies_pulsar_keys(tmp_path: Path, brokers: list[Broker]) -> None:
    port = free_port()
    conf = write_conf(
        tmp_path / "broker.conf",
        "# a Pulsar broker.conf, trimmed",
        f"brokerServicePort={port}",
        "webServicePort=0",
        "brokerDeduplicationEnabled=true",
        "maxMessageSize=131072",
        f"magnetarDataDir={tmp_path / 'data'}",
        "numIOThreads=",
        "zookeeperServers=localhost:2181",
        "bookkeeperClientTimeoutInSeconds=30",
    )
    broker = Broker("--config", str(conf), port=port)
    brokers.append(broker)
    broker.wait_ready()
    with RawClient("127.0.0.1", port) as raw:
        assert raw.connect().max_message_size == 131072

    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        topic = "persistent://public/default/cli-dedup"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, producer_name="dedup-p", batching_enabled=False)
        producer.send(b"one", sequence_id=5)
        producer.send(b"one again", sequence_id=5)  # a duplicate: dropped by the broker
        producer.send(b"two", sequence_id=6)
        assert [consumer.receive(timeout_millis=5000).data() for _ in range(2)] == [b"one", b"two"]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=300)
    finally:
        client.close()
    assert broker.terminate() == 0
    unknown_lines = [line for line in broker.stderr.splitlines() if "not implemented" in line]
    assert len(unknown_lines) == 1
    for key in ("numIOThreads", "zookeeperServers", "bookkeeperClientTimeoutInSeconds"):
        assert key in unknown_lines[0]


def test_bad_config_value_names_key_and_line(tmp_path: Path) -> None:
    conf = write_conf(tmp_path / "bad.conf", "# comment", "brokerServicePort=6650", "maxMessageSize=abc")
    out = run_magnetar("standalone", "--config", str(conf), "--data-dir", str(tmp_path / "d"))
    assert out.returncode == 2
    assert f"{conf}:3" in out.stderr
    assert "maxMessageSize" in out.stderr
    assert "'abc'" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "d").exists()  # nothing started


def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    out = run_magnetar("standalone", "--config", str(tmp_path / "nope.conf"))
    assert out.returncode == 2
    assert "nope.conf" in out.stderr


def test_flags_override_the_file(tmp_path: Path) -> None:
    conf = write_conf(
        tmp_path / "c.conf", "brokerServicePort=7000", "magnetarDataDir=/from/file",
        "bindAddress=10.0.0.1", "maxMessageSize=1000",
    )
    args = build_parser().parse_args(
        ["standalone", "--config", str(conf), "--port", "7001", "--data-dir", "/from/flag"]
    )
    config = config_from_args(args)
    assert config.brokerServicePort == 7001
    assert config.magnetarDataDir == "/from/flag"
    assert config.bindAddress == "10.0.0.1"  # no flag given: the file's value stays
    assert config.maxMessageSize == 1000


def test_unknown_keys_are_reported_once_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="magnetar.broker.config.broker_config")
    conf = write_conf(tmp_path / "u.conf", "fooKey=1", "barKey=2", "fooKey=3", "clusterName=x")
    config = BrokerConfig.load(conf)
    assert config.clusterName == "x"
    records = [r for r in caplog.records if r.name == "magnetar.broker.config.broker_config"]
    assert len(records) == 1
    assert "fooKey" in records[0].getMessage() and "barKey" in records[0].getMessage()
    assert config.unknown_keys == ["fooKey", "barKey"]


def test_properties_syntax_as_pulsar_writes_it(tmp_path: Path) -> None:
    conf = write_conf(
        tmp_path / "p.conf",
        "! a bang comment",
        "managedLedgerCacheSizeMB=",  # blank: keep the default, as Pulsar does
        "clusterName: colon-separated",
        "advertisedAddress = spaced.example ",
        "brokerEntryMetadataInterceptors=org.a.One,\\",
        "    org.a.Two",
        "backlogQuotaDefaultLimitGB=0.5",
        "isAllowAutoUpdateSchemaEnabled=false",
    )
    config = BrokerConfig.load(conf)
    assert config.managedLedgerCacheSizeMB == BrokerConfig().managedLedgerCacheSizeMB
    assert config.clusterName == "colon-separated"
    assert config.advertisedAddress == "spaced.example"
    assert config.brokerEntryMetadataInterceptors == "org.a.One,org.a.Two"
    assert config.backlogQuotaDefaultLimitBytes == 512 * 1024 * 1024
    assert config.isAllowAutoUpdateSchemaEnabled is False
    assert config.unknown_keys == []


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("maxMessageSize=abc", ("maxMessageSize", "integer", "'abc'")),
        ("brokerDeduplicationEnabled=yes", ("brokerDeduplicationEnabled", "true or false")),
        ("just-a-word", ("expected key=value",)),
    ],
)
def test_bad_values_raise_config_error_with_the_line(tmp_path: Path, line: str, words: tuple[str, ...]) -> None:
    conf = write_conf(tmp_path / "b.conf", "# first", line)
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(conf)
    message = str(info.value)
    assert f"{conf}:2" in message
    for word in words:
        assert word in message



def test_serving_broker_freezes_its_start_up_heap_and_collects_less_often() -> None:
    # in a child process: gc.freeze() would keep this test process's objects for good
    code = ("import gc\nfrom magnetar.cli.standalone import GC_THRESHOLD_0, GC_THRESHOLD_1, "
            "tune_gc_for_serving\n"
            "before = gc.get_threshold()\ntune_gc_for_serving()\n"
            "print(gc.get_freeze_count() > 1000, gc.get_threshold()[0] == GC_THRESHOLD_0 > 700, "
            "gc.get_threshold()[1:] == (GC_THRESHOLD_1, before[2]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split() == ["True", "True", "True"]


LEAVE = """
import atexit, logging, sys, threading
from magnetar.cli.standalone import leave_after_clean_stop
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
atexit.register(print, "atexit ran")
release = threading.Event()
if sys.argv[1] == "thread":
    worker = threading.Thread(target=lambda: (release.wait(60), print("worker done")))
    worker.start()
logging.getLogger("t").info("logged")
print("pending output")  # in stdout's buffer (a pipe): lost unless flushed
code = leave_after_clean_stop(3)
print("returned", code)
release.set()
sys.exit(code)
"""


@pytest.mark.parametrize("case", ["alone", "thread"])
def test_leave_after_clean_stop_flushes_and_leaves_only_when_nothing_runs(case: str) -> None:
    out = subprocess.run([sys.executable, "-c", LEAVE, case], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 3
    if case == "alone":  # left at once, after the atexit functions and the flushes
        assert out.stdout.splitlines() == ["logged", "pending output", "atexit ran"]
    else:  # a thread still working: the ordinary exit, which waits for it
        assert out.stdout.splitlines() == ["logged", "pending output", "returned 3",
                                           "worker done", "atexit ran"]
