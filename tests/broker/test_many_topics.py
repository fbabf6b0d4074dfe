"""Many loaded topics: what an idle topic keeps, and that an unloaded one is freed.

The broker freezes what topic loads build out of the garbage collector's reach
(`magnetar.broker.heap`), so an unloaded topic must be freed by reference counting alone:
these tests freeze the heap as the broker does, unload, and check that the topic, its
ledger and its subscriptions are gone (a cycle left among them would keep them forever).
They also bound what a loaded idle topic holds: no dispatcher, rate limiter or
deduplication objects until used, and few objects the collector tracks."""

from __future__ import annotations

import asyncio
import copy
import gc
import logging
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from magnetar.broker.heap import HeapFreezer
from magnetar.broker.namespaces import housekeeping
from magnetar.broker.service import BrokerService
from magnetar.broker.topic_name import TopicName
from magnetar.broker.topics.listing import topics_in_namespace
from magnetar.broker.topics.topic import PersistentTopic

from .conftest import QUIET, ThreadedBroker


def _small_bulk_service(tmp_path: Any) -> BrokerService:
    """A broker service (not started) whose bulks are framed from 20 topics
    (10 x ``magnetarGcFreezeAfterTopicLoads``), with no metrics cache and no unloads."""
    from magnetar.broker.config import BrokerConfig

    return BrokerService(BrokerConfig.load(
        None, magnetarDataDir=str(tmp_path), brokerServicePort=0, bindAddress="127.0.0.1",
        magnetarMetricsCacheSeconds=0, magnetarTopicUnloadIdleSeconds=0,
        magnetarGcFreezeAfterTopicLoads=2))


#: idle topics made to count what each holds
IDLE_TOPICS = 200
#: the bound on the objects the garbage collector tracks per loaded idle topic
TRACKED_PER_TOPIC = 28
#: CPython 3.11 shares an instance's attribute keys with its class up to 29 attributes:
#: past that each instance has a dict of its own (~1.6 KB instead of ~0.3 KB)
SHARED_KEYS_MAX = 29


@pytest.fixture
def thaw_heap() -> Iterator[None]:
    """What a broker of the test froze goes back to the collector at teardown."""
    yield
    gc.unfreeze()


def _refs(service: BrokerService, name: str) -> dict[str, weakref.ref[Any]]:
    topic = service.topics[name]
    assert isinstance(topic, PersistentTopic)
    refs: dict[str, weakref.ref[Any]] = {"topic": weakref.ref(topic), "ledger": weakref.ref(topic.ledger)}
    for sub_name, sub in topic.subscriptions.items():
        refs[f"subscription {sub_name}"] = weakref.ref(sub)
        refs[f"cursor {sub_name}"] = weakref.ref(sub.cursor)
    return refs


@pytest.mark.parametrize("sub_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared,
                                      pulsar.ConsumerType.Exclusive])
def test_unloaded_topic_is_freed_without_the_collector(
        make_broker: Callable[..., ThreadedBroker], sub_type: pulsar.ConsumerType) -> None:
    broker = make_broker(magnetarTopicUnloadIdleSeconds=0, brokerDeduplicationEnabled=True)
    service = broker.service
    assert service is not None
    name = "persistent://public/default/released"
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        producer = client.create_producer(name, batching_enabled=False)
        for i in range(3):
            producer.send(b"m-%d" % i, partition_key=f"k{i}")
        consumer = client.subscribe(name, "s", consumer_type=sub_type,
                                    initial_position=pulsar.InitialPosition.Earliest)
        msg = consumer.receive(10_000)
        consumer.acknowledge(msg)
        producer.close()
        consumer.close()
    finally:
        client.close()
    refs = broker.call(_refs, service, name)
    assert "subscription s" in refs
    gc.collect()
    gc.freeze()  # as the broker's HeapFreezer does: the collector no longer sees the topic
    try:
        broker.call(lambda: service.unload_topic(service.topics[name]))
        # bounded poll: the close finishes on storage threads and in callbacks it schedules
        # (a busy machine may take a while); a cycle left would keep them for ever
        deadline = time.monotonic() + 30
        while True:
            broker.call(lambda: None)  # callbacks the close scheduled have run
            gc.collect()
            alive = [what for what, ref in refs.items() if ref() is not None]
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        gc.unfreeze()
    assert alive == []


def test_topic_loads_freeze_what_they_built(make_broker: Callable[..., ThreadedBroker],
                                            thaw_heap: None) -> None:
    """After a stream of loads (from a tenth of magnetarGcFreezeAfterTopicLoads), once
    loads pause, the heap is frozen: the topics just built are in the permanent
    generation, out of full collections."""
    broker = make_broker(magnetarTopicUnloadIdleSeconds=0, magnetarGcFreezeAfterTopicLoads=5)
    service = broker.service
    assert service is not None
    names = [f"persistent://public/default/frozen-{i}" for i in range(5)]
    for name in names:
        broker.call(service.create_topic, name)
    deadline = time.monotonic() + 30
    while (broker.call(lambda: service.heap.streaming or service.heap.freezes == 0)
           and time.monotonic() < deadline):
        time.sleep(0.05)
    assert broker.call(lambda: service.heap.freezes) >= 1  # (a pause in the loads: 2)
    topic = broker.call(lambda: service.topics[names[-1]])
    assert not any(o is topic for o in gc.get_objects()), "the topic is still in a collected generation"
    assert broker.call(lambda: service.heap.loads) == 0


def test_a_freeze_does_not_walk_the_frozen_heap(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture,
                                                thaw_heap: None) -> None:
    """``gc.get_freeze_count()`` walks the whole permanent generation (millions of objects
    at 100,000 topics: a stall of the loop at every freeze); a freeze never asks it, even
    with debug logging on."""
    walks: list[int] = []
    monkeypatch.setattr(gc, "get_freeze_count", lambda: walks.append(1) or 0)
    caplog.set_level(logging.DEBUG, logger="magnetar.broker.heap")
    heap = HeapFreezer(1)
    heap.freeze()
    assert heap.freezes == 1
    assert "froze the heap" in caplog.text
    assert walks == []


def test_a_bulk_is_framed_only_when_large(monkeypatch: pytest.MonkeyPatch,
                                          thaw_heap: None) -> None:
    """Below `bulk_topics` a bulk is left to the collector; from it on, ``before_bulk``
    collects every generation (the unfrozen cyclic garbage freed, not frozen) and
    ``after_bulk`` freezes, unless the bulk built nothing (a /metrics build that reused
    its blocks). ``magnetarGcFreezeAfterTopicLoads=0`` frames nothing."""
    collected: list[tuple[int, ...]] = []
    real_collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *gen: collected.append(gen) or real_collect(*gen))
    heap = HeapFreezer(2)
    assert heap.bulk_topics == 20
    assert not heap.before_bulk(19)
    assert collected == [] and heap.sweeps == 0
    assert heap.before_bulk(20)
    assert collected == [()] and heap.sweeps == 1  # every generation
    heap.after_bulk(False)
    assert heap.freezes == 0 and heap.bulk_freezes == 0
    heap.after_bulk()
    assert collected == [(), (1,)]  # the young ones before the freeze
    assert heap.freezes == 1 and heap.bulk_freezes == 1
    assert not HeapFreezer(0).before_bulk(10**6)


def test_the_bulk_frame_freezes_after_its_block_even_when_it_raises(thaw_heap: None) -> None:
    """``with heap.bulk(n)`` is `before_bulk` and `after_bulk` around the block: a small
    bulk is not framed, a block that built nothing freezes nothing, one that raises is
    still framed (the sweep before it needs the freeze after it)."""
    heap = HeapFreezer(2)
    with heap.bulk(19) as small:
        assert not small.framed
    assert heap.sweeps == 0 and heap.freezes == 0
    with heap.bulk(20) as nothing:
        assert nothing.framed
        nothing.built = False
    assert heap.sweeps == 1 and heap.freezes == 0
    with pytest.raises(RuntimeError), heap.bulk(20):
        raise RuntimeError("the bulk failed")
    assert heap.sweeps == 2 and heap.freezes == 1 and heap.bulk_freezes == 1


def test_rate_samples_and_metrics_builds_freeze_what_they_keep(tmp_path: Any,
                                                               thaw_heap: None) -> None:
    """With `bulk_topics` loaded topics, a /metrics build's caches (the grouping, the
    blocks) are frozen once made, out of every later full collection; a build that reused
    every block freezes nothing; what the next build replaces is freed by reference
    counting (no cycle left in the caches). A rate sample needs no freeze: what it keeps
    (counters and rates by name) is in dicts the collector never tracks."""
    from magnetar.admin.metrics import MetricsBuilder
    from magnetar.broker.topics.stats import RateTracker

    def tracked(obj: object) -> bool:
        return any(o is obj for o in gc.get_objects())

    async def go() -> None:
        service = _small_bulk_service(tmp_path)
        await service.start()
        try:
            heap = service.heap
            for i in range(heap.bulk_topics):
                await service.load_topic(f"persistent://public/default/bulk-{i}")
            rates = RateTracker()
            bulk = heap.bulk_freezes
            await rates.sample_in_pieces(service, chunk=4)
            await rates.sample_in_pieces(service, chunk=4)  # (the first makes no rates)
            assert heap.bulk_freezes == bulk
            assert len(rates._previous) == 2 * heap.bulk_topics
            kept = [*rates.rates.msgs.values(), *rates.rates.bytes.values(),
                    *rates._previous.dicts()]
            assert not any(map(gc.is_tracked, kept))
            builder = MetricsBuilder(service, rates)
            await builder.topic_part()
            assert heap.bulk_freezes == bulk + 1 and builder.regrouped
            first = next(iter(builder._blocks.values()))  # (slots, no weak references)
            assert not tracked(builder._topics) and not gc.is_tracked(builder._labels)
            assert not gc.is_tracked(builder._spaces)  # (dicts of strings: never tracked)
            await builder.topic_part()  # nothing changed: the same blocks, nothing to freeze
            assert heap.bulk_freezes == bulk + 1 and builder.read_blocks == 0
            service.topics["persistent://public/default/bulk-0"].msg_in += 1
            service.topic_changes.names.add("persistent://public/default/bulk-0")
            await builder.topic_part()
            assert heap.bulk_freezes == bulk + 2 and builder.read_blocks == 1
            # the block replaced: nothing but this test holds it (freed by reference counting)
            assert sys.getrefcount(first) == 2
            # and the builds and samples left no cyclic garbage holding topics (a freeze
            # would keep it for good)
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                gc.collect()
                loaded = {id(t) for t in service.topics.values()}
                holding = [type(o).__name__ for o in gc.garbage
                           if any(id(r) in loaded for r in gc.get_referents(o))]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
            assert holding == []
        finally:
            await service.stop()

    asyncio.run(go())


def test_a_metrics_build_tells_the_same_topics_by_the_registry_version(
        tmp_path: Any, thaw_heap: None) -> None:
    """A /metrics build groups the topics again only when the loaded set changed since its
    last grouping (`TopicRegistry.version`: a load, an unload, a topic replaced under its
    name), never by walking them; a build that is to read only the blocks of a few noted
    topics is no bulk (no full collection before it, nothing frozen after it), one after a
    load is."""
    from magnetar.admin.metrics import MetricsBuilder
    from magnetar.broker.topics.stats import RateTracker

    async def go() -> None:
        service = _small_bulk_service(tmp_path)
        await service.start()
        try:
            heap = service.heap
            names = [f"persistent://public/default/version-{i}" for i in range(heap.bulk_topics)]
            for name in names:
                await service.load_topic(name)
            builder = MetricsBuilder(service, RateTracker(), chunk=1)  # blocks of 4 topics
            first = await builder.topic_part()
            assert builder.regrouped and heap.bulk_freezes == 1
            version = service.topics.version
            assert b"".join(await builder.topic_part()) == b"".join(first)
            assert not builder.regrouped and builder.read_blocks == 0
            sweeps, freezes = heap.sweeps, heap.bulk_freezes
            service.topics[names[3]].msg_in += 1
            service.topic_changes.names.add(names[3])  # one block to read: no bulk
            await builder.topic_part()
            assert not builder.regrouped and builder.read_blocks == 1
            assert (heap.sweeps, heap.bulk_freezes) == (sweeps, freezes)
            extra = "persistent://public/default/version-extra"
            await service.load_topic(extra)  # a load: grouped again, framed as a bulk
            assert service.topics.version > version
            text = b"".join(await builder.topic_part())
            assert builder.regrouped and heap.bulk_freezes == freezes + 1
            assert b'topic="' + extra.encode() + b'"' in text
            await builder.topic_part()
            assert not builder.regrouped
            # the same name, another topic object: grouped again, the new one read
            old = service.topics[names[0]]
            other = copy.copy(old)
            service.topics[names[0]] = other
            await builder.topic_part()
            assert builder.regrouped and builder._groups["public/default"][0] is other
            service.topics[names[0]] = old
            await service.unload_topic(service.topics[extra])  # an unload: grouped again
            text = b"".join(await builder.topic_part())
            assert builder.regrouped and b'topic="' + extra.encode() + b'"' not in text
        finally:
            await service.stop()

    asyncio.run(go())


def test_idle_topic_holds_few_objects(make_broker: Callable[..., ThreadedBroker]) -> None:
    """A loaded topic nobody uses holds no rate limiter, dispatcher or deduplication
    objects, and fewer than `TRACKED_PER_TOPIC` objects the collector tracks."""
    broker = make_broker(magnetarTopicUnloadIdleSeconds=0, magnetarGcFreezeAfterTopicLoads=0)
    service = broker.service
    assert service is not None
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        p = client.create_producer("persistent://public/default/idle-warm", batching_enabled=False)
        p.send(b"warm")
        p.close()
        names = [f"persistent://public/default/idle-{i}" for i in range(IDLE_TOPICS)]

        def tracked() -> int:
            gc.collect()
            return len(gc.get_objects())

        before = broker.call(tracked)
        for i, name in enumerate(names):
            p = client.create_producer(name, batching_enabled=False)
            p.send(b"m-%d" % i)
            p.close()
        after = broker.call(tracked)
    finally:
        client.close()
    per_topic = (after - before) / IDLE_TOPICS
    assert per_topic < TRACKED_PER_TOPIC, f"{per_topic:.1f} tracked objects per idle topic"
    topic = broker.call(lambda: service.topics[names[0]])
    assert isinstance(topic, PersistentTopic)
    assert topic.dedup is None
    assert topic.limits.publish_throttle is None and topic.limits.dispatch_limiter is None
    assert not topic.producers and not topic.subscriptions
    # what most topics and ledgers keep at its default lives on the class (topic.py, state.py)
    assert len(vars(topic)) <= SHARED_KEYS_MAX, sorted(vars(topic))
    assert len(vars(topic.ledger)) <= SHARED_KEYS_MAX, sorted(vars(topic.ledger))


def test_loads_that_unload_again_make_no_freeze() -> None:
    """The idle-topic sweep loads and unloads topics in turn: the loaded count does not
    grow, so no freeze becomes due however many loads it makes."""
    async def sweep_like() -> HeapFreezer:
        heap = HeapFreezer(30)  # a stream from 3 more topics loaded
        for loaded in (1, 2, 3):  # three topics loaded: a stream
            heap.topic_loaded(loaded)
        assert heap.loads == 3
        heap.stop()
        heap.freeze()
        for _ in range(10):  # one more loaded and unloaded, ten times over
            heap.topic_loaded(4)
            heap.topic_unloaded(3)
        assert heap.loads == 1 and not heap.streaming
        heap.topic_loaded(5)
        heap.topic_loaded(6)
        assert heap.loads == 3 and heap.streaming
        heap.stop()
        return heap

    try:
        heap = asyncio.run(sweep_like())
    finally:
        gc.unfreeze()
    assert heap.freezes == 1


class _Node:
    """A container object the collector tracks (a stand-in for what a load builds)."""

    def __init__(self) -> None:
        self.refs: list[Any] = []


def _in_collected_generations(objs: list[Any]) -> bool:
    ids = {id(o) for o in objs}
    return any(id(o) in ids for o in gc.get_objects())


@pytest.fixture
def gc_generations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The generation of every collection that ends while the test runs, with the
    default thresholds (700, 10, 10), so that a stream of loads' allocations would start
    middle-generation and full collections if nothing froze them."""
    seen: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            seen.append(info["generation"])

    thresholds = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    gc.collect()
    gc.callbacks.append(record)
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def test_a_stream_of_loads_is_frozen_at_each_young_collection(
        gc_generations: list[int]) -> None:
    """Once a freeze is due, until loads pause, every collection ends with a freeze: what
    the loads built is walked by one first-generation collection, then frozen, and no
    middle-generation or full collection runs however much they build (the generations'
    counts start again at each freeze). Once loads pause, one freeze ends the stream and
    the hook is gone from ``gc.callbacks``."""
    async def stream() -> tuple[HeapFreezer, list[_Node], list[int]]:
        heap = HeapFreezer(30)
        assert heap.stream_loads == 3
        for loaded in (1, 2):
            heap.topic_loaded(loaded)
        assert not heap.streaming
        heap.topic_loaded(3)  # the stream begins
        assert heap.streaming and heap.streams == 1 and heap.freezes == 0
        kept: list[_Node] = []
        for i in range(200_000):  # ~280 first-generation collections' worth
            node = _Node()
            node.refs.append(_Node())
            kept.append(node)
            if i % 1000 == 0:
                heap.topic_loaded(4 + i // 1000)  # the loads go on (no pause)
        during = list(gc_generations)
        assert heap.streaming
        deadline = time.monotonic() + 30
        while heap.streaming and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return heap, kept, during

    heap, kept, during = asyncio.run(stream())
    assert during and set(during) == {0}, "only first-generation collections in a stream"
    assert heap.young_freezes >= len(during)
    assert not _in_collected_generations(kept[:1000] + kept[-1000:-500])
    assert not heap.streaming and heap.freezes == 1 and heap.loads == 0
    assert heap._after_young_collection not in gc.callbacks
    assert 1 in gc_generations[len(during):]  # the last freeze's young collection


def test_a_stream_of_unloads_is_frozen_at_each_young_collection(
        gc_generations: list[int]) -> None:
    """Unloads leave objects that outlive them (5,000 unloads: ~50,000 young survivors,
    walked by middle-generation collections of ~35 ms): once the loaded topics fell by
    `stream_loads` below the most since the last freeze, every young collection ends
    with a freeze until the unloads pause, and no middle-generation or full collection
    runs meanwhile; a pause ends the stream with one freeze."""
    async def stream() -> tuple[HeapFreezer, list[_Node], list[int]]:
        heap = HeapFreezer(30)
        for loaded in range(1, 301):
            heap.topic_loaded(loaded)
        deadline = time.monotonic() + 30
        while heap.streaming and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the loads pause: their stream ends with a freeze
        assert not heap.streaming and heap.freezes == 1
        gc_generations.clear()
        heap.topic_unloaded(299)
        heap.topic_unloaded(298)
        assert not heap.streaming
        heap.topic_unloaded(297)  # three fewer than the most: the stream begins
        assert heap.streaming and heap.streams == 2
        left: list[_Node] = []
        for i in range(200_000):  # what the unloads leave behind
            node = _Node()
            node.refs.append(_Node())
            left.append(node)
            if i % 1000 == 0:
                heap.topic_unloaded(296 - i // 1000)  # the unloads go on
        during = list(gc_generations)
        deadline = time.monotonic() + 30
        while heap.streaming and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        streams = heap.streams
        heap.stop()
        heap.topic_unloaded(1)  # the broker stops: its last unloads begin no stream
        assert not heap.streaming and heap.streams == streams
        return heap, left, during

    heap, left, during = asyncio.run(stream())
    assert during and set(during) == {0}, "only first-generation collections in a stream"
    assert not _in_collected_generations(left[:1000] + left[-1000:-500])
    assert not heap.streaming and heap.freezes == 2
    assert heap._after_young_collection not in gc.callbacks


def test_a_bulk_during_a_stream_collects_only_the_young(gc_generations: list[int]) -> None:
    """A rate sample or /metrics build while topics are loaded in a stream: nothing older
    than the last young collection is unfrozen, so the bulk is framed by first-generation
    collections (each followed by the stream's freeze), not by a full one; the stream
    goes on. `stop` ends it."""
    async def bulk_in_stream() -> tuple[HeapFreezer, list[_Node]]:
        heap = HeapFreezer(2)
        heap.topic_loaded(1)
        heap.topic_loaded(2)
        assert heap.streaming
        gc_generations.clear()
        with heap.bulk(heap.bulk_topics) as frame:
            assert frame.framed
            built = [_Node() for _ in range(100)]
        assert heap.streaming
        heap.stop()
        assert not heap.streaming
        return heap, built

    heap, built = asyncio.run(bulk_in_stream())
    assert heap.sweeps == 0 and heap.young_sweeps == 1 and heap.bulk_freezes == 1
    assert gc_generations and set(gc_generations) == {0}, "no full collection in a stream"
    assert not _in_collected_generations(built)
    assert heap._after_young_collection not in gc.callbacks


def test_namespace_listing_filters_by_name_without_parsing_each() -> None:
    """The namespace's names only: not its prefix's twin (``default2``), nor another's."""
    names = ["persistent://public/default/a", "persistent://public/default2/b",
             "persistent://public/other/c", "non-persistent://public/default/d",
             "persistent://other/default/e"]
    assert topics_in_namespace(names, "public/default", None) == (
        ["non-persistent://public/default/d", "persistent://public/default/a"], False)
    assert topics_in_namespace(names, "public/default", ".*/a") == (
        ["persistent://public/default/a"], True)


def test_names_are_sorted_in_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """A namespace's names are sorted with no single ``sorted`` call over more than a
    slice (a reader thread holds the interpreter through one C call: ~70 ms for 100,000
    names, which the event loop waited for), and come out as ``sorted`` gives them:
    shuffled, already in key order (chained), with duplicates and few."""
    import random

    from magnetar.broker.topics import listing

    longest: list[int] = []

    def spy(items: Any) -> list[str]:
        items = list(items)
        longest.append(len(items))
        return sorted(items)

    monkeypatch.setattr(listing, "sorted", spy, raising=False)
    names = [f"persistent://public/default/t-{i}" for i in range(20_000)] * 2
    shuffled = random.Random(7).sample(names, len(names))
    assert listing.sorted_in_slices(shuffled, 1000) == sorted(names)
    assert max(longest) == 1000
    ordered = sorted(names)
    assert listing.sorted_in_slices(ordered, 1000) == ordered
    assert listing.sorted_in_slices(["b", "a"], 1000) == ["a", "b"]
    assert listing.sorted_in_slices([], 1000) == []
    longest.clear()
    found, _ = topics_in_namespace(shuffled[:30_000], "public/default", None)
    assert found == sorted(shuffled[:30_000]) and max(longest) <= listing.SORT_SLICE


def test_a_namespace_is_listed_off_the_loop(
        make_broker: Callable[..., ThreadedBroker], monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing a namespace's topics (pulsar-admin's ``topics list``, GetTopicsOfNamespace)
    reads, filters and sorts the names on a reader thread, not the event loop (at
    100,000 topics that held it ~150 ms); the loaded non-persistent topics are listed too."""
    from magnetar.broker import operations

    broker = make_broker(magnetarTopicUnloadIdleSeconds=0)
    service = broker.service
    assert service is not None
    names = [f"persistent://public/default/listed-{i}" for i in range(5)]
    for name in names:
        broker.call(service.create_topic, name)
    live = "non-persistent://public/default/listed-live"
    broker.call(service.load_topic, live)
    loop_thread = broker.call(lambda: __import__("threading").current_thread())
    threads: list[Any] = []
    original = operations.topics_in_namespace

    def spy(*args: Any) -> Any:
        threads.append(__import__("threading").current_thread())
        return original(*args)

    monkeypatch.setattr(operations, "topics_in_namespace", spy)
    mode = operations.pb.CommandGetTopicsOfNamespace
    listed = broker.call_async(lambda: service.topics_of_namespace_page(
        "public/default", mode.PERSISTENT, None, None))
    assert listed == sorted(names)
    everything, _ = broker.call_async(lambda: service.topics_of_namespace_async(
        "public/default", mode.ALL, None))
    assert everything == sorted([*names, live])
    assert len(threads) == 2 and loop_thread not in threads


def test_a_long_json_list_is_encoded_in_slices() -> None:
    """A listing's JSON body is built a slice at a time, the loop handed back between two
    (one ``json.dumps`` of 100,000 names held it ~30 ms), and reads back as the list."""
    import json

    from magnetar.admin.routing import JSON_LIST_SLICE, json_list_response

    names = [f"persistent://public/default/t-{i}" for i in range(3 * JSON_LIST_SLICE + 7)]

    async def encode() -> tuple[Any, int]:
        turns = 0

        async def ticker() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        before = turns
        response = await json_list_response(names)
        during = turns - before
        task.cancel()
        return response, during

    response, during = asyncio.run(encode())
    assert during >= 3, "the loop ran nothing else while the list was encoded"
    assert response.content_type == "application/json"
    assert json.loads(response.text) == names
    small = asyncio.run(json_list_response(names[:3]))
    assert json.loads(small.text) == names[:3]


def test_a_loaded_topics_name_is_not_parsed_again(
        make_broker: Callable[..., ThreadedBroker], monkeypatch: pytest.MonkeyPatch) -> None:
    """Lookups and attaches of a loaded topic take its parsed name from the topic (the
    parse cache holds 4,096 names: with 100,000 loaded topics it would miss every time)."""
    broker = make_broker(magnetarTopicUnloadIdleSeconds=0)
    service = broker.service
    assert service is not None
    name = "persistent://public/default/parsed-once"
    broker.call(service.create_topic, name)
    topic = broker.call(service.load_topic, name)
    parses: list[str] = []
    real = TopicName.parse

    def parse(text: str) -> TopicName:
        parses.append(text)
        return real(text)

    monkeypatch.setattr(TopicName, "parse", staticmethod(parse))
    assert broker.call(service.check_topic_name, name) is topic.topic_name
    assert broker.call(service.load_topic, name) is topic
    assert parses == []
    assert broker.call(service.check_topic_name, "other-topic").local_name == "other-topic"
    assert parses == ["other-topic"]


def _loaded_topics(make_broker: Callable[..., ThreadedBroker], prefix: str,
                   count: int) -> tuple[ThreadedBroker, BrokerService, list[str]]:
    """A broker that never unloads idle topics, with ``count`` topics ``<prefix>-<i>`` of
    public/default made and loaded."""
    broker = make_broker(magnetarTopicUnloadIdleSeconds=0)
    service = broker.service
    assert service is not None
    names = [f"persistent://public/default/{prefix}-{i}" for i in range(count)]
    for name in names:
        broker.call(service.create_topic, name)
        broker.call(service.load_topic, name)
    return broker, service, names


def test_a_housekeeping_round_lets_the_loop_serve_between_topics(
        make_broker: Callable[..., ThreadedBroker], monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle topic's housekeeping waits for nothing, so a round used to go through every
    loaded topic in one step of the loop (about a second at 100,000 topics, every send
    waiting). The round's workers hand the loop back once a slice of work is used up (here
    a slice of 0: after each topic); a callback scheduled when the round starts runs
    before most topics are housekept, and every topic still is."""
    broker, service, names = _loaded_topics(make_broker, "housekept", 40)
    service.turns.budget_s = 0.0  # (the periodic rounds' budget per turn)
    keeper = service.housekeeping
    events: list[str] = []
    real = keeper._housekeep

    async def counted(topic: PersistentTopic, now: float) -> None:
        events.append(topic.name)
        await real(topic, now)

    monkeypatch.setattr(keeper, "_housekeep", counted)

    walked: list[list[object]] = []

    def holders() -> None:
        # while the round goes on, what holds every loaded topic in a collected generation
        # (a full collection walks it each time): the round holds only their names, in a
        # tuple of strings the first young collection untracked (heap.topic_names)
        gc.collect(0)
        topic = service.topics[names[-1]]
        walked.append([o for o in gc.get_referrers(topic)
                       if isinstance(o, (list, tuple)) and len(o) >= len(names)])

    async def one_round() -> None:
        done = keeper.run()
        loop = asyncio.get_running_loop()
        loop.call_soon(events.append, "loop served")
        loop.call_soon(holders)
        await done

    broker.call_async(one_round)
    assert set(names) <= set(events)  # every loaded topic was housekept
    assert events.index("loop served") < len(names) // 2, events
    assert keeper.round_yields >= len(names) // 2
    assert walked == [[]]


def test_a_housekeeping_round_works_one_slice_per_turn_of_the_loop(
        make_broker: Callable[..., ThreadedBroker], monkeypatch: pytest.MonkeyPatch) -> None:
    """The round's workers share one budget per turn of the loop (the periodic rounds'
    `TurnShare`): once it is used up, each waits for the next turn (a worker already
    waiting then does one topic at most). A slice per worker held the loop for _WORKERS
    slices in every turn. Timed here by a clock that advances one unit per topic
    housekept, with a budget of 2.5 units."""
    ticks = [0.0]
    broker, service, names = _loaded_topics(make_broker, "turns", 60)
    service.turns.set_clock(lambda: ticks[0])
    service.turns.budget_s = 2.5
    keeper = service.housekeeping
    events: list[str] = []
    real = keeper._housekeep

    async def counted(topic: PersistentTopic, now: float) -> None:
        events.append("topic")
        ticks[0] += 1.0
        await real(topic, now)

    monkeypatch.setattr(keeper, "_housekeep", counted)

    async def one_round() -> None:
        loop = asyncio.get_running_loop()
        done = keeper.run()

        def turn() -> None:  # one mark per turn of the loop while the round goes on
            events.append("turn")
            if not done.done():
                loop.call_soon(turn)

        loop.call_soon(turn)
        await done

    broker.call_async(one_round)
    assert events.count("topic") >= len(names)
    per_turn = [len(run) for run in "".join("t" if e == "topic" else "|"
                                            for e in events).split("|")]
    # the slice's 3 topics, and one each for the workers resuming into the new turn
    assert max(per_turn) <= 3 + housekeeping._WORKERS - 1, per_turn
    assert sum(1 for n in per_turn if n >= 3) >= len(names) // 6, per_turn


def test_samples_and_scrapes_hold_no_young_list_of_every_topic(tmp_path: Any,
                                                                thaw_heap: None) -> None:
    """A rate sample, a /metrics build of the same topics as the last and the per-broker
    tail walk the loaded topics over many slices of the loop; meanwhile no container that
    the collector walks (in a generation it collects, so not frozen) holds every loaded
    topic or all their names: they walk a tuple of names (`heap.topic_names`, untracked by
    the first young collection), and the build tells the same topics without a list of
    them. Such a young list of 100,000 topics, or a dict of 200,000 counters, was walked
    whole by each middle-generation collection (30-145 ms of the loop)."""
    from magnetar.admin.metrics import MetricsBuilder
    from magnetar.broker.topics.stats import RateTracker

    async def go() -> None:
        service = _small_bulk_service(tmp_path)
        await service.start()
        try:
            names = [f"persistent://public/default/young-{i}" for i in range(40)]
            for name in names:
                await service.load_topic(name)
            rates = RateTracker()
            builder = MetricsBuilder(service, rates, chunk=1, pause=0, slice_s=0)
            await builder.topic_part()  # groups the topics (kept, and frozen after it)
            assert builder.regrouped
            held: list[str] = []
            ticks = [0]
            done = asyncio.Event()

            async def watch() -> None:
                while not done.is_set():
                    gc.collect(0)  # (tuples of atomic values untracked)
                    # the names walked: in no list or tuple the collector still tracks
                    held.extend(type(o).__name__ for o in gc.get_referrers(names[-1])
                                if o is not names and isinstance(o, (list, tuple))
                                and len(names) <= len(o))
                    topic = service.topics[names[-1]]
                    held.extend(type(o).__name__ for o in gc.get_referrers(topic)
                                if o is not service.topics
                                and isinstance(o, (list, tuple, dict, set))
                                and len(names) <= len(o))
                    ticks[0] += 1
                    await asyncio.sleep(0)

            watcher = asyncio.ensure_future(watch())
            await asyncio.sleep(0)
            service.turns.budget_s = 0.0  # (the periodic rounds' budget: a slice per turn)
            await rates.sample_in_pieces(service, chunk=4)
            sampled = ticks[0]
            await builder.topic_part()
            assert not builder.regrouped
            built = ticks[0]
            tail = asyncio.ensure_future(builder.broker_tail())
            await asyncio.sleep(0)
            assert len(builder.tail_names) == len(names)
            gc.collect(0)
            assert not gc.is_tracked(builder.tail_names)  # (a tuple of strings)
            await tail
            done.set()
            await watcher
            # each walked in several slices, the watcher looking between them
            assert sampled >= 5 and built - sampled >= 3 and ticks[0] - built >= 2
            assert held == []
        finally:
            await service.stop()

    asyncio.run(go())


def test_a_first_build_freezes_each_block_as_it_is_read(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                       thaw_heap: None) -> None:
    """A topic-level build reads the loaded topics a block at a time and keeps each
    block's values (`_Block`: ~15 lists of its topics' values). Floats count as no
    allocation, so nothing collected between blocks: the first build at 100,000 topics
    left 50 blocks (770 lists, 1.5 million values) to one young collection of ~20 ms.
    Each block read is now collected (and, in the framed bulk, frozen) before the next:
    when a block is made, no block made before it is still in a collected generation."""
    from magnetar.admin import metrics
    from magnetar.admin.metrics import MetricsBuilder
    from magnetar.broker.topics.stats import RateTracker

    real = metrics._Block
    unfrozen_before: list[int] = []

    def block(*args: Any) -> Any:
        unfrozen_before.append(sum(1 for o in gc.get_objects() if type(o) is real))
        return real(*args)

    monkeypatch.setattr(metrics, "_Block", block)

    async def go() -> None:
        service = _small_bulk_service(tmp_path)
        await service.start()
        try:
            for i in range(40):
                await service.load_topic(f"persistent://public/default/blocks-{i}")
            builder = MetricsBuilder(service, RateTracker(), chunk=1, pause=0, slice_s=0)
            await builder.topic_part()
            assert builder.read_blocks >= 5
        finally:
            await service.stop()

    asyncio.run(go())
    assert len(unfrozen_before) >= 5
    assert max(unfrozen_before) == 0, unfrozen_before


def test_the_exposition_is_written_with_the_loop_given_back() -> None:
    """``StreamResponse.write`` waits only while the client's socket buffer is full: the
    /metrics handler gives the loop back itself every `WRITE_YIELD_BYTES` written, so a
    client that reads as fast as it is written to does not hold the loop for the whole
    exposition (133 MB at 100,000 topics)."""
    from magnetar.admin.metrics import write_pieces

    async def go() -> None:
        ticks = [0]
        seen: list[int] = []
        done = asyncio.Event()

        async def tick() -> None:
            while not done.is_set():
                ticks[0] += 1
                await asyncio.sleep(0)

        async def write(piece: bytes) -> None:  # a client that never fills its buffer
            seen.append(ticks[0])

        ticker = asyncio.ensure_future(tick())
        await asyncio.sleep(0)
        pieces = [b"x" * 300] * 10
        yields = await write_pieces(write, pieces, every=600)
        done.set()
        await ticker
        assert yields == 5
        assert seen == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]  # the loop served every second piece

    asyncio.run(go())


def test_changes_are_taken_a_slice_at_a_time() -> None:
    """After topics were made or unloaded in bulk the changed names are every topic's: a
    build takes them `step` per turn of the loop (a copy of 100,000 names in one call held
    it ~25 ms), all of them; a take cancelled half-way makes the next one read every topic
    (the names moved were lost with it)."""
    from magnetar.broker.topics.changes import TopicChanges

    async def go() -> None:
        changes = TopicChanges()
        reader = object()
        changes.take(reader)  # (a new reader reads every topic once)
        names = {f"persistent://public/default/changed-{i}" for i in range(10)}
        changes.names.update(names)
        served: list[str] = []
        asyncio.get_running_loop().call_soon(served.append, "loop")
        async def cancelled_after_a_slice(who: object) -> None:
            """A take of the noted ``names`` by ``who``, cancelled after its first slice."""
            changes.names.update(names)
            task = asyncio.ensure_future(changes.take_in_slices(who, step=3))
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        taken, overflowed = await changes.take_in_slices(reader, step=3)
        assert taken == names and not overflowed and not changes.names
        assert served == ["loop"]  # the loop served before the take was done
        await cancelled_after_a_slice(reader)  # (its first slice moved)
        assert changes.take(reader)[1]
        # a reader that must read every topic (here a new one) is not given the names: they
        # are dropped, not moved (100,000 of them at the first scrape after they were made),
        # `step` per turn of the loop, and the next take by the same reader has only the
        # names noted since
        changes.names.update(names)
        other = object()
        served.clear()
        asyncio.get_running_loop().call_soon(served.append, "loop")
        taken, overflowed = await changes.take_in_slices(other, step=3)
        assert overflowed and taken == set() and not changes.names
        assert served == ["loop"]
        changes.names.add("persistent://public/default/later")
        assert await changes.take_in_slices(other) == ({"persistent://public/default/later"},
                                                        False)
        # a drop cancelled half-way leaves the next take reading every topic too
        third = object()
        await cancelled_after_a_slice(third)  # (its first slice dropped)
        assert changes.take(third)[1]

    asyncio.run(go())


def test_the_registry_counts_its_changes_and_keeps_one_copy_of_the_names() -> None:
    """`TopicRegistry.version` moves at every load, unload or replacement (however made),
    and `heap.topic_names` of the registry is one tuple shared by every walk until then
    (a copy of 100,000 names is 5-15 ms of the loop); of a plain dict, a fresh copy."""
    from magnetar.broker.heap import topic_names
    from magnetar.broker.topics.changes import TopicChanges, TopicRegistry

    registry: TopicRegistry[object] = TopicRegistry(TopicChanges())
    registry["a"] = object()
    registry["b"] = object()
    names = topic_names(registry)
    assert names == ("a", "b") and topic_names(registry) is names
    changes: list[Callable[[], object]] = [
        lambda: registry.__setitem__("c", object()),
        lambda: registry.__setitem__("c", object()),  # (the same name, another topic)
        lambda: registry.__delitem__("c"),
        lambda: registry.pop("b"),
        lambda: registry.setdefault("d", object()),
        lambda: registry.update({"e": object()}),
        lambda: registry.popitem(),
        lambda: registry.clear(),
    ]
    for change in changes:
        version = registry.version
        change()
        assert registry.version > version
        now = topic_names(registry)
        assert now is not names and now == tuple(registry)
        names = now
    plain = {"a": 1}
    assert topic_names(plain) == ("a",) and topic_names(plain) is not topic_names(plain)


def test_a_trickle_of_loads_ends_the_stream() -> None:
    """Loads that go on without a pause but slowly (here 1 every 0.1 s, fewer than
    `stream_rate` per `SETTLE_S`) end a stream: its freezes at every young collection keep
    for good whatever is alive then, so it lasts only while loads come in bulk."""
    async def trickle() -> HeapFreezer:
        heap = HeapFreezer(1000)
        for loaded in range(1, heap.stream_loads + 1):
            heap.topic_loaded(loaded)
        assert heap.streaming
        loaded = heap.stream_loads
        deadline = time.monotonic() + 30
        while heap.streaming and time.monotonic() < deadline:
            loaded += 1
            heap.topic_loaded(loaded)  # never quiet for SETTLE_S
            await asyncio.sleep(0.1)
        heap.stop()
        return heap

    heap = asyncio.run(trickle())
    assert heap.freezes >= 1 and heap.streams >= 1
    assert heap._after_young_collection not in gc.callbacks


def test_loaded_slices_look_names_up_as_reached() -> None:
    """`heap.loaded_slices` walks a copy of the names, a slice at a time, the caller's
    pause awaited between two slices and each name looked up after it: a topic unloaded
    before its slice is reached is left out (its slice shorter, or empty), one loaded after
    the walk began is not in it."""
    from magnetar.broker.heap import loaded_slices

    live = {f"t{i}": object() for i in range(7)}
    pauses = [  # t1 is walked already when it goes
        lambda: (live.pop("t1"), live.pop("t4"), live.__setitem__("late", object())),
        lambda: live.pop("t6"),
    ]

    async def pause() -> None:
        pauses.pop(0)()

    async def walk(names: tuple[str, ...] | None = None) -> list[list[object]]:
        return [topics async for topics in loaded_slices(live, 3, pause, names)]

    t = dict(live)
    assert asyncio.run(walk()) == [[t["t0"], t["t1"], t["t2"]], [t["t3"], t["t5"]], []]
    assert pauses == []
    assert asyncio.run(walk(("t0", "gone", "t3"))) == [[t["t0"], t["t3"]]]  # (the names given)


def test_large_containers_are_freed_and_filled_a_slice_at_a_time() -> None:
    """`heap.dismantle` empties dicts ``size`` entries per slice (across the dicts) and
    `heap.add_in_slices` adds ``size`` items per slice, the caller's pause awaited between
    two slices: a rate sample's previous counters and moved names at 100,000 topics are
    neither freed nor added in one call."""
    from magnetar.broker.heap import add_in_slices, dismantle

    first, second = {i: (i, float(i)) for i in range(7)}, {"a": (1,), "b": (2,)}
    seen: list[tuple[int, int]] = []

    async def pause() -> None:
        seen.append((len(first), len(second)))

    asyncio.run(dismantle([first, second], 3, pause))
    assert first == {} and second == {}
    assert seen == [(4, 2), (1, 2), (0, 0)]  # 3, 3, then the last of one and the other's 2

    target: set[int] = {100}
    sizes: list[int] = []

    async def note() -> None:
        sizes.append(len(target))

    asyncio.run(add_in_slices(target, list(range(8)), 3, note))
    assert target == {100, *range(8)}
    assert sizes == [4, 7]  # 3 then 6 added before each pause; the last 2 after the second


def test_a_bulk_is_frozen_as_it_is_built(gc_generations: list[int]) -> None:
    """Outside a stream of loads, a framed bulk's young collections end with a freeze too
    (the stream's hook, for the bulk alone), and `HeapFreezer.settle` collects the first
    generation at once: a container made to hold every topic is frozen while empty, so no
    collection walks it once grown (a list of 100,000 topics, 13-28 ms each time), and the
    frame's end is a first-generation collection, not a middle one. The hook goes with
    the bulk; outside one, `settle` collects nothing."""
    heap = HeapFreezer(2)
    heap.settle()
    assert gc_generations == []
    assert heap.before_bulk(heap.bulk_topics)
    assert heap._after_young_collection in gc.callbacks and not heap.streams
    grown: list[_Node] = []
    heap.settle()
    assert not _in_collected_generations([grown])  # frozen while empty
    grown.extend(_Node() for _ in range(5000))  # (young collections freeze them as they go)
    gc_generations.clear()
    heap.after_bulk()
    assert gc_generations == [0]
    assert heap._after_young_collection not in gc.callbacks
    assert not _in_collected_generations([grown, *grown])
    assert heap.bulk_freezes == 1 and heap.freezes == 1 and heap.sweeps == 1


def test_a_long_topic_list_answer_is_serialized_in_slices(
        make_broker: Callable[..., ThreadedBroker], monkeypatch: pytest.MonkeyPatch) -> None:
    """GetTopicsOfNamespace's answer is serialized `TOPICS_SLICE` names at a time, the loop
    handed back between two (one protobuf call over 100,000 names held it ~40 ms), and
    reads back as the whole sorted list, through our client and the official one."""
    from magnetar.broker.connection import lookup
    from magnetar.client import RegexSubscriptionMode
    from magnetar.sync import Client

    broker, _, names = _loaded_topics(make_broker, "sliced", 11)
    sizes: list[int] = []
    original = lookup.repeated_string_part

    def spy(number: int, values: Any) -> bytes:
        sizes.append(len(values))
        return original(number, values)

    monkeypatch.setattr(lookup, "TOPICS_SLICE", 3)
    monkeypatch.setattr(lookup, "repeated_string_part", spy)
    with Client(broker.url) as client:
        assert client.get_topics_of_namespace("public/default") == sorted(names)
        assert sizes == [3, 3, 3, 2]
        sizes.clear()
        few = client.get_topics_of_namespace("public/default", RegexSubscriptionMode.NonPersistentOnly)
        assert few == [] and sizes == []  # a short list: one protobuf call, as before
    # the official client's pattern consumer reads the sliced answer too: it finds the
    # topic named in the last slice and receives from it
    import re

    official = pulsar.Client(broker.url, logger=QUIET)
    try:
        consumer = official.subscribe(re.compile(r"persistent://public/default/sliced-\d+"), "s",
                                      initial_position=pulsar.InitialPosition.Earliest)
        last = sorted(names)[-1]
        official.create_producer(last).send(b"from the last slice")
        assert consumer.receive(timeout_millis=20000).data() == b"from the last slice"
        assert sizes[:4] == [3, 3, 3, 2]  # the consumer's own GetTopicsOfNamespace, in slices
    finally:
        official.close()
