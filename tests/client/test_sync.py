"""The blocking facade ``magnetar.sync``: same calls as the official client, no await."""

from __future__ import annotations

import threading

import pytest

from magnetar.client import CompressionType, InitialPosition, MessageId, Timeout
from magnetar.sync import Client
from tests.client.conftest import BrokerProcess


def test_sync_roundtrip(broker: BrokerProcess, topic: str) -> None:
    with Client(broker.url) as client:
        consumer = client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=True,
                                          compression_type=CompressionType.ZSTD)
        assert isinstance(producer.send(b"one", properties={"k": "v"}), MessageId)
        done = threading.Event()
        seen = []

        def cb(exc: object, mid: object) -> None:
            seen.append((exc, mid))
            if len(seen) == 10:
                done.set()

        futs = [producer.send_async(b"m%d" % i, cb) for i in range(10)]
        producer.flush()
        assert done.wait(10)
        assert [f.result(5) for f in futs] == [m for _, m in seen]
        msgs = [consumer.receive(5000) for _ in range(11)]
        assert [m.data() for m in msgs] == [b"one"] + [b"m%d" % i for i in range(10)]
        assert msgs[0].properties() == {"k": "v"}
        for m in msgs:
            consumer.acknowledge(m)
        with pytest.raises(Timeout):
            consumer.receive(50)
        reader = client.create_reader(topic, MessageId.earliest)
        n = 0
        while reader.has_message_available():
            reader.read_next(5000)
            n += 1
        assert n == 11
        assert client.get_topic_partitions(topic) == [topic]


def test_sync_message_listener(broker: BrokerProcess, topic: str) -> None:
    import queue

    got: queue.Queue[bytes] = queue.Queue()

    def listener(consumer: object, msg: object) -> None:
        consumer.acknowledge(msg)  # type: ignore[attr-defined]  # blocking call is fine here
        got.put(msg.data())  # type: ignore[attr-defined]

    with Client(broker.url) as client:
        client.subscribe(topic, "s", message_listener=listener)
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(b"s%d" % i)
        assert [got.get(timeout=5) for _ in range(3)] == [b"s0", b"s1", b"s2"]


def test_sync_send_async_keeps_order(broker: BrokerProcess, topic: str) -> None:
    with Client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=True,
                                          max_pending_messages=100, block_if_queue_full=True)
        futs = [producer.send_async(b"o%d" % i) for i in range(3000)]
        last = producer.send(b"last")
        ids = [f.result(10) for f in futs]
        assert ids == sorted(ids) and len(set(ids)) == 3000 and ids[-1] < last


def test_sync_receive_takes_queued_messages_from_its_thread(broker: BrokerProcess,
                                                            topic: str) -> None:
    """Queued messages are taken without a trip to the loop; their permits still go back
    (a small receiver queue needs many Flows), from two threads at once; and
    ``redeliver_unacknowledged_messages`` still gets everything again."""
    n = 3000
    with Client(broker.url) as client:
        consumer = client.subscribe(topic, "s", initial_position=InitialPosition.Earliest,
                                    receiver_queue_size=40)
        producer = client.create_producer(topic, batching_enabled=True,
                                          batching_max_messages=25, block_if_queue_full=True)
        for i in range(n):
            producer.send_async(b"%d" % i, None)
        producer.flush()
        got: list[list[int]] = [[], []]

        def take(out: list[int]) -> None:
            try:
                while True:
                    out.append(int(consumer.receive(1000).data()))
            except Timeout:
                pass

        threads = [threading.Thread(target=take, args=(got[i],)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(got[0] + got[1]) == list(range(n))  # each exactly once
        for out in got:  # and in order within each thread
            assert out == sorted(out)
        consumer.redeliver_unacknowledged_messages()
        again: list[int] = []
        take(again)
        assert set(again) == set(range(n))


def test_sync_reader_takes_queued_messages_from_its_thread(broker: BrokerProcess,
                                                           topic: str) -> None:
    n = 2000
    with Client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=True,
                                          batching_max_messages=30, block_if_queue_full=True)
        for i in range(n):
            producer.send_async(b"%d" % i, None)
        producer.flush()
        reader = client.create_reader(topic, MessageId.earliest, receiver_queue_size=50)
        got = []
        while reader.has_message_available():
            got.append(int(reader.read_next(5000).data()))
        assert got == list(range(n))
        last = reader._r._consumer._children[0].last_dequeued
        assert last is not None and last.batch_index() >= 0
        reader.seek(MessageId.earliest)
        assert int(reader.read_next(5000).data()) == 0
        reader.close()
