"""`AnswersWithReceipts`: answers that leave in the write of the receipts due next.

A client that does not wait for an answer (Magnetar's client writes a transaction's sends
right behind its AddPartitionToTxn) gains nothing from its own write, and on loopback a
write costs the broker about what handling the command does (the receiving side's TCP
work runs in the sender's call). `write_with_receipts` queues such an answer for the write
of the receipts of the sends in flight once the frames read with it are handled; with
none in flight then, it is written at once, and at the latest `WITH_RECEIPTS_S` later.
`flush_soon` writes what is queued in a later callback of the loop instead of now, so
that what the callbacks scheduled before it queue leaves in the same write (a commit's
answer with its sends' receipts). A part of `CnxBase`, which owns the output buffer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

#: how long output queued by `write_with_receipts` may wait for receipts
WITH_RECEIPTS_S = 0.05


class AnswersWithReceipts:
    """The output `CnxBase` holds, grouped with the receipts (see the module docstring)."""

    _with_receipts = False  # write_with_receipts queued output: `_after_read` is due
    _receipts_timer = False  # a `_flush_if_queued` is due
    if TYPE_CHECKING:  # (CnxBase's own)
        loop: asyncio.AbstractEventLoop
        closed: bool
        pending_sends: int
        _out: list[bytes | memoryview]
        _out_bytes: int
        _flush_scheduled: bool
        _flushes: int

        def _flush(self) -> None: ...

    def write_with_receipts(self, data: bytes) -> None:
        """`write` of the frame ``data``, left to the receipts of the sends this
        connection has in flight once the frames read with it are handled: an answer the
        client does not wait for (a transaction's AddPartitionToTxn with its sends written
        behind it) leaves in the receipts' write instead of one of its own, which on
        loopback costs the broker about what handling the command does. With no send in
        flight then, it is written at once; with some, at the latest `WITH_RECEIPTS_S`
        later."""
        if self.closed:
            return
        self._out.append(data)
        self._out_bytes += len(data)
        if not self._flush_scheduled and not self._with_receipts:
            self._with_receipts = True
            self.loop.call_soon(self._after_read)

    def _after_read(self) -> None:
        self._with_receipts = False
        if not self._out or self._flush_scheduled:
            return
        if self.pending_sends <= 0:
            self._flush()
            return
        if not self._receipts_timer:  # (one at a time: `_flush_if_queued` arms it again)
            self._receipts_timer = True
            self.loop.call_later(WITH_RECEIPTS_S, self._flush_if_queued, self._flushes)

    def _flush_if_queued(self, flushes: int) -> None:
        """Write what waited for receipts `WITH_RECEIPTS_S` in vain (none was written
        since: ``flushes`` is unchanged)."""
        self._receipts_timer = False
        if self._out and not self._flush_scheduled and not self.closed:
            if self._flushes == flushes:
                self._flush()
            else:
                self._receipts_timer = True
                self.loop.call_later(WITH_RECEIPTS_S, self._flush_if_queued, self._flushes)

    def flush_soon(self) -> None:
        """Write the queued output in a later callback of the loop (not now, as
        `release_held` would): what the callbacks scheduled before it queue leaves in the
        same write."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)


__all__ = ["WITH_RECEIPTS_S", "AnswersWithReceipts"]
