"""/metrics at namespace level and consumer level (Pulsar's
``exposeTopicLevelMetricsInPrometheus`` / ``exposeConsumerLevelMetricsInPrometheus``), and a
scrape built in pieces that give the event loop back, with its per-topic part cached."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from magnetar.admin.metrics import MetricsBuilder
from magnetar.broker.config import BrokerConfig
from magnetar.broker.service import BrokerService
from magnetar.broker.topics.stats import RateTracker
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
            builder = MetricsBuilder(service, RateTracker(), chunk=5)
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
