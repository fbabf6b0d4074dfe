"""A slow disk holds up only the subscriptions that read from it (issue 9): reads that miss
the cache run on the storage's reader threads, so while one topic's read stalls, another
topic on the same broker keeps its latency, and the stalled one catches up afterwards."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from magnetar.admin.server import AdminServer
from magnetar.storage import segment as segment_module
from magnetar.storage.ledger import reads as ledger_module
from magnetar.storage.metadata import SqliteMetadataStore

from .conftest import QUIET, ThreadedBroker

SLOW = "persistent://public/default/on-a-slow-disk"
FAST = "persistent://public/default/elsewhere"


def served_elsewhere(client: pulsar.Client) -> None:
    """Subscribe to and make 20 send/receive round trips on another topic, each within
    1 s and all within 5 s: far below the 30 s a stall holds its own topic."""
    began = time.monotonic()
    consumer = client.subscribe(FAST, "s")
    fast = client.create_producer(FAST, batching_enabled=False)
    worst = 0.0
    for i in range(20):
        started = time.monotonic()
        fast.send(b"fast-%d" % i)
        assert consumer.receive(timeout_millis=5000).data() == b"fast-%d" % i
        worst = max(worst, time.monotonic() - started)
    whole = time.monotonic() - began
    assert worst < 1.0, f"a round trip on another topic took {worst:.2f}s during the stall"
    assert whole < 5.0, f"subscribing and 20 round trips on another topic took {whole:.2f}s"


def publish_elsewhere(client: pulsar.Client) -> None:
    """10 messages on another topic, for `attended_elsewhere` to receive."""
    producer = client.create_producer(FAST, batching_enabled=False)
    for i in range(10):
        producer.send(b"fast-%d" % i)
    producer.close()


def attended_elsewhere(client: pulsar.Client) -> None:
    """20 lookups of another topic, a new subscription there that receives the messages
    `publish_elsewhere` stored, and a new producer, each step within 1 s and all within
    2 s. No sends: the flusher thread commits them, one for all topics, and a sync
    stalled in it holds them (what this checks is that the event loop is free)."""
    began = time.monotonic()
    worst = 0.0
    for _ in range(20):
        started = time.monotonic()
        assert client.get_topic_partitions(FAST) == [FAST]
        worst = max(worst, time.monotonic() - started)
    consumer = client.subscribe(FAST, "attended", initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(timeout_millis=5000).data() for _ in range(10)]
    assert got == [b"fast-%d" % i for i in range(10)]
    consumer.close()
    client.create_producer(FAST, batching_enabled=False, producer_name="attended").close()
    whole = time.monotonic() - began
    assert worst < 1.0, f"a lookup on another topic took {worst:.2f}s"
    assert whole < 2.0, f"20 lookups, a subscription and a producer took {whole:.2f}s"


@pytest.fixture
def stalled_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[set[str], threading.Event]]:
    """Reads of files under the directories in the set wait for the event (30 s at most),
    whether they run on a reader thread or, as before, on the event loop."""
    slow_dirs: set[str] = set()
    release = threading.Event()

    def stalled(path: str) -> bool:
        return any(path.startswith(d) for d in slow_dirs)

    real_span = ledger_module.read_span
    real_records = segment_module.Segment.read_records

    def slow_span(span: segment_module.ColdSpan, views: bool = False) -> Any:
        if stalled(span.path):
            release.wait(30)
        return real_span(span, views)

    def slow_records(self: segment_module.Segment, first: int, last: int) -> list[bytes]:
        if stalled(self.path):
            release.wait(30)
        return real_records(self, first, last)

    monkeypatch.setattr(ledger_module, "read_span", slow_span)
    monkeypatch.setattr(segment_module.Segment, "read_records", slow_records)
    yield slow_dirs, release
    release.set()


def test_a_stalled_read_does_not_delay_other_topics(
    make_broker: Callable[..., ThreadedBroker], stalled_reads: tuple[set[str], threading.Event]
) -> None:
    slow_dirs, release = stalled_reads
    broker = make_broker(managedLedgerCacheSizeMB=0)  # every read goes to the disk
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        producer = client.create_producer(SLOW, batching_enabled=False)
        for i in range(20):
            producer.send(b"slow-%d" % i)
        service = broker.service
        assert service is not None
        slow_dirs.add(broker.call(lambda: service.topics[SLOW].ledger.directory))

        stalled = client.subscribe(SLOW, "s", initial_position=pulsar.InitialPosition.Earliest)
        with pytest.raises(pulsar.Timeout):
            stalled.receive(timeout_millis=200)  # its read is stuck on the slow disk

        served_elsewhere(client)
        assert not release.is_set()

        release.set()
        got = [stalled.receive(timeout_millis=10_000).data() for _ in range(20)]
        assert got == [b"slow-%d" % i for i in range(20)]
    finally:
        release.set()
        client.close()


def test_a_seek_by_time_on_a_slow_disk_does_not_delay_other_topics(
    make_broker: Callable[..., ThreadedBroker], stalled_reads: tuple[set[str], threading.Event]
) -> None:
    slow_dirs, release = stalled_reads
    broker = make_broker(managedLedgerCacheSizeMB=0)
    client = pulsar.Client(broker.url, operation_timeout_seconds=20, logger=QUIET)
    try:
        seeker = client.subscribe(SLOW, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(SLOW, batching_enabled=False)
        ids = [producer.send(b"slow-%d" % i) for i in range(20)]
        got = [seeker.receive(timeout_millis=5000) for _ in range(20)]
        assert [m.message_id() for m in got] == ids
        service = broker.service
        assert service is not None
        slow_dirs.add(broker.call(lambda: service.topics[SLOW].ledger.directory))

        seeking = threading.Thread(target=seeker.seek, args=(got[10].publish_timestamp(),))
        seeking.start()  # its search reads the slow disk
        consumer = client.subscribe(FAST, "s")
        fast = client.create_producer(FAST, batching_enabled=False)
        began = time.monotonic()
        for i in range(10):
            fast.send(b"fast-%d" % i)
            assert consumer.receive(timeout_millis=5000).data() == b"fast-%d" % i
        assert time.monotonic() - began < 5.0
        assert seeking.is_alive() and not release.is_set()
        release.set()
        seeking.join(20)
        assert not seeking.is_alive()
        first = next(i for i, m in enumerate(got) if m.publish_timestamp() >= got[10].publish_timestamp())
        assert seeker.receive(timeout_millis=10_000).data() == b"slow-%d" % first
    finally:
        release.set()
        client.close()


@pytest.mark.parametrize("settings", [
    {},
    {"brokerDeduplicationEnabled": True,
     "brokerEntryMetadataInterceptors": "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"},
], ids=["plain", "dedup-replay-and-entry-index"])
def test_a_stalled_topic_load_does_not_delay_other_topics(
    make_broker: Callable[..., ThreadedBroker], monkeypatch: pytest.MonkeyPatch,
    stalled_reads: tuple[set[str], threading.Event], settings: dict[str, object],
) -> None:
    """Loading a topic (its ledger's recovery scan and stored state; with dedup, the
    snapshot and the entries replayed after it; with entry metadata, the last entry) runs
    on the storage threads: while one topic's load is stuck on its disk, a producer and a
    consumer on another topic are served as usual, and the stuck one completes afterwards."""
    slow_dirs, release = stalled_reads
    real_open = segment_module.Segment.open_existing.__func__  # type: ignore[attr-defined]

    stall_open = not settings  # with dedup, the ledger opens and its reads are what stall

    def slow_open(cls: type[segment_module.Segment], directory: str, ledger_id: int,
                  *args: object, **kwargs: object) -> object:
        if stall_open and directory in slow_dirs:
            release.wait(30)
        return real_open(cls, directory, ledger_id, *args, **kwargs)

    monkeypatch.setattr(segment_module.Segment, "open_existing", classmethod(slow_open))
    broker = make_broker(managedLedgerCacheSizeMB=0, **settings)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        producer = client.create_producer(SLOW, batching_enabled=False, producer_name="p")
        service = broker.service
        assert service is not None
        snapshot = broker.call(service.metadata.get, f"dedup/{SLOW}")
        for i in range(5):
            producer.send(b"slow-%d" % i)
        producer.close()
        slow_dirs.add(broker.call(lambda: service.topics[SLOW].ledger.directory))
        last = broker.call(lambda: service.topics[SLOW].ledger.last_confirmed())
        broker.call(lambda: service.unload_topic(service.topics[SLOW]))  # next use reloads it
        if snapshot is not None:  # as after a crash: the 5 entries are replayed on load
            # (the unload's own snapshot is written off the loop: let it land first, or it
            # would land over the old one put back here)
            wait_for(lambda: broker.call(service.metadata.get, f"dedup/{SLOW}")["position"]
                     == list(last), "the unload's dedup snapshot")
            broker.call(service.metadata.put, f"dedup/{SLOW}", snapshot)

        loaded: list[pulsar.Consumer] = []
        loading = threading.Thread(target=lambda: loaded.append(client.subscribe(
            SLOW, "s", initial_position=pulsar.InitialPosition.Earliest)))
        loading.start()  # its topic's load is stuck on the slow disk
        time.sleep(0.2)

        served_elsewhere(client)
        assert loading.is_alive() and not loaded and not release.is_set()
        assert SLOW not in broker.call(lambda: list(service.topics))

        release.set()
        loading.join(20)
        assert loaded
        got = [loaded[0].receive(timeout_millis=10_000).data() for _ in range(5)]
        assert got == [b"slow-%d" % i for i in range(5)]
        if snapshot is not None:
            topic = broker.call(lambda: service.topics[SLOW])
            assert broker.call(topic.last_sequence_id, "p") == 4
            assert broker.call(lambda: topic.dedup_unsaved) == 5
            assert broker.call(lambda: topic.entry_index) == 5
    finally:
        release.set()
        client.close()


def test_a_stalled_metadata_store_read_delays_only_its_own_request(
    make_broker: Callable[..., ThreadedBroker],
) -> None:
    """PartitionedMetadata and GetTopicsOfNamespace read the metadata store on the storage
    threads: while those reads stall (one topic's key, one namespace listing), requests on
    other topics are served as usual, and the stalled ones are answered afterwards."""
    broker = make_broker()
    service = broker.service
    assert service is not None
    store = service.metadata
    release = threading.Event()
    stalled: list[str] = []
    real_get, real_list, real_keys = store.get, store.list, store.keys

    def slow_get(key: str) -> object:
        if "stalled-topic" in key and not release.is_set():
            stalled.append(key)
            release.wait(30)
        return real_get(key)

    def slow_list(prefix: str) -> object:
        if prefix.startswith("topics/persistent://") and not release.is_set():
            stalled.append(prefix)
            release.wait(30)
        return real_list(prefix)

    def slow_keys(prefix: str, *args: object) -> object:  # (listings read keys only)
        if prefix.startswith("topics/persistent://") and not release.is_set():
            stalled.append(prefix)
            release.wait(30)
        return real_keys(prefix, *args)  # type: ignore[arg-type]

    broker.call(setattr, store, "get", slow_get)
    broker.call(setattr, store, "list", slow_list)
    broker.call(setattr, store, "keys", slow_keys)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        created: list[pulsar.Producer] = []
        creating = threading.Thread(target=lambda: created.append(
            client.create_producer("persistent://public/default/stalled-topic")))
        listed: list[pulsar.Consumer] = []
        listing = threading.Thread(target=lambda: listed.append(client.subscribe(
            re.compile("persistent://public/default/pattern-.*"), "s")))
        creating.start()
        listing.start()
        deadline = time.monotonic() + 10
        while len(stalled) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(stalled) >= 2, stalled

        served_elsewhere(client)
        assert creating.is_alive() and listing.is_alive() and not created and not listed

        release.set()
        creating.join(20)
        listing.join(20)
        assert created and listed
        created[0].send(b"after the stall")
    finally:
        release.set()
        client.close()
        broker.call(delattr, store, "get")
        broker.call(delattr, store, "list")


def _http(method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.parametrize("method, path", [
    ("GET", "/stats"),
    ("POST", "/subscription/s/skip_all"),
], ids=["stats", "skip-all"])
def test_an_admin_call_on_a_stalled_topic_load_does_not_delay_other_topics(
    make_broker: Callable[..., ThreadedBroker], monkeypatch: pytest.MonkeyPatch,
    stalled_reads: tuple[set[str], threading.Event], method: str, path: str,
) -> None:
    """An admin call on a topic that is not loaded loads it off the loop (as a client's
    Producer or Subscribe does): while its ledger's open is stuck on the disk, clients of
    another topic are served as usual, and the admin call is answered afterwards."""
    slow_dirs, release = stalled_reads
    real_open = segment_module.Segment.open_existing.__func__  # type: ignore[attr-defined]

    stuck = threading.Event()

    def slow_open(cls: type[segment_module.Segment], directory: str, ledger_id: int,
                  *args: object, **kwargs: object) -> object:
        if directory in slow_dirs:
            stuck.set()
            release.wait(30)
        return real_open(cls, directory, ledger_id, *args, **kwargs)

    monkeypatch.setattr(segment_module.Segment, "open_existing", classmethod(slow_open))
    broker = make_broker()
    service = broker.service
    assert service is not None
    server = AdminServer(service, "127.0.0.1", 0)
    broker.call_async(server.start)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        client.subscribe(SLOW, "s").close()
        producer = client.create_producer(SLOW, batching_enabled=False)
        for i in range(5):
            producer.send(b"slow-%d" % i)
        producer.close()
        slow_dirs.add(broker.call(lambda: service.topics[SLOW].ledger.directory))
        broker.call(lambda: service.unload_topic(service.topics[SLOW]))

        answers: list[tuple[int, bytes]] = []
        url = f"http://127.0.0.1:{server.port}/admin/v2/persistent/public/default/on-a-slow-disk{path}"
        calling = threading.Thread(target=lambda: answers.append(_http(method, url)))
        calling.start()  # its topic's load is stuck on the slow disk
        assert stuck.wait(10)

        served_elsewhere(client)
        assert calling.is_alive() and not answers and not release.is_set()

        release.set()
        calling.join(20)
        assert answers and answers[0][0] in (200, 204), answers
        backlog = broker.call(lambda: service.topics[SLOW].subscriptions["s"].cursor.backlog())
        assert backlog == (0 if "skip_all" in path else 5)
    finally:
        release.set()
        client.close()
        broker.call_async(server.stop)


class StalledPuts:
    """Metadata store writes of keys containing one of ``marks`` stall (30 s at most) until
    ``release`` is set; each stalled key is noted in ``stalled``."""

    def __init__(self) -> None:
        self.marks: set[str] = set()
        self.stalled: list[str] = []
        self.release = threading.Event()

    def install(self, broker: ThreadedBroker) -> None:
        store = broker.service.metadata  # type: ignore[union-attr]
        real_put = store.put

        def slow_put(key: str, value: object) -> None:
            if any(m in key for m in self.marks) and not self.release.is_set():
                self.stalled.append(key)
                self.release.wait(30)
            real_put(key, value)

        broker.call(setattr, store, "put", slow_put)


@pytest.fixture
def stalled_puts(make_broker: Callable[..., ThreadedBroker]) -> Iterator[
        tuple[Callable[..., ThreadedBroker], StalledPuts]]:
    """``make(**settings)`` starts a broker whose metadata writes stall as `StalledPuts` says."""
    stall = StalledPuts()

    def make(**settings: object) -> ThreadedBroker:
        broker = make_broker(**settings)
        stall.install(broker)
        return broker

    yield make, stall
    stall.release.set()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_stalled_schema_write_delays_only_its_own_producer(
    stalled_puts: tuple[Callable[..., ThreadedBroker], StalledPuts],
) -> None:
    """A producer's new schema version is stored off the loop: while that write stalls,
    clients of other topics are served as usual; the producer is answered only once its
    version is stored."""
    make, stall = stalled_puts
    broker = make()
    service = broker.service
    assert service is not None
    stalled, release = stall.stalled, stall.release
    stall.marks.add("schemas/public/default/on-a-slow-disk")
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        created: list[pulsar.Producer] = []
        creating = threading.Thread(target=lambda: created.append(client.create_producer(
            SLOW, schema=pulsar.schema.StringSchema())))
        creating.start()
        wait_for(lambda: bool(stalled), "the schema write")

        served_elsewhere(client)
        assert creating.is_alive() and not created and not release.is_set()

        release.set()
        creating.join(20)
        assert created
        stored = broker.call(service.metadata.list, "schemas/public/default/on-a-slow-disk/")
        assert len(stored) == 1
        created[0].send("typed")
    finally:
        release.set()
        client.close()


def test_a_stalled_dedup_snapshot_write_delays_no_one(
    stalled_puts: tuple[Callable[..., ThreadedBroker], StalledPuts],
) -> None:
    """Dedup snapshots are written off the loop, one at a time per topic: while a topic's
    snapshot write stalls, its own producer and the clients of other topics are served as
    usual, and once it lands, the latest state is written after it (never an older one)."""
    make, stall = stalled_puts
    broker = make(brokerDeduplicationEnabled=True, brokerDeduplicationEntriesInterval=2)
    service = broker.service
    assert service is not None
    key = f"dedup/{SLOW}"
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        producer = client.create_producer(SLOW, batching_enabled=False, producer_name="p")
        stall.marks.add(key)
        for i in range(4):  # the snapshot after the second entry stalls
            producer.send(b"slow-%d" % i)
        wait_for(lambda: bool(stall.stalled), "the snapshot write")

        served_elsewhere(client)
        for i in range(4, 10):  # the stalled topic's own sends do not wait either
            producer.send(b"slow-%d" % i)
        assert not stall.release.is_set() and stall.stalled == [key]

        stall.release.set()
        topic = broker.call(lambda: service.topics[SLOW])
        last = broker.call(topic.ledger.last_confirmed)
        wait_for(lambda: broker.call(service.metadata.get, key)["position"] == list(last),
                 "the latest snapshot")
        assert broker.call(service.metadata.get, key)["producers"] == {"p": 9}
    finally:
        stall.release.set()
        client.close()


def _compact_slow_topic(broker: ThreadedBroker, client: pulsar.Client, stall: StalledPuts) -> None:
    """Six messages on two keys on SLOW, then compact it (its metadata write as ``stall``
    says: served_elsewhere runs while that write stalls, if it does)."""
    service = broker.service
    assert service is not None
    producer = client.create_producer(SLOW, batching_enabled=False)
    for i in range(6):
        producer.send(b"v%d" % i, partition_key=f"k{i % 2}")
    topic = broker.call(lambda: service.topics[SLOW])
    assert broker.call(service.compactor.trigger, topic)
    if stall.marks:
        wait_for(lambda: bool(stall.stalled), "the compaction's write")
        served_elsewhere(client)
        assert broker.call(lambda: service.compactor.status(SLOW).status) == "RUNNING"
        stall.release.set()
    wait_for(lambda: broker.call(lambda: service.compactor.status(SLOW).status) == "SUCCESS",
             "the compaction")


def test_a_stalled_compaction_write_delays_only_its_own_topic(
    stalled_puts: tuple[Callable[..., ThreadedBroker], StalledPuts],
) -> None:
    """The write that ends a compaction (its ``compaction/<topic>`` key) runs off the loop:
    while it stalls, clients of other topics are served as usual."""
    make, stall = stalled_puts
    broker = make()
    stall.marks.add(f"compaction/{SLOW}")
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        _compact_slow_topic(broker, client, stall)
    finally:
        stall.release.set()
        client.close()


def test_a_stalled_compaction_read_delays_only_its_read_compacted_subscriber(
    stalled_puts: tuple[Callable[..., ThreadedBroker], StalledPuts],
) -> None:
    """A ``read_compacted`` subscriber of a topic just loaded has the topic's compaction
    key read (and its compacted ledger opened) off the loop: while that read stalls,
    clients of other topics are served as usual; then it gets the compacted view."""
    make, stall = stalled_puts
    broker = make()
    service = broker.service
    assert service is not None
    key = f"compaction/{SLOW}"
    store = service.metadata
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    got_key = threading.Event()
    release = threading.Event()
    real_get = store.get

    def slow_get(k: str) -> object:
        if k == key and not release.is_set():
            got_key.set()
            release.wait(30)
        return real_get(k)

    try:
        _compact_slow_topic(broker, client, stall)
        broker.call(lambda: service.unload_topic(service.topics[SLOW]))
        broker.call(setattr, store, "get", slow_get)
        subscribed: list[pulsar.Consumer] = []
        subscribing = threading.Thread(target=lambda: subscribed.append(client.subscribe(
            SLOW, "compacted", is_read_compacted=True,
            initial_position=pulsar.InitialPosition.Earliest)))
        subscribing.start()
        assert got_key.wait(10)

        served_elsewhere(client)
        assert subscribing.is_alive() and not subscribed

        release.set()
        subscribing.join(20)
        assert subscribed
        got = [subscribed[0].receive(timeout_millis=10_000).data() for _ in range(2)]
        assert got == [b"v4", b"v5"]
    finally:
        release.set()
        client.close()
        broker.call(delattr, store, "get")


@pytest.fixture
def admin(make_broker: Callable[..., ThreadedBroker]) -> Iterator[
        Callable[..., tuple[ThreadedBroker, str]]]:
    """``make(**settings)`` starts a broker with an admin server: (broker, its base URL)."""
    servers: list[tuple[ThreadedBroker, AdminServer]] = []

    def make(**settings: object) -> tuple[ThreadedBroker, str]:
        broker = make_broker(**settings)
        service = broker.service
        assert service is not None
        server = AdminServer(service, "127.0.0.1", 0)
        broker.call_async(server.start)
        servers.append((broker, server))
        return broker, f"http://127.0.0.1:{server.port}/admin/v2"

    yield make
    for broker, server in servers:
        broker.call_async(server.stop)


def _call_in_thread(method: str, url: str, body: bytes | None = None
                    ) -> tuple[threading.Thread, list[tuple[int, bytes]]]:
    answers: list[tuple[int, bytes]] = []
    calling = threading.Thread(target=lambda: answers.append(_http(method, url, body)))
    calling.start()
    return calling, answers


@pytest.mark.parametrize("stall", ["rmtree", "metadata-delete"])
def test_a_stalled_topic_delete_delays_only_its_own_request(
    admin: Callable[..., tuple[ThreadedBroker, str]], monkeypatch: pytest.MonkeyPatch,
    stall: str,
) -> None:
    """Deleting a topic removes its files and its metadata off the loop: while the
    directory's removal (or the ``topics/`` key's delete) stalls, clients of other topics
    are served as usual; the delete is answered once it is done, and the topic is gone."""
    broker, base = admin()
    service = broker.service
    assert service is not None
    release = threading.Event()
    stalled: list[str] = []
    slow_dirs: set[str] = set()
    real_rmtree = shutil.rmtree

    def slow_rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path) in slow_dirs and not release.is_set():
            stalled.append(str(path))
            release.wait(30)
        real_rmtree(path, *args, **kwargs)

    store = service.metadata
    real_delete = store.delete

    def slow_delete(key: str) -> bool:
        if stall == "metadata-delete" and key == f"topics/{SLOW}" and not release.is_set():
            stalled.append(key)
            release.wait(30)
        return real_delete(key)

    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        producer = client.create_producer(SLOW, batching_enabled=False)
        for i in range(5):
            producer.send(b"slow-%d" % i)
        producer.close()
        directory = broker.call(lambda: service.topics[SLOW].ledger.directory)
        if stall == "rmtree":
            slow_dirs.add(directory)
            monkeypatch.setattr(shutil, "rmtree", slow_rmtree)
        else:
            broker.call(setattr, store, "delete", slow_delete)

        deleting, answers = _call_in_thread(
            "DELETE", f"{base}/persistent/public/default/on-a-slow-disk")
        wait_for(lambda: bool(stalled), "the stalled delete")

        served_elsewhere(client)
        assert deleting.is_alive() and not answers

        release.set()
        deleting.join(20)
        assert answers and answers[0][0] == 204, answers
        assert broker.call(store.get, f"topics/{SLOW}") is None
        assert not os.path.exists(directory)
        assert SLOW not in broker.call(lambda: list(service.topics))
    finally:
        release.set()
        client.close()
        if stall == "metadata-delete":
            broker.call(delattr, store, "delete")


@pytest.mark.parametrize("method, path, body, key", [
    ("POST", "/namespaces/public/default/messageTTL", b"600", "policies/public/default"),
    ("PUT", "/namespaces/public/slow-ns", None, "namespaces/public/slow-ns"),
    ("PUT", "/tenants/slow-tenant", None, "tenants/slow-tenant"),
    ("POST", "/namespaces/public/default/permissions/alice", b'["produce"]',
     "permissions/public/default"),
], ids=["policy", "namespace", "tenant", "permission"])
def test_a_stalled_admin_metadata_write_delays_only_its_own_request(
    stalled_puts: tuple[Callable[..., ThreadedBroker], StalledPuts],
    method: str, path: str, body: bytes | None, key: str,
) -> None:
    """Policies, namespaces, tenants and permissions change in memory at once and are
    stored off the loop: while the store write stalls, clients of other topics are served
    as usual (and the change is already in effect); the admin call is answered once the
    change is stored."""
    make, stall = stalled_puts
    broker = make()
    service = broker.service
    assert service is not None
    server = AdminServer(service, "127.0.0.1", 0)
    broker.call_async(server.start)
    stall.marks.add(key)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        calling, answers = _call_in_thread(
            method, f"http://127.0.0.1:{server.port}/admin/v2{path}", body)
        wait_for(lambda: bool(stall.stalled), "the stalled write")

        served_elsewhere(client)
        assert calling.is_alive() and not answers
        if key.startswith("policies/"):  # in effect before it is stored
            ttl = broker.call(lambda: service.policies.get("public/default").message_ttl_seconds)
            assert ttl == 600

        stall.release.set()
        calling.join(20)
        assert answers and answers[0][0] == 204, answers
        assert broker.call(service.metadata.get, key) is not None
    finally:
        stall.release.set()
        client.close()
        broker.call_async(server.stop)


@pytest.mark.parametrize("path", ["/lastMessageId", "/subscription/s/position/1"],
                         ids=["last-message-id", "peek"])
def test_a_stalled_admin_entry_read_delays_only_its_own_request(
    admin: Callable[..., tuple[ThreadedBroker, str]],
    stalled_reads: tuple[set[str], threading.Event], path: str,
) -> None:
    """lastMessageId and peek read their entry on the storage's reader threads: while that
    read stalls on the disk, clients of other topics are served as usual, and the admin
    call is answered afterwards."""
    slow_dirs, release = stalled_reads
    broker, base = admin(managedLedgerCacheSizeMB=0)  # every read goes to the disk
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        client.subscribe(SLOW, "s").close()
        producer = client.create_producer(SLOW, batching_enabled=False)
        ids = [producer.send(b"slow-%d" % i) for i in range(3)]
        slow_dirs.add(broker.call(lambda: service.topics[SLOW].ledger.directory))

        calling, answers = _call_in_thread(
            "GET", f"{base}/persistent/public/default/on-a-slow-disk{path}")
        calling.join(0.3)  # its read is stuck on the slow disk
        served_elsewhere(client)
        assert calling.is_alive() and not answers

        release.set()
        calling.join(20)
        assert answers and answers[0][0] == 200, answers
        if "position" in path:
            assert answers[0][1] == b"slow-0"
        else:
            doc = json.loads(answers[0][1])
            assert (doc["ledgerId"], doc["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    finally:
        release.set()
        client.close()


def test_a_stalled_cursor_write_on_unload_delays_no_one(
    make_broker: Callable[..., ThreadedBroker], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unloading a topic hands its cursors' last states to the storage's cursor writer
    thread: while that write stalls, clients of other topics (a new subscription included)
    are served as usual; a reload of the topic waits for the write and sees the acks."""
    release = threading.Event()
    stalled: list[str] = []
    real_put_many = SqliteMetadataStore.put_many

    def slow_put_many(self: SqliteMetadataStore, items: dict[str, Any], *args: Any,
                      **kwargs: Any) -> None:
        if release_armed.is_set() and not release.is_set() and any(
                k.startswith("cursor/") and slow_ledger[0] in k for k in items):
            stalled.extend(items)
            release.wait(30)
        real_put_many(self, items, *args, **kwargs)

    release_armed = threading.Event()
    slow_ledger: list[str] = []
    monkeypatch.setattr(SqliteMetadataStore, "put_many", slow_put_many)
    broker = make_broker()
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = client.subscribe(SLOW, "s")
        producer = client.create_producer(SLOW, batching_enabled=False)
        for i in range(5):
            producer.send(b"slow-%d" % i)
        for _ in range(3):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        producer.close()
        consumer.close()
        wait_for(lambda: broker.call(
            lambda: service.topics[SLOW].subscriptions["s"].cursor.backlog()) == 2, "the acks")
        slow_ledger.append(broker.call(lambda: service.topics[SLOW].ledger.name))
        release_armed.set()
        topic = broker.call(lambda: service.topics[SLOW])
        broker.loop.call_soon_threadsafe(service.unload_topic, topic)
        wait_for(lambda: bool(stalled), "the stalled cursor write")

        served_elsewhere(client)
        assert not release.is_set()

        reloading = threading.Thread(target=lambda: client.subscribe(SLOW, "s").close())
        reloading.start()  # the reload waits for the cursor write
        reloading.join(0.3)
        assert reloading.is_alive()
        release.set()
        reloading.join(20)
        assert not reloading.is_alive()
        backlog = broker.call(lambda: service.topics[SLOW].subscriptions["s"].cursor.backlog())
        assert backlog == 2
    finally:
        release.set()
        client.close()


def _slow_fdatasync(monkeypatch: pytest.MonkeyPatch, seconds: float) -> tuple[set[str], list[int]]:
    """Make fdatasync of files under the directories in the returned set take ``seconds``
    longer (the injected slow disk; whichever thread syncs: the loop inline or the flusher
    thread, as both go through `Segment.sync`); the list notes the thread of each slow one."""
    slow_dirs: set[str] = set()
    slow_syncs: list[int] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        if slow_dirs:
            path = os.readlink(f"/proc/self/fd/{fd}")
            if any(path.startswith(d) for d in slow_dirs):
                slow_syncs.append(threading.get_ident())
                time.sleep(seconds)
        real(fd)

    monkeypatch.setattr(segment_module.os, "fdatasync", fdatasync)
    return slow_dirs, slow_syncs


def test_a_slow_fdatasync_blocks_the_event_loop_once(
    make_broker: Callable[..., ThreadedBroker], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The event loop syncs a lone send's batch itself while the flusher thread idles; when
    a sync is slow (here 300 ms per fdatasync of one topic's segment), it stops doing that
    for a while: the first slow sync blocks the loop once, and then, while the slow topic
    goes on sending (its syncs on the flusher thread), another topic's lookups, new
    producer and consumer and deliveries are served as usual."""
    slow_dirs, slow_syncs = _slow_fdatasync(monkeypatch, 0.3)
    broker = make_broker()
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    stop = threading.Event()
    sent: list[pulsar.MessageId] = []
    try:
        publish_elsewhere(client)
        producer = client.create_producer(SLOW, batching_enabled=False)
        sent.append(producer.send(b"slow"))
        slow_dirs.add(broker.call(lambda: service.topics[SLOW].ledger.directory))

        def keep_sending() -> None:
            while not stop.is_set():
                sent.append(producer.send(b"slow"))

        sending = threading.Thread(target=keep_sending)
        sending.start()
        wait_for(lambda: len(slow_syncs) >= 2, "two slow syncs")
        began_with = len(sent)

        # (each lookup would wait for a 300 ms sync on the loop if it went on syncing inline)
        attended_elsewhere(client)

        wait_for(lambda: len(sent) >= began_with + 2, "the slow topic's sends")
        stop.set()
        sending.join(10)
        assert not sending.is_alive()
        loop_thread = broker.thread.ident
        # once at most: none if a real sync slower than the threshold (20 ms, a loaded
        # machine) had already turned inline syncs off before the slow topic's first one
        assert slow_syncs.count(loop_thread) <= 1, "the loop synced a slow batch more than once"
        assert len(slow_syncs) > 2 and broker.call(lambda: service.storage._flusher.inline_paused)
    finally:
        stop.set()
        client.close()


def test_fast_fdatasyncs_are_still_made_on_the_event_loop(
    make_broker: Callable[..., ThreadedBroker], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The back-off after slow syncs leaves the saving alone while syncs are fast: a lone
    unbatched producer's sends are synced on the event loop (no thread hand-off)."""
    monkeypatch.setattr(segment_module.os, "fdatasync", lambda fd: None)  # an instant disk
    broker = make_broker()
    service = broker.service
    assert service is not None
    flusher = service.storage._flusher
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        producer = client.create_producer(FAST, batching_enabled=False)
        before = broker.call(lambda: flusher.inline_rounds)
        for i in range(50):
            producer.send(b"fast-%d" % i)
        assert broker.call(lambda: flusher.inline_rounds) - before >= 45
        assert flusher.slow_syncs == 0 and not flusher.inline_paused
    finally:
        client.close()


@pytest.mark.parametrize("how, stall", [
    ("admin", "seal"), ("idle", "seal"), ("namespace", "seal"), ("admin", "fdatasync"),
], ids=["admin-unload-seal", "idle-unload-seal", "namespace-unload-seal", "admin-unload-fdatasync"])
def test_a_stalled_ledger_close_on_unload_delays_no_one(
    admin: Callable[..., tuple[ThreadedBroker, str]], monkeypatch: pytest.MonkeyPatch,
    how: str, stall: str,
) -> None:
    """Unloading a topic closes its ledger off the loop: the last appends' commit (here an
    fdatasync stalled in the flusher thread) and the sealing of its segments (here the
    index sidecar's write) wait on storage threads while clients of other topics are
    served as usual; a reload of the topic waits for the close, an admin unload is
    answered once it is done."""
    release = threading.Event()
    stalled: list[str] = []
    slow_dirs: set[str] = set()

    def stalled_here(path: str) -> bool:
        if release.is_set() or not any(path.startswith(d) for d in slow_dirs):
            return False
        stalled.append(threading.current_thread().name)
        return True

    if stall == "seal":
        real_index = segment_module.Segment.write_index

        def write_index(self: segment_module.Segment) -> None:
            if stalled_here(self.path):
                release.wait(30)
            real_index(self)

        monkeypatch.setattr(segment_module.Segment, "write_index", write_index)
    else:
        real_sync = os.fdatasync

        def fdatasync(fd: int) -> None:
            if slow_dirs and stalled_here(os.readlink(f"/proc/self/fd/{fd}")):
                release.wait(30)
            real_sync(fd)

        monkeypatch.setattr(segment_module.os, "fdatasync", fdatasync)
    # (with a sync held without end, the loop must not sync inline: the flusher does)
    broker, base = admin(magnetarSyncOnLoopWhenIdle=stall == "seal")
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        publish_elsewhere(client)
        consumer = client.subscribe(SLOW, "s")
        producer = client.create_producer(SLOW, batching_enabled=False)
        for i in range(5):
            producer.send(b"slow-%d" % i)
        for _ in range(2):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        consumer.close()
        wait_for(lambda: broker.call(
            lambda: service.topics[SLOW].subscriptions["s"].cursor.backlog()) == 3, "the acks")
        slow_dirs.add(broker.call(lambda: service.topics[SLOW].ledger.directory))
        if stall == "fdatasync":  # a send in flight: its commit stalls in the flusher
            producer.send_async(b"slow-5", lambda result, msg_id: None)
            wait_for(lambda: bool(stalled), "the stalled fdatasync")
        else:
            producer.close()

        answers: list[tuple[int, bytes]] = []
        calling = None
        if how == "admin":
            calling, answers = _call_in_thread(
                "PUT", f"{base}/persistent/public/default/on-a-slow-disk/unload")
        elif how == "namespace":
            calling, answers = _call_in_thread("PUT", f"{base}/namespaces/public/default/unload")
        else:
            broker.loop.call_soon_threadsafe(
                service.unload_idle_topics, time.monotonic() + 100_000, [SLOW])
        wait_for(lambda: broker.call(lambda: SLOW not in service.topics), "the unload")
        if stall == "seal":
            wait_for(lambda: bool(stalled), "the stalled seal")
            assert all(t.startswith("magnetar-read") for t in stalled)

        attended_elsewhere(client)
        assert not release.is_set()
        if calling is not None:
            assert calling.is_alive() and not answers

        reloading = threading.Thread(target=lambda: client.subscribe(SLOW, "s").close())
        reloading.start()  # the reload waits for the close
        reloading.join(0.3)
        assert reloading.is_alive()
        release.set()
        reloading.join(20)
        assert not reloading.is_alive()
        if calling is not None:
            calling.join(20)
            assert answers and answers[0][0] == 204, answers
        topic = broker.call(lambda: service.topics[SLOW])
        assert broker.call(lambda: topic.subscriptions["s"].cursor.backlog()) == (
            4 if stall == "fdatasync" else 3)
    finally:
        release.set()
        client.close()


def test_a_stalled_terminate_delays_only_its_own_request(
    admin: Callable[..., tuple[ThreadedBroker, str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Terminating a topic stores its ledger's terminated flag (a durable storage.db write)
    off the loop: while that write stalls, clients of other topics are served as usual and
    the topic already refuses new messages; the admin call is answered once the flag is
    stored, and the topic stays terminated after an unload."""
    release = threading.Event()
    stalled: list[str] = []
    slow_ledger: list[str] = []
    real_put_many = SqliteMetadataStore.put_many

    def slow_put_many(self: SqliteMetadataStore, items: dict[str, Any], *args: Any,
                      **kwargs: Any) -> None:
        if slow_ledger and not release.is_set() and f"ledger/{slow_ledger[0]}" in items:
            stalled.append(threading.current_thread().name)
            release.wait(30)
        real_put_many(self, items, *args, **kwargs)

    monkeypatch.setattr(SqliteMetadataStore, "put_many", slow_put_many)
    broker, base = admin()
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        producer = client.create_producer(SLOW, batching_enabled=False)
        ids = [producer.send(b"slow-%d" % i) for i in range(3)]
        slow_ledger.append(broker.call(lambda: service.topics[SLOW].ledger.name))

        calling, answers = _call_in_thread(
            "POST", f"{base}/persistent/public/default/on-a-slow-disk/terminate")
        wait_for(lambda: bool(stalled), "the stalled write")
        assert stalled == ["magnetar-meta_0"]

        served_elsewhere(client)
        assert calling.is_alive() and not answers
        assert broker.call(lambda: service.topics[SLOW].terminated)
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(SLOW)

        release.set()
        calling.join(20)
        assert answers and answers[0][0] == 200, answers
        doc = json.loads(answers[0][1])
        assert (doc["ledgerId"], doc["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
        broker.call(lambda: service.unload_topic(service.topics[SLOW]))
        assert broker.call(lambda: service.load_topic(SLOW)).terminated
    finally:
        release.set()
        client.close()


@pytest.mark.parametrize("durable", [True, False], ids=["consumer", "reader"])
def test_a_stalled_compacted_ledger_read_delays_only_its_read_compacted_subscriber(
    make_broker: Callable[..., ThreadedBroker],
    stalled_reads: tuple[set[str], threading.Event], durable: bool,
) -> None:
    """Dispatching a compacted view reads the compacted ledger from the read cache or on
    the storage's reader threads, never on the loop: while those reads stall, clients of
    other topics are served as usual; the read_compacted subscriber (a consumer, or a
    reader) gets the compacted messages afterwards."""
    slow_dirs, release = stalled_reads
    broker = make_broker(managedLedgerCacheSizeMB=0)  # every read goes to the disk
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        _compact_slow_topic(broker, client, StalledPuts())
        broker.call(lambda: service.unload_topic(service.topics[SLOW]))
        topic = broker.call(lambda: service.load_topic(SLOW))
        view = broker.call(lambda: service.compactor.view_async(topic))  # its index, read now
        assert view is not None and view.kept_positions()
        slow_dirs.add(view.compacted.directory)

        if durable:
            subscriber: Any = client.subscribe(
                SLOW, "compacted", is_read_compacted=True,
                initial_position=pulsar.InitialPosition.Earliest)
        else:
            subscriber = client.create_reader(SLOW, pulsar.MessageId.earliest, is_read_compacted=True)
        with pytest.raises(pulsar.Timeout):
            subscriber.read_next(200) if not durable else subscriber.receive(timeout_millis=200)

        served_elsewhere(client)
        assert not release.is_set()

        release.set()
        if durable:
            got = [subscriber.receive(timeout_millis=10_000).data() for _ in range(2)]
        else:
            got = [subscriber.read_next(10_000).data() for _ in range(2)]
        assert got == [b"v4", b"v5"]
    finally:
        release.set()
        client.close()


def test_the_compacted_view_is_only_ever_answered_from_memory(
    make_broker: Callable[..., ThreadedBroker],
) -> None:
    """`Compactor.view` does no I/O: for a topic whose view was not loaded it refuses
    (callers load it with `view_async` first) without reading the metadata store."""
    broker = make_broker()
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        _compact_slow_topic(broker, client, StalledPuts())
        broker.call(lambda: service.unload_topic(service.topics[SLOW]))
        topic = broker.call(lambda: service.load_topic(SLOW))
        store = service.metadata
        reads: list[str] = []
        real_get = store.get
        broker.call(setattr, store, "get", lambda key: reads.append(key) or real_get(key))
        try:
            with pytest.raises(RuntimeError, match="not loaded"):
                broker.call(service.compactor.view, topic)
            assert reads == []
            assert broker.call(lambda: service.compactor.view_async(topic)) is not None
            assert reads == [f"compaction/{SLOW}"]
            assert broker.call(service.compactor.view, topic) is not None
        finally:
            broker.call(delattr, store, "get")
    finally:
        client.close()


class StalledCursorRows:
    """Writes and deletes of the cursor rows (storage.db) of the ledgers in ``ledgers``
    stall, in whatever thread, until ``release`` is set (30 s at most); each stalled one
    is noted in ``stalled`` as (what, thread name)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ledgers: set[str] = set()
        self.stalled: list[tuple[str, str]] = []
        self.release = threading.Event()
        real_put_many, real_delete = SqliteMetadataStore.put_many, SqliteMetadataStore.delete
        stall = self._stall

        def put_many(store: SqliteMetadataStore, items: dict[str, Any], *args: Any,
                     **kwargs: Any) -> None:
            stall("put", items)
            real_put_many(store, items, *args, **kwargs)

        def delete(store: SqliteMetadataStore, key: str) -> bool:
            stall("delete", [key])
            return real_delete(store, key)

        monkeypatch.setattr(SqliteMetadataStore, "put_many", put_many)
        monkeypatch.setattr(SqliteMetadataStore, "delete", delete)

    def _stall(self, what: str, keys: Any) -> None:
        if self.release.is_set() or not self.ledgers:
            return
        if any(k.startswith(f"cursor/{name}\x1f") for k in keys for name in self.ledgers):
            self.stalled.append((what, threading.current_thread().name))
            self.release.wait(30)


@pytest.fixture
def stalled_cursor_rows(monkeypatch: pytest.MonkeyPatch) -> Iterator[StalledCursorRows]:
    stall = StalledCursorRows(monkeypatch)
    yield stall
    stall.release.set()


def _slow_topic_with_backlog(broker: ThreadedBroker, client: pulsar.Client) -> pulsar.Consumer:
    """SLOW with 5 messages and subscription "s" (its consumer returned) at 3 acknowledged."""
    service = broker.service
    assert service is not None
    consumer = client.subscribe(SLOW, "s")
    producer = client.create_producer(SLOW, batching_enabled=False)
    for i in range(5):
        producer.send(b"slow-%d" % i)
    producer.close()
    for _ in range(3):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    wait_for(lambda: broker.call(
        lambda: service.topics[SLOW].subscriptions["s"].cursor.backlog()) == 2, "the acks")
    return consumer


def _stored_cursor(broker: ThreadedBroker, name: str) -> Any:
    """The row of SLOW's cursor ``name`` in storage.db (None: no row)."""
    service = broker.service
    assert service is not None
    ledger = broker.call(lambda: service.topics[SLOW].ledger.name)
    store = service.storage._store
    return broker.call(store.get, f"cursor/{ledger}\x1f{name}")


def test_a_stalled_new_subscription_row_delays_only_its_subscribe(
    make_broker: Callable[..., ThreadedBroker], stalled_cursor_rows: StalledCursorRows,
) -> None:
    """A new durable subscription's cursor row is written off the loop before the
    Subscribe is answered: while that write stalls, clients of other topics (a new
    subscription of theirs included) are served as usual."""
    stall = stalled_cursor_rows
    broker = make_broker()
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        producer = client.create_producer(SLOW, batching_enabled=False)
        producer.send(b"slow-0")
        stall.ledgers.add(broker.call(lambda: service.topics[SLOW].ledger.name))

        subscribed: list[pulsar.Consumer] = []
        subscribing = threading.Thread(target=lambda: subscribed.append(client.subscribe(
            SLOW, "new", initial_position=pulsar.InitialPosition.Earliest)))
        subscribing.start()
        wait_for(lambda: bool(stall.stalled), "the stalled row")
        assert all(thread.startswith("magnetar-read") for _, thread in stall.stalled)

        served_elsewhere(client)
        assert subscribing.is_alive() and not subscribed

        stall.release.set()
        subscribing.join(20)
        assert subscribed
        assert subscribed[0].receive(timeout_millis=5000).data() == b"slow-0"
        assert _stored_cursor(broker, "new") is not None
    finally:
        stall.release.set()
        client.close()


def test_unsubscribe_then_resubscribe_on_a_stalled_disk(
    make_broker: Callable[..., ThreadedBroker], stalled_cursor_rows: StalledCursorRows,
) -> None:
    """Unsubscribing deletes the cursor's row off the loop and is answered once it is gone;
    a subscription of the same name made meanwhile is a new one (from where it asks),
    whose row is written after the delete lands: never the deleted state, never a row
    lost behind the delete. Meanwhile other topics are served as usual."""
    stall = stalled_cursor_rows
    broker = make_broker()
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = _slow_topic_with_backlog(broker, client)
        stall.ledgers.add(broker.call(lambda: service.topics[SLOW].ledger.name))

        unsubscribing = threading.Thread(target=consumer.unsubscribe)
        unsubscribing.start()
        wait_for(lambda: bool(stall.stalled), "the stalled delete")
        assert stall.stalled == [("delete", "magnetar-meta_0")]
        assert broker.call(lambda: "s" not in service.topics[SLOW].subscriptions)

        resubscribed: list[pulsar.Consumer] = []
        resubscribing = threading.Thread(target=lambda: resubscribed.append(client.subscribe(
            SLOW, "s", initial_position=pulsar.InitialPosition.Earliest)))
        resubscribing.start()

        served_elsewhere(client)
        unsubscribing.join(0.1)
        assert unsubscribing.is_alive() and resubscribing.is_alive() and not resubscribed
        assert [what for what, _ in stall.stalled] == ["delete"]  # the new row waits for it

        stall.release.set()
        unsubscribing.join(20)
        resubscribing.join(20)
        assert not unsubscribing.is_alive() and resubscribed
        got = [resubscribed[0].receive(timeout_millis=5000).data() for _ in range(5)]
        assert got == [b"slow-%d" % i for i in range(5)]  # a new subscription, from the start
        stored = _stored_cursor(broker, "s")
        assert stored is not None and stored["md"][1] == -1  # the new one's, not the old acks
        resubscribed[0].close()
        broker.call(lambda: service.unload_topic(service.topics[SLOW]))
        backlog = broker.call(lambda: service.load_topic(SLOW)).subscriptions["s"].cursor.backlog()
        assert backlog >= 5 - len(got) and backlog <= 5
    finally:
        stall.release.set()
        client.close()


@pytest.mark.parametrize("method, path", [
    ("POST", "/subscription/s/resetcursor/0"),
    ("POST", "/subscription/s/skip/1"),
    ("POST", "/subscription/s/skip_all"),
    ("DELETE", "/subscription/s"),
    ("PUT", "/subscription/made"),
], ids=["reset-by-time", "skip", "skip-all", "delete", "create"])
def test_admin_cursor_operations_are_answered_once_stored_off_the_loop(
    admin: Callable[..., tuple[ThreadedBroker, str]], stalled_cursor_rows: StalledCursorRows,
    method: str, path: str,
) -> None:
    """The admin API's cursor moves (reset, skip, clear backlog), a subscription's delete
    and creation store the cursor's row off the loop and are answered once it is stored:
    while that write stalls, clients of other topics are served as usual."""
    stall = stalled_cursor_rows
    broker, base = admin()
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        _slow_topic_with_backlog(broker, client).close()
        assert _stored_cursor(broker, "s") is not None
        stall.ledgers.add(broker.call(lambda: service.topics[SLOW].ledger.name))

        calling, answers = _call_in_thread(
            method, f"{base}/persistent/public/default/on-a-slow-disk{path}")
        wait_for(lambda: bool(stall.stalled), "the stalled row")

        served_elsewhere(client)
        assert calling.is_alive() and not answers

        stall.release.set()
        calling.join(20)
        assert answers and answers[0][0] == 204, answers
        stored = _stored_cursor(broker, path.split("/")[2])
        if method == "DELETE":
            assert stored is None
        else:
            assert stored is not None
            backlog = broker.call(lambda: service.topics[SLOW].subscriptions[
                path.split("/")[2]].cursor.backlog())
            assert backlog == {"resetcursor": 5, "skip": 1, "skip_all": 0}.get(
                path.split("/")[3] if path.count("/") > 2 else "", 0)
    finally:
        stall.release.set()
        client.close()


@pytest.mark.parametrize("by", ["message-id", "time"])
def test_a_seek_is_answered_once_the_cursor_is_stored_off_the_loop(
    make_broker: Callable[..., ThreadedBroker], stalled_cursor_rows: StalledCursorRows, by: str,
) -> None:
    """A client's Seek moves the subscription at once and is answered once the cursor's
    new position is stored off the loop: while that write stalls, other topics are served
    as usual; afterwards the consumer reads from the seek's position."""
    stall = stalled_cursor_rows
    broker = make_broker()
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = _slow_topic_with_backlog(broker, client)
        stall.ledgers.add(broker.call(lambda: service.topics[SLOW].ledger.name))
        target: Any = pulsar.MessageId.earliest if by == "message-id" else 0
        seeking = threading.Thread(target=consumer.seek, args=(target,))
        seeking.start()
        wait_for(lambda: bool(stall.stalled), "the stalled row")
        assert stall.stalled[0][1] == "magnetar-meta_0"

        served_elsewhere(client)
        seeking.join(0.1)
        assert seeking.is_alive()

        stall.release.set()
        seeking.join(20)
        assert not seeking.is_alive()
        assert _stored_cursor(broker, "s")["md"][1] == -1
        assert consumer.receive(timeout_millis=10_000).data() == b"slow-0"
    finally:
        stall.release.set()
        client.close()
