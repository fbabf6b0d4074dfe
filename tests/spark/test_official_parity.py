"""Every default column of a batch read equals what the official client's ``Reader`` says
of the same messages: a partitioned topic holding batched and unbatched messages, with and
without keys (of several lengths), properties, event times, values of one size (runs the
column builder decodes vectorised) and of varying sizes (walked message by message), and
batches of a few messages (built a value per message)."""

from __future__ import annotations

import pulsar
import pytest

from tests.broker.conftest import ThreadedBroker
from tests.spark.conftest import new_topic

#: a hang guard: a SparkSession's first job on a loaded 2-core machine takes minutes, and a
#: py4j call cut by the timeout leaves the module's session unusable for every later test
pytestmark = pytest.mark.timeout(600)


def _send(producer: pulsar.Producer, i: int, sent: list[int]) -> None:
    kwargs: dict[str, object] = {"sequence_id": 10_000 + i}
    if i % 4 == 0:
        kwargs["partition_key"] = "user-" + "x" * (i % 7) + str(i)
    if i % 3 == 0:
        kwargs["properties"] = {f"p{j}": f"v{i}-{j}" * (j + 1) for j in range(i % 4)}
    if i % 5 != 0:
        kwargs["event_timestamp"] = 1_700_000_000_000 + i
    if 300 <= i < 600:
        value = b"%08d" % i + b"u" * 92  # one size, no per-message fields: alike records
        kwargs = {"sequence_id": 10_000 + i}
    else:
        value = b"%d:" % i + b"v" * (i % 37)

    def done(res: pulsar.Result, _mid: pulsar.MessageId) -> None:
        assert res == pulsar.Result.Ok
        sent.append(i)

    producer.send_async(value, done, **kwargs)


def _id(mid: pulsar.MessageId) -> tuple[int, int, int]:
    return mid.ledger_id(), mid.entry_id(), mid.batch_index()


def _official_rows(client: pulsar.Client, topic: str, partitions: int) -> list[tuple]:
    rows = []
    for p in range(partitions):
        reader = client.create_reader(f"{topic}-partition-{p}", pulsar.MessageId.earliest)
        try:
            while reader.has_message_available():
                m = reader.read_next(10_000)
                rows.append((
                    m.data(), m.partition_key() or None, m.topic_name(),
                    _id(m.message_id()), m.publish_timestamp(),
                    m.event_timestamp() or None, dict(m.properties()), m.producer_name(),
                ))
        finally:
            reader.close()
    return rows


def test_all_columns_equal_the_official_readers(spark, broker: ThreadedBroker,
                                                official: pulsar.Client) -> None:
    topic = new_topic("parity")
    broker.call(broker.service.create_partitioned_topic, topic, 3)
    sent: list[int] = []
    batched = official.create_producer(
        topic, batching_enabled=True, batching_max_messages=200, block_if_queue_full=True,
        batching_max_publish_delay_ms=50)
    plain = official.create_producer(topic, batching_enabled=False, producer_name="plain")
    small = official.create_producer(topic, batching_enabled=True, batching_max_messages=3,
                                     block_if_queue_full=True, producer_name="small")
    for i in range(900):
        _send(plain if 600 <= i < 650 else small if 650 <= i < 700 else batched, i, sent)
    for p in (batched, plain, small):
        p.flush()
    assert len(sent) == 900

    df = (spark.read.format("pulsar").option("service.url", broker.url)
          .option("topic", topic).load())
    assert df.columns == ["value", "__key", "__topic", "__messageId", "__publishTime",
                          "__eventTime", "__messageProperties", "__producerName",
                          "__sequenceId"]
    got = df.collect()
    ids = [pulsar.MessageId.deserialize(bytes(r["__messageId"])) for r in got]
    # the partition is in our ids (as in the producer's and a consumer's of the partitioned
    # topic); a reader opened on the partition's own name leaves it out
    assert [m.partition() for m in ids] == [int(r["__topic"].rsplit("-", 1)[1]) for r in got]
    ours = [(r.value, r["__key"], r["__topic"], _id(mid),
             round(r["__publishTime"].timestamp() * 1000),
             None if r["__eventTime"] is None else round(r["__eventTime"].timestamp() * 1000),
             dict(r["__messageProperties"]), r["__producerName"])
            for r, mid in zip(got, ids, strict=True)]
    theirs = _official_rows(official, topic, 3)
    assert len(ours) == 900
    assert ours == theirs  # partition by partition, each in the official reader's order
    # sequence ids: the ones given to send_async, by value
    assert sorted((int(r.value.split(b":")[0][:8]), r["__sequenceId"]) for r in got) == \
        [(i, 10_000 + i) for i in range(900)]
    # both kinds of entry and every kind of field were there
    assert {r["__producerName"] for r in got} >= {"plain", "small"}
    assert any(r["__key"] for r in got) and any(r["__messageProperties"] for r in got)
    assert any(r["__eventTime"] is None for r in got)
