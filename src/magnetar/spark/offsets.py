"""Positions in a topic partition, and their JSON forms.

A *bound* is a ``(ledger_id, entry_id, batch_index)`` tuple compared like the message
keys it separates; a message with key ``k`` (``batch_index`` -1 when not batched) lies
after a bound ``a`` when ``k > a``. A read range is ``(after, upto)``: every message with
``after < key <= upto``. Two bounds are special: ``EARLIEST`` (before everything) and, for a
message id ``m``, ``before(m)`` = the bound just before ``m`` (``batch_index - 1``: for an
unbatched message ``-2``, below every message of that entry).

The streaming offset Spark checkpoints is ``{"<partition topic>": "ledger:entry:batch"}``,
the ``after`` bound of the next batch, i.e. the key of the last message handed to Spark.
User options (``startingOffsets`` / ``endingOffsets``) accept ``earliest``, ``latest`` or a
JSON object mapping a topic (partition) to ``earliest``, ``latest``, the official client's
serialized ``MessageId`` as a list of byte values, or ``{"ledgerId": .., "entryId": ..,
"batchIndex": ..}``. A starting id is included, an ending id is not (as in Kafka's
connector); a batch message id means exactly that message.
"""

from __future__ import annotations

import json
from typing import Any

Bound = tuple[int, int, int]

EARLIEST: Bound = (-1, -1, -1)


def before(mid: Bound) -> Bound:
    """The bound just below message ``mid`` (so a range ``(before(m), ...]`` includes m)."""
    return (mid[0], mid[1], mid[2] - 1)


def encode_bound(b: Bound) -> str:
    return f"{b[0]}:{b[1]}:{b[2]}"


def decode_bound(s: str) -> Bound:
    ledger, entry, batch = (int(x) for x in str(s).split(":"))
    return (ledger, entry, batch)


def encode_offset(bounds: dict[str, Bound]) -> dict[str, str]:
    return {topic: encode_bound(b) for topic, b in sorted(bounds.items())}


def decode_offset(offset: dict[str, Any]) -> dict[str, Bound]:
    return {topic: decode_bound(v) for topic, v in offset.items()}


def bound_of_id_bytes(data: bytes) -> Bound:
    """The message key of a serialized ``MessageIdData`` (the official client's form)."""
    from magnetar.client import MessageId

    mid = MessageId.deserialize(bytes(data))
    return (mid.ledger_id(), mid.entry_id(), mid.batch_index())


def _spec(value: Any, label: str, topic: str, err: type[Exception]) -> str | Bound:
    if isinstance(value, str) and value.lower() in ("earliest", "latest"):
        return value.lower()
    if isinstance(value, list) and all(isinstance(x, int) and 0 <= x < 256 for x in value):
        try:
            return bound_of_id_bytes(bytes(value))
        except Exception:
            raise err(f"'{label}' for {topic}: the bytes are not a serialized message id") \
                from None
    if isinstance(value, dict):
        try:
            return (int(value["ledgerId"]), int(value["entryId"]),
                    int(value.get("batchIndex", -1)))
        except (KeyError, TypeError, ValueError):
            pass
    raise err(f"'{label}' for {topic}: expected \"earliest\", \"latest\", a serialized message "
              "id (list of byte values) or {\"ledgerId\": L, \"entryId\": E, \"batchIndex\": B}"
              f", got {value!r}")


def parse_offsets_option(value: str, label: str,
                         err: type[Exception]) -> str | dict[str, str | Bound]:
    """``earliest`` / ``latest`` or a per-topic mapping (topic names made full)."""
    from magnetar.client.topic import full_name

    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        parsed = json.loads(text)
    except ValueError:
        raise err(f"'{label}' must be earliest, latest or a JSON object mapping each topic "
                  f"to a message id; got {value!r}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise err(f"'{label}' JSON must be a non-empty object of topic -> message id")
    out: dict[str, str | Bound] = {}
    for topic, v in parsed.items():
        try:
            name = full_name(topic)
        except ValueError:
            raise err(f"'{label}': invalid topic name {topic!r}") from None
        out[name] = _spec(v, label, topic, err)
    return out
