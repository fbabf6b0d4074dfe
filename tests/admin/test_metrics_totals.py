"""Namespace-level /metrics totals kept between scrapes (admin/metrics_totals.py), updated
from the topics the broker notes as changed (broker/topics/changes.py): after every kind of
change the kept totals equal a count made from every loaded topic, and a scrape reads only
the topics that changed."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from magnetar.admin.metrics import MetricsBuilder
from magnetar.broker.service import BrokerService
from magnetar.broker.topics.stats import RateTracker
from magnetar.broker.topics.topic import PersistentTopic
from tests.admin.conftest import wait_until
from tests.broker.conftest import QUIET, ThreadedBroker, start_broker

NS = ("public/default", "public/other")


def _direct(service: BrokerService, rates: RateTracker) -> dict[str, list[float]]:
    """Each namespace's totals counted from every loaded topic through the topics' own
    methods (not the gathering /metrics uses), the rates summed with fsum."""
    rows: dict[str, list[list[float]]] = {}
    for topic in service.topics.values():
        r_in, r_out = rates.rate("in", topic.name), rates.rate("out", topic.name)
        subs = list(topic.subscriptions.values())
        size = topic.ledger.size_bytes() if isinstance(topic, PersistentTopic) else 0
        rows.setdefault(topic.topic_name.namespace, []).append([
            r_in[0], r_out[0], r_in[1], r_out[1], sum(s.backlog() for s in subs), size,
            len(topic.producers), sum(len(s.consumers) for s in subs), len(subs),
            topic.msg_in, topic.bytes_in])
    out = {}
    for namespace, topics in rows.items():
        columns = list(zip(*topics, strict=True))
        out[namespace] = [math.fsum(c) for c in columns[:4]] + [sum(c) for c in columns[4:]]
    return out


class Probe:
    """A namespace-level builder on the broker's loop, and the comparison of its kept totals
    with `_direct` at one instant."""

    def __init__(self, broker: ThreadedBroker) -> None:
        self.broker = broker
        assert broker.service is not None
        self.service = broker.service
        self.rates = RateTracker()
        self.builder = MetricsBuilder(self.service, self.rates, chunk=4)  # blocks of 16

    async def scrape_now(self) -> int:
        """A scrape (on the broker's loop); the topics it read."""
        totals = self.builder.totals
        before = totals.read if totals is not None else 0
        await self.builder.scrape()
        assert self.builder.totals is not None
        if self.builder.totals is not totals:  # made again from every topic
            return self.builder.totals.read
        return self.builder.totals.read - before

    def scrape(self) -> int:
        result: int = self.broker.call_async(self.scrape_now)
        return result

    def check(self) -> dict[str, list[float]]:
        """Scrape, then (in one turn of the loop: nothing changes meanwhile) fold what changed
        since and compare the kept totals with a direct count of every loaded topic."""
        self.scrape()

        def compare() -> dict[str, list[float]]:
            totals = self.builder.totals
            assert totals is not None
            totals.fold(self.service.topic_changes.take(self.builder)[0], self.service.topics,
                        self.builder.gather)
            kept = dict(totals.table())
            direct = _direct(self.service, self.rates)
            assert kept == direct
            return kept
        result: dict[str, list[float]] = self.broker.call(compare)
        return result

    def sample(self) -> None:
        self.broker.call(self.rates.sample, self.service)


@pytest.fixture
def probe(tmp_path: Any) -> Iterator[Probe]:
    broker = start_broker(tmp_path, exposeTopicLevelMetricsInPrometheus=False,
                          magnetarMetricsCacheSeconds=0)
    try:
        assert broker.service is not None
        broker.call(broker.service.namespaces.create_namespace, NS[1])
        yield Probe(broker)
    finally:
        broker.stop()


def test_kept_totals_equal_a_recount_through_every_kind_of_change(probe):
    client: pulsar.Client | None = pulsar.Client(probe.broker.url, operation_timeout_seconds=20,
                                                 logger=QUIET)
    assert client is not None
    try:
        names = [f"persistent://{NS[i % 2]}/kept-{i}" for i in range(6)]
        producers = [client.create_producer(name, batching_enabled=False) for name in names]
        consumers = [client.subscribe(name, "sub") for name in names[:3]]
        probe.check()  # loads, producers, subscriptions, consumers
        for i, producer in enumerate(producers):
            for k in range(3 + i):
                producer.send(b"m" * (10 + k))
        kept = probe.check()  # publishes: counters, sizes, backlog
        assert kept[NS[0]][9] == 3 + 5 + 7 and kept[NS[1]][9] == 4 + 6 + 8
        probe.sample()
        for producer in producers:
            producer.send(b"later")
        probe.sample()  # rates moved
        kept = probe.check()
        assert kept[NS[0]][0] > 0 and kept[NS[1]][0] > 0
        for consumer in consumers:  # acks: individual, then cumulative
            first = consumer.receive(timeout_millis=20000)
            consumer.acknowledge(first)
            second = consumer.receive(timeout_millis=20000)
            consumer.acknowledge_cumulative(second)
        service = probe.service

        def backlog() -> int:
            return sum(service.topics[name].subscriptions["sub"].backlog() for name in names[:3])
        wait_until(lambda: probe.broker.call(backlog) == sum(4 + i - 2 for i in range(3)),
                   30, "the acks")
        probe.check()

        def quiet() -> bool:  # nothing sent since: the rates fall back to zero
            probe.sample()
            return bool(probe.broker.call(lambda: _direct(service, probe.rates)[NS[0]][:4]
                                          == [0.0] * 4))
        wait_until(quiet, 30, "the rates back at zero")
        kept = probe.check()
        assert kept[NS[0]][:4] == [0.0] * 4
        consumers[0].close()
        producers[1].close()
        consumers[1].unsubscribe()
        probe.check()
        for closing in (producers[2], consumers[2], producers[4]):  # (none to reload them)
            closing.close()
        probe.broker.call(service.unload_topic, service.topics[names[2]])  # unload
        probe.broker.call(service.delete_topic, names[4])  # delete
        kept = probe.check()
        assert kept[NS[0]][8] == 1  # kept-0's subscription; kept-2's left with its topic
        reloaded = client.create_producer(names[2])  # loaded again: a new topic object
        reloaded.send(b"again")
        client.create_producer(f"non-persistent://{NS[1]}/np").send(b"np")
        probe.check()
        client.close()  # (no client left to load them again)
        client = None
        for name in names:
            if name in service.topics:
                probe.broker.call(service.unload_topic, service.topics[name])
        kept = probe.check()
        assert set(kept) == {NS[1]}  # only the non-persistent topic is left
    finally:
        if client is not None:
            client.close()


def test_a_namespace_gone_quiet_shows_exact_zero_rates(probe):
    """Rates are kept per topic while not zero and summed with fsum: adding and taking out
    floats leaves no rounding residue behind."""
    async def go() -> None:
        service = probe.service
        for i in range(5):
            await service.load_topic(f"persistent://public/default/quiet-{i}")
        await probe.builder.scrape()
        for i, name in enumerate(service.topics):
            probe.rates.set_rate((0.1 * (i + 1), 1e17 / 3 * (i + 1)), "in", name)
            service.topic_changes.names.add(name)  # as the tracker notes a rate that moved
        await probe.builder.scrape()
        for name in service.topics:
            probe.rates.set_rate((0.0, 0.0), "in", name)
            service.topic_changes.names.add(name)
        await probe.builder.scrape()
        assert probe.builder.totals is not None
        assert dict(probe.builder.totals.table())["public/default"][:4] == [0.0] * 4

    probe.broker.call_async(go)


def test_a_scrape_reads_only_the_topics_that_changed(probe):
    async def go() -> None:
        service = probe.service
        topics = [await service.load_topic(f"persistent://public/default/few-{i}")
                  for i in range(20)]
        assert probe.scrape_now is not None
        assert await probe.scrape_now() == 20  # the first scrape reads every topic
        assert await probe.scrape_now() == 0  # nothing changed: none read
        await service.unload_topic(topics[5])
        await service.load_topic("persistent://public/default/few-new")
        assert await probe.scrape_now() == 1  # the new one (the unloaded one: taken out)
        assert probe.builder.totals is not None
        assert probe.builder.totals.counts == {"public/default": 20}
        assert await probe.scrape_now() == 0
        other = MetricsBuilder(service, probe.rates)  # a second reader of the same broker
        await other.scrape()
        assert other.totals is not None and other.totals.read == 20
        assert await probe.scrape_now() == 20  # the other took the names: read everything

    probe.broker.call_async(go)
