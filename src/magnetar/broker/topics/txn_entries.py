"""`OpenTxn`: where a transaction open on a topic has its entries.

A topic's transaction buffer keeps, for each open transaction, its first position (what
readers of later entries wait behind), how many messages it holds, and every entry of it:
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
    """A transaction open on the topic: its first entry, its messages, its entries."""

    __slots__ = ("earlier", "first", "ids", "ledger", "messages")

    def __init__(self, first: Position, entries: Iterable[Position] = (),
                 messages: int = 0) -> None:
        self.first = first
        self.messages = messages
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


__all__ = ["OpenTxn"]
