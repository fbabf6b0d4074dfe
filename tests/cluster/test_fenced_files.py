"""The file rule with broker processes (issue 29, item 4): a bundle owner SIGSTOPped under
load past its ZooKeeper session, its topic taken over by the other broker, then resumed,
changes no file of the shared data directory after the new owner's fence: no segment
made, cut or rewritten, no ledger row or cursor file written (`file_rule.py`).

Small segments (20 entries) make the paused owner roll over often, so that its held sends
would make new segment files when it resumes (as observed before the fix:
``000000000004.seg`` to ``007.seg`` 9.8 s after the new owner's fence); a consumer acks
on it meanwhile, so cursor states are being written when it stops. Where it stops is
wherever SIGSTOP finds it: a write may be under way."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.cluster.brokers import Cluster, topic_owned_by
from tests.cluster.file_rule import assert_untouched, snapshot
from tests.cluster.test_cluster_moves import live_brokers
from tests.zkserver import ZooKeeperServer

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@pytest.fixture
def small_segments(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("fenced"), zookeeper, 2,
                {"managedLedgerMaxEntriesPerLedger": "20",
                 "zookeeperSessionExpiredPolicy": "shutdown"}, shared=True)
    c.start()
    yield c
    c.stop()


def _wait(what: str, done, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # a bounded poll of something another process does


def test_a_resumed_owner_changes_no_file_after_the_fence(small_segments: Cluster) -> None:
    a, b = small_segments.brokers
    assert a.proc is not None
    data = Path(a.data_dir)
    topic = topic_owned_by(small_segments, a.port, "fenced-files")
    c1 = pulsar.Client(a.url, operation_timeout_seconds=15, logger=QUIET)
    c2 = pulsar.Client(b.url, operation_timeout_seconds=30, logger=QUIET)
    stop = threading.Event()
    try:
        consumer = c1.subscribe(topic, "s")
        producer = c1.create_producer(topic, batching_enabled=False, send_timeout_millis=15_000,
                                      block_if_queue_full=True)
        acked: set[str] = set()
        late: dict[str, pulsar.Result] = {}

        def produce() -> None:
            i = 0
            while not stop.is_set():
                key = f"a{i}"

                def done(res: pulsar.Result, _mid: object, key: str = key) -> None:
                    late[key] = res
                    if res == pulsar.Result.Ok:
                        acked.add(key)

                producer.send_async(key.encode(), done)
                i += 1
                if i % 50 == 0:
                    time.sleep(0.01)  # a steady stream, not a flood of the client's queue

        def consume() -> None:
            while not stop.is_set():
                try:
                    consumer.acknowledge(consumer.receive(200))
                except Exception:  # a timeout, or the broker gone: keep trying until told
                    continue

        threads = [threading.Thread(target=f, daemon=True) for f in (produce, consume)]
        for t in threads:
            t.start()
        _wait("acked sends on the owner", lambda: len(acked) >= 200, 60)
        os.kill(a.proc.pid, signal.SIGSTOP)  # wherever it is: a write may be under way
        try:
            _wait("the paused owner's session to expire",
                  lambda: a.broker_id not in live_brokers(b), 60)
            stop.set()  # no more sends: those queued so far wait in the paused one's socket
            p2 = c2.create_producer(topic, batching_enabled=False)  # B fences and takes over
            for i in range(30):  # rolls over: B makes its own segments
                p2.send(f"b{i}".encode())
                acked.add(f"b{i}")
            p2.close()
            before = snapshot(data)  # after the new owner's fence, with B idle
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        # the resumed owner finds its session gone and stops; before that it handles every
        # send held in its socket (refused: fenced) and every timer that came due
        a.proc.wait(60)
        for t in threads:
            t.join(30)
        # (a write under way at the SIGSTOP may still land, where no reader looks)
        assert_untouched(before, snapshot(data), who="the resumed owner", root=data)
        log = (a.root / "broker.log").read_text(errors="replace")
        assert "metadata session expired" in log
        # nothing acknowledged was lost: the new owner serves all of it
        check = c2.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
        got: set[str] = set()
        deadline = time.monotonic() + 60
        while not acked <= got and time.monotonic() < deadline:
            try:
                got.add(check.receive(5_000).data().decode())
            except pulsar.Timeout:
                continue
        assert acked <= got, sorted(acked - got)[:20]
    finally:
        stop.set()
        c1.close()
        c2.close()
