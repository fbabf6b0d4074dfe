"""Message ids on the wire: the one place that turns wire ids into signed positions.

``MessageIdData.ledgerId`` and ``entryId`` are protobuf ``uint64``, but Pulsar's ids are Java
``long``s, and negative values mean something: entry id ``-1`` is "just before the first
entry of that ledger" (a cumulative ack of a message inside a ledger's first batch, with
batch-index acks off, names exactly that), and ``(-1, -1)`` is "before everything". On the
wire such a value arrives as its 64-bit two's complement (``-1`` as ``2**64 - 1``). Reading
it as a huge position once acknowledged a whole topic; every reader of an id from the wire
goes through :func:`wire_position`, every writer through :func:`message_id_data`.

Bit-set words of batch-index acks are protobuf ``int64`` and use the same two helpers.
"""

from __future__ import annotations

from magnetar.protocol import pulsar_pb2 as pb

__all__ = ["message_id_data", "to_signed64", "to_unsigned64", "wire_position"]

_MASK64 = (1 << 64) - 1
_SIGN_BIT = 1 << 63


def to_signed64(value: int) -> int:
    """The low 64 bits of ``value`` read as a signed int64 (a Java ``long``)."""
    value &= _MASK64
    return value - (1 << 64) if value & _SIGN_BIT else value


def to_unsigned64(value: int) -> int:
    """A signed (or unsigned) 64-bit value as the uint64 the wire carries."""
    return value & _MASK64


def wire_position(mid: pb.MessageIdData) -> tuple[int, int]:
    """``(ledger_id, entry_id)`` of a wire message id, signed: ``-1`` stays ``-1``."""
    return to_signed64(mid.ledgerId), to_signed64(mid.entryId)


def message_id_data(
    ledger_id: int, entry_id: int, batch_index: int = -1, partition: int | None = None
) -> pb.MessageIdData:
    """A wire message id for a signed ``(ledger_id, entry_id)``."""
    mid = pb.MessageIdData(
        ledgerId=ledger_id & _MASK64, entryId=entry_id & _MASK64, batch_index=batch_index
    )
    if partition is not None:
        mid.partition = partition
    return mid
