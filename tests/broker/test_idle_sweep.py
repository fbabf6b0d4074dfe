"""Retention, message TTL and trimming on topics that are NOT loaded (the idle-topic sweep).

Topics are produced to and consumed through the official client, then unloaded; the sweep
pass is run on demand (``service.sweeper.run_pass(now)``) except in the test of its timer.
Retention compares segment mtimes with the wall clock, so "time passes" by moving the
segment files' mtimes back (and ``now`` forward for the sweep's own due times and TTL).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from magnetar.broker.namespaces.sweep import SweepStats
from magnetar.broker.service import BrokerService

from .brokerproc import drain, new_topic, wait_until
from .conftest import QUIET, ThreadedBroker

HOURS = 3600.0


@pytest.fixture
def make_broker(make_broker: Callable[..., ThreadedBroker]) -> Callable[..., ThreadedBroker]:
    """The shared factory, with sweep passes run on demand instead of on a timer."""

    def make(**settings: object) -> ThreadedBroker:
        settings.setdefault("magnetarIdleTopicSweepIntervalSeconds", 0)
        return make_broker(**settings)

    return make


def service_of(broker: ThreadedBroker) -> BrokerService:
    assert broker.service is not None
    return broker.service


def segment_files(broker: ThreadedBroker) -> list[Path]:
    return sorted(Path(broker.config.magnetarDataDir, "ledgers").glob("*/*.seg"))


def age_segments(broker: ThreadedBroker, seconds: float) -> None:
    """Make every segment file look ``seconds`` older (retention goes by segment mtime)."""
    for path in segment_files(broker):
        st = path.stat()
        os.utime(path, (st.st_atime - seconds, st.st_mtime - seconds))


def sweep(broker: ThreadedBroker, now: float | None = None, max_topics: int | None = None) -> SweepStats:
    service = service_of(broker)
    return broker.call_async(lambda: service.sweeper.run_pass(now, max_topics))


def unload(broker: ThreadedBroker, topic: str) -> None:
    service = service_of(broker)
    broker.call(lambda: service.unload_topic(service.topics[topic]))
    assert not is_loaded(broker, topic)


def is_loaded(broker: ThreadedBroker, topic: str) -> bool:
    service = service_of(broker)
    return broker.call(lambda: topic in service.topics)


def backlog(broker: ThreadedBroker, topic: str, sub: str) -> int:
    """The subscription's backlog (this loads the topic)."""
    service = service_of(broker)
    return broker.call(service.topic_stats, topic)["subscriptions"][sub]["msgBacklog"]


def produce_and_consume(broker: ThreadedBroker, topic: str, total: int) -> None:
    """``total`` messages, all received and acknowledged on "sub"; every client closed."""
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"%d" % i) for i in range(total)]
    assert drain(consumer, b"%d" % (total - 1)) == [b"%d" % i for i in range(total)]
    last = (ids[-1].ledger_id(), ids[-1].entry_id())
    service = service_of(broker)

    def acked() -> bool:
        cursor = broker.call(lambda: service.topics[topic].subscriptions["sub"].cursor)
        return tuple(cursor.mark_delete_position) >= last

    wait_until(acked, 10, "the acknowledgements")
    client.close()


def produce_backlog(broker: ThreadedBroker, topic: str, total: int, sub: str = "lagging") -> None:
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    client.subscribe(topic, sub).close()  # durable, nobody consuming
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(total):
        producer.send(b"%d" % i)
    client.close()


# ------------------------------------------------------------------------------ retention


def test_sweep_deletes_consumed_segments_of_an_unloaded_topic(make_broker) -> None:
    broker = make_broker(managedLedgerMaxEntriesPerLedger=10, defaultRetentionTimeInMinutes=60,
                         defaultRetentionSizeInMB=100)
    topic = new_topic()
    produce_and_consume(broker, topic, 55)
    before = segment_files(broker)
    assert len(before) == 6
    broker.call(service_of(broker).run_housekeeping)  # within retention: all kept
    unload(broker, topic)

    stats = sweep(broker)  # still within the hour: judged from the files, nothing loaded
    assert (stats.loaded, stats.judged_from_files) == (0, 1)
    assert segment_files(broker) == before

    age_segments(broker, 2 * HOURS)  # two hours pass
    stats = sweep(broker, time.time() + 2 * HOURS)
    assert stats.loaded == 1
    assert not is_loaded(broker, topic), "the sweep left the topic loaded"
    assert segment_files(broker) == before[-1:], "the last segment is kept, the rest deleted"

    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(timeout_millis=5000).data() == b"50"  # 0-49 are gone
    consumer = client.subscribe(topic, "sub")
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=200)  # nothing redelivered
    client.close()


def test_sweep_keeps_unconsumed_data_of_an_unloaded_topic(make_broker) -> None:
    broker = make_broker(managedLedgerMaxEntriesPerLedger=10)  # retention 0: none
    topic = new_topic()
    produce_backlog(broker, topic, 35)
    before = segment_files(broker)
    assert len(before) == 4
    unload(broker, topic)
    age_segments(broker, 10 * HOURS)
    stats = sweep(broker, time.time() + 10 * HOURS)
    assert stats.loaded == 1  # retention could have deleted: the cursors had to be seen
    assert segment_files(broker) == before
    assert not is_loaded(broker, topic)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    consumer = client.subscribe(topic, "lagging")
    assert drain(consumer, b"34") == [b"%d" % i for i in range(35)]
    client.close()


def test_idle_unload_trims_first(make_broker) -> None:
    broker = make_broker(managedLedgerMaxEntriesPerLedger=10, magnetarTopicUnloadIdleSeconds=60)
    topic = new_topic()
    produce_and_consume(broker, topic, 45)
    before = segment_files(broker)
    assert len(before) == 5
    service = service_of(broker)
    assert broker.call(service.unload_idle_topics, time.monotonic() + 61) == 1
    assert not is_loaded(broker, topic)
    assert segment_files(broker) == before[-1:]
    # nothing can change before new messages: the sweep will not load it again
    assert broker.call(service.sweeper.due_time, topic) == float("inf")
    assert sweep(broker, time.time() + 100 * HOURS).loaded == 0


def test_idle_unload_of_a_non_persistent_topic(make_broker,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """Nothing to housekeep: it used to be housekept like a persistent topic, which failed
    (no ledger) and logged two tracebacks before the unload went ahead anyway."""
    broker = make_broker(magnetarTopicUnloadIdleSeconds=60)
    topic = f"non-persistent://public/default/np-{uuid.uuid4().hex[:10]}"
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    client.subscribe(topic, "sub").close()
    client.create_producer(topic).close()
    assert is_loaded(broker, topic)
    service = service_of(broker)
    with caplog.at_level(logging.WARNING, logger="magnetar"):
        assert broker.call(service.unload_idle_topics, time.monotonic() + 61) == 1
    assert not is_loaded(broker, topic)
    assert not [r for r in caplog.records if r.name.startswith("magnetar")], caplog.text
    consumer = client.subscribe(topic, "sub")  # loaded again on use
    client.create_producer(topic).send(b"again")
    assert consumer.receive(timeout_millis=5000).data() == b"again"
    client.close()


# ------------------------------------------------------------------------------------ TTL


def test_sweep_expires_the_backlog_of_an_unloaded_topic(make_broker) -> None:
    broker = make_broker(ttlDurationDefaultInSeconds=60, magnetarTopicUnloadIdleSeconds=60)
    topic = new_topic()
    keep = new_topic()
    produce_backlog(broker, topic, 20)
    sent = time.time()
    while time.time() < sent + 0.005:  # keep's publish times are strictly later
        pass
    produce_backlog(broker, keep, 5)
    service = service_of(broker)
    assert broker.call(service.unload_idle_topics, time.monotonic() + 61) == 2
    due = broker.call(service.sweeper.due_time, topic)
    assert due is not None and sent - 5 < due - 60 <= sent  # oldest publish time + TTL

    stats = sweep(broker, sent + 30)  # nothing is 60 s old yet
    assert (stats.loaded, stats.not_due) == (0, 2)
    stats = sweep(broker, sent + 60.002)
    assert stats.loaded == 1  # only the topic whose oldest message reached the TTL
    assert not is_loaded(broker, topic) and not is_loaded(broker, keep)
    assert backlog(broker, topic, "lagging") == 0
    assert backlog(broker, keep, "lagging") == 5
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    consumer = client.subscribe(topic, "lagging")
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=200)
    client.close()


def test_no_ttl_keeps_the_backlog_of_an_unloaded_topic(make_broker) -> None:
    broker = make_broker()
    topic = new_topic()
    produce_backlog(broker, topic, 5)
    unload(broker, topic)
    sweep(broker, time.time() + 1000 * HOURS)
    assert not is_loaded(broker, topic)
    assert backlog(broker, topic, "lagging") == 5


# ----------------------------------------------------------------------------- bounded cost


def test_sweep_loads_a_bounded_number_of_topics_per_pass(make_broker) -> None:
    broker = make_broker(magnetarTopicUnloadIdleSeconds=60)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    topics = [new_topic() for _ in range(30)]
    for name in topics:
        producer = client.create_producer(name)
        producer.send(b"x")
        producer.close()
    client.close()
    service = service_of(broker)
    assert broker.call(service.unload_idle_topics, time.monotonic() + 61) == 30
    for name in topics:
        broker.call(service.sweeper.forget, name)  # as after a restart: nothing known

    stats = sweep(broker)  # one segment each, no TTL: nothing to load for
    assert (stats.loaded, stats.judged_from_files) == (0, 30)

    # a TTL appears: backlog must be looked at, at most 12 topics per pass, round robin
    broker.call(lambda: service.policies.set("public/default", message_ttl_seconds=600))
    seen: list[set[str]] = []
    for _ in range(3):
        stats = sweep(broker, max_topics=12)
        assert stats.loaded <= 12
        known = {n for n in topics if broker.call(service.sweeper.due_time, n) is not None}
        seen.append(known)
    assert [len(s) for s in seen] == [12, 24, 30]
    assert sweep(broker).loaded == 0  # all known now: nothing due
    assert not any(is_loaded(broker, n) for n in topics)


def test_client_use_during_sweeps_is_safe(make_broker) -> None:
    broker = make_broker(defaultRetentionTimeInMinutes=0)
    topic = new_topic()
    service = service_of(broker)
    stop = threading.Event()
    swept: list[bool] = []

    def sweeper() -> None:
        while not stop.is_set():
            swept.append(broker.call(service.sweeper.sweep_topic, topic))

    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    client.subscribe(topic, "hold").close()  # keeps every message (retention is 0)
    thread = threading.Thread(target=sweeper)
    thread.start()
    try:
        for i in range(30):
            producer = client.create_producer(topic, batching_enabled=False)
            producer.send(b"%d" % i)
            producer.close()
            if i % 3 == 0 and is_loaded(broker, topic):
                broker.call(lambda: service.unload_topic(service.topics[topic]))
    finally:
        stop.set()
        thread.join(timeout=30)
    assert any(swept) and not all(swept)  # it ran both on and around the loaded topic
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(timeout_millis=5000).data() for _ in range(30)] == [
        b"%d" % i for i in range(30)
    ]
    assert backlog(broker, topic, "hold") == 30
    assert broker.call(lambda: len(service.storage.open_ledgers())) == broker.call(
        lambda: sum(1 for t in service.topics.values() if t.persistent)
    )
    client.close()


def test_the_sweep_runs_on_its_timer(make_broker) -> None:
    broker = make_broker(managedLedgerMaxEntriesPerLedger=10,
                         magnetarIdleTopicSweepIntervalSeconds=1)
    topic = new_topic()
    produce_and_consume(broker, topic, 35)
    before = segment_files(broker)
    assert len(before) == 4
    unload(broker, topic)
    # the sweep loads the topic, removes the segments, then unloads it again: wait for
    # both (the files go first, so seeing them gone says nothing yet of the unload)
    wait_until(lambda: segment_files(broker) == before[-1:] and not is_loaded(broker, topic),
               20, "the sweep to delete the consumed segments and unload the topic")
    assert segment_files(broker) == before[-1:]
    assert not is_loaded(broker, topic)


def test_a_pass_reads_the_topics_keys_not_their_values(make_broker) -> None:
    """A pass lists the persistent topics by their keys alone (`KeyValueStore.keys`):
    reading and parsing every topic's stored value as well (`list`) held the GIL for most
    of a second at 100,000 topics, every pass, and the event loop waited for it."""
    broker = make_broker(managedLedgerMaxEntriesPerLedger=10, defaultRetentionTimeInMinutes=60,
                         defaultRetentionSizeInMB=100)
    topic = new_topic()
    produce_and_consume(broker, topic, 15)
    unload(broker, topic)
    metadata = service_of(broker).metadata
    listed: list[str] = []
    real_list = metadata.list

    def spying_list(prefix: str = "") -> dict[str, object]:
        listed.append(prefix)
        return real_list(prefix)

    metadata.list = spying_list  # type: ignore[method-assign]
    try:
        stats = sweep(broker)
    finally:
        del metadata.list
    assert stats.topics >= 1 and stats.judged_from_files == 1
    assert not [p for p in listed if p.startswith("topics/")], listed
