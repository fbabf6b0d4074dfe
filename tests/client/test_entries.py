"""A reader that hands out whole entries (``deliver_entries=True``): batches unsplit,
compressed ones uncompressed, and split with ``magnetar.protocol.split_batch`` into the
same messages a message reader returns; permits follow, so more than a receiver queue
of messages comes through."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.client import Client, MessageId, PulsarException, Timeout
from magnetar.protocol import split_batch
from tests.client.conftest import BrokerProcess, run


def _produce(official: pulsar.Client, topic: str) -> None:
    batched = official.create_producer(topic, batching_enabled=True, batching_max_messages=40,
                                       compression_type=pulsar.CompressionType.LZ4)
    for i in range(300):
        batched.send_async(b"b%d" % i, None, partition_key=f"k{i}" if i % 7 == 0 else None)
    batched.flush()
    batched.close()
    single = official.create_producer(topic, batching_enabled=False)
    for i in range(5):
        single.send(b"s%d" % i, properties={"i": str(i)})
    single.close()


def _messages(entry) -> list[tuple[tuple[int, int, int], bytes, str]]:
    """(key, bytes, partition key) of each message of an entry, via split_batch."""
    meta, payload = entry.metadata(), entry.payload()
    if not entry.is_batch():
        return [((entry.ledger_id(), entry.entry_id(), -1), payload, meta.partition_key)]
    split = split_batch(payload, entry.num_messages())
    b = split.bounds
    return [((entry.ledger_id(), entry.entry_id(), i), payload[b[2 * i + 1]:b[2 * i + 2]],
             split.metadata[i].partition_key if i in split.metadata else "")
            for i in range(entry.num_messages())]


def test_entries_split_into_the_messages_a_reader_reads(broker: BrokerProcess, topic: str,
                                                        official: pulsar.Client) -> None:
    _produce(official, topic)

    async def main() -> None:
        async with Client(broker.url) as client:
            plain = await client.create_reader(topic, MessageId.earliest)
            expected = []
            while len(expected) < 305:
                for m in await plain.read_batch(1000, 5000):
                    mid = m.message_id()
                    expected.append(((mid.ledger_id(), mid.entry_id(), mid.batch_index()),
                                     m.data(), m.partition_key()))
            # a queue of 50 messages: the 300 batched ones come only as permits return
            reader = await client.create_reader(topic, MessageId.earliest,
                                                receiver_queue_size=50, deliver_entries=True)
            entries = []
            while sum(e.num_messages() for e in entries) < 305:
                entries += await reader.read_entries(3, 5000)
            assert [e.is_batch() for e in entries] == [True] * 8 + [False] * 5
            assert entries[-1].metadata().properties[0].value == "4"
            got = [m for e in entries for m in _messages(e)]
            assert got == expected
            with pytest.raises(Timeout):
                await reader.read_entries(10, 200)
            assert not await reader.has_message_available()
            with pytest.raises(PulsarException, match="deliver_entries"):
                await plain.read_entries(1, 100)
            with pytest.raises(PulsarException, match="read_entries"):
                await reader.read_next(100)

    run(main)
