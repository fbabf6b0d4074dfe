"""`OpenTxn`: where a transaction open on a topic has its entries; `TxnLane`: what a
transaction's later sends need of it, found once a send.

A topic's transaction buffer keeps, for each open transaction, its first position (what
readers of later entries wait behind) and every entry of it:
an abort hands those to the cursors so that no reader ever gets them. Entry ids are kept
in an ``array('q')`` per ledger (a transaction's entries are appended in order, most often
all in one ledger), not as one `Position` object per entry: a list of positions kept a
transaction's objects alive until its end (~100 bytes a message, 10 MB for 100,000), and
at 1,000 messages a transaction that cost about 1 µs of broker CPU a message more
(bench/README.md, "What a transaction's extra is made of").
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

from magnetar.storage import Position


class OpenTxn:
    """A transaction open on the topic: its first entry and its entries."""

    __slots__ = ("earlier", "first", "ids", "ledger")

    def __init__(self, first: Position, entries: Iterable[Position] = ()) -> None:
        self.first = first
        #: the ledger of the latest entries, and their entry ids (`add` appends)
        self.ledger = first[0]
        self.ids = array("q")
        #: the ledgers before it, each with its entry ids (a roll-over mid-transaction)
        self.earlier: list[tuple[int, array[int]]] = []
        for position in entries:
            self.add(position)

    def add(self, position: Position) -> None:
        """One more entry of the transaction (in append order). The hot caller appends
        to ``ids`` itself when ``position`` is in ``ledger``."""
        if position[0] != self.ledger:
            self.earlier.append((self.ledger, self.ids))
            self.ledger = position[0]
            self.ids = array("q")
        self.ids.append(position[1])

    @property
    def positions(self) -> list[Position]:
        """Every entry noted, in append order."""
        return [Position(ledger, entry) for ledger, ids in (*self.earlier, (self.ledger, self.ids))
                for entry in ids]


class TxnLane:
    """A transaction checked open on the topic (its buffer's ``verified``): the metadata
    fields its messages end with (`fastpath.txnid_fields`, ``size`` bytes) and, once an
    entry of it is placed, its `OpenTxn` (None before, and from the start of its end on).
    A later send finds both with one lookup and carries the lane down its append
    (`Producer.publish`, `PersistentTopic.publish`), where its entry is noted without
    another."""

    __slots__ = ("entry", "fields", "size")

    def __init__(self, fields: bytes, entry: OpenTxn | None = None) -> None:
        self.fields = fields
        self.size = len(fields)
        self.entry = entry


__all__ = ["OpenTxn", "TxnLane"]
