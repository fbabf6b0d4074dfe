"""Scale: many topics keep file descriptors bounded, idle topics unload and reload
transparently, and hundreds of subscriptions on one topic survive a restart.

The official client runs in this process too, so descriptor counts are taken relative to
a baseline measured once the client is connected."""

from __future__ import annotations

import concurrent.futures
import os
import random
import threading
import time
import uuid
from pathlib import Path

import pulsar

from .conftest import QUIET, ThreadedBroker, start_broker

MAX_OPEN = 64
SLACK = 16  # a few descriptors the client or SQLite may open meanwhile


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class FdMonitor:
    """Samples this process's descriptor count in a thread; ``peak`` is the highest seen."""

    def __init__(self) -> None:
        self.peak = _fds()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _fds())

    def __enter__(self) -> FdMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.peak = max(self.peak, _fds())


def _name(prefix: str, i: int) -> str:
    return f"persistent://public/default/{prefix}-{i}"


def _create_topics(client: pulsar.Client, prefix: str, n: int) -> None:
    def make(i: int) -> None:
        producer = client.create_producer(_name(prefix, i), batching_enabled=False)
        try:
            producer.send(b"message %d" % i)
        finally:
            producer.close()

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(make, range(n)))


def _read_first(client: pulsar.Client, topic: str, subscription: str) -> bytes:
    consumer = client.subscribe(topic, subscription,
                                initial_position=pulsar.InitialPosition.Earliest)
    try:
        msg = consumer.receive(timeout_millis=5000)
        consumer.acknowledge(msg)
        return msg.data()
    finally:
        consumer.close()


def _open_ledgers(broker: ThreadedBroker) -> int:
    assert broker.service is not None
    return len(broker.call(broker.service.storage.open_ledgers))


def test_many_topics_keep_descriptors_bounded(tmp_path: Path) -> None:
    # no read cache: the reads below must reopen segment files the LRU closed
    broker = start_broker(tmp_path, magnetarMaxOpenFiles=MAX_OPEN, managedLedgerCacheSizeMB=0)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        client.create_producer(_name("warm", 0)).close()
        baseline = _fds()
        n = 1500
        with FdMonitor() as monitor:
            _create_topics(client, "fd", n)
        assert broker.service is not None
        assert len(broker.service.topics) >= n  # every topic is loaded, yet ...
        assert monitor.peak <= baseline + MAX_OPEN + SLACK, (monitor.peak, baseline)
        assert broker.call(broker.service.storage.open_file_count) <= MAX_OPEN

        sample = random.Random(7).sample(range(n), 50)
        with FdMonitor() as monitor:
            for i in sample:
                assert _read_first(client, _name("fd", i), "reader") == b"message %d" % i
        assert monitor.peak <= baseline + MAX_OPEN + SLACK, (monitor.peak, baseline)
    finally:
        client.close()
        broker.stop()


def test_idle_topics_unload_and_reload_transparently(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, magnetarTopicUnloadIdleSeconds=60, managedLedgerCacheSizeMB=0)
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        client.create_producer(_name("warm", 0)).close()
        n = 200
        _create_topics(client, "idle", n)
        # a subscription that acknowledged the first message, and one that did not
        for i in range(n):
            if i % 20 == 0:
                assert _read_first(client, _name("idle", i), "acked") == b"message %d" % i
        busy_topic = _name("idle", 1)
        busy = client.subscribe(busy_topic, "busy")
        producer_topic = _name("idle", 2)
        producer = client.create_producer(producer_topic)
        loaded = broker.call(len, service.topics)
        assert loaded >= n

        assert broker.call(service.unload_idle_topics) == 0  # nothing idle long enough yet
        later = time.monotonic() + 61  # the broker's clock: same process
        unloaded = broker.call(service.unload_idle_topics, later)
        assert unloaded == loaded - 2
        assert broker.call(set, service.topics) == {busy_topic, producer_topic}
        assert _open_ledgers(broker) == 2

        def backlogs(topic: str) -> dict[str, int]:
            subs = service.get_topic(topic).subscriptions
            return {name: sub.backlog() for name, sub in subs.items()}

        # next use reloads: data, subscriptions and their acknowledgements are all there
        for i in range(0, n, 20):
            assert _read_first(client, _name("idle", i), "fresh") == b"message %d" % i
            assert broker.call(backlogs, _name("idle", i)) == {"acked": 0, "fresh": 0}
        acked = client.subscribe(_name("idle", 0), "acked")
        try:
            acked.receive(timeout_millis=300)
            raise AssertionError("an acknowledged message came back after unload/reload")
        except pulsar.Timeout:
            pass
        finally:
            acked.close()
        # a reloaded topic takes new messages after the old ones
        topic = _name("idle", 3)
        with_sub = client.subscribe(topic, "later", initial_position=pulsar.InitialPosition.Earliest)
        p = client.create_producer(topic)
        p.send(b"after reload")
        p.close()
        assert with_sub.receive(timeout_millis=5000).data() == b"message 3"
        assert with_sub.receive(timeout_millis=5000).data() == b"after reload"
        with_sub.close()
        producer.send(b"still attached")
        busy.close()
        producer.close()
    finally:
        client.close()
        broker.stop()


def test_many_subscriptions_survive_restart(tmp_path: Path) -> None:
    topic = f"persistent://public/default/subs-{uuid.uuid4().hex[:8]}"
    n = 500
    broker = start_broker(tmp_path)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"first")
        producer.send(b"second")
        producer.close()

        def subscribe(i: int) -> None:
            consumer = client.subscribe(topic, f"sub-{i}",
                                        initial_position=pulsar.InitialPosition.Earliest,
                                        consumer_type=pulsar.ConsumerType.Shared)
            try:
                if i % 2 == 0:  # even subscriptions acknowledge the first message
                    msg = consumer.receive(timeout_millis=5000)
                    assert msg.data() == b"first"
                    consumer.acknowledge(msg)
            finally:
                consumer.close()

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(subscribe, range(n)))
        assert broker.service is not None
        subs = broker.call(lambda: set(broker.service.get_topic(topic).subscriptions))
        assert subs == {f"sub-{i}" for i in range(n)}

        # publishing with one live consumer: the 500 idle subscriptions are not woken per entry
        live = client.subscribe(topic, "live")
        woken: list[str] = []

        def watch_idle() -> int:
            watched = 0
            for name, sub in broker.service.get_topic(topic).subscriptions.items():
                if name != "live" and sub.dispatcher is not None:
                    sub.dispatcher.schedule = lambda name=name: woken.append(name)
                    watched += 1
            return watched

        assert broker.call(watch_idle) == n  # their dispatchers outlive their consumers
        producer = client.create_producer(topic)
        for k in range(20):
            producer.send_async(b"more %d" % k, None)
        producer.flush()
        producer.close()
        assert [live.receive(timeout_millis=5000).data() for _ in range(20)] == [
            b"more %d" % k for k in range(20)]
        live.unsubscribe()
        live.close()
        assert woken == []
    finally:
        client.close()
        broker.stop()

    broker = start_broker(tmp_path)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        assert broker.service is not None
        stats = broker.call(broker.service.topic_stats, topic)
        assert set(stats["subscriptions"]) == {f"sub-{i}" for i in range(n)}
        for i in random.Random(3).sample(range(n), 40):
            # Latest would start after "second": what arrives is the stored backlog
            consumer = client.subscribe(topic, f"sub-{i}",
                                        initial_position=pulsar.InitialPosition.Latest)
            try:
                expected = b"second" if i % 2 == 0 else b"first"
                assert consumer.receive(timeout_millis=5000).data() == expected, i
            finally:
                consumer.close()
    finally:
        client.close()
        broker.stop()


def test_background_unload_of_an_idle_topic(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, magnetarTopicUnloadIdleSeconds=1)
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        idle, busy = _name("bg", 0), _name("bg", 1)
        consumer = client.subscribe(busy, "stays")
        producer = client.create_producer(idle)
        producer.send(b"kept")
        producer.close()
        deadline = time.monotonic() + 10
        while broker.call(lambda: idle in service.topics) and time.monotonic() < deadline:
            time.sleep(0.1)  # bounded poll: the unload runs on the broker's own timer
        assert broker.call(set, service.topics) == {busy}
        assert _read_first(client, idle, "after") == b"kept"
        consumer.close()
    finally:
        client.close()
        broker.stop()
