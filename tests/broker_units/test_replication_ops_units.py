"""The pure parts of operating geo-replication: `ReplicatorThrottle` following the policies
(``replicatorDispatchRate``), replication counted in a topic's load counters, and the
``pulsar_replication_*`` rows summed per namespace."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

from magnetar.admin.metrics import REPLICATION_SERIES, _Rows, add_replication
from magnetar.broker.cluster.load_report import topic_counters
from magnetar.broker.config.broker_config import BrokerConfig
from magnetar.broker.namespaces.policies import Policies, broker_defaults
from magnetar.broker.replication.throttle import ReplicatorThrottle
from magnetar.broker.topic_name import TopicName


@dataclass
class Store:
    policies: Policies
    generation: int = 0
    asked: list[TopicName] = field(default_factory=list)

    def for_topic(self, topic: TopicName) -> Policies:
        self.asked.append(topic)
        return self.policies

    def set(self, **changes: Any) -> None:
        self.policies = replace(self.policies, **changes)
        self.generation += 1


def test_broker_defaults_give_the_replicator_rate() -> None:
    config = BrokerConfig(dispatchThrottlingRatePerReplicatorInMsg=7,
                          dispatchThrottlingRatePerReplicatorInByte=4096)
    p = broker_defaults(config)
    assert (p.replicator_dispatch_rate_msgs, p.replicator_dispatch_rate_bytes,
            p.replicator_dispatch_rate_period) == (7, 4096, 1)


def test_throttle_follows_the_policies() -> None:
    store = Store(broker_defaults(BrokerConfig()))
    throttle = ReplicatorThrottle(store, TopicName.parse("persistent://t/ns/x"))
    assert throttle.rates is None  # no limit by default
    store.set(replicator_dispatch_rate_msgs=50, replicator_dispatch_rate_period=2)
    assert throttle.rates == (50, 0, 2.0)
    store.set(replicator_dispatch_rate_msgs=-1)
    assert throttle.rates is None


def test_throttle_waits_for_tokens_and_stops_waiting_when_the_rate_goes() -> None:
    store = Store(replace(broker_defaults(BrokerConfig()), replicator_dispatch_rate_msgs=1000))
    throttle = ReplicatorThrottle(store, TopicName.parse("persistent://t/ns/x"))

    async def run() -> None:
        await throttle.admit()
        throttle.sent(1000, 0)  # the whole burst
        assert throttle.throttled == 0
        throttle.sent(1000, 0)  # a second's debt: the next entry waits about that long
        waiting = asyncio.ensure_future(throttle.admit())
        await asyncio.sleep(0.05)
        assert not waiting.done() and throttle.throttled == 1
        store.set(replicator_dispatch_rate_msgs=0)  # removed: the waiter goes on
        await asyncio.wait_for(waiting, 5)

    asyncio.run(run())


def test_topic_counters_count_what_replicators_send() -> None:
    replicator = SimpleNamespace(msg_out=30, bytes_out=3000)
    topic = SimpleNamespace(msg_in=5, bytes_in=500, subscriptions={}, producers={},
                            replicators={"B": replicator, "C": replicator})
    counters = topic_counters(topic)  # type: ignore[arg-type]
    assert (counters.msg_in, counters.msg_out, counters.bytes_out) == (5, 60, 6000)


def test_replication_rows_sum_per_namespace_and_remote() -> None:
    width = len(REPLICATION_SERIES)
    rows_1 = [("B", [1.0] * (width - 1) + [3.0]), ("C", [2.0] * width)]
    rows_2 = [("B", [10.0] * (width - 1) + [2.0])]
    rows = _Rows(width)
    totals: dict[tuple[str, str], list[float]] = {}
    add_replication(rows, totals, "", "t/ns", rows_1)
    add_replication(rows, totals, "", "t/ns", rows_2)
    assert not rows
    assert totals[("t/ns", "B")] == [11.0] * (width - 1) + [3.0]  # the delay: the largest
    assert totals[("t/ns", "C")] == [2.0] * width
    add_replication(rows, None, 'cluster="A",namespace="t/ns",topic="x"', "t/ns", rows_2)
    assert rows.labels == ['cluster="A",namespace="t/ns",topic="x",remote_cluster="B"} ']
    assert [column[0] for column in rows.columns] == rows_2[0][1]
