"""Message TTL, retention (consumed segments deleted outside it, kept within it) and backlog
quotas with their three policies, through the official client.

Housekeeping is run on demand (``broker.call(service.run_housekeeping, now)``) instead of
waiting for its timer; ``now`` moves the clock forward for TTL.
"""

from __future__ import annotations

import time
from pathlib import Path

import pulsar
import pytest

from magnetar.protocol import pb

from .brokerproc import drain, new_topic, wait_until
from .conftest import QUIET, ThreadedBroker


def segment_files(broker: ThreadedBroker) -> list[Path]:
    return sorted(Path(broker.config.magnetarDataDir, "ledgers").glob("*/*.seg"))


def subscription_stats(broker: ThreadedBroker, topic: str, sub: str) -> dict:
    return broker.call(broker.service.topic_stats, topic)["subscriptions"][sub]  # type: ignore[union-attr]


def mark_delete(broker: ThreadedBroker, topic: str, sub: str) -> tuple[int, int]:
    return broker.call(
        lambda: tuple(broker.service.topics[topic].subscriptions[sub].cursor.mark_delete_position)  # type: ignore[union-attr]
    )


def housekeeping(broker: ThreadedBroker, now: float | None = None) -> None:
    broker.call(broker.service.run_housekeeping, now)  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------ TTL


def test_ttl_expires_old_backlog_only(make_broker) -> None:
    broker = make_broker(ttlDurationDefaultInSeconds=60)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    topic = new_topic()
    client.subscribe(topic, "ttl").close()  # a durable subscription with no consumer
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(b"old-%d" % i)
    boundary = time.time()
    while time.time() < boundary + 0.003:  # the next publish times are strictly later
        pass
    for i in range(5):
        producer.send(b"new-%d" % i)
    assert subscription_stats(broker, topic, "ttl")["msgBacklog"] == 25

    housekeeping(broker, boundary + 0.001 + 30)  # nothing is 60 s old yet
    assert subscription_stats(broker, topic, "ttl")["msgBacklog"] == 25
    housekeeping(broker, boundary + 0.001 + 60)  # the "old" ones are now past the TTL
    assert subscription_stats(broker, topic, "ttl")["msgBacklog"] == 5
    consumer = client.subscribe(topic, "ttl")
    assert drain(consumer, b"new-4") == [b"new-%d" % i for i in range(5)]
    housekeeping(broker, time.time() + 3600)
    assert subscription_stats(broker, topic, "ttl")["msgBacklog"] == 0
    client.close()


def test_no_ttl_keeps_backlog(make_broker) -> None:
    broker = make_broker()
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    topic = new_topic()
    client.subscribe(topic, "keep").close()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(b"%d" % i)
    housekeeping(broker, time.time() + 10 * 86400)
    assert subscription_stats(broker, topic, "keep")["msgBacklog"] == 5
    client.close()


# ------------------------------------------------------------------------------ retention


def _produce_and_consume(broker: ThreadedBroker, topic: str, total: int, consumed: int) -> pulsar.Client:
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    consumer = client.subscribe(topic, "sub", receiver_queue_size=consumed)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"%d" % i) for i in range(total)]
    for i in range(consumed):
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"%d" % i
        consumer.acknowledge(msg)
    last = (ids[consumed - 1].ledger_id(), ids[consumed - 1].entry_id())
    wait_until(lambda: mark_delete(broker, topic, "sub") >= last, 10, "the acknowledgements")
    consumer.close()
    return client


def test_consumed_segments_outside_retention_are_deleted(make_broker) -> None:
    broker = make_broker(managedLedgerMaxEntriesPerLedger=10)  # retention 0: none
    topic = new_topic()
    client = _produce_and_consume(broker, topic, total=55, consumed=32)
    before = segment_files(broker)
    assert len(before) == 6
    housekeeping(broker)
    after = segment_files(broker)
    # segments 0-2 (entries 0-29) are consumed; the one holding 30-39 is not, nor later ones
    assert len(after) == 3
    assert after == before[3:]
    assert all(not p.exists() for p in before[:3])
    assert all(not p.with_suffix(".idx").exists() for p in before[:3])
    consumer = client.subscribe(topic, "sub")
    assert drain(consumer, b"54") == [b"%d" % i for i in range(32, 55)]
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(timeout_millis=5000).data() == b"30"  # 0-29 are gone
    client.close()


def test_consumed_data_within_retention_is_kept(make_broker) -> None:
    broker = make_broker(
        managedLedgerMaxEntriesPerLedger=10, defaultRetentionTimeInMinutes=60,
        defaultRetentionSizeInMB=100,
    )
    topic = new_topic()
    client = _produce_and_consume(broker, topic, total=55, consumed=55)
    before = segment_files(broker)
    housekeeping(broker)
    assert segment_files(broker) == before
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(timeout_millis=5000).data() for _ in range(55)] == [
        b"%d" % i for i in range(55)
    ]
    client.close()


def test_unconsumed_data_is_kept_outside_retention(make_broker) -> None:
    broker = make_broker(managedLedgerMaxEntriesPerLedger=10)
    topic = new_topic()
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    client.subscribe(topic, "lagging").close()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(35):
        producer.send(b"%d" % i)
    before = segment_files(broker)
    housekeeping(broker)
    assert segment_files(broker) == before
    consumer = client.subscribe(topic, "lagging")
    assert drain(consumer, b"34") == [b"%d" % i for i in range(35)]
    client.close()


# --------------------------------------------------------------------------- backlog quotas

QUOTA = 2000  # bytes; 40 entries of ~100-byte payloads are well over it
LAST = b"039" + b"." * 97  # the last message _fill_backlog sends


def _fill_backlog(client: pulsar.Client, topic: str, count: int = 40) -> pulsar.Producer:
    client.subscribe(topic, "slow").close()
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=1500)
    for i in range(count):
        producer.send(b"%03d" % i + b"." * 97)
    return producer


def test_quota_producer_request_hold(make_broker) -> None:
    broker = make_broker(
        backlogQuotaDefaultLimitBytes=QUOTA, backlogQuotaDefaultRetentionPolicy="producer_request_hold"
    )
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    topic = new_topic()
    producer = _fill_backlog(client, topic)
    housekeeping(broker)  # over quota: the producers are disconnected
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededError):
        client.create_producer(topic)
    with pytest.raises(pulsar.Timeout):  # held: the send waits until its timeout
        producer.send(b"held")
    # once the backlog is consumed, the held producer gets through again
    consumer = client.subscribe(topic, "slow")
    assert len(drain(consumer, LAST)) == 40

    def send_succeeds() -> bool:
        try:
            producer.send(b"after")
            return True
        except pulsar.Timeout:
            return False

    wait_until(send_succeeds, 30, "the held producer to publish again")
    client.create_producer(topic).close()
    client.close()


def test_quota_producer_exception(make_broker) -> None:
    broker = make_broker(
        backlogQuotaDefaultLimitBytes=QUOTA, backlogQuotaDefaultRetentionPolicy="producer_exception"
    )
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    topic = new_topic()
    producer = _fill_backlog(client, topic)
    housekeeping(broker)
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        producer.send(b"refused")
    consumer = client.subscribe(topic, "slow")
    got = drain(consumer, LAST)
    assert len(got) == 40 and b"refused" not in got
    wait_until(lambda: subscription_stats(broker, topic, "slow")["msgBacklog"] == 0, 10,
               "the acknowledgements")
    client.create_producer(topic).send(b"ok again")
    client.close()


def test_quota_not_exceeded_lets_producers_be(make_broker) -> None:
    broker = make_broker(
        backlogQuotaDefaultLimitBytes=100_000, backlogQuotaDefaultRetentionPolicy="producer_exception"
    )
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    topic = new_topic()
    producer = _fill_backlog(client, topic)
    housekeeping(broker)
    producer.send(b"fine")
    client.create_producer(topic).send(b"also fine")
    client.close()


def test_quota_consumer_backlog_eviction(make_broker) -> None:
    broker = make_broker(
        backlogQuotaDefaultLimitBytes=QUOTA,
        backlogQuotaDefaultRetentionPolicy="consumer_backlog_eviction",
    )
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    topic = new_topic()
    fast = client.subscribe(topic, "fast")
    producer = _fill_backlog(client, topic)
    assert len(drain(fast, LAST)) == 40
    housekeeping(broker)
    # producers are untouched; the slow subscription lost its oldest backlog
    producer.send(b"040" + b"." * 97)
    client.create_producer(topic).close()
    backlog = subscription_stats(broker, topic, "slow")["msgBacklog"]
    assert 0 < backlog < 41
    size = broker.call(lambda: broker.service.backlog_quota.backlog_bytes(broker.service.topics[topic])[0])  # type: ignore[union-attr]
    assert size <= QUOTA
    slow = client.subscribe(topic, "slow")
    got = [int(m[:3]) for m in drain(slow, b"040" + b"." * 97)]
    assert got == list(range(41 - backlog, 41)), "not the newest messages, in order"
    assert got[0] > 0
    client.close()


def test_time_quota_eviction_expires_old_backlog(make_broker) -> None:
    broker = make_broker(
        backlogQuotaDefaultLimitSecond=100,
        backlogQuotaDefaultRetentionPolicy="consumer_backlog_eviction",
    )
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    topic = new_topic()
    _fill_backlog(client, topic, count=10)
    sent = time.time()
    housekeeping(broker, sent + 50)  # within the quota
    assert subscription_stats(broker, topic, "slow")["msgBacklog"] == 10
    housekeeping(broker, sent + 101)  # over it: older than 90 s goes
    assert subscription_stats(broker, topic, "slow")["msgBacklog"] == 0
    client.close()


def test_time_quota_holds_producers(make_broker) -> None:
    broker = make_broker(
        backlogQuotaDefaultLimitSecond=100,
        backlogQuotaDefaultRetentionPolicy="producer_request_hold",
    )
    client = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    topic = new_topic()
    _fill_backlog(client, topic, count=3)
    sent = time.time()
    service = broker.service
    assert service is not None

    def quota_error(now: float) -> tuple[int, str] | None:
        return broker.call(service.backlog_quota.producer_error, service.topics[topic], now)

    assert quota_error(sent + 50) is None
    error = quota_error(sent + 101)
    assert error is not None and error[0] == pb.ProducerBlockedQuotaExceededError
    assert "100-second quota" in error[1]
    client.close()
