"""Entries to Arrow record batches, column by column, in exactly the schema Spark expects.

``BatchBuilder(schema, fmt, topic, partition)`` is made once per task; ``build(runs)`` turns
a list of ``Run`` (an entry and the indexes of its messages to emit) into one
``pyarrow.RecordBatch``. Only the columns the schema names are computed, and per entry
rather than per message: ``protocol.columnar.split_columns`` reads a batch's metadata once
into numpy columns of offsets and values, and every column of the batch is then built
from them over the payload's own buffer: values, keys and property keys and values are
Arrow ``take``s of pieces of the payload cut at those offsets, properties a map array over
per-message offsets, sequence ids and event times int64 arrays (event times cast to
timestamps), the columns an entry shares (topic, publish time, producer) repeated scalars,
and ``__messageId`` the entry's id prefix joined to cached per-index suffixes (the official
client's serialized ``MessageIdData``). No Python object per message, except for record
fields decoded from JSON or Avro values; an unbatched entry costs one of each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from magnetar.client import Entry
from magnetar.protocol.columnar import BatchColumns, split_columns
from magnetar.protocol.fastpath import (
    message_id_batch_size,
    message_id_bytes,
    message_id_prefix,
    message_id_suffix,
)
from magnetar.spark.schema import ValueFormat, decoder


def serialize_id(ledger: int, entry: int, partition: int, batch_index: int,
                 batch_size: int) -> bytes:
    """Same bytes as ``MessageId.serialize()`` of the official and Magnetar clients."""
    return message_id_bytes(ledger, entry, partition, batch_index, batch_size)


_MAP = pa.map_(pa.string(), pa.string())
_TS = pa.timestamp("us", tz="UTC")
_EMPTY = pa.scalar(b"", pa.binary())


def _pieces(payload: pa.Buffer, cuts: np.ndarray[Any, Any], every: int,
            first: int = 0) -> pa.Array:
    """Binary pieces of ``payload``: the payload cut at the increasing offsets ``cuts``
    (pieces lie between consecutive cuts), then every ``every``-th piece from ``first``
    taken (the others are the bytes between them)."""
    offsets = cuts.astype(np.int32)
    if len(offsets) > 1 and (np.diff(offsets) < 0).any():
        # out of order (a property's value written before its key: legal protobuf, never
        # seen from a client): no offsets array can express it, so slice one by one
        data = payload.to_pybytes()
        return pa.array([data[offsets[i]:offsets[i + 1]]
                         for i in range(first, len(offsets) - 1, every)], pa.binary())
    pieces = pa.Array.from_buffers(pa.binary(), len(offsets) - 1,
                                   [None, pa.py_buffer(offsets), payload])
    return pieces.take(pa.array(np.arange(first, len(offsets) - 1, every, dtype=np.int32)))


def _strings(values: pa.Array) -> pa.Array:
    """Binary to string, checked as UTF-8 (invalid bytes read with replacement
    characters)."""
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if v is None else v.decode("utf-8", "replace")
                         for v in values.to_pylist()], pa.string())


@dataclass(eq=False)
class Split:
    """An entry with its messages located (a batch split once, however many runs), and
    the columns of the whole batch, each built on first use."""

    entry: Entry
    batch: BatchColumns | None  # None: the entry is one message
    cols: dict[str, pa.Array] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, entry: Entry) -> Split:
        if not entry.is_batch():
            return cls(entry, None)
        return cls(entry, split_columns(entry.payload(), entry.num_messages()))

    def skipped(self) -> set[int]:
        """Indexes not to emit: compacted out, or acknowledged per index already."""
        out: set[int] = set()
        if self.batch is not None:
            out.update(self.batch.compacted)
        ack_set = self.entry.ack_set()
        if ack_set is not None:
            out.update(i for i in range(self.entry.num_messages())
                       if not (ack_set[i >> 6] >> (i & 63)) & 1)
        return out

    def column(self, name: str) -> pa.Array:
        """Column ``name`` (value, key, properties, sequence id, event time) of every
        message of the batch."""
        col = self.cols.get(name)
        if col is None:
            col = self.cols[name] = self._build(name)
        return col

    def _build(self, name: str) -> pa.Array:
        b = self.batch
        assert b is not None
        payload = pa.py_buffer(self.entry.payload())
        if name == "value":
            return _pieces(payload, np.stack((b.value_start, b.value_end), 1).ravel(), 2)
        if name == "__key":
            # an empty key reads as none, as the official client's ``partition_key()``
            has = b.key_end > b.key_start
            if not has.any():
                return pa.nulls(b.count, pa.string())
            cuts = np.stack((b.key_start[has], b.key_end[has]), 1).ravel()
            keys = _strings(_pieces(payload, cuts, 2))
            index = np.cumsum(has, dtype=np.int32) - 1
            return keys.take(pa.array(index, mask=~has))
        if name == "__messageProperties":
            total = len(b.prop_bounds)
            if not total:
                return _no_props(b.count)
            cuts = b.prop_bounds.ravel()
            keys = _strings(_pieces(payload, cuts, 4))
            items = _strings(_pieces(payload, cuts, 4, 2))
            return pa.MapArray.from_arrays(pa.array(b.prop_offsets.astype(np.int32)), keys,
                                           items)
        if name == "__sequenceId":
            seqs = b.sequence_ids
            missing = seqs < 0
            if missing.any():  # not in the message's metadata: the entry's first + index
                base = self.entry.metadata().sequence_id
                seqs = np.where(missing, base + np.arange(b.count, dtype=np.int64), seqs)
            return pa.array(seqs, pa.int64())
        if name == "__eventTime":
            times = b.event_times
            absent = times == 0
            if absent.all():
                return pa.nulls(b.count, _TS)
            return pa.array(times * 1000, _TS, mask=absent)
        raise KeyError(name)


@dataclass(frozen=True)
class Run:
    """Messages ``lo`` to ``hi - 1`` of an entry."""

    split: Split
    lo: int
    hi: int

    def __len__(self) -> int:
        return self.hi - self.lo


class _Indexes:
    """Arrays that depend only on a message's index in its batch, built once for the
    largest batch seen and sliced: the batch-index part of serialized message ids, and
    empty property maps."""

    def __init__(self) -> None:
        self.size = 0
        self.id_parts = pa.array([], pa.binary())
        self.empty_maps = pa.array([], _MAP)

    def grow(self, n: int) -> None:
        if n > self.size:
            size = max(n, 2 * self.size, 1024)
            self.id_parts = pa.array([message_id_suffix(i) for i in range(size)],
                                     pa.binary())
            self.empty_maps = pa.MapArray.from_arrays(_zeros(size + 1),
                                                      pa.array([], pa.string()),
                                                      pa.array([], pa.string()))
            self.size = size


_INDEXES = _Indexes()


def _key(m: Any) -> str | None:
    return m.partition_key or None


def _props(m: Any) -> list[tuple[str, str]]:
    return [(kv.key, kv.value) for kv in m.properties]


def _zeros(n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(bytes(4 * n))])


def _no_props(k: int) -> pa.Array:
    _INDEXES.grow(k)
    return _INDEXES.empty_maps.slice(0, k)


#: Batches of at most this many messages are built a Python value per message, with the
#: unbatched entries around them: Arrow calls per entry cost more than that for them.
SMALL = 8

#: A message in a group of small entries: its entry, and its index in the batch (-1: an
#: unbatched entry)
_Item = tuple[Split, int]


def _groups(runs: list[Run]) -> list[Run | list[_Item]]:
    """Runs of larger batches one by one; the messages of consecutive unbatched entries
    and small batches together."""
    out: list[Run | list[_Item]] = []
    for r in runs:
        if r.split.batch is not None and r.split.batch.count > SMALL:
            out.append(r)
            continue
        items = [(r.split, -1)] if r.split.batch is None else \
            [(r.split, i) for i in range(r.lo, r.hi)]
        if out and isinstance(out[-1], list):
            out[-1].extend(items)
        else:
            out.append(items)
    return out


def _text(payload: bytes, start: int, end: int) -> str:
    return bytes(payload[start:end]).decode("utf-8", "replace")


class BatchBuilder:
    """Builds record batches of ``schema`` from the entries of one topic partition."""

    def __init__(self, schema: StructType, fmt: ValueFormat, topic: str,
                 partition: int) -> None:
        self.schema = schema
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.names = [f.name for f in schema.fields]
        self.topic = topic
        self.partition = partition
        self.fmt = fmt
        self._decode = decoder(fmt)
        self._topic_scalar = pa.scalar(topic, pa.string())

    # ------------------------------------------------------------ columns
    def _column(self, name: str, run: Run) -> pa.Array:
        """Column ``name`` for a run of batch messages."""
        split, k = run.split, len(run)
        entry = split.entry
        if name == "__topic":
            return pa.repeat(self._topic_scalar, k)
        if name == "__publishTime":
            return pa.repeat(pa.scalar(entry.metadata().publish_time * 1000, _TS), k)
        if name == "__producerName":
            return pa.repeat(pa.scalar(entry.metadata().producer_name, pa.string()), k)
        if name == "__messageId":
            n = entry.num_messages()
            prefix = message_id_prefix(entry.ledger_id(), entry.entry_id(), self.partition)
            _INDEXES.grow(n)
            return pc.binary_join_element_wise(
                pa.scalar(prefix, pa.binary()), _INDEXES.id_parts.slice(run.lo, k),
                pa.scalar(message_id_batch_size(n), pa.binary()), _EMPTY)
        return split.column(name).slice(run.lo, k)

    def _few_column(self, name: str, items: list[_Item]) -> pa.Array:
        """Column ``name`` for unbatched entries and messages of small batches (a Python
        value each)."""
        if name == "__topic":
            return pa.repeat(self._topic_scalar, len(items))
        get = getattr(self, "_one_" + name.lstrip("_"))
        out = [get(split, i) for split, i in items]
        if name == "__messageProperties" and not any(out):
            return _no_props(len(out))
        return pa.array(out, _FEW_TYPES[name])

    def _one_value(self, split: Split, i: int) -> bytes:
        payload = split.entry.payload()
        if i < 0:
            return bytes(payload)
        b = split.batch
        assert b is not None
        return bytes(payload[b.value_start[i]:b.value_end[i]])

    def _one_messageId(self, split: Split, i: int) -> bytes:
        e = split.entry
        prefix = message_id_prefix(e.ledger_id(), e.entry_id(), self.partition)
        return prefix if i < 0 else prefix + message_id_suffix(i, e.num_messages())

    def _one_publishTime(self, split: Split, i: int) -> int:
        return split.entry.metadata().publish_time * 1000

    def _one_producerName(self, split: Split, i: int) -> str:
        return split.entry.metadata().producer_name

    def _one_sequenceId(self, split: Split, i: int) -> int:
        meta = split.entry.metadata()
        if i < 0 or split.batch is None:
            return meta.sequence_id
        seq = int(split.batch.sequence_ids[i])
        return seq if seq >= 0 else meta.sequence_id + i

    def _one_eventTime(self, split: Split, i: int) -> int | None:
        if i < 0 or split.batch is None:
            t = split.entry.metadata().event_time
        else:
            t = int(split.batch.event_times[i])
        return t * 1000 if t else None

    def _one_key(self, split: Split, i: int) -> str | None:
        if i < 0 or split.batch is None:
            return _key(split.entry.metadata())
        b = split.batch
        ks, ke = int(b.key_start[i]), int(b.key_end[i])
        return _text(split.entry.payload(), ks, ke) if ke > ks else None

    def _one_messageProperties(self, split: Split, i: int) -> list[tuple[str, str]]:
        if i < 0 or split.batch is None:
            return _props(split.entry.metadata())
        b = split.batch
        payload = split.entry.payload()
        return [(_text(payload, int(ks), int(ke)), _text(payload, int(vs), int(ve)))
                for ks, ke, vs, ve in b.prop_bounds[b.prop_offsets[i]:b.prop_offsets[i + 1]]]

    def _values_of(self, groups: list[Run | list[_Item]]) -> pa.Array:
        parts = [self._column("value", g) if isinstance(g, Run) else
                 self._few_column("value", g) for g in groups]
        return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)

    def build(self, runs: list[Run]) -> pa.RecordBatch:
        """One record batch of all of ``runs`` (record batches of a few thousand rows cost
        Spark's JVM less than one per entry, which outweighs the copy that joins them)."""
        groups = _groups(runs)
        records: list[Any] | None = None
        if self._decode is not None and any(n not in _NON_RECORD for n in self.names):
            records = [self._safe_decode(v) for v in self._values_of(groups).to_pylist()]
        arrays = []
        for name, fld in zip(self.names, self.arrow_schema, strict=True):
            if name in _NON_RECORD:
                if name == "value":
                    arr = self._values_of(groups)
                    if self.fmt.kind == "string":
                        arr = _strings(arr)
                else:
                    parts = [self._column(name, g) if isinstance(g, Run) else
                             self._few_column(name, g) for g in groups]
                    arr = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
                if arr.type != fld.type:
                    arr = arr.cast(fld.type)
            else:
                assert records is not None
                out = []
                for r in records:
                    v = r.get(name) if isinstance(r, dict) else None
                    out.append(json.dumps(v) if isinstance(v, dict | list) else v)
                arr = pa.array(out, type=fld.type)
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)

    def _safe_decode(self, data: bytes) -> Any:
        assert self._decode is not None
        try:
            return self._decode(data)
        except Exception:
            return None


_FEW_TYPES = {"value": pa.binary(), "__messageId": pa.binary(), "__publishTime": _TS,
              "__producerName": pa.string(), "__sequenceId": pa.int64(), "__eventTime": _TS,
              "__key": pa.string(), "__messageProperties": _MAP}

_NON_RECORD = frozenset({"value", "__key", "__topic", "__messageId", "__publishTime",
                         "__eventTime", "__messageProperties", "__producerName",
                         "__sequenceId"})
