"""Housekeeping on a slow disk (issue 9): the disk work of message TTL, backlog quotas and
retention runs on the storage's reader threads, so while one topic's housekeeping is stuck
on its disk, clients of another topic on the same broker are served as usual, and the stuck
work completes correctly once the disk answers: messages expired, quota applied, segments
deleted.

Housekeeping runs on its timer here (every second: ``retentionCheckIntervalInSeconds`` or
``backlogQuotaCheckIntervalInSeconds`` set to 1, the smallest of the three intervals wins),
and the tests wait for its effects with bounded polls. A stall holds the matching disk call
(30 s at most, or until released) when a broker thread makes it, never when the test's own
thread looks at the files.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.storage import segment as segment_module
from magnetar.storage.ledger import reads as ledger_module

from .conftest import QUIET, ThreadedBroker
from .test_slow_disk import (
    FAST,
    SLOW,
    _call_in_thread,
    admin,
    attended_elsewhere,
    publish_elsewhere,
    served_elsewhere,
    wait_for,
)

__all__ = ["admin"]  # a fixture, used by name


class Stall:
    """Holds the disk calls of broker threads on files under ``dirs`` until ``release``
    (30 s at most), noting the calling threads' names."""

    def __init__(self) -> None:
        self.dirs: set[str] = set()
        self.release = threading.Event()
        self.threads: list[str] = []

    def hold(self, path: object) -> None:
        if (self.release.is_set() or threading.current_thread() is threading.main_thread()
                or not isinstance(path, str) or not any(path.startswith(d) for d in self.dirs)):
            return
        self.threads.append(threading.current_thread().name)
        self.release.wait(30)

    def only_reader_threads(self) -> bool:
        return bool(self.threads) and all(t.startswith("magnetar-read") for t in self.threads)


@pytest.fixture
def stalled_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stall]:
    """Entry reads of the stalled files (on a reader thread or on the event loop) wait."""
    stall = Stall()
    real_span = ledger_module.read_span
    real_records = segment_module.Segment.read_records

    def slow_span(span: segment_module.ColdSpan, views: bool = False) -> Any:
        stall.hold(span.path)
        return real_span(span, views)

    def slow_records(self: segment_module.Segment, first: int, last: int) -> list[bytes]:
        stall.hold(self.path)
        return real_records(self, first, last)

    monkeypatch.setattr(ledger_module, "read_span", slow_span)
    monkeypatch.setattr(segment_module.Segment, "read_records", slow_records)
    yield stall
    stall.release.set()


@pytest.fixture
def stalled_files(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Stall]]:
    """``stall("stat")`` or ``stall("unlink")``: that call on the stalled files waits."""
    stall = Stall()

    def make(call: str) -> Stall:
        real = getattr(os, call)

        def slow(path: Any, *args: Any, **kwargs: Any) -> Any:
            stall.hold(path)
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, call, slow)
        return stall

    yield make
    stall.release.set()


def _service(broker: ThreadedBroker) -> Any:
    assert broker.service is not None
    return broker.service


def _directory(broker: ThreadedBroker) -> str:
    service = _service(broker)
    return str(broker.call(lambda: service.topics[SLOW].ledger.directory))


def _backlog(broker: ThreadedBroker, sub: str) -> int:
    service = _service(broker)
    return int(broker.call(lambda: service.topics[SLOW].subscriptions[sub].cursor.backlog()))


def _slow_backlog(client: pulsar.Client, broker: ThreadedBroker, stall: Stall, n: int = 20) -> None:
    """SLOW with durable subscription "lagging" (no consumer) ``n`` messages behind; its
    files stalled from before the first message (nothing could expire unseen)."""
    client.subscribe(SLOW, "lagging").close()
    stall.dirs.add(_directory(broker))
    producer = client.create_producer(SLOW, batching_enabled=False)
    for i in range(n):
        producer.send(b"slow-%d" % i)
    producer.close()


# ------------------------------------------------------------------------------ message TTL


@pytest.mark.parametrize("by", ["timer", "admin"])
def test_a_stalled_ttl_search_delays_no_one(
    admin: Callable[..., tuple[ThreadedBroker, str]], stalled_reads: Stall, by: str,
) -> None:
    """The message-TTL search by publish time (housekeeping's, or the admin's
    expireMessages) reads the ledger on the reader threads: while it is stuck, another topic
    is served; once released, the subscription's old messages are expired (and an admin
    call is answered only then)."""
    settings: dict[str, object] = {"managedLedgerCacheSizeMB": 0}  # the reads go to the disk
    if by == "timer":
        settings.update(ttlDurationDefaultInSeconds=1, retentionCheckIntervalInSeconds=1)
    broker, base = admin(**settings)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        _slow_backlog(client, broker, stalled_reads)
        calling, answers = None, []
        if by == "admin":
            calling, answers = _call_in_thread(
                "POST", f"{base}/persistent/public/default/on-a-slow-disk"
                        "/subscription/lagging/expireMessages/0")
        wait_for(lambda: bool(stalled_reads.threads), "the stalled search")

        served_elsewhere(client)
        assert _backlog(broker, "lagging") == 20
        assert calling is None or (calling.is_alive() and not answers)
        assert stalled_reads.only_reader_threads(), stalled_reads.threads

        stalled_reads.release.set()
        wait_for(lambda: _backlog(broker, "lagging") == 0, "the expiry", timeout=20)
        if calling is not None:
            calling.join(20)
            assert answers and answers[0][0] == 204, answers
        consumer = client.subscribe(SLOW, "lagging")
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=300)  # nothing expired comes back
    finally:
        stalled_reads.release.set()
        client.close()


# ------------------------------------------------------------------------- backlog quotas


def test_a_stalled_oldest_entry_read_of_the_time_quota_delays_no_one(
    make_broker: Callable[..., ThreadedBroker], stalled_reads: Stall,
) -> None:
    """Housekeeping's backlog time quota reads the oldest unacknowledged entry (not in the
    read cache) on a reader thread: while that read is stuck, another topic is served;
    once released, the quota is applied (consumer_backlog_eviction: the messages older
    than 90% of it expire)."""
    broker = make_broker(
        managedLedgerCacheSizeMB=0, backlogQuotaDefaultLimitSecond=1,
        backlogQuotaDefaultRetentionPolicy="consumer_backlog_eviction",
        backlogQuotaCheckIntervalInSeconds=1,
    )
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        _slow_backlog(client, broker, stalled_reads)
        wait_for(lambda: bool(stalled_reads.threads), "the stalled read")

        served_elsewhere(client)
        assert _backlog(broker, "lagging") == 20
        assert stalled_reads.only_reader_threads(), stalled_reads.threads

        stalled_reads.release.set()
        wait_for(lambda: _backlog(broker, "lagging") == 0, "the eviction", timeout=20)
    finally:
        stalled_reads.release.set()
        client.close()


@pytest.mark.parametrize("policy, limit, refused", [
    ("producer_request_hold", 1, pulsar.ProducerBlockedQuotaExceededError),
    ("producer_exception", 1, pulsar.ProducerBlockedQuotaExceededException),
    ("producer_exception", 3600, None),
], ids=["hold-over", "exception-over", "within"])
def test_a_new_producer_waits_for_the_stalled_read_of_its_time_quota(
    make_broker: Callable[..., ThreadedBroker], stalled_reads: Stall,
    policy: str, limit: int, refused: type[Exception] | None,
) -> None:
    """A new producer's backlog time quota check needs the oldest unacknowledged entry's
    publish time: when it is not in the read cache, it is read on a reader thread and the
    Producer command is answered once it is; meanwhile another topic is served. The answer
    is Pulsar's: refused with the policy's error when over the quota, else the producer."""
    broker = make_broker(
        managedLedgerCacheSizeMB=0, backlogQuotaDefaultLimitSecond=limit,
        backlogQuotaDefaultRetentionPolicy=policy,
        backlogQuotaCheckIntervalInSeconds=3600,  # no housekeeping during the test
    )
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        _slow_backlog(client, broker, stalled_reads, n=5)
        sent = time.time()
        while time.time() < sent + limit + 0.1 and limit < 60:
            time.sleep(0.05)  # the backlog gets older than the quota
        outcome: list[object] = []

        def create() -> None:
            try:
                outcome.append(client.create_producer(SLOW, batching_enabled=False))
            except Exception as exc:
                outcome.append(exc)

        creating = threading.Thread(target=create)
        creating.start()
        wait_for(lambda: bool(stalled_reads.threads), "the stalled read")

        served_elsewhere(client)  # (its new producer finds no backlog on FAST)
        assert creating.is_alive() and not outcome
        assert stalled_reads.only_reader_threads(), stalled_reads.threads

        stalled_reads.release.set()
        creating.join(20)
        assert len(outcome) == 1, outcome
        if refused is not None:
            assert isinstance(outcome[0], refused), outcome
        else:
            producer = outcome[0]
            assert isinstance(producer, pulsar.Producer), outcome
            producer.send(b"accepted")
            consumer = client.subscribe(SLOW, "lagging")
            got = [consumer.receive(timeout_millis=5000).data() for _ in range(6)]
            assert got == [b"slow-%d" % i for i in range(5)] + [b"accepted"]
    finally:
        stalled_reads.release.set()
        client.close()


# ------------------------------------------------------------------------------ retention


def _segment_files(directory: str) -> list[str]:
    return sorted(str(p) for p in Path(directory).glob("*.seg"))


@pytest.mark.parametrize("call", ["unlink", "stat"])
def test_a_stalled_retention_trim_delays_no_one(
    make_broker: Callable[..., ThreadedBroker], stalled_files: Callable[[str], Stall], call: str,
) -> None:
    """Retention deletes consumed segments with their files' stat (the time window) and
    unlink on the reader threads: while either is stuck, another topic is served. A
    segment leaves the ledger at once, before its file is removed (a reader starts after
    it); once released, the consumed segments' files are gone, the last one kept."""
    settings: dict[str, object] = {
        "managedLedgerMaxEntriesPerLedger": 10, "retentionCheckIntervalInSeconds": 1,
    }
    if call == "stat":
        # kept for a minute whatever the size: the trim needs the files' modification times
        settings.update(defaultRetentionTimeInMinutes=1, defaultRetentionSizeInMB=-1)
    broker = make_broker(**settings)
    service = _service(broker)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        publish_elsewhere(client)
        consumer = client.subscribe(SLOW, "s")
        hold = client.subscribe(SLOW, "hold")  # nothing is consumed while it is there
        directory = _directory(broker)
        stall = stalled_files(call)
        stall.dirs.add(directory)
        producer = client.create_producer(SLOW, batching_enabled=False)
        for i in range(35):
            producer.send(b"slow-%d" % i)
        for _ in range(35):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        wait_for(lambda: _backlog(broker, "s") == 0, "the acks")
        before = _segment_files(directory)
        assert len(before) == 4
        if call == "stat":
            for path in before:  # two hours pass for them: outside the retention window
                st = os.stat(path)
                os.utime(path, (st.st_atime - 7200, st.st_mtime - 7200))
        hold.unsubscribe()  # the first three segments are consumed now
        wait_for(lambda: bool(stall.threads), f"the stalled {call}")

        attended_elsewhere(client)
        assert stall.only_reader_threads(), stall.threads
        assert _segment_files(directory) == before
        kept = broker.call(lambda: service.topics[SLOW].ledger.segment_ids())
        if call == "unlink":  # already out of the ledger, all at once
            assert len(kept) == 1
            reader = client.create_reader(SLOW, pulsar.MessageId.earliest)
            assert reader.read_next(timeout_millis=5000).data() == b"slow-30"
        else:  # not decided before the files' times are known
            assert len(kept) == 4

        stall.release.set()
        trimmed = before[:-1] + [p[:-4] + ".idx" for p in before[:-1]]
        wait_for(lambda: not any(os.path.exists(p) for p in trimmed), "the trim", timeout=20)
        assert _segment_files(directory) == before[-1:]
        assert broker.call(lambda: service.topics[SLOW].ledger.segment_ids()) == [
            int(os.path.basename(before[-1])[:-4])]
    finally:
        stall.release.set()
        client.close()


# ------------------------------------------------------------------- idle unload and the sweep


def test_an_idle_unload_whose_housekeeping_stalls_delays_no_one(
    make_broker: Callable[..., ThreadedBroker], stalled_reads: Stall,
) -> None:
    """An idle topic is housekept before it is unloaded (here its TTL search and the read
    of its oldest unacknowledged entry for the sweep's due time, on the reader threads):
    while that is stuck, the topic stays loaded and another topic is served; once
    released, it is unloaded with its due time noted (oldest publish time + TTL)."""
    broker = make_broker(managedLedgerCacheSizeMB=0, ttlDurationDefaultInSeconds=3600,
                         magnetarTopicUnloadIdleSeconds=60)
    service = _service(broker)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        began = time.time()
        _slow_backlog(client, broker, stalled_reads, n=5)
        unloaded: list[int] = []
        broker.loop.call_soon_threadsafe(
            lambda: service.unload_idle_topics(time.monotonic() + 100, [SLOW]).add_done_callback(
                lambda f: unloaded.append(f.result())))
        wait_for(lambda: bool(stalled_reads.threads), "the stalled housekeeping")

        served_elsewhere(client)
        assert broker.call(lambda: SLOW in service.topics) and not unloaded
        assert stalled_reads.only_reader_threads(), stalled_reads.threads

        stalled_reads.release.set()
        wait_for(lambda: unloaded == [1], "the unload", timeout=20)
        assert broker.call(lambda: SLOW not in service.topics)
        due = broker.call(service.sweeper.due_time, SLOW)
        assert due is not None and began - 1 < due - 3600 < time.time()
        assert FAST in broker.call(lambda: list(service.topics))
    finally:
        stalled_reads.release.set()
        client.close()
