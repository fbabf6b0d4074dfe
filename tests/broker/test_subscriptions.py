"""Subscription types with the official client: Exclusive, Shared, Failover, Key_Shared; Flow."""

from __future__ import annotations

import collections
from pathlib import Path

import pulsar
import pytest

from magnetar.protocol import pb
from magnetar.protocol.hashing import sticky_key_hash

from . import rawconsumer as rc
from .conftest import QUIET, ThreadedBroker, start_broker

T = pb.BaseCommand
Sub = pb.CommandSubscribe
SHORT_MS = 300  # how long "nothing arrives" is watched for


def produce(client: pulsar.Client, topic: str, payloads: list[str], key: str | None = None) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for p in payloads:
        if key is None:
            producer.send(p.encode())
        else:
            producer.send(p.encode(), partition_key=key)
    producer.close()


def receive_n(consumer: pulsar.Consumer, n: int, ack: bool = True) -> list[pulsar.Message]:
    out = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis=5000)
        if ack:
            consumer.acknowledge(msg)
        out.append(msg)
    return out


def nothing_more(consumer: pulsar.Consumer, timeout_ms: int = SHORT_MS) -> bool:
    try:
        msg = consumer.receive(timeout_millis=timeout_ms)
    except pulsar.Timeout:
        return True
    raise AssertionError(f"unexpected message {msg.data()!r}")


def drain(consumer: pulsar.Consumer, ack: bool = True, timeout_ms: int = 1000) -> list[pulsar.Message]:
    """Everything that arrives until ``timeout_ms`` passes without a message."""
    out = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return out
        if ack:
            consumer.acknowledge(msg)
        out.append(msg)


# ------------------------------------------------------------------------------ Exclusive


def test_exclusive_second_consumer_is_refused_until_the_first_closes(client: pulsar.Client, topic: str) -> None:
    first = client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
    produce(client, topic, [f"m-{i}" for i in range(6)])
    got = receive_n(first, 6, ack=False)
    for msg in got[:2]:
        first.acknowledge(msg)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
    # Another type cannot join an Exclusive subscription either.
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Shared)
    first.close()  # flushes the two acks first
    second = client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
    again = receive_n(second, 4)
    assert [m.data() for m in again] == [f"m-{i}".encode() for i in range(2, 6)]
    assert nothing_more(second)


# ------------------------------------------------------------------------------ Shared


def test_shared_round_robin_exactly_once(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, consumer_name=f"c{i}")
        for i in range(2)
    ]
    produce(client, topic, [f"m-{i}" for i in range(20)])
    per_consumer = [drain(c, timeout_ms=500) for c in consumers]
    counts = [len(msgs) for msgs in per_consumer]
    assert counts == [10, 10], counts
    everything = [m.data() for msgs in per_consumer for m in msgs]
    assert sorted(everything) == sorted(f"m-{i}".encode() for i in range(20))
    for msgs in per_consumer:  # each consumer sees its share in publish order
        ids = [int(m.data().split(b"-")[1]) for m in msgs]
        assert ids == sorted(ids)


def test_shared_close_with_unacked_redelivers_to_the_others(client: pulsar.Client, topic: str) -> None:
    a = client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, consumer_name="a")
    b = client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, consumer_name="b")
    produce(client, topic, [f"m-{i}" for i in range(10)])
    held = receive_n(a, 5, ack=False)
    acked_by_b = receive_n(b, 5)
    a.close()
    redelivered = receive_n(b, 5)
    assert sorted(m.data() for m in redelivered) == sorted(m.data() for m in held)
    assert all(m.redelivery_count() == 0 for m in acked_by_b)
    assert nothing_more(b)
    all_seen = {m.data() for m in acked_by_b + redelivered}
    assert all_seen == {f"m-{i}".encode() for i in range(10)}


def test_shared_everything_acked_is_never_redelivered(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5)
        for _ in range(3)
    ]
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=7,
                                      batching_max_publish_delay_ms=5)
    for i in range(200):
        producer.send_async(f"m-{i}".encode(), None)
    producer.flush()
    seen: collections.Counter[bytes] = collections.Counter()
    idle_rounds = 0
    while sum(seen.values()) < 200 and idle_rounds < 3:
        progressed = False
        for c in consumers:
            for msg in drain(c, timeout_ms=200):
                seen[msg.data()] += 1
                progressed = True
        idle_rounds = 0 if progressed else idle_rounds + 1
    for c in consumers:
        c.close()
    assert set(seen) == {f"m-{i}".encode() for i in range(200)}
    assert max(seen.values()) == 1
    again = client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared)
    assert nothing_more(again, 500)


# ------------------------------------------------------------------------------ Failover


def test_failover_active_is_first_by_name_and_takes_over_the_backlog(client: pulsar.Client, topic: str) -> None:
    b = client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b-consumer")
    a = client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a-consumer")
    produce(client, topic, [f"m-{i}" for i in range(8)])
    got = receive_n(a, 8, ack=False)
    assert [m.data() for m in got] == [f"m-{i}".encode() for i in range(8)]
    assert nothing_more(b)
    for msg in got[:3]:
        a.acknowledge(msg)
    a.close()
    taken_over = receive_n(b, 5)
    assert [m.data() for m in taken_over] == [f"m-{i}".encode() for i in range(3, 8)]
    assert nothing_more(b)


def test_failover_priority_level_and_active_consumer_change(broker: ThreadedBroker, topic: str) -> None:
    raw = rc.connected(broker.url)
    try:
        def change(consumer_id: int) -> bool:
            frame = rc.expect(
                raw,
                lambda f: f.command.type == T.ACTIVE_CONSUMER_CHANGE
                and f.command.active_consumer_change.consumer_id == consumer_id,
            )
            return frame.command.active_consumer_change.is_active

        # "z" has the better (lower) priority level, so it wins over "a" despite its name.
        assert rc.subscribe(raw, topic, "fo", 1, Sub.Failover, consumer_name="z", priority_level=0).type == T.SUCCESS
        assert change(1) is True
        assert rc.subscribe(raw, topic, "fo", 2, Sub.Failover, consumer_name="a", priority_level=1).type == T.SUCCESS
        assert change(2) is False
        producer = rc.connected(broker.url)
        producer.create_producer(topic, 1)
        producer.send_message(1, 0, b"hello")
        rc.expect(producer, lambda f: f.command.type == T.SEND_RECEIPT)
        rc.flow(raw, 2, 10)
        assert rc.message(raw, 2, SHORT_MS / 1000) is None  # the inactive consumer gets nothing
        rc.flow(raw, 1, 10)
        assert rc.message(raw, 1) is not None
        assert rc.close_consumer(raw, 1).type == T.SUCCESS
        assert change(2) is True
        frame = rc.message(raw, 2)  # the unacknowledged message moves to the new active one
        assert frame is not None
        producer.close()
    finally:
        raw.close()


# ------------------------------------------------------------------------------ Key_Shared


def _key_of(msg: pulsar.Message) -> str:
    return msg.partition_key()


def test_key_shared_same_key_same_consumer_in_order(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=f"c{i}")
        for i in range(3)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{k}" for k in range(12)]
    for i in range(120):
        producer.send(f"{i}".encode(), partition_key=keys[i % len(keys)])
    owner: dict[str, int] = {}
    per_key: dict[str, list[int]] = collections.defaultdict(list)
    for index, c in enumerate(consumers):
        for msg in drain(c, timeout_ms=500):
            key = _key_of(msg)
            assert owner.setdefault(key, index) == index, f"{key} went to two consumers"
            per_key[key].append(int(msg.data()))
    assert sum(len(v) for v in per_key.values()) == 120
    for key, values in per_key.items():
        assert values == sorted(values), key
    assert len(set(owner.values())) > 1  # the keys did spread


def test_key_shared_sticky_ranges_follow_the_murmur3_hash(client: pulsar.Client, topic: str) -> None:
    halves = [(0, 32767), (32768, 65535)]
    consumers = [
        client.subscribe(
            topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
            key_shared_policy=pulsar.ConsumerKeySharedPolicy(
                key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[r]),
        )
        for r in halves
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"k{i}" for i in range(40)]
    for key in keys:
        producer.send(key.encode(), partition_key=key)
    for (low, high), c in zip(halves, consumers, strict=True):
        got = {m.data().decode() for m in drain(c, timeout_ms=500)}
        assert got == {k for k in keys if low <= sticky_key_hash(k.encode()) <= high}


def test_key_shared_joining_consumer_waits_for_older_messages(client: pulsar.Client, topic: str) -> None:
    first = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="first")
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{k}" for k in range(16)]
    for i in range(32):
        producer.send(f"{i}".encode(), partition_key=keys[i % 16])
    early = receive_n(first, 32, ack=False)
    second = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="second")
    for i in range(32, 64):
        producer.send(f"{i}".encode(), partition_key=keys[i % 16])
    # Keys that moved to `second` must wait: `first` still holds older messages of them.
    assert nothing_more(second)
    later_first = drain(first, ack=False, timeout_ms=1000)
    assert len(later_first) < 32  # some keys did move
    for msg in early + later_first:
        first.acknowledge(msg)
    later_second = drain(second, timeout_ms=1000)
    assert len(later_first) + len(later_second) == 32
    first_keys = {_key_of(m) for m in later_first}
    assert not first_keys & {_key_of(m) for m in later_second}
    for batch in (later_first, later_second):
        values = collections.defaultdict(list)
        for m in batch:
            values[_key_of(m)].append(int(m.data()))
        for v in values.values():
            assert v == sorted(v)


def _keys_by_half(n: int) -> tuple[list[str], list[str]]:
    """``n`` keys in the lower half of the hash range (where a second AUTO_SPLIT consumer
    lands) and ``n`` in the upper half."""
    low: list[str] = []
    high: list[str] = []
    i = 0
    while len(low) < n or len(high) < n:
        key = f"key-{i}"
        side = low if sticky_key_hash(key.encode()) <= 32768 else high
        if len(side) < n:
            side.append(key)
        i += 1
    return low, high


def test_key_shared_moved_keys_drain_before_the_new_owner_gets_them(client: pulsar.Client, topic: str) -> None:
    low, high = _keys_by_half(4)
    keys = low + high
    client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared).close()
    produce_keys = client.create_producer(topic, batching_enabled=False)
    for i in range(48):
        produce_keys.send(f"{i}".encode(), partition_key=keys[i % 8])
    # `first` owns every key; it takes 8 messages (one per key), the rest is read and held back.
    first = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
                             consumer_name="first", receiver_queue_size=8)
    second = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
                              consumer_name="second")
    # `second` now owns the `low` keys, but `first` still holds a message of each of them.
    assert nothing_more(second)
    held = receive_n(first, 8, ack=False)
    assert [m.data() for m in held] == [f"{i}".encode() for i in range(8)]
    for m in held:
        first.acknowledge(m)
    got_second = drain(second, timeout_ms=1000)
    got_first = drain(first, timeout_ms=1000)
    assert {_key_of(m) for m in got_second} == set(low)
    assert {_key_of(m) for m in got_first} == set(high)
    for msgs in (got_first, got_second):
        assert [int(m.data()) for m in msgs] == sorted(int(m.data()) for m in msgs)
    assert len(got_first) + len(got_second) == 40


def test_key_shared_leaving_consumer_hands_over_in_order(client: pulsar.Client, topic: str) -> None:
    a = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="a",
                         receiver_queue_size=10)
    b = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="b",
                         receiver_queue_size=10)
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{k}" for k in range(10)]
    for i in range(100):
        producer.send_async(f"{i}".encode(), None, partition_key=keys[i % 10])
    producer.flush()
    b_held = drain(b, ack=False, timeout_ms=300)  # b keeps what it got, acks nothing, and leaves
    b.close()
    got_a = drain(a, timeout_ms=1000)
    per_key = collections.defaultdict(list)
    for m in got_a:
        per_key[_key_of(m)].append(int(m.data()))
    assert {int(m.data()) for m in got_a} == set(range(100))
    for key, values in per_key.items():
        assert values == sorted(values), (key, values)
    assert b_held  # b did own some keys


def test_key_shared_redelivered_messages_are_not_overtaken(tmp_path: Path, topic: str) -> None:
    # Small read batches: the replay set is read in several chunks, while new entries arrive.
    small = start_broker(tmp_path, dispatcherMaxReadBatchSize=4)
    client = pulsar.Client(small.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        slow = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
                                consumer_name="a", receiver_queue_size=20)
        leaver = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
                                  consumer_name="b")
        producer = client.create_producer(topic, batching_enabled=False)
        keys = [f"key-{k}" for k in range(12)]
        for i in range(60):
            producer.send(f"{i}".encode(), partition_key=keys[i % 12])
        held = drain(leaver, ack=False, timeout_ms=300)
        assert held
        leaver.close()  # its messages join the slow consumer's held-back ones in the replay set
        for i in range(60, 120):
            producer.send(f"{i}".encode(), partition_key=keys[i % 12])
        got = drain(slow, timeout_ms=1000)
        assert sorted(int(m.data()) for m in got) == list(range(120))
        per_key = collections.defaultdict(list)
        for m in got:
            per_key[_key_of(m)].append(int(m.data()))
        for key, values in per_key.items():
            assert values == sorted(values), (key, values)
    finally:
        client.close()
        small.stop()


# ------------------------------------------------------------------------------ Flow


def test_small_receiver_queue_with_batches_gets_everything(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "flow", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=3)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=20)
    for i in range(300):
        producer.send_async(f"m-{i}".encode(), None)
    producer.flush()
    got = [m.data() for m in receive_n(consumer, 300)]
    assert sorted(got) == sorted(f"m-{i}".encode() for i in range(300))
    assert nothing_more(consumer)


@pytest.mark.parametrize("sub_type", [Sub.Exclusive, Sub.Shared, Sub.Failover, Sub.Key_Shared])
def test_flow_permits_are_counted_in_messages(broker: ThreadedBroker, topic: str, sub_type: int) -> None:
    producer = rc.connected(broker.url)
    consumer = rc.connected(broker.url)
    try:
        assert rc.subscribe(consumer, topic, "flow", 1, sub_type, earliest=True).type == T.SUCCESS
        assert producer.create_producer(topic, 1).type == T.PRODUCER_SUCCESS
        for seq in range(3):
            receipt = rc.publish_batch(producer, 1, seq, [f"{seq}-{i}".encode() for i in range(10)])
            assert receipt.type == T.SEND_RECEIPT
        rc.flow(consumer, 1, 1)
        first = rc.message(consumer, 1)
        assert first is not None  # one permit is enough to start a batch of ten...
        assert rc.message(consumer, 1, SHORT_MS / 1000) is None  # ...which costs ten
        rc.flow(consumer, 1, 9)  # back to zero: still nothing
        assert rc.message(consumer, 1, SHORT_MS / 1000) is None
        rc.flow(consumer, 1, 1)
        second = rc.message(consumer, 1)
        assert second is not None
        assert second.command.message.message_id.entryId == first.command.message.message_id.entryId + 1
        assert rc.message(consumer, 1, SHORT_MS / 1000) is None
    finally:
        producer.close()
        consumer.close()
