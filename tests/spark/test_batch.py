"""Batch reads and writes of the ``pulsar`` data source on a real local Spark and broker:
contents, metadata columns, ids in the official client's form, offsets and times, a
partitioned topic, a schema'd topic, user schemas, writes read back with the official
client, a retried write task, and options refused at planning time."""

from __future__ import annotations

import json

import pulsar
import pyarrow as pa
import pytest
from pulsar.schema import Integer, JsonSchema, Record, String
from pyspark.errors import AnalysisException

from magnetar.spark import PulsarDataSource
from magnetar.spark.options import SinkOptions
from magnetar.spark.writer import PulsarBatchWriter
from tests.broker.brokerproc import wait_until
from tests.broker.conftest import QUIET, ThreadedBroker
from tests.spark.conftest import new_topic

#: a hang guard: a SparkSession's first job on a loaded 2-core machine takes minutes, and a
#: py4j call cut by the timeout leaves the module's session unusable for every later test
pytestmark = pytest.mark.timeout(600)


def produce(client: pulsar.Client, topic: str, n: int, batched: bool = True,
            start: int = 0) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=batched,
                                      batching_max_messages=50)
    ids: list[pulsar.MessageId] = [None] * n  # type: ignore[list-item]

    def done(i: int):
        def cb(res: pulsar.Result, mid: pulsar.MessageId) -> None:
            assert res == pulsar.Result.Ok
            ids[i] = mid
        return cb

    for i in range(n):
        producer.send_async(b"m%d" % (start + i), done(i), partition_key=f"k{i % 3}",
                            properties={"i": str(start + i)}, event_timestamp=1000 + i)
    producer.flush()
    producer.close()
    return ids


def load(spark, broker, **options):
    reader = spark.read.format("pulsar").option("service.url", broker.url)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_contents_and_metadata(spark, broker, official):
    topic = new_topic()
    ids = produce(official, topic, 230)
    rows = load(spark, broker, topic=topic).collect()
    assert [r.value for r in rows] == [b"m%d" % i for i in range(230)]
    assert [r["__key"] for r in rows] == [f"k{i % 3}" for i in range(230)]
    assert [r["__messageProperties"] for r in rows] == [{"i": str(i)} for i in range(230)]
    assert all(r["__topic"] == topic for r in rows)
    assert [r["__messageId"] for r in rows] == [mid.serialize() for mid in ids]
    back = pulsar.MessageId.deserialize(rows[7]["__messageId"])
    assert (back.ledger_id(), back.entry_id(), back.batch_index()) == \
        (ids[7].ledger_id(), ids[7].entry_id(), ids[7].batch_index())
    assert [round(r["__eventTime"].timestamp() * 1000) for r in rows[:3]] == [1000, 1001, 1002]
    assert all(r["__publishTime"] is not None and r["__producerName"] for r in rows)
    assert [r["__sequenceId"] for r in rows] == list(range(230))


def test_registered_explicitly_too(spark, broker, official):
    topic = new_topic()
    produce(official, topic, 5, batched=False)
    spark.dataSource.register(PulsarDataSource)
    assert load(spark, broker, topic=topic).count() == 5


def test_offsets_and_times(spark, broker, official):
    topic = new_topic()
    ids = produce(official, topic, 120)
    start, end = ids[30], ids[90]  # batch message ids: exactly those messages
    df = load(spark, broker, topic=topic,
              startingOffsets=json.dumps({topic: list(start.serialize())}),
              endingOffsets=json.dumps({topic: {"ledgerId": end.ledger_id(),
                                                "entryId": end.entry_id(),
                                                "batchIndex": end.batch_index()}}))
    assert [r.value for r in df.collect()] == [b"m%d" % i for i in range(30, 90)]
    unbatched = new_topic()
    uids = produce(official, unbatched, 20, batched=False)
    df = load(spark, broker, topic=unbatched,
              startingOffsets=json.dumps({unbatched: list(uids[5].serialize())}))
    assert [r.value for r in df.collect()] == [b"m%d" % i for i in range(5, 20)]
    # publish time: everything at/after the time of the 2nd half
    times = [r["__publishTime"] for r in load(spark, broker, topic=unbatched).collect()]
    cut = round(times[10].timestamp() * 1000)
    got = load(spark, broker, topic=unbatched, startingTime=str(cut)).collect()
    assert {r.value for r in got} >= {b"m%d" % i for i in range(10, 20)}
    assert all(round(r["__publishTime"].timestamp() * 1000) >= cut for r in got)
    assert load(spark, broker, topic=unbatched, endingTime="1").count() == 0


def test_fail_on_data_loss_when_retention_removed_the_start(spark, tmp_path):
    """A range whose first entry's ledger was removed (consumed, no retention): the task
    fails and says so; with failOnDataLoss=false the rest is read and the loss logged."""
    lossy = ThreadedBroker(tmp_path / "data", managedLedgerMaxEntriesPerLedger=10).start()
    client = pulsar.Client(lossy.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        topic = new_topic("lossy")
        consumer = client.subscribe(topic, "sub")
        ids = produce(client, topic, 35, batched=False)
        for _ in range(25):  # ledgers of entries 0-9 and 10-19 consumed entirely
            consumer.acknowledge(consumer.receive(timeout_millis=10000))
        key = (ids[24].ledger_id(), ids[24].entry_id())
        wait_until(lambda: lossy.call(lambda: tuple(
            lossy.service.topics[topic].subscriptions["sub"].cursor.mark_delete_position)) >= key,
            10, "the acknowledgements")
        lossy.call(lossy.service.run_housekeeping, None)  # retention 0: they go
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert reader.read_next(timeout_millis=10000).data() == b"m20"
        start = json.dumps({topic: list(ids[5].serialize())})
        with pytest.raises(Exception, match="messages in between were removed"):
            load(spark, lossy, topic=topic, startingOffsets=start).collect()
        rest = load(spark, lossy, topic=topic, startingOffsets=start, failOnDataLoss="false")
        assert [r.value for r in rest.collect()] == [b"m%d" % i for i in range(20, 35)]
        # a start that still exists is no loss
        kept = load(spark, lossy, topic=topic,
                    startingOffsets=json.dumps({topic: list(ids[22].serialize())}))
        assert [r.value for r in kept.collect()] == [b"m%d" % i for i in range(22, 35)]
    finally:
        client.close()
        lossy.stop()


def test_partitioned_topic_and_topics_list(spark, broker, official):
    topic = new_topic("parted")
    broker.call(broker.service.create_partitioned_topic, topic, 3)
    produce(official, topic, 300, batched=False)  # round robin per message
    df = load(spark, broker, topic=topic)
    assert df.rdd.getNumPartitions() == 3
    rows = df.collect()
    assert sorted(r.value for r in rows) == sorted(b"m%d" % i for i in range(300))
    # keys k0..k2 hash to some of the partitions; an empty partition reads as nothing
    assert {r["__topic"] for r in rows} <= {f"{topic}-partition-{i}" for i in range(3)}
    other = new_topic()
    produce(official, other, 10)
    assert load(spark, broker, topics=f"{topic},{other}").count() == 310
    assert load(spark, broker, topicsPattern=topic.replace("parted-", "parte.-") +
                ".*").count() == 300


class Click(Record):
    user = String()
    n = Integer()


def test_schema_topic_as_columns_and_user_schema(spark, broker, official):
    topic = new_topic()
    producer = official.create_producer(topic, schema=JsonSchema(Click))
    for i in range(4):
        producer.send(Click(user=f"u{i}", n=i))
    producer.close()
    df = load(spark, broker, topic=topic)
    assert df.columns[:2] == ["user", "n"]
    assert [(r.user, r.n) for r in df.collect()] == [(f"u{i}", i) for i in range(4)]
    plain = new_topic()
    produce(official, plain, 3)
    df = (spark.read.format("pulsar").schema("value string, __key string")
          .option("service.url", broker.url).option("topic", plain).load())
    assert [tuple(r) for r in df.collect()] == [("m0", "k0"), ("m1", "k1"), ("m2", "k2")]


def read_back(client: pulsar.Client, topic: str) -> list[pulsar.Message]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=10000))
    reader.close()
    return out


def test_batch_write_read_back_with_official_client(spark, broker, official):
    topic = new_topic("sink")
    df = spark.createDataFrame(
        [(f"v{i}", f"k{i}", {"p": str(i)}) for i in range(500)],
        "value string, __key string, __messageProperties map<string,string>",
    ).repartition(2)
    df.write.format("pulsar").option("service.url", broker.url).option("topic", topic) \
        .mode("append").save()
    msgs = read_back(official, topic)
    assert sorted(m.data() for m in msgs) == sorted(b"v%d" % i for i in range(500))
    assert all(m.partition_key() == "k" + m.data().decode()[1:] for m in msgs)
    assert all(m.properties() == {"p": m.data().decode()[1:]} for m in msgs)
    # per-row routing
    a, b = new_topic("route"), new_topic("route")
    spark.createDataFrame([(b"x", a), (b"y", b), (b"z", a)], "value binary, __topic string") \
        .write.format("pulsar").option("service.url", broker.url).mode("append").save()
    # the rows may land in different Spark tasks: their order across tasks is not fixed
    assert sorted(m.data() for m in read_back(official, a)) == [b"x", b"z"]
    assert [m.data() for m in read_back(official, b)] == [b"y"]


def test_retried_write_task_is_deduplicated(broker, official):
    """The same task run twice (a retry) publishes each row once (broker dedup on)."""
    topic = new_topic("retry")
    from pyspark.sql.types import BinaryType, StructField, StructType

    schema = StructType([StructField("value", BinaryType())])
    writer = PulsarBatchWriter(SinkOptions.parse({"service.url": broker.url,
                                                  "topic": topic}), schema)
    batches = [pa.RecordBatch.from_pydict({"value": [b"r%d" % i for i in range(k, k + 700)]})
               for k in (0, 700, 1400)]

    def failing():
        yield from batches[:2]
        raise RuntimeError("executor lost")  # the first attempt fails after 1,400 rows

    with pytest.raises(RuntimeError, match="executor lost"):
        writer.write(failing())
    assert writer.write(iter(batches)).rows == 2100  # the retry sends everything again
    got = [m.data() for m in read_back(official, topic)]
    assert got == [b"r%d" % i for i in range(2100)]


def test_retried_write_task_on_a_partitioned_topic_is_deduplicated(broker, official):
    """A retry sends every batch entry to the same partition with the same sequence ids
    (the partition depends on the rows only, not on a router's random start), so the
    broker drops what the failed attempt stored: plain rows (whole entries) and keyed rows
    (one by one, by key hash) alike."""
    topic = new_topic("retry-parts")
    broker.call(broker.service.create_partitioned_topic, topic, 3)
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    schema = StructType([StructField("value", BinaryType()), StructField("__key", StringType())])
    writer = PulsarBatchWriter(SinkOptions.parse({"service.url": broker.url,
                                                  "topic": topic}), schema)

    def rows(k: int, keyed: bool) -> pa.RecordBatch:
        keys = [f"k{i % 5}" if keyed else None for i in range(k, k + 900)]
        return pa.RecordBatch.from_pydict(
            {"value": [b"r%d" % i for i in range(k, k + 900)], "__key": keys},
            schema=pa.schema([("value", pa.binary()), ("__key", pa.string())]))

    batches = [rows(0, False), rows(900, True), rows(1800, False), rows(2700, False)]

    def failing():
        yield from batches[:3]
        raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError, match="executor lost"):
        writer.write(failing())
    assert writer.write(iter(batches)).rows == 3600
    got = [m for p in range(3) for m in read_back(official, f"{topic}-partition-{p}")]
    assert sorted(m.data() for m in got) == sorted(b"r%d" % i for i in range(3600))
    assert len({m.topic_name() for m in got}) == 3  # entries spread over the partitions
    assert all(m.partition_key() == f"k{int(m.data()[1:]) % 5}" for m in got
               if 900 <= int(m.data()[1:]) < 1800)


def test_write_task_of_more_than_one_receipt_window(broker, official):
    """A task writes past the 50,000 rows after which it waits for receipts: its open
    batches (never cut by time) are flushed first, else it waited for ever."""
    topic = new_topic("big-task")
    from pyspark.sql.types import BinaryType, StructField, StructType

    schema = StructType([StructField("value", BinaryType())])
    writer = PulsarBatchWriter(SinkOptions.parse({"service.url": broker.url,
                                                  "topic": topic}), schema)
    n = 60_500
    batches = [pa.RecordBatch.from_pydict({"value": [b"%d" % i for i in range(k, min(k + 10_000, n))]})
               for k in range(0, n, 10_000)]
    assert writer.write(iter(batches)).rows == n
    got = read_back(official, topic)
    assert len(got) == n and got[-1].data() == b"%d" % (n - 1)


@pytest.mark.parametrize(("options", "message"), [
    ({"topic": "t"}, "service.url"),
    ({"service.url": "pulsar://x:1"}, "exactly one of"),
    ({"service.url": "pulsar://x:1", "topic": "a", "topics": "a,b"}, "exactly one of"),
    ({"service.url": "pulsar://x:1", "topic": "a", "startingOffsets": "{nope"},
     "startingOffsets"),
    ({"service.url": "pulsar://x:1", "topic": "a", "pulsar.client.bogus": "1"},
     "pulsar.client.bogus"),
    ({"service.url": "pulsar://x:1", "topic": "a", "maxRecordsPerTrigger": "10"},
     "streaming reads only"),
    ({"service.url": "http://x:1", "topic": "a"}, "pulsar://"),
])
def test_bad_options_fail_at_planning(spark, broker, options, message):
    reader = spark.read.format("pulsar")
    for k, v in options.items():
        v = broker.url if v == "pulsar://x:1" else v
        reader = reader.option(k, v)
    with pytest.raises(AnalysisException, match=message):
        reader.load().collect()


def test_write_modes_other_than_append_refused(spark, broker):
    df = spark.createDataFrame([(b"x",)], "value binary")
    with pytest.raises(Exception, match="append"):
        df.write.format("pulsar").option("service.url", broker.url).option("topic", "t") \
            .mode("overwrite").save()
    with pytest.raises(Exception, match="'value' column"):
        spark.createDataFrame([(1,)], "value int").write.format("pulsar") \
            .option("service.url", broker.url).option("topic", "t").mode("append").save()
