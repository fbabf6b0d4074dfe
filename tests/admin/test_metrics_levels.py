"""/metrics at namespace level and consumer level (Pulsar's
``exposeTopicLevelMetricsInPrometheus`` / ``exposeConsumerLevelMetricsInPrometheus``), and a
scrape built in pieces that give the event loop back, with its per-topic part cached."""

from __future__ import annotations

import asyncio
import gc
import urllib.request
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from magnetar.admin.metrics import (
    TOPIC_SERIES,
    MetricsBuilder,
    Series,
    _gather_block,
    _lines,
    _texts,
)
from magnetar.broker.config import BrokerConfig
from magnetar.broker.service import BrokerService
from magnetar.broker.topics.stats import KindTable, RateTracker
from magnetar.testing import StandaloneBroker, standalone
from tests.admin.conftest import QUIET, Api, wait_until

Samples = dict[str, list[tuple[dict[str, str], float]]]


def _scrape(broker: StandaloneBroker) -> Samples:
    with urllib.request.urlopen(broker.web_service_url + "/metrics", timeout=30) as reply:
        text = reply.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


@pytest.fixture(scope="module")
def ns_level() -> Iterator[StandaloneBroker]:
    with standalone({"exposeTopicLevelMetricsInPrometheus": False,
                     "magnetarMetricsCacheSeconds": 0}) as b:
        yield b


@pytest.fixture(scope="module")
def consumer_level() -> Iterator[StandaloneBroker]:
    with standalone({"exposeConsumerLevelMetricsInPrometheus": True,
                     "magnetarMetricsCacheSeconds": 0}) as b:
        yield b


def test_namespace_level_sums_the_topics_of_each_namespace(ns_level):
    Api(ns_level.web_service_url).ok("PUT", "/admin/v2/namespaces/public/other")
    client = pulsar.Client(ns_level.service_url, logger=QUIET)
    try:
        sends = {"public/default/a": 3, "public/default/b": 4, "public/other/c": 5}
        for topic, count in sends.items():
            client.subscribe(f"persistent://{topic}", "s")
            producer = client.create_producer(f"persistent://{topic}")
            for _ in range(count):
                producer.send(b"x" * 10)
        samples = _scrape(ns_level)
    finally:
        client.close()

    def by_ns(name: str) -> dict[str, float]:
        rows = samples[name]
        assert all("topic" not in labels for labels, _ in rows), rows  # no per-topic series
        return {labels["namespace"]: value for labels, value in rows}

    assert by_ns("pulsar_in_messages_total") == {"public/default": 7, "public/other": 5}
    assert by_ns("pulsar_msg_backlog") == {"public/default": 7, "public/other": 5}
    assert by_ns("pulsar_producers_count") == {"public/default": 2, "public/other": 1}
    assert by_ns("pulsar_subscriptions_count") == {"public/default": 2, "public/other": 1}
    assert by_ns("pulsar_in_bytes_total")["public/other"] > 0
    assert not [n for n in samples if n.startswith(("pulsar_subscription_", "pulsar_consumer_"))]
    assert samples["pulsar_topics_count"][0][1] == 3  # the broker's own series stay


def test_consumer_level_series(consumer_level):
    topic = "persistent://public/default/per-consumer"
    client = pulsar.Client(consumer_level.service_url, logger=QUIET)
    try:
        client.subscribe(topic, "sub", consumer_name="c1", receiver_queue_size=10)
        producer = client.create_producer(topic)
        for _ in range(3):
            producer.send(b"m")

        def consumer(name: str) -> float:
            for labels, value in _scrape(consumer_level)[name]:
                if labels.get("consumer_name") == "c1":
                    assert labels["topic"] == topic and labels["subscription"] == "sub"
                    assert labels["consumer_id"].isdigit()
                    return value
            raise AssertionError(f"no {name} for c1")

        wait_until(lambda: consumer("pulsar_consumer_unacked_messages") == 3, 30,
                   "3 unacknowledged messages at c1")
        assert consumer("pulsar_consumer_available_permits") == 7  # 10 given, 3 used
        assert consumer("pulsar_consumer_blocked_on_unacked_messages") == 0
        samples = _scrape(consumer_level)
        assert any(labels.get("topic") == topic for labels, _ in samples["pulsar_rate_in"])
    finally:
        client.close()


def test_scrape_is_built_in_pieces_and_cached(tmp_path):
    """The per-topic part gives the loop back every few topics (here 5) and lines, other
    tasks run in between, and scrapes within the cache period reuse one build."""

    async def go() -> None:
        config = BrokerConfig.load(None, magnetarDataDir=str(tmp_path), brokerServicePort=0,
                                   bindAddress="127.0.0.1", magnetarMetricsCacheSeconds=3600)
        service = BrokerService(config)
        await service.start()
        try:
            for i in range(40):
                await service.load_topic(f"persistent://public/default/piece-{i}")
            # (slice_s=0: the loop given back after every unit of work, however short)
            builder = MetricsBuilder(service, RateTracker(), chunk=5, slice_s=0)
            ticks = 0
            done = asyncio.Event()

            async def ticker() -> None:
                nonlocal ticks
                while not done.is_set():
                    ticks += 1
                    await asyncio.sleep(0)

            task = asyncio.create_task(ticker())
            await asyncio.sleep(0)
            ticks_before = ticks
            first, second = await asyncio.gather(builder.scrape(), builder.scrape())
            done.set()
            await task
            assert builder.builds == 1  # two concurrent scrapes, one build
            assert builder.yields >= 40 // 5 - 1
            assert ticks - ticks_before >= builder.yields  # the ticker ran between pieces
            assert first == second
            assert first.count('pulsar_storage_size{cluster="standalone"') == 40
            await builder.scrape()
            assert builder.builds == 1  # cached
        finally:
            await service.stop()

    asyncio.run(go())


def _families(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


async def _service(tmp_path, **settings) -> BrokerService:
    config = BrokerConfig.load(None, magnetarDataDir=str(tmp_path), brokerServicePort=0,
                               bindAddress="127.0.0.1", magnetarMetricsCacheSeconds=0, **settings)
    service = BrokerService(config)
    await service.start()
    for namespace in ("public/other", "public/third"):
        created = service.namespaces.create_namespace(namespace)
        if created is not None:
            await created
    return service


def test_namespace_level_sums_what_the_topic_level_shows(tmp_path):
    """The namespace level's sums and the topic level's rows (both `_gather_block`)
    read the same values: per namespace, every topic series sums to the namespace's."""

    async def go() -> None:
        service = await _service(tmp_path)
        try:
            for i in range(45):
                namespace = ("public/default", "public/other", "public/third")[i % 3]
                kind = "non-persistent" if i % 4 == 0 else "persistent"
                topic = await service.load_topic(f"{kind}://{namespace}/sum-{i}")
                topic.msg_in, topic.bytes_in = i, 10 * i
            rates = RateTracker()
            for i, name in enumerate(service.topics):
                rates.set_rate((i / 4, i * 2.5), "in", name)
                rates.set_rate((i / 8, i * 1.25), "out", name)
            service.config.exposeTopicLevelMetricsInPrometheus = True
            per_topic = _families(await MetricsBuilder(service, rates, chunk=4).scrape())
            service.config.exposeTopicLevelMetricsInPrometheus = False
            per_namespace = _families(await MetricsBuilder(service, rates, chunk=4).scrape())
        finally:
            await service.stop()
        for series in TOPIC_SERIES:
            sums: dict[str, float] = {}
            for labels, value in per_topic[series.sample]:
                sums[labels["namespace"]] = sums.get(labels["namespace"], 0.0) + value
            got = {labels["namespace"]: value for labels, value in per_namespace[series.sample]}
            assert got == pytest.approx(sums), series.sample
            assert len(got) == 3
        assert sum(v for _, v in per_namespace["pulsar_in_messages_total"]) == sum(range(45))

    asyncio.run(go())


def test_scrape_follows_topics_loaded_and_unloaded_and_reports_its_cost(tmp_path):
    """The grouping and label texts kept between builds follow the loaded topics; the
    last build's cost on the loop is exposed (build time, longest slice, in wall and CPU)."""

    async def go() -> None:
        service = await _service(tmp_path)
        try:
            for i in range(12):
                await service.load_topic(f"persistent://public/default/kept-{i}")
            builder = MetricsBuilder(service, RateTracker(), chunk=5)

            def topics(samples: Samples) -> set[str]:
                return {labels["topic"].rsplit("/", 1)[1]
                        for labels, _ in samples["pulsar_storage_size"]}

            first = _families(await builder.scrape())
            assert topics(first) == {f"kept-{i}" for i in range(12)}
            again = _families(await builder.scrape())  # same topics: the grouping is reused
            assert topics(again) == topics(first)
            await service.unload_topic(service.topics["persistent://public/default/kept-3"])
            await service.load_topic("persistent://public/other/new-one")
            after = _families(await builder.scrape())
            assert topics(after) == {f"kept-{i}" for i in range(12) if i != 3} | {"new-one"}
            assert {labels["namespace"] for labels, _ in after["pulsar_storage_size"]
                    if labels["topic"].endswith("new-one")} == {"public/other"}
            assert builder.builds == 3
            cost = {name: after[name][0][1] for name in (
                "magnetar_metrics_build_seconds", "magnetar_metrics_build_cpu_seconds",
                "magnetar_metrics_longest_slice_seconds",
                "magnetar_metrics_longest_slice_cpu_seconds")}
            assert 0 < cost["magnetar_metrics_longest_slice_seconds"] <= cost[
                "magnetar_metrics_build_seconds"]
            assert 0 <= cost["magnetar_metrics_longest_slice_cpu_seconds"] <= cost[
                "magnetar_metrics_build_cpu_seconds"]
        finally:
            await service.stop()

    asyncio.run(go())


def test_values_are_written_as_the_exposition_format_spells_them():
    assert list(_texts([1, 2.5, 0.0, 7])) == ["1", "2.5", "0.0", "7"]
    assert list(_texts([1, float("nan"), float("inf"), -float("inf"), 0.1])) == [
        "1", "NaN", "+Inf", "-Inf", "0.1"]
    assert list(_texts([10**400, 3])) == [str(10**400), "3"]  # too large for a float


def test_a_column_of_one_value_is_written_as_any_other():
    """`_lines` writes a column of one value with one join: the same text as value by
    value, and ``0`` and ``0.0`` (equal, of two types) each as it is spelled."""
    series = Series("pulsar_rate_in", "help")
    labels = ['topic="a"} ', 'topic="b\\"} ', 'topic="c"} ']
    nan = float("nan")
    for column, texts in (([0.0] * 3, ["0.0"] * 3), ([7] * 3, ["7"] * 3),
                          ([0, 0.0, 0], ["0", "0.0", "0"]),
                          ([nan, nan, nan], ["NaN"] * 3), ([1.5, 1.5, 2], ["1.5", "1.5", "2"])):
        expected = "".join(f"pulsar_rate_in{{{label}{text}\n"
                           for label, text in zip(labels, texts, strict=True))
        assert _lines(series, labels, column).decode() == expected, column
    assert _lines(series, [], []) == b""


def test_a_build_gives_the_loop_back_once_its_slice_is_spent(tmp_path):
    """The build goes on to its next unit of work while the slice has time left for it
    (`SLICE_S`): with a slice of an hour a build of 40 topics never gives the loop back,
    with none it does after every unit (a block read, a family's lines of a block)."""

    async def go() -> None:
        service = await _service(tmp_path)
        try:
            for i in range(40):
                await service.load_topic(f"persistent://public/default/slice-{i}")
            whole = MetricsBuilder(service, RateTracker(), chunk=2, slice_s=3600)  # blocks of 8
            pieces = MetricsBuilder(service, RateTracker(), chunk=2, slice_s=0)
            # (the first build of each: every topic read)
            assert b"".join(await whole.topic_part()) == b"".join(await pieces.topic_part())
            assert whole.yields == 0 and whole.read_blocks == 5
            assert pieces.yields >= 5 * (1 + len(TOPIC_SERIES))
        finally:
            await service.stop()

    asyncio.run(go())


def test_topic_level_reuses_the_lines_of_idle_topics_and_renders_changed_ones(tmp_path):
    """A build renders again only the families of the blocks whose values changed: an idle
    topic's lines are the same bytes as the last build's; a changed value is re-rendered
    (and only that family, in that block); a topic loaded or unloaded shows at once."""

    async def go() -> None:
        service = await _service(tmp_path)
        try:
            for i in range(100):  # chunk 10: blocks of 40 topics (40, 40, 20)
                await service.load_topic(f"persistent://public/default/idle-{i}")
            builder = MetricsBuilder(service, RateTracker(), chunk=10)
            first_parts = list(await builder.topic_part())
            assert builder.rendered == 3 * len(TOPIC_SERIES)
            first = _families(await builder.scrape())
            assert builder.rendered == 0  # nothing changed: every block's lines reused
            assert builder.read_blocks == 0  # nor any topic read (none noted as changed)
            again = list(await builder.topic_part())
            assert again == first_parts
            assert all(a is b for a, b in zip(again, first_parts, strict=True) if len(a) > 200)

            busy = service.topics["persistent://public/default/idle-57"]
            busy.msg_in += 5  # as a publish would, which also notes the topic:
            busy.touch()  # (topics/changes.py)
            after = _families(await builder.scrape())
            assert builder.rendered == 1  # pulsar_in_messages of the second block
            assert builder.read_blocks == 1  # the only block read again
            got = {labels["topic"]: value for labels, value in after["pulsar_in_messages_total"]}
            assert got[busy.name] == 5
            assert sum(got.values()) == 5 and len(got) == 100
            assert after["pulsar_storage_size"] == first["pulsar_storage_size"]

            await service.unload_topic(service.topics["persistent://public/default/idle-3"])
            await service.load_topic("persistent://public/default/late")
            moved = _families(await builder.scrape())
            names = [labels["topic"].rsplit("/", 1)[1] for labels, _ in moved["pulsar_rate_in"]]
            assert sorted(names) == sorted([f"idle-{i}" for i in range(100) if i != 3] + ["late"])
            got = {labels["topic"]: value for labels, value in moved["pulsar_in_messages_total"]}
            assert got[busy.name] == 5 and sum(got.values()) == 5
            for series in TOPIC_SERIES:  # every family has a line per loaded topic
                assert len(moved[series.sample]) == 100
        finally:
            await service.stop()

    asyncio.run(go())


def test_namespace_totals_follow_topics_loaded_changed_and_unloaded(tmp_path):
    async def go() -> None:
        service = await _service(tmp_path, exposeTopicLevelMetricsInPrometheus=False)
        try:
            topics = []
            for i in range(30):
                namespace = ("public/default", "public/other")[i % 2]
                topic = await service.load_topic(f"persistent://{namespace}/sum-{i}")
                topic.msg_in = i
                topics.append(topic)
            builder = MetricsBuilder(service, RateTracker(), chunk=4)  # blocks of 16 topics

            def totals(samples: Samples) -> dict[str, float]:
                return {labels["namespace"]: value
                        for labels, value in samples["pulsar_in_messages_total"]}

            evens, odds = sum(range(0, 30, 2)), sum(range(1, 30, 2))
            assert totals(_families(await builder.scrape())) == {
                "public/default": evens, "public/other": odds}
            topics[4].msg_in += 100  # as a publish would, which also notes the topic:
            topics[4].touch()  # only noted topics are read again (topics/changes.py)
            await service.unload_topic(topics[7])
            added = await service.load_topic("persistent://public/third/new")
            added.msg_in = 1000
            assert totals(_families(await builder.scrape())) == {
                "public/default": evens + 100, "public/other": odds - 7, "public/third": 1000}
            for topic in [t for t in topics if t.name.startswith("persistent://public/other")
                          and t.name in service.topics]:
                await service.unload_topic(topic)
            assert totals(_families(await builder.scrape())) == {
                "public/default": evens + 100, "public/third": 1000}
        finally:
            await service.stop()

    asyncio.run(go())


def test_a_block_drops_topics_unloaded_during_the_build(tmp_path):
    """Values are read in slices with the loop given back between them: a topic no longer
    in the registry when its block is read is left out, and the block is not kept."""

    async def go() -> None:
        service = await _service(tmp_path)
        try:
            topics = [await service.load_topic(f"persistent://public/default/gone-{i}")
                      for i in range(4)]
            for i, topic in enumerate(topics):
                topic.msg_in = 10 + i
            live = dict(service.topics)
            del live[topics[1].name]
            subscribed: list[Any] = []
            names, columns, whole = _gather_block(topics, live, KindTable(), subscribed)
            assert not whole and not subscribed
            assert names == [topics[0].name, topics[2].name, topics[3].name]
            assert columns[TOPIC_SERIES.index(next(
                s for s in TOPIC_SERIES if s.name == "pulsar_in_messages"))] == [10, 12, 13]
            assert all(len(column) == 3 for column in columns)
        finally:
            await service.stop()

    asyncio.run(go())


def test_rates_sampled_in_pieces_match_the_counters(tmp_path):
    """`RateTracker.sample_in_pieces` computes the rates in slices too (here 8 counters a
    slice): every counter's rate is its change over the interval, none left out; only
    rates not zero are kept, in dicts the garbage collector never tracks; the previous
    sample's counters are freed a slice at a time after it."""

    async def go() -> None:
        service = await _service(tmp_path)
        try:
            topics = [await service.load_topic(f"persistent://public/default/rate-{i}")
                      for i in range(30)]
            rates = RateTracker()
            await rates.sample_in_pieces(service, chunk=2)
            assert len(rates.rates) == 0  # no previous sample yet
            for i, topic in enumerate(topics):
                if i % 3 == 0:
                    topic.msg_in += i + 1
                    topic.bytes_in += 10 * (i + 1)
            await asyncio.sleep(0.05)
            await rates.sample_in_pieces(service, chunk=2)
            for i, topic in enumerate(topics):
                msgs, size = rates.rate("in", topic.name)
                assert rates.rate("out", topic.name) == (0.0, 0.0)
                if i % 3:
                    assert (msgs, size) == (0.0, 0.0)
                else:
                    assert msgs > 0 and size == pytest.approx(10 * msgs)
            assert len(rates.rates) == len(topics) // 3  # (the idle ones have none)
            kept = [*rates.rates.msgs.values(), *rates.rates.bytes.values(),
                    *rates._previous.dicts()]
            assert not any(map(gc.is_tracked, kept))
            # the previous sample's counters are emptied a slice at a time, not dropped whole
            previous = rates._previous
            assert len(previous) == 2 * len(topics)
            turns = 0

            async def count_turns() -> None:
                nonlocal turns
                while True:
                    await asyncio.sleep(0)
                    turns += 1

            counting = asyncio.ensure_future(count_turns())
            service.turns.budget_s = 0.0  # (the rounds' budget per turn: a slice each here)
            await rates.sample_in_pieces(service, chunk=2)
            counting.cancel()
            assert len(previous) == 0 and not any(previous.dicts())
            assert rates._previous is not previous and len(rates._previous) == 2 * len(topics)
            # 14 turns between the 15 slices of topics, then one after each 8 of the 60
            # counters freed (in and out of 30 topics): 21, one of which the counter may
            # miss (dropped whole: 14 turns in all)
            assert turns >= 14 + 6
        finally:
            await service.stop()

    asyncio.run(go())
