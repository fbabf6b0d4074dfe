"""Topic compaction: triggered over HTTP (and automatically past a threshold), read with
read_compacted readers and the official client's TableView, compacted view then tail."""

from __future__ import annotations

import uuid

import pulsar

from magnetar.testing import standalone
from tests.admin.conftest import QUIET, Api, wait_until


def compact(api: Api, path: str) -> None:
    api.ok("PUT", f"{path}/compaction")
    wait_until(lambda: api.ok("GET", f"{path}/compaction")["status"] == "SUCCESS", 30, "compaction")


def read_all(client: pulsar.Client, topic: str, compacted: bool) -> list[tuple[str, bytes]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted)
    out = []
    while reader.has_message_available():
        msg = reader.read_next(timeout_millis=10000)
        out.append((msg.partition_key(), msg.data()))
    reader.close()
    return out


def test_compaction_keeps_the_latest_per_key(api: Api, client: pulsar.Client) -> None:
    name = f"compact-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    path = f"/admin/v2/persistent/public/default/{name}"
    assert api.get(f"{path}/compaction")[0] == 404  # no such topic yet
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        for key in ("a", "b", "c"):
            producer.send(f"{key}{i}".encode(), partition_key=key)
    producer.send(b"", partition_key="b")  # deletes b
    producer.send(b"no key")  # dropped by compaction
    assert api.ok("GET", f"{path}/compaction")["status"] == "NOT_RUN"
    compact(api, path)
    assert read_all(client, topic, compacted=True) == [("a", b"a2"), ("c", b"c2")]
    assert len(read_all(client, topic, compacted=False)) == 11  # the topic itself is intact
    # after the horizon the tail follows, and a second compaction folds it in
    producer.send(b"a3", partition_key="a")
    producer.send(b"d0", partition_key="d")
    assert read_all(client, topic, compacted=True) == [
        ("a", b"a2"), ("c", b"c2"), ("a", b"a3"), ("d", b"d0")]
    compact(api, path)
    assert read_all(client, topic, compacted=True) == [("c", b"c2"), ("a", b"a3"), ("d", b"d0")]
    # a durable read_compacted consumer sees the same
    consumer = client.subscribe(topic, "compacted-sub", is_read_compacted=True,
                                initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(timeout_millis=10000) for _ in range(3)]
    assert [(m.partition_key(), m.data()) for m in got] == [("c", b"c2"), ("a", b"a3"), ("d", b"d0")]
    for m in got:
        consumer.acknowledge(m)
    consumer.close()
    # the official client's TableView over the compacted topic
    producer.send(b"c3", partition_key="c")
    view = client.create_table_view(topic)
    wait_until(lambda: view.get("c") == b"c3", 10, "the table view to catch up")
    assert {k: view.get(k) for k in ("a", "c", "d")} == {"a": b"a3", "c": b"c3", "d": b"d0"}
    assert view.get("b") is None
    view.close()
    producer.close()


def test_batches_are_compacted_message_by_message(api: Api, client: pulsar.Client) -> None:
    name = f"compact-batch-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=4,
                                      batching_max_publish_delay_ms=1000,
                                      compression_type=pulsar.CompressionType.LZ4)
    for text, key in (("x0", "x"), ("y0", "y"), ("x1", "x"), ("z0", "z")):
        producer.send_async(text.encode(), None, partition_key=key)
    producer.flush()
    producer.close()
    compact(api, f"/admin/v2/persistent/public/default/{name}")
    assert read_all(client, topic, compacted=True) == [("y", b"y0"), ("x", b"x1"), ("z", b"z0")]


def test_automatic_compaction_past_the_threshold() -> None:
    with standalone({"brokerServiceCompactionThresholdInBytes": 1000,
                     "retentionCheckIntervalInSeconds": 1,
                     "backlogQuotaCheckIntervalInSeconds": 1}) as broker:
        api = Api(broker.web_service_url)
        client = pulsar.Client(broker.service_url, logger=QUIET)
        topic = "persistent://public/default/auto-compact"
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(50):
            producer.send(b"v" * 100 + b"%d" % i, partition_key=str(i % 5))
        path = "/admin/v2/persistent/public/default/auto-compact/compaction"
        wait_until(lambda: api.ok("GET", path)["status"] == "SUCCESS", 30, "automatic compaction")
        assert [k for k, _ in read_all(client, topic, compacted=True)] == ["0", "1", "2", "3", "4"]
        client.close()
