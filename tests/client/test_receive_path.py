"""The consumer's receive path on its own (no broker): a delivered batch becomes lazy
messages, members the compactor dropped or the broker's ack set excludes are skipped (and
their permits returned), and every accessor still reads what the producer wrote."""

from __future__ import annotations

import asyncio

from magnetar.client import Client, MessageId
from magnetar.client.consumer import Consumer, ConsumerConf
from magnetar.client.schema import BytesSchema
from magnetar.client.topic_consumer import TopicConsumer
from magnetar.protocol import build_payload_part, encode_batch, pb
from magnetar.protocol.frames import MessageFrame

TOPIC = "persistent://public/default/receive-path"


def _batch() -> bytes:
    smm = pb.SingleMessageMetadata
    members = [
        (smm(compacted_out=True), b"gone"),
        (smm(properties=[pb.KeyValue(key="a", value="b")], partition_key="k",
             ordering_key=b"o", event_time=5, sequence_id=11), b"one"),
        (smm(sequence_id=12), b"two"),
        (smm(sequence_id=13), b"acked already"),
    ]
    meta = pb.MessageMetadata(producer_name="p", sequence_id=10, publish_time=1234,
                              num_messages_in_batch=4, properties=[
                                  pb.KeyValue(key="entry", value="level")])
    return build_payload_part(meta, encode_batch(members))


def test_batch_members_are_lazy_and_filtered() -> None:
    async def main() -> None:
        client = Client("pulsar://localhost:1")  # never connects
        consumer = Consumer(client, TOPIC, ConsumerConf("s"), BytesSchema())
        child = TopicConsumer(consumer, TOPIC, 3)
        # ack set from the broker: members 0-2 still unacknowledged, 3 acknowledged
        child._on_message(MessageFrame(child.consumer_id, 7, 9, 2, [0b0111], _batch()))
        assert child._permits == 2  # the compacted-out and the acknowledged member
        one, two = consumer.take_queued(10)
        assert [one.data(), two.data()] == [b"one", b"two"]
        assert one.properties() == {"a": "b"} and two.properties() == {}
        assert (one.partition_key(), one.ordering_key(), one.event_timestamp()) == ("k", b"o", 5)
        assert (two.partition_key(), two.event_timestamp()) == ("", 0)
        assert one.publish_timestamp() == 1234 and one.producer_name() == "p"
        assert one.redelivery_count() == 2 and one.topic_name() == TOPIC
        mid = one.message_id()
        assert mid == MessageId(3, 7, 9, 1, 4) and mid.batch_size() == 4
        assert mid is one.message_id() and mid.topic_name() == TOPIC
        assert child.last_dequeued == MessageId(3, 7, 9, 2, 4)
        assert one._smm is not None and one._smm.sequence_id == 11  # the views spark reads
        assert one._meta.publish_time == 1234 and one._data == b"one"
        assert "3 bytes" in repr(one)
        # acknowledging both delivered members acknowledges the entry
        assert not child.ack_at((7, 9), 1)
        assert child.ack_at((7, 9), 2)
        await consumer.close()

    asyncio.run(main())


def test_unbatched_message() -> None:
    async def main() -> None:
        client = Client("pulsar://localhost:1")
        consumer = Consumer(client, TOPIC, ConsumerConf("s"), BytesSchema())
        child = TopicConsumer(consumer, TOPIC, -1)
        meta = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=5,
                                  partition_key="key", event_time=9,
                                  properties=[pb.KeyValue(key="x", value="y")])
        child._on_message(MessageFrame(child.consumer_id, 1, 2, 0, [],
                                       build_payload_part(meta, b"payload")))
        (msg,) = consumer.take_queued(10)
        assert msg.data() == b"payload" and msg._entry.data_size(-1) == 7
        assert (msg.properties(), msg.partition_key(), msg.event_timestamp()) == (
            {"x": "y"}, "key", 9)
        assert msg.message_id() == MessageId(-1, 1, 2)
        await consumer.close()

    asyncio.run(main())
