"""Key-based batching (``BatchingType.KeyBased``) and the pending limit across partitions,
against a real broker over TCP, with the official client on the other side where it counts."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import pulsar
import pytest

from magnetar.client import (
    BatchingType,
    Client,
    ConsumerType,
    InitialPosition,
    ProducerQueueIsFull,
)
from magnetar.protocol import boost_hash
from tests.client.conftest import QUIET, BrokerProcess, receive_unique, run

KEYS = [f"key-{i}" for i in range(16)]
#: long enough that only the count/byte limits or an explicit flush close a batch
NEVER_MS = 60_000


def _entry(mid: Any) -> tuple[int, int, int]:
    return (mid.partition(), mid.ledger_id(), mid.entry_id())


def _keys_of(pairs: list[tuple[int, int, int] | Any]) -> dict[Any, set[str]]:
    per_entry: dict[Any, set[str]] = defaultdict(set)
    for entry, key in pairs:
        per_entry[entry].add(key)
    return per_entry


async def _send_interleaved(producer: Any, n: int, keys: list[str]) -> list[Any]:
    futs = [await producer.send_async(b"m%d" % i, partition_key=keys[i % len(keys)])
            for i in range(n)]
    await producer.flush()
    return list(await asyncio.gather(*futs))


def test_enum_mirrors_official() -> None:
    assert {m.name: m.value for m in BatchingType} == {
        "Default": pulsar.BatchingType.Default.value,
        "KeyBased": pulsar.BatchingType.KeyBased.value,
    }


def test_key_based_batches_hold_one_key(broker: BrokerProcess, topic: str) -> None:
    """Interleaved keys: every stored entry holds one key, several messages each, and
    messages of a key keep their order."""

    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "s",
                                              initial_position=InitialPosition.Earliest)
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_type=BatchingType.KeyBased,
                batching_max_messages=1000, batching_max_publish_delay_ms=NEVER_MS)
            ids = await _send_interleaved(producer, 96, KEYS[:6])
            assert producer.last_sequence_id() == 95
            # receipts: each entry one key, batch indexes numbered inside the key's batch
            per_entry = _keys_of([(_entry(mid), KEYS[i % 6]) for i, mid in enumerate(ids)])
            assert len(per_entry) == 6
            assert all(len(keys) == 1 for keys in per_entry.values())
            assert sorted(mid.batch_index() for mid in ids[:96:6]) == list(range(16))

            msgs = await receive_unique(consumer, 96)
            seen = _keys_of([(_entry(m.message_id()), m.partition_key()) for m in msgs])
            assert all(len(keys) == 1 for keys in seen.values()) and len(seen) == 6
            by_key: dict[str, list[int]] = defaultdict(list)
            for m in msgs:
                by_key[m.partition_key()].append(int(m.data()[1:]))
            assert all(v == sorted(v) and len(v) == 16 for v in by_key.values())

    run(main)


def test_default_batching_mixes_keys(broker: BrokerProcess, topic: str) -> None:
    """The control for the test above: Default batching puts all keys in one entry."""

    async def main() -> None:
        async with Client(broker.url) as client:
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_max_publish_delay_ms=NEVER_MS)
            ids = await _send_interleaved(producer, 12, KEYS[:6])
            assert len({_entry(mid) for mid in ids}) == 1

    run(main)


def test_ordering_key_groups_before_partition_key(broker: BrokerProcess, topic: str) -> None:
    """The batch key is the ordering key when there is one (as in the official clients);
    unkeyed messages share a batch; each message keeps its own keys and properties."""

    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "s",
                                              initial_position=InitialPosition.Earliest)
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_type=BatchingType.KeyBased,
                batching_max_publish_delay_ms=NEVER_MS)
            futs = []
            for i in range(12):
                kw: dict[str, Any] = {"properties": {"i": str(i)}}
                if i % 3 == 0:
                    kw["ordering_key"] = b"ok"
                    kw["partition_key"] = f"pk-{i}"
                elif i % 3 == 1:
                    kw["partition_key"] = "plain"
                futs.append(await producer.send_async(b"v%d" % i, **kw))
            await producer.flush()
            ids = await asyncio.gather(*futs)
            groups = {i % 3: {_entry(ids[j]) for j in range(i % 3, 12, 3)} for i in range(3)}
            assert all(len(g) == 1 for g in groups.values())
            assert len(set().union(*groups.values())) == 3
            msgs = {m.properties()["i"]: m for m in await receive_unique(consumer, 12)}
            assert msgs["3"].partition_key() == "pk-3" and msgs["3"].ordering_key() == b"ok"
            assert msgs["4"].partition_key() == "plain" and msgs["5"].partition_key() == ""

    run(main)


def test_key_based_limits_and_unbatched_messages(broker: BrokerProcess, topic: str) -> None:
    """The count limit covers all open batches together; a message too big for a batch
    and a delayed one go alone, after the open batches, and sequence ids stay ordered."""

    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared,
                                              initial_position=InitialPosition.Earliest)
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_type=BatchingType.KeyBased,
                batching_max_messages=4, batching_max_allowed_size_in_bytes=1024,
                batching_max_publish_delay_ms=NEVER_MS)
            # 4 messages over 2 keys reach the count limit: both batches are sent
            first = [await producer.send_async(b"a", partition_key=k)
                     for k in ("x", "y", "x", "y")]
            ids = await asyncio.wait_for(asyncio.gather(*first), 10)
            assert len({_entry(m) for m in ids}) == 2
            small = await producer.send_async(b"b", partition_key="x")
            big = await producer.send_async(b"B" * 2048, partition_key="x")
            later = await producer.send_async(b"d", partition_key="x", deliver_after=0)
            got = await asyncio.wait_for(asyncio.gather(small, big, later), 10)
            assert got[0] < got[1] < got[2]
            assert got[1].batch_index() == -1 and got[2].batch_index() == -1
            assert producer.last_sequence_id() == 6
            assert len(await receive_unique(consumer, 7)) == 7

    run(main)


def test_key_based_to_official_key_shared(broker: BrokerProcess, official: pulsar.Client,
                                          topic: str) -> None:
    """Our KeyBased producer -> two official Key_Shared consumers: every key reaches one
    consumer only, and both consumers get keys (Default batches carry no key, so the
    broker would send all of them to one consumer)."""
    consumers = [official.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
                                    consumer_name=f"c{i}") for i in range(2)]
    total = 160

    async def produce() -> None:
        async with Client(broker.url) as client:
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_type=BatchingType.KeyBased,
                batching_max_messages=40, batching_max_publish_delay_ms=NEVER_MS)
            await _send_interleaved(producer, total, KEYS)

    run(produce)
    seen: dict[str, set[int]] = defaultdict(set)
    entries: dict[tuple[int, int], set[str]] = defaultdict(set)
    datas: set[bytes] = set()
    lock = threading.Lock()

    def drain(idx: int) -> None:
        c = consumers[idx]
        end = time.monotonic() + 30
        while time.monotonic() < end:
            with lock:
                if len(datas) >= total:
                    return
            try:
                msg = c.receive(200)
            except pulsar.Timeout:
                continue
            c.acknowledge(msg)
            mid = msg.message_id()
            with lock:
                datas.add(msg.data())
                seen[msg.partition_key()].add(idx)
                entries[(mid.ledger_id(), mid.entry_id())].add(msg.partition_key())

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(datas) == total
    assert all(len(owners) == 1 for owners in seen.values()), seen
    assert {next(iter(o)) for o in seen.values()} == {0, 1}
    assert all(len(keys) == 1 for keys in entries.values())


def test_default_batch_carries_first_key_like_official(broker: BrokerProcess,
                                                      official: pulsar.Client,
                                                      topic: str) -> None:
    """Default batching: the batch takes its first message's key, as the official client's
    does, so a Key_Shared subscription routes our mixed batch where it routes theirs."""
    consumers = [official.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
                                    consumer_name=f"c{i}") for i in range(2)]
    firsts = KEYS[:10]
    theirs = official.create_producer(topic, batching_enabled=True,
                                      batching_max_publish_delay_ms=NEVER_MS)
    for k in firsts:
        for j, key in enumerate([k, "other-a", "other-b"]):
            theirs.send_async(b"o:%s:%d" % (k.encode(), j), None, partition_key=key)
        theirs.flush()

    async def produce() -> None:
        async with Client(broker.url) as client:
            ours = await client.create_producer(topic, batching_enabled=True,
                                                batching_max_publish_delay_ms=NEVER_MS)
            for k in firsts:
                for j, key in enumerate([k, "other-a", "other-b"]):
                    await ours.send_async(b"m:%s:%d" % (k.encode(), j), partition_key=key)
                await ours.flush()

    run(produce)
    owner: dict[bytes, set[int]] = defaultdict(set)
    datas: set[bytes] = set()
    end = time.monotonic() + 20
    while len(datas) < 60 and time.monotonic() < end:
        for idx, c in enumerate(consumers):
            try:
                msg = c.receive(50)
            except pulsar.Timeout:
                continue
            c.acknowledge(msg)
            datas.add(msg.data())
            who, first, _ = msg.data().split(b":")
            owner[who + b":" + first].add(idx)
    assert len(datas) == 60
    assert all(len(v) == 1 for v in owner.values()), owner
    for k in firsts:
        assert owner[b"o:" + k.encode()] == owner[b"m:" + k.encode()], k


def test_key_based_on_partitions(partitioned_broker: BrokerProcess, topic: str) -> None:
    """Partitioned: keys route by hash as before, and each partition's entries hold one
    key each."""

    async def main() -> None:
        async with Client(partitioned_broker.url) as client:
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_type=BatchingType.KeyBased,
                batching_max_publish_delay_ms=NEVER_MS)
            ids = await _send_interleaved(producer, 64, KEYS[:8])
            for i, mid in enumerate(ids):
                assert mid.partition() == boost_hash(KEYS[i % 8]) % 3
            per_entry = _keys_of([(_entry(mid), KEYS[i % 8]) for i, mid in enumerate(ids)])
            assert len(per_entry) == 8 and all(len(k) == 1 for k in per_entry.values())

    run(main)


# ------------------------------------------------------ max_pending_messages_across_partitions
def _keys_on(partition: int, n: int) -> list[str]:
    return [k for k in (f"k{i}" for i in range(1000)) if boost_hash(k) % 3 == partition][:n]


def _official_accepted(url: str, topic: str, keys: list[str]) -> int:
    client = pulsar.Client(url, logger=QUIET)
    try:
        producer = client.create_producer(
            topic, max_pending_messages_across_partitions=6, batching_enabled=True,
            batching_max_publish_delay_ms=NEVER_MS, block_if_queue_full=False)
        results: list[pulsar.Result] = []
        for k in keys:
            producer.send_async(b"o", lambda res, _mid: results.append(res), partition_key=k)
        producer.flush()
        return sum(1 for r in results if r == pulsar.Result.Ok)
    finally:
        client.close()


@pytest.mark.parametrize("spread", [False, True])
def test_across_partitions_limit_raises(partitioned_broker: BrokerProcess, spread: bool) -> None:
    """6 across 3 partitions: 2 pending per partition, 6 in all; the next one raises
    ``ProducerQueueIsFull`` while the first ones wait in open batches. The official client
    accepts exactly as many."""
    topic = f"persistent://public/default/across-{uuid.uuid4().hex[:10]}"
    keys = [k for p in range(3) for k in _keys_on(p, 3)] if spread else _keys_on(0, 5)

    async def main() -> int:
        async with Client(partitioned_broker.url) as client:
            producer = await client.create_producer(
                topic, max_pending_messages_across_partitions=6, batching_enabled=True,
                batching_max_publish_delay_ms=NEVER_MS, block_if_queue_full=False)
            accepted = []
            for k in keys:
                with contextlib.suppress(ProducerQueueIsFull):
                    accepted.append(await producer.send_async(b"m", partition_key=k))
            await producer.flush()
            assert all(not f.exception() for f in accepted)
            return len(accepted)

    ours = run(main)
    assert ours == (6 if spread else 2)
    assert ours == _official_accepted(partitioned_broker.url, topic, keys)


def test_across_partitions_limit_blocks(partitioned_broker: BrokerProcess, topic: str) -> None:
    """With ``block_if_queue_full`` sends wait for room: the pending total over all
    partitions never passes the limit, and every message is published."""

    async def main() -> None:
        async with Client(partitioned_broker.url) as client:
            producer = await client.create_producer(
                topic, max_pending_messages_across_partitions=9, batching_enabled=True,
                batching_max_publish_delay_ms=NEVER_MS, block_if_queue_full=True)
            parts = producer._parts
            futs, peak = [], 0
            for i in range(90):
                futs.append(await producer.send_async(b"b%d" % i, partition_key=KEYS[i % 16]))
                peak = max(peak, sum(p.pending for p in parts))
            await asyncio.wait_for(producer.flush(), 20)
            ids = [f.result() for f in futs]
            assert peak == 9
            assert len(set(ids)) == 90

    run(main)


def test_across_partitions_not_below_max_pending(partitioned_broker: BrokerProcess,
                                                 topic: str) -> None:
    """``max_pending_messages`` stays the limit when it is the smaller one; 0 or less
    across partitions means no shared bound."""

    async def main() -> None:
        async with Client(partitioned_broker.url) as client:
            small = await client.create_producer(topic, max_pending_messages=2,
                                                 max_pending_messages_across_partitions=600)
            unbounded = await client.create_producer(
                topic, max_pending_messages=0, max_pending_messages_across_partitions=0)
            assert {p.max_pending for p in small._parts} == {2}
            assert {p.max_pending for p in unbounded._parts} == {1 << 62}

    run(main)
