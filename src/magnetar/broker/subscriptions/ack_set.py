"""Batch-index acknowledgement sets, as carried on the wire.

Theory of operation
-------------------
A batch entry holds ``n`` messages. Pulsar tracks which of them are still to be
acknowledged with a bit set serialised like ``java.util.BitSet.toLongArray()``:

* bit ``i`` lives in word ``i // 64`` at bit position ``i % 64`` (least significant first);
* the array stops at the last non-zero word (trailing zero words are dropped, so an
  all-clear set is the empty list);
* words are protobuf ``int64``: signed, so a word with bit 63 set arrives as a negative
  Python int and must be sent back as one.

**Polarity: a SET bit means "still unacknowledged".** Checked against Pulsar:

* the consumer's ack tracker starts a batch with ``set(0, n)``; an individual ack of
  index ``i`` does ``clear(i)``, a cumulative ack through ``i`` does ``clear(0, i + 1)``,
  and the remaining words go in ``CommandAck.message_id[].ack_set``;
* the broker intersects (AND) the cursor's stored set with the one received; what is
  acknowledged by this ack is the drop in cardinality, and an empty result means the
  whole entry is acknowledged;
* on redelivery the broker puts the cursor's set into ``CommandMessage.ack_set``, and the
  consumer skips index ``i`` when bit ``i`` is clear.

Two consequences for the broker. An empty ``ack_set`` list means "no ack set": in a
``CommandAck`` that is an ack of the whole entry (consistent with "all bits clear"), but
in a ``CommandMessage`` it means "deliver every index", so a fully acknowledged entry
must not be dispatched at all rather than dispatched with an empty set. And some
clients set one bit too many (index ``n``); pass ``n`` to the counting functions so
stray bits at or above the batch size are ignored.

Every function accepts words signed or unsigned and returns wire-ready signed words
with no trailing zero words. Internally a set is one Python ``int``. One function uses a
cursor: `settle_individual`, individual acks (an Ack, or pending acks at a transaction's
commit) recorded and the wholly acknowledged positions returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from magnetar.protocol.ids import to_signed64, to_unsigned64

if TYPE_CHECKING:
    from magnetar.storage import ManagedCursor, Position

__all__ = [
    "and_words",
    "clear_index",
    "clear_through",
    "count_unacked",
    "from_int",
    "from_words",
    "full",
    "is_all_acked",
    "is_unacked",
    "to_int",
    "to_signed64",
    "to_unsigned64",
    "unacked_indexes",
]

_WORD_BITS = 64
_MASK64 = (1 << 64) - 1


def to_int(words: Iterable[int]) -> int:
    """The whole set as one non-negative Python int (bit ``i`` = batch index ``i``)."""
    acc = 0
    for pos, word in enumerate(words):
        acc |= (word & _MASK64) << (_WORD_BITS * pos)
    return acc


def from_int(bits: int) -> list[int]:
    """Wire words (signed, trailing zero words dropped) for a non-negative int."""
    if bits < 0:
        raise ValueError("a bit set cannot be negative")
    out: list[int] = []
    while bits:
        out.append(to_signed64(bits & _MASK64))
        bits >>= _WORD_BITS
    return out


def _low_mask(n: int) -> int:
    if n < 0:
        raise ValueError(f"batch size must be >= 0, got {n}")
    return (1 << n) - 1


def _bits(words: Sequence[int] | Iterable[int], n: int | None) -> int:
    bits = to_int(words)
    return bits if n is None else bits & _low_mask(n)


def full(n: int) -> list[int]:
    """A fresh batch of ``n`` messages: every index still unacknowledged."""
    return from_int(_low_mask(n))


def from_words(words: Iterable[int], n: int | None = None) -> list[int]:
    """Normalise words from the wire; with ``n``, drop bits at or above ``n``."""
    return from_int(_bits(words, n))


def and_words(a: Iterable[int], b: Iterable[int]) -> list[int]:
    """Intersection of two sets: indexes unacknowledged in both (how acks combine)."""
    return from_int(to_int(a) & to_int(b))


def is_all_acked(words: Iterable[int], n: int | None = None) -> bool:
    """True when no index (below ``n``, if given) is still unacknowledged."""
    return _bits(words, n) == 0


def is_unacked(words: Iterable[int], index: int) -> bool:
    """True when batch index ``index`` is still unacknowledged."""
    if index < 0:
        raise ValueError(f"batch index must be >= 0, got {index}")
    return bool((to_int(words) >> index) & 1)


def unacked_indexes(words: Iterable[int], n: int | None = None) -> list[int]:
    """Sorted batch indexes still unacknowledged (below ``n``, if given)."""
    bits = _bits(words, n)
    out: list[int] = []
    while bits:
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return out


def count_unacked(words: Iterable[int], n: int | None = None) -> int:
    """How many indexes (below ``n``, if given) are still unacknowledged."""
    return _bits(words, n).bit_count()


def clear_index(words: Iterable[int], index: int) -> list[int]:
    """The set after an individual ack of ``index``."""
    if index < 0:
        raise ValueError(f"batch index must be >= 0, got {index}")
    return from_int(to_int(words) & ~(1 << index))


def clear_through(words: Iterable[int], index: int) -> list[int]:
    """The set after a cumulative ack through ``index`` (indexes ``0..index`` cleared)."""
    if index < 0:
        return from_words(words)
    return from_int(to_int(words) & ~_low_mask(index + 1))


def settle_individual(cursor: ManagedCursor,
                      targets: Iterable[tuple[Position, list[int]]]) -> list[Position]:
    """Individual acks (position, ack set; empty: the whole entry) on ``cursor``: each
    partial ack set recorded; the positions now wholly acknowledged, for the caller to
    delete (an acknowledgement, or pending acks applied at a transaction's commit)."""
    deleted = []
    for position, words in targets:
        if words and not is_all_acked(words):
            cursor.set_batch_ack(position, words)
            if cursor.is_deleted(position):
                deleted.append(position)
        else:
            deleted.append(position)
    return deleted
