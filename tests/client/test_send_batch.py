"""``Producer.send_batch_async``: records already laid out as a batch payload go out as one
entry with consecutive sequence ids (the Spark sink's path): the official client reads the
messages back with their keys and properties, the receipt names the entry, ids carry on
for later sends, and a batch sent again is dropped by broker deduplication."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.client import Client
from magnetar.protocol import encode_batch, pb
from tests.client.conftest import QUIET, BrokerProcess, needs_magnetar, run


def _records(first: int, n: int) -> bytes:
    msgs = []
    for i in range(first, first + n):
        smm = pb.SingleMessageMetadata()
        if i % 2:
            smm.partition_key = f"k{i}"
            smm.properties.add(key="i", value=str(i))
        msgs.append((smm, b"m%d" % i))
    return encode_batch(msgs)


def test_batch_payload_sent_whole_and_deduplicated(own_broker: BrokerProcess, topic: str) -> None:
    needs_magnetar(own_broker, "deduplication")

    async def main() -> tuple[list[tuple[int, int, int]], int]:
        async with Client(own_broker.url) as client:
            p = await client.create_producer(topic, producer_name="bulk",
                                             batching_enabled=True)
            ids = [await (await p.send_batch_async(_records(0, 5), 5, 100))]
            ids.append(await (await p.send_batch_async(_records(5, 3), 3, 105)))
            again = await p.send_batch_async(_records(5, 3), 3, 105)  # a retry: dropped
            await again
            last = p.last_sequence_id()
            await p.send(b"m8")  # the producer's own ids carry on after the batch's
            await p.close()
            return [(m.entry_id(), m.batch_index(), m.batch_size()) for m in ids], last

    ids, last = run(main)
    assert ids == [(0, 0, 5), (1, 0, 3)]
    assert last == 107
    client = pulsar.Client(own_broker.url, logger=QUIET)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():
            m = reader.read_next(5000)
            got.append((m.data(), m.partition_key(), m.properties()))
    finally:
        client.close()
    assert [g[0] for g in got] == [b"m%d" % i for i in range(9)]
    assert got[1][1:] == ("k1", {"i": "1"}) and got[2][1:] == ("", {})


def test_partitioned_producer_refuses(partitioned_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(partitioned_broker.url) as client:
            p = await client.create_producer(topic, batching_enabled=True)
            with pytest.raises(ValueError, match="one topic or partition"):
                await p.send_batch_async(_records(0, 2), 2, 0)
            await p.close()

    run(main)
