"""Messages to Arrow record batches, column by column, in exactly the schema Spark expects.

``BatchBuilder(schema, fmt, topic, partition)`` is made once per task; ``build(messages)``
turns a chunk of ``magnetar.client.Message`` into one ``pyarrow.RecordBatch``. Only the
columns the schema names are computed. ``__messageId`` is the official client's serialized
``MessageIdData`` (ledgerId, entryId, partition, batch_index, batch_size), encoded here
with a per-entry prefix instead of one protobuf object per message.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from magnetar.protocol.fastpath import message_id_bytes, message_id_prefix
from magnetar.spark.schema import ValueFormat, decoder


def serialize_id(ledger: int, entry: int, partition: int, batch_index: int,
                 batch_size: int) -> bytes:
    """Same bytes as ``MessageId.serialize()`` of the official and Magnetar clients."""
    return message_id_bytes(ledger, entry, partition, batch_index, batch_size)


def _sequence_id(msg: Any) -> int:
    meta = msg._meta
    smm = msg._smm
    if smm is not None and smm.HasField("sequence_id"):
        return int(smm.sequence_id)
    bi = msg._id._batch_index
    return int(meta.sequence_id) + (bi if bi > 0 else 0)


_MAP = pa.map_(pa.string(), pa.string())
_TS = pa.timestamp("us", tz="UTC")


class BatchBuilder:
    """Builds record batches of ``schema`` from messages of one topic partition."""

    def __init__(self, schema: StructType, fmt: ValueFormat, topic: str,
                 partition: int) -> None:
        self.schema = schema
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.names = [f.name for f in schema.fields]
        self.topic = topic
        self.partition = partition
        self.fmt = fmt
        self._decode = decoder(fmt)
        self._prefix_key: tuple[int, int] = (-9, -9)
        self._prefix = b""

    def _ids(self, msgs: list[Any]) -> list[bytes]:
        out = []
        append = out.append
        part = self.partition
        for m in msgs:
            mid = m._id
            key = (mid._ledger_id, mid._entry_id)
            if key != self._prefix_key:
                self._prefix_key = key
                self._prefix = message_id_prefix(key[0], key[1], part)
            append(message_id_bytes(key[0], key[1], part, mid._batch_index, mid._batch_size,
                                    self._prefix))
        return out

    def column(self, name: str, msgs: list[Any], records: list[Any] | None) -> list[Any]:
        if name == "value":
            if self.fmt.kind == "string":
                return [m._data.decode("utf-8", "replace") for m in msgs]
            return [m._data for m in msgs]
        if name == "__key":
            return [m.partition_key() or None for m in msgs]
        if name == "__topic":
            return [self.topic] * len(msgs)
        if name == "__messageId":
            return self._ids(msgs)
        if name == "__publishTime":
            return [m._meta.publish_time * 1000 for m in msgs]
        if name == "__eventTime":
            return [(m.event_timestamp() or None) and m.event_timestamp() * 1000 for m in msgs]
        if name == "__messageProperties":
            return [list(m.properties().items()) for m in msgs]
        if name == "__producerName":
            return [m._meta.producer_name for m in msgs]
        if name == "__sequenceId":
            return [_sequence_id(m) for m in msgs]
        assert records is not None
        out = []
        for r in records:
            v = r.get(name) if isinstance(r, dict) else None
            out.append(json.dumps(v) if isinstance(v, dict | list) else v)
        return out

    def build(self, msgs: list[Any]) -> pa.RecordBatch:
        records = None
        if self._decode is not None and any(n not in _NON_RECORD for n in self.names):
            records = [self._safe_decode(m._data) for m in msgs]
        arrays = []
        for name, field in zip(self.names, self.arrow_schema, strict=True):
            values = self.column(name, msgs, records)
            typ = field.type
            if name == "__messageProperties" and typ == _MAP and not any(values):
                arrays.append(pa.MapArray.from_arrays(
                    pa.array([0] * (len(values) + 1), pa.int32()),
                    pa.array([], pa.string()), pa.array([], pa.string())))
                continue
            arrays.append(pa.array(values, type=typ))
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)

    def _safe_decode(self, data: bytes) -> Any:
        assert self._decode is not None
        try:
            return self._decode(data)
        except Exception:
            return None


_NON_RECORD = frozenset({"value", "__key", "__topic", "__messageId", "__publishTime",
                         "__eventTime", "__messageProperties", "__producerName",
                         "__sequenceId"})
