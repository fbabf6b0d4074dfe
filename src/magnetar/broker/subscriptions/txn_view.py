"""`TxnView`: what subscriptions and dispatchers use of their topic's transaction buffer
(``topics.transaction_buffer.TransactionBuffer`` is one; the subscriptions room names no
room above it): how far readers may read, and which entries they never get."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.entries import entry_metadata
from magnetar.storage import Position

if TYPE_CHECKING:
    from magnetar.protocol import pb

#: entries read back per step when the last ones are markers or aborted messages
_LAST_SCAN = 64


class TxnView(Protocol):
    """A topic's transactions as its readers see them."""

    @property
    def max_read(self) -> Position | None: ...  # None: no bound
    def readable_last(self, last: Position | None) -> Position | None: ...
    def hides(self, metadata: pb.MessageMetadata) -> bool: ...  # markers, aborted messages


def readable(view: TxnView | None, last: Position | None) -> Position | None:
    """``last`` (a ledger's last confirmed position) cut at what readers may read."""
    return last if view is None else view.readable_last(last)


async def last_shown(ledger: Any, view: TxnView, last: Position
                     ) -> tuple[Position, bytes | memoryview] | None:
    """The last entry up to ``last`` that a reader gets (not a marker, not an aborted
    transaction's message), searched back within ``last``'s ledger (None: none there);
    read on the storage's reader threads."""
    end = last[1]
    while end >= 0:
        start = max(0, end - _LAST_SCAN + 1)
        read = await ledger.read_positions_cold([Position(last[0], e) for e in range(start, end + 1)])
        found = dict(read.entries)
        for e in range(end, start - 1, -1):
            data = found.get(Position(last[0], e))
            if data is None:
                continue
            metadata = entry_metadata(data)
            if metadata is None or not view.hides(metadata):
                return Position(last[0], e), data
        end = start - 1
    return None
