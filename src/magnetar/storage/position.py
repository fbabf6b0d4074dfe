"""`Position`: where an entry lives, (ledger id, entry id), ordered like a tuple."""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """An entry's address. Entry ids start at 0 in each ledger; `entry_id == -1` means
    "just before the first entry of that ledger" (used for mark-delete positions)."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


#: Before every possible entry (an "earliest" mark-delete position on an empty ledger).
EARLIEST = Position(-1, -1)
