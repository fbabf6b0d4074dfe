"""Batch payloads as columns: where each message's value, key and properties lie, and its
sequence id and event time, as numpy arrays (for readers that build Arrow columns; needs
numpy, which the ``spark`` extra brings).

``split_columns(payload, count)`` reads every ``SingleMessageMetadata`` of a batch once and
returns a ``BatchColumns``: offsets into the payload for values, keys and property keys and
values (no copy, no Python object per message), and the varint fields decoded.

Theory of operation. A batch is ``size(4) + SingleMessageMetadata + value`` per message,
so where message ``i + 1`` starts depends on message ``i``: a chain. Producers write
runs of messages laid out alike (same fields, same value size, same key and property
lengths: only varint values and string contents differ), so the chain is guessed a run at
a time: from message ``i``'s layout, assume the next ones repeat it at the same stride,
check every guessed record with a few vectorised comparisons (the bytes that fix the layout
must equal message ``i``'s, the varints must have the same length), keep the prefix that
checks, and decode its fields by gathering bytes at fixed offsets. Where the layout changes
(a sequence id that gains a varint byte, a longer key, a different value size) one message
is walked field by field in Python and the guess starts again from it; when runs keep
coming out short, a stretch of messages is walked by hand before guessing again. Either way
each field is read by the same rules as protobuf: any field order, the last occurrence of
a scalar winning, unknown fields skipped by wire type.

``tests/protocol/test_columnar.py`` checks the result against ``decode_batch`` (protobuf)
for uniform, mixed and random batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from magnetar.protocol.errors import MalformedFrame
from magnetar.protocol.varint import decode_varint

__all__ = ["BatchColumns", "split_columns"]

I64 = npt.NDArray[np.int64]

# SingleMessageMetadata tags (field << 3 | wire type)
_PROPERTIES = 0x0A
_PARTITION_KEY = 0x12
_PAYLOAD_SIZE = 0x18
_COMPACTED_OUT = 0x20
_EVENT_TIME = 0x28
_SEQUENCE_ID = 0x40
# KeyValue tags
_KV_KEY = 0x0A
_KV_VALUE = 0x12

#: a run shorter than this makes the next ``_WALK`` messages (twice as many after each
#: short run in a row) go through the walker
_SHORT_RUN = 8
_WALK = 64


@dataclass(slots=True)
class BatchColumns:
    """The messages of one batch payload, as columns of offsets and values.

    Message ``i``'s value is ``payload[value_start[i]:value_end[i]]``; its key
    ``payload[key_start[i]:key_end[i]]`` when ``key_start[i] >= 0`` (no key otherwise);
    its properties are entries ``prop_offsets[i]`` to ``prop_offsets[i + 1] - 1`` of
    ``prop_bounds``, whose rows hold the key start, key end, value start and value end.
    ``sequence_ids[i]`` is -1 and ``event_times[i]`` 0 when absent; ``compacted`` lists
    the messages marked ``compacted_out``. Every offset increases through the payload.
    """

    count: int
    value_start: I64
    value_end: I64
    sequence_ids: I64
    event_times: I64
    key_start: I64
    key_end: I64
    prop_offsets: I64
    prop_bounds: I64  # shape (properties, 4)
    compacted: list[int]

    def has_keys(self) -> bool:
        return bool((self.key_start >= 0).any())


class _Out:
    """Column chunks gathered in message order: numpy arrays for guessed runs, and rows of
    walked messages (``walked``, turned into arrays before the next run's)."""

    def __init__(self) -> None:
        self.walked: list[tuple[int, int, int, int, int, int, int]] = []
        self.walked_props: list[int] = []
        self.vs: list[I64] = []
        self.ve: list[I64] = []
        self.seq: list[I64] = []
        self.evt: list[I64] = []
        self.ks: list[I64] = []
        self.ke: list[I64] = []
        self.pcount: list[I64] = []
        self.pb: list[I64] = []
        self.compacted: list[int] = []


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos >= end:
        raise MalformedFrame("bad batch message metadata: truncated field")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    try:
        value, after = decode_varint(buf, pos)
    except ValueError as exc:
        raise MalformedFrame(f"bad batch message metadata: {exc}") from None
    if after > end:
        raise MalformedFrame("bad batch message metadata: varint runs past its size")
    return value, after


def _skip(buf: bytes, tag: int, pos: int, end: int) -> int:
    """Past the value of an unknown field of wire type ``tag & 7`` at ``pos``."""
    wire = tag & 7
    if wire == 0:
        return _varint(buf, pos, end)[1]
    if wire == 2:
        n, pos = _varint(buf, pos, end)
        pos += n
    elif wire == 1:
        pos += 8
    elif wire == 5:
        pos += 4
    else:
        raise MalformedFrame(f"bad batch message metadata: wire type {wire}")
    if pos > end:
        raise MalformedFrame("bad batch message metadata: field runs past its size")
    return pos


def _key_value(buf: bytes, pos: int, end: int) -> tuple[int, int, int, int]:
    """(key start, key end, value start, value end) of the ``KeyValue`` in ``buf[pos:end]``."""
    ks = ke = vs = ve = -1
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        if tag in (_KV_KEY, _KV_VALUE):
            n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise MalformedFrame("bad batch message metadata: property runs past its size")
            if tag == _KV_KEY:
                ks, ke = pos, pos + n
            else:
                vs, ve = pos, pos + n
            pos += n
        else:
            pos = _skip(buf, tag, pos, end)
    if ks < 0 or vs < 0:
        raise MalformedFrame("bad batch message metadata: a property lacks its key or value")
    return ks, ke, vs, ve


@dataclass(slots=True)
class _Layout:
    """One message's metadata as read field by field: the values, and where (relative to
    its record's start) the bytes are that a message laid out alike has the same."""

    meta_size: int
    payload_size: int
    key: tuple[int, int] | None
    props: list[tuple[int, int, int, int]]
    # relative positions of the bytes every alike record repeats exactly ...
    fixed: list[int]
    # ... and of the varint bytes whose continuation bit it repeats
    cont: list[int]
    # relative (position, length) of the varints to decode per record
    seq_at: tuple[int, int] | None
    time_at: tuple[int, int] | None
    compacted_at: tuple[int, int] | None

    @property
    def stride(self) -> int:
        return 4 + self.meta_size + self.payload_size


def _read(buf: bytes, start: int, size: int, index: int) -> _Layout:
    """Message ``index``'s record at ``start``, read field by field, noting which bytes fix
    its layout (for ``_run``)."""
    if size - start < 4:
        raise MalformedFrame(f"batch truncated before message {index}")
    at = start + 4
    stop = at + int.from_bytes(buf[start:at], "big")
    if stop > size:
        raise MalformedFrame(f"batch message {index}: metadata runs past the end")
    fixed = [0, 1, 2, 3]
    cont: list[int] = []
    psize = -1
    key: tuple[int, int] | None = None
    props: list[tuple[int, int, int, int]] = []
    seq_at = time_at = compacted_at = None
    pos = at
    while pos < stop:
        tag_at = pos
        tag, pos = _varint(buf, pos, stop)
        fixed.extend(range(tag_at - start, pos - start))
        if tag & 7 == 0:
            value_at = pos
            value, pos = _varint(buf, pos, stop)
            span = (value_at - start, pos - value_at)
            if tag == _PAYLOAD_SIZE:
                psize = value if value < 1 << 31 else -1
                fixed.extend(range(value_at - start, pos - start))
                continue
            cont.extend(range(value_at - start, pos - start))
            if tag == _SEQUENCE_ID:
                seq_at = span
            elif tag == _EVENT_TIME:
                time_at = span
            elif tag == _COMPACTED_OUT:
                compacted_at = span
            continue
        if tag & 7 != 2:
            value_at = pos
            pos = _skip(buf, tag, pos, stop)
            # rare: kept alike exactly
            fixed.extend(range(value_at - start, pos - start))
            continue
        len_at = pos
        n, pos = _varint(buf, pos, stop)
        fixed.extend(range(len_at - start, pos - start))
        end = pos + n
        if end > stop:
            raise MalformedFrame(f"batch message {index}: a field runs past its metadata")
        if tag == _PARTITION_KEY:
            key = (pos, end)
        elif tag == _PROPERTIES:
            kv = _key_value(buf, pos, end)
            props.append(kv)
            # the KeyValue's own tags and lengths: all of it but the strings
            fixed.extend(p - start for p in range(pos, end)
                         if not (kv[0] <= p < kv[1] or kv[2] <= p < kv[3]))
        # another string or bytes field (ordering key, ...): its contents are free
        pos = end
    if pos != stop:
        raise MalformedFrame(f"batch message {index}: metadata runs past its size")
    if psize < 0:
        raise MalformedFrame(f"batch message {index}: metadata lacks payload_size")
    if stop + psize > size:
        raise MalformedFrame(f"batch message {index}: payload runs past the end")
    return _Layout(stop - at, psize, key, props, fixed, cont, seq_at, time_at, compacted_at)


def _walk(out: _Out, buf: bytes, pos: int, size: int, index: int, count: int) -> int:
    """Walk messages ``index`` to ``index + count - 1`` (the record of the first at ``pos``)
    field by field, noting their columns; returns where the next record starts. The common
    one-byte tags and varints are read inline."""
    rows = out.walked
    props = out.walked_props
    for i in range(index, index + count):
        if size - pos < 4:
            raise MalformedFrame(f"batch truncated before message {i}")
        at = pos + 4
        stop = at + int.from_bytes(buf[pos:at], "big")
        if stop > size:
            raise MalformedFrame(f"batch message {i}: metadata runs past the end")
        psize = seq = ks = ke = -1
        etime = nprops = 0
        pos = at
        try:
            while pos < stop:
                tag = buf[pos]
                if tag >= 0x80:
                    tag, pos = _varint(buf, pos, stop)
                else:
                    pos += 1
                wire = tag & 7
                if wire == 0 or wire == 2:
                    value = buf[pos]
                    if value < 0x80:
                        pos += 1
                    else:
                        value, pos = _varint(buf, pos, stop)
                    if wire == 2:
                        end = pos + value
                        if end > stop:
                            raise MalformedFrame(f"batch message {i}: a field runs past its "
                                                 "metadata")
                        if tag == _PARTITION_KEY:
                            ks, ke = pos, end
                        elif tag == _PROPERTIES:
                            # inline: key then value, one-byte tags and lengths
                            if (buf[pos] == _KV_KEY and buf[pos + 1] < 0x80
                                    and buf[pos + 2 + buf[pos + 1]] == _KV_VALUE):
                                kv_at = pos + 2 + buf[pos + 1]
                                n = buf[kv_at + 1]
                                if n < 0x80 and kv_at + 2 + n == end:
                                    props += (pos + 2, kv_at, kv_at + 2, end)
                                else:
                                    props.extend(_key_value(buf, pos, end))
                            else:
                                props.extend(_key_value(buf, pos, end))
                            nprops += 1
                        pos = end
                    elif tag == _PAYLOAD_SIZE:
                        psize = value if value < 1 << 31 else -1
                    elif tag == _SEQUENCE_ID:
                        seq = value if value < 1 << 63 else value - (1 << 64)
                    elif tag == _EVENT_TIME:
                        etime = value if value < 1 << 63 else value - (1 << 64)
                    elif tag == _COMPACTED_OUT and value:
                        out.compacted.append(i)
                else:
                    pos = _skip(buf, tag, pos, stop)
        except IndexError:
            raise MalformedFrame(f"batch message {i}: truncated metadata") from None
        if pos != stop:
            raise MalformedFrame(f"batch message {i}: metadata runs past its size")
        if psize < 0:
            raise MalformedFrame(f"batch message {i}: metadata lacks payload_size")
        pos = stop + psize
        if pos > size:
            raise MalformedFrame(f"batch message {i}: payload runs past the end")
        rows.append((stop, pos, seq, etime, ks, ke, nprops))
    return pos


def _flush_walked(out: _Out) -> None:
    if out.walked:
        cols = np.array(out.walked, np.int64).T
        for dest, col in zip((out.vs, out.ve, out.seq, out.evt, out.ks, out.ke, out.pcount),
                             cols, strict=True):
            dest.append(col)
        out.walked = []
    if out.walked_props:
        out.pb.append(np.array(out.walked_props, np.int64).reshape(-1, 4))
        out.walked_props = []


def _varints(rows: npt.NDArray[np.uint8]) -> I64:
    """The varints in the rows of ``rows`` (one varint per row, all the same length)."""
    value = np.zeros(rows.shape[0], np.uint64)
    for j in range(rows.shape[1]):
        value |= (rows[:, j].astype(np.uint64) & np.uint64(0x7F)) << np.uint64(7 * j)
    return value.view(np.int64)


def _run(out: _Out, arr: npt.NDArray[np.uint8], buf: bytes, start: int, lay: _Layout,
         index: int, left: int) -> int:
    """Guess that the next up to ``left`` records repeat ``lay`` (read at ``start``) at its
    stride; append the columns of the ones that check, and return how many did: 0 when
    the second does not (checked first, without numpy: then nothing is appended)."""
    stride = lay.stride
    n = min(left, (len(buf) - start) // stride)
    second = start + stride
    if n < 2 or any(buf[second + r] != buf[start + r] for r in lay.fixed) or \
            any((buf[second + r] ^ buf[start + r]) & 0x80 for r in lay.cont):
        return 0
    _flush_walked(out)
    starts = start + stride * np.arange(n, dtype=np.int64)
    fixed = np.array(lay.fixed, np.int64)
    ok = (arr[starts[:, None] + fixed] == arr[start + fixed]).all(axis=1)
    if lay.cont:
        cont = np.array(lay.cont, np.int64)
        ok &= ((arr[starts[:, None] + cont] & 0x80) == (arr[start + cont] & 0x80)).all(axis=1)
    if not ok.all():
        n = max(1, int(np.argmin(ok)))
        starts = starts[:n]
    vs = starts + (4 + lay.meta_size)
    out.vs.append(vs)
    out.ve.append(vs + lay.payload_size)

    def gather(span: tuple[int, int] | None, default: int) -> I64:
        if span is None:
            return np.full(n, default, np.int64)
        at, width = span
        return _varints(arr[starts[:, None] + np.arange(at, at + width)])

    out.seq.append(gather(lay.seq_at, -1))
    out.evt.append(gather(lay.time_at, 0))
    if lay.compacted_at is not None:
        flags = gather(lay.compacted_at, 0)
        out.compacted.extend(int(i) + index for i in np.flatnonzero(flags))
    if lay.key is None:
        out.ks.append(np.full(n, -1, np.int64))
        out.ke.append(np.full(n, -1, np.int64))
    else:
        ks = starts + (lay.key[0] - start)
        out.ks.append(ks)
        out.ke.append(ks + (lay.key[1] - lay.key[0]))
    out.pcount.append(np.full(n, len(lay.props), np.int64))
    if lay.props:
        rel = np.array(lay.props, np.int64).reshape(1, -1) - start
        out.pb.append((starts[:, None] + rel).reshape(-1, 4))
    return n


def split_columns(payload: bytes, count: int) -> BatchColumns:
    """The ``count`` messages of an (uncompressed) batch payload, as columns.

    Bytes after the last message are ignored. Raises ``MalformedFrame`` like
    ``decode_batch``."""
    size = len(payload)
    if count < 0 or count > size // 4 + 1:
        raise MalformedFrame(f"batch of {size} bytes cannot hold {count} messages")
    arr = np.frombuffer(payload, np.uint8)
    out = _Out()
    index = 0
    pos = 0
    walk = _WALK  # how many to walk by hand after a short run (doubles while runs stay short)
    if count <= _SHORT_RUN:  # too few for numpy to pay
        pos = _walk(out, payload, pos, size, index, count)
        index = count
    while index < count:
        lay = _read(payload, pos, size, index)
        done = _run(out, arr, payload, pos, lay, index, count - index)  # 0: walk from here
        pos += done * lay.stride
        index += done
        if done < _SHORT_RUN and index < count:
            k = min(walk, count - index)
            pos = _walk(out, payload, pos, size, index, k)
            index += k
            walk *= 2
        else:
            walk = _WALK
    _flush_walked(out)
    return _columns(out, count)


def _cat(parts: list[I64], count: int) -> I64:
    if not parts:
        return np.zeros(count, np.int64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _columns(out: _Out, count: int) -> BatchColumns:
    pcount = _cat(out.pcount, count)
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(pcount, out=offsets[1:])
    bounds = (np.concatenate(out.pb) if out.pb else np.zeros((0, 4), np.int64))
    return BatchColumns(count, _cat(out.vs, count), _cat(out.ve, count),
                        _cat(out.seq, count), _cat(out.evt, count), _cat(out.ks, count),
                        _cat(out.ke, count), offsets, bounds, out.compacted)
