"""Entries to rows without Spark or a broker: which messages of an entry a range takes
(batched and not, bounds inside a batch, skipped indexes), and the columns built from
batch and unbatched entries side by side, checked against the client's own ``Message``
view of the same bytes."""

from __future__ import annotations

import datetime as dt

import pytest

from magnetar.client.entry import Entry
from magnetar.client.message_id import MessageId
from magnetar.protocol import pb
from magnetar.protocol.batch import encode_batch
from magnetar.spark import arrow
from magnetar.spark.arrow import BatchBuilder
from magnetar.spark.offsets import EARLIEST
from magnetar.spark.ranges import entry_runs
from magnetar.spark.schema import ValueFormat, default_schema

TOPIC = "persistent://public/default/t-partition-2"


def batch_entry(ledger: int, entry: int, n: int, ack_set: list[int] | None = None,
                compacted: tuple[int, ...] = ()) -> Entry:
    msgs = []
    for i in range(n):
        smm = pb.SingleMessageMetadata(sequence_id=50 + i)
        if i % 3 == 1:
            smm.partition_key = f"k{i}"
            smm.properties.add(key="i", value=str(i))
            smm.event_time = 7000 + i
        if i in compacted:
            smm.compacted_out = True
        msgs.append((smm, b"v%d.%d" % (entry, i)))
    meta = pb.MessageMetadata(producer_name="prod", sequence_id=50, publish_time=1234,
                              num_messages_in_batch=n)
    return Entry(encode_batch(msgs), meta, MessageId(2, ledger, entry), TOPIC, 0, ack_set)


def single_entry(ledger: int, entry: int) -> Entry:
    meta = pb.MessageMetadata(producer_name="solo", sequence_id=900 + entry,
                              publish_time=5678, partition_key="sk", event_time=42)
    meta.properties.add(key="p", value="q")
    return Entry(b"s%d" % entry, meta, MessageId(2, ledger, entry), TOPIC, 0, None)


def keys(entry: Entry, lower, upto) -> tuple[list[int], bool]:
    runs, done = entry_runs(entry, lower, upto)
    return [i for r in runs for i in range(r.lo, r.hi)], done


def test_runs_of_a_batch_entry():
    e = batch_entry(3, 10, 5)
    assert keys(e, EARLIEST, (9, 0, -1)) == ([0, 1, 2, 3, 4], False)
    assert keys(e, (3, 10, 1), (3, 11, -1)) == ([2, 3, 4], False)
    assert keys(e, (3, 10, -1), (3, 10, 2)) == ([0, 1, 2], True)
    assert keys(e, (3, 10, 4), (3, 12, 0)) == ([], False)  # all at or below the start
    assert keys(e, EARLIEST, (3, 9, 0)) == ([], True)  # past the end
    assert keys(e, (3, 9, 3), (3, 10, 99)) == ([0, 1, 2, 3, 4], True)


def test_runs_of_an_unbatched_entry():
    e = single_entry(3, 10)
    assert keys(e, (3, 10, -2), (3, 10, -1)) == ([0], True)  # before(m) .. m
    assert keys(e, (3, 10, -1), (3, 11, -1)) == ([], False)  # the start is m itself
    assert keys(e, (3, 9, -1), (3, 10, -2)) == ([], True)


def test_skipped_indexes_cut_runs():
    # compacted out: 1; not in the ack set: 3
    e = batch_entry(3, 10, 6, ack_set=[0b110111], compacted=(1,))
    runs, _ = entry_runs(e, EARLIEST, (4, 0, -1))
    assert [(r.lo, r.hi) for r in runs] == [(0, 1), (2, 3), (4, 6)]


@pytest.mark.parametrize("small", [0, 8])  # batches as Arrow columns / a value per message
@pytest.mark.parametrize("fmt", [ValueFormat(), ValueFormat("string")])
def test_columns_match_the_client_view(fmt, small, monkeypatch):
    monkeypatch.setattr(arrow, "SMALL", small)
    entries = [single_entry(3, 1), batch_entry(3, 2, 4), single_entry(3, 3),
               single_entry(3, 4), batch_entry(3, 5, 3)]
    runs = [r for e in entries for r in entry_runs(e, (3, 2, 0), (3, 5, 1))[0]]
    builder = BatchBuilder(default_schema(fmt), fmt, TOPIC, 2)
    rows = builder.build(runs).to_pylist()
    assert rows == [row for r in runs for row in builder.build([r]).to_pylist()]
    expected_ids = [(3, 2, i) for i in (1, 2, 3)] + [(3, 3, -1), (3, 4, -1)] + \
        [(3, 5, 0), (3, 5, 1)]
    got_ids = [MessageId.deserialize(r["__messageId"]) for r in rows]
    assert [(m.ledger_id(), m.entry_id(), m.batch_index()) for m in got_ids] == expected_ids
    assert all(m.partition() == 2 for m in got_ids)
    assert [m.batch_size() for m in got_ids] == [4, 4, 4, 0, 0, 3, 3]
    values = [b"v2.1", b"v2.2", b"v2.3", b"s3", b"s4", b"v5.0", b"v5.1"]
    assert [r["value"] for r in rows] == \
        ([v.decode() for v in values] if fmt.kind == "string" else values)
    assert [r["__key"] for r in rows] == ["k1", None, None, "sk", "sk", None, "k1"]
    assert [r["__messageProperties"] for r in rows] == \
        [[("i", "1")], [], [], [("p", "q")], [("p", "q")], [], [("i", "1")]]
    ms = [None if r["__eventTime"] is None else
          round(r["__eventTime"].timestamp() * 1000) for r in rows]
    assert ms == [7001, None, None, 42, 42, None, 7001]
    assert [r["__sequenceId"] for r in rows] == [51, 52, 53, 903, 904, 50, 51]
    assert [r["__producerName"] for r in rows] == ["prod"] * 3 + ["solo"] * 2 + ["prod"] * 2
    assert [r["__publishTime"] for r in rows][:1] == \
        [dt.datetime.fromtimestamp(1.234, dt.UTC)]
    assert {r["__topic"] for r in rows} == {TOPIC}


def test_property_value_before_its_key():
    """Legal protobuf no client writes: a KeyValue's value first. Still read right."""
    kv = b"\x12\x01v\x0a\x01k"  # value "v", then key "k"
    smm = b"\x0a" + bytes([len(kv)]) + kv + b"\x18\x01"
    one = len(smm).to_bytes(4, "big") + smm + b"x"
    meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1,
                              num_messages_in_batch=20)
    e = Entry(one * 20, meta, MessageId(2, 3, 4), TOPIC, 0, None)
    runs, _ = entry_runs(e, EARLIEST, (9, 0, -1))
    rows = BatchBuilder(default_schema(ValueFormat()), ValueFormat(), TOPIC, 2).build(runs)
    assert rows.column("__messageProperties").to_pylist() == [[("k", "v")]] * 20
    assert rows.column("value").to_pylist() == [b"x"] * 20
