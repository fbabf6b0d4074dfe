"""A segment roll-over on a slow disk holds up only its own topic (issue 9, item 3): the
next segment's file is made, and the sealed one's index sidecar written, on the storage's
reader threads. While those stall for one topic, clients of another topic on the same
broker are served as usual; the stalled topic's sends are answered, in order, once the
disk answers, and nothing is lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pulsar
import pytest

from magnetar.storage import segment as segment_module

from .conftest import QUIET, ThreadedBroker, start_broker
from .test_slow_disk import SLOW, served_elsewhere

Segment = segment_module.Segment


class Stall:
    """Holds segment file creation and sidecar writes under ``dirs`` (broker threads only,
    30 s at most) until ``release``; notes the calling threads."""

    def __init__(self) -> None:
        self.dirs: set[str] = set()
        self.release = threading.Event()
        self.entered = threading.Event()
        self.threads: list[str] = []

    def hold(self, seg: Segment) -> None:
        if (self.release.is_set() or threading.current_thread() is threading.main_thread()
                or seg.directory not in self.dirs):
            return
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        self.release.wait(30)


@pytest.fixture
def stalled_files(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stall]:
    stall = Stall()
    real_create = Segment.create_file
    real_index = Segment.write_index

    def create_file(self: Segment) -> int:
        stall.hold(self)
        return real_create(self)

    def write_index(self: Segment) -> None:
        stall.hold(self)
        real_index(self)

    monkeypatch.setattr(Segment, "create_file", create_file)
    monkeypatch.setattr(Segment, "write_index", write_index)
    yield stall
    stall.release.set()


def test_a_stalled_roll_over_does_not_delay_other_topics(
    make_broker: Callable[..., ThreadedBroker], stalled_files: Stall
) -> None:
    broker = make_broker(managedLedgerMaxEntriesPerLedger=5)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = client.subscribe(SLOW, "s")
        producer = client.create_producer(SLOW, batching_enabled=False)
        for i in range(3):
            producer.send(b"slow-%d" % i)  # the first segment's file is made
        service = broker.service
        assert service is not None
        stalled_files.dirs.add(broker.call(lambda: service.topics[SLOW].ledger.directory))

        receipts: list[tuple[int, object]] = []
        answered = threading.Event()

        def sent(i: int) -> Callable[[object, object], None]:
            def done(result: object, msg_id: object) -> None:
                receipts.append((i, result))
                if len(receipts) == 7:
                    answered.set()
            return done

        for i in range(3, 10):  # the 6th entry rolls over: its segment's file stalls
            producer.send_async(b"slow-%d" % i, sent(i))
        assert stalled_files.entered.wait(10)
        deadline = time.monotonic() + 10
        while len(receipts) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [i for i, _ in receipts] == [3, 4]  # the entries before the roll-over

        served_elsewhere(client)
        assert not stalled_files.release.is_set()
        assert len(receipts) == 2  # the rest still wait for their segment's file

        stalled_files.release.set()
        assert answered.wait(10)
        assert [i for i, _ in receipts] == list(range(3, 10))
        assert all(r == pulsar.Result.Ok for _, r in receipts)
        got = [consumer.receive(timeout_millis=10_000).data() for _ in range(10)]
        assert got == [b"slow-%d" % i for i in range(10)]
        assert stalled_files.threads
        assert all(t.startswith("magnetar-read") for t in stalled_files.threads)
    finally:
        stalled_files.release.set()
        client.close()


@pytest.mark.parametrize("fsync", ["group", "always", "never"])
def test_a_segment_per_entry_keeps_every_message_across_a_restart(tmp_path, fsync: str) -> None:
    """Every entry rolls over (one per segment), with a descriptor limit far below the
    segment count: held writes, off-loop creations and seals, retiring descriptors, all
    at once under the official client's batched and unbatched sends."""
    settings = {"managedLedgerMaxEntriesPerLedger": 1, "magnetarMaxOpenFiles": 8,
                "magnetarFsyncPolicy": fsync}
    topic = "persistent://public/default/one-entry-segments"
    broker = start_broker(tmp_path, **settings)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
        consumer = client.subscribe(topic, "s")
        batched = client.create_producer(topic, batching_enabled=True,
                                         batching_max_messages=10)
        for i in range(100):
            batched.send_async(b"b%03d" % i, None)
        batched.flush()
        single = client.create_producer(topic, batching_enabled=False)
        for i in range(60):
            single.send(b"u%03d" % i)
        expected = [b"b%03d" % i for i in range(100)] + [b"u%03d" % i for i in range(60)]
        got = [consumer.receive(timeout_millis=10_000).data() for _ in expected]
        assert got == expected
        client.close()
    finally:
        broker.stop()
    broker = start_broker(tmp_path, **settings)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        again = [reader.read_next(timeout_millis=10_000).data() for _ in expected]
        assert again == expected
        assert not reader.has_message_available()
        client.close()
    finally:
        broker.stop()
