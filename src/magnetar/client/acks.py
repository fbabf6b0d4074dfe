"""Grouped acknowledgements: acks collect for ``ack_group_time`` and leave as one command.

Individual acks of batch members are held per entry until every member delivered from
that entry is acknowledged; then the entry itself is acknowledged (the official clients'
behaviour without batch-index acks). With ``batch_index_ack_enabled`` a partly acknowledged
entry is also sent, with an ``ack_set`` whose set bits are the members still unacknowledged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from magnetar.protocol import command, encode_command, pb
from magnetar.protocol.ids import to_signed64

T = pb.BaseCommand
EntryKey = tuple[int, int]


class AckGroupingTracker:
    def __init__(self, send: Callable[[bytes], None], consumer_id: Callable[[], int],
                 group_time: float, max_size: int = 1000,
                 batch_index_ack: bool = False) -> None:
        self._send = send
        self._consumer_id = consumer_id
        self._group_time = group_time
        self._max = max_size
        self._individual: dict[EntryKey, None] = {}
        self._cumulative: EntryKey | None = None
        self._timer: asyncio.TimerHandle | None = None
        # per batch entry: the delivered indexes not yet acknowledged (an int n stands for
        # all of range(n), made a set on the first individual ack)
        self._batches: dict[EntryKey, set[int] | int] = {}
        self._batch_index_ack = batch_index_ack
        self._partial: dict[EntryKey, list[int]] = {}

    def track_batch(self, key: EntryKey, indexes: set[int] | int) -> None:
        """Remember which members of a batch entry were delivered: a set of indexes, or
        their number when all were."""
        self._batches[key] = indexes

    def individual(self, key: EntryKey, batch_index: int = -1) -> bool:
        """Record an ack; True when the whole entry is now acknowledged."""
        if batch_index >= 0:
            left = self._batches.get(key)
            if left is not None:
                if isinstance(left, int):
                    left = self._batches[key] = set(range(left))
                left.discard(batch_index)
                if left:
                    if self._batch_index_ack:
                        self._partial[key] = ack_set_words(left)
                        if self._timer is None:
                            self._arm(False)
                    return False
                del self._batches[key]
                self._partial.pop(key, None)
        individual = self._individual
        individual[key] = None
        if self._timer is None or len(individual) >= self._max:
            self._arm(len(individual) >= self._max)
        return True

    def cumulative(self, key: EntryKey) -> None:
        if self._cumulative is None or key > self._cumulative:
            self._cumulative = key
        for k in [k for k in self._batches if k <= key]:
            del self._batches[k]
        self._arm(False)

    def forget_batches(self) -> None:
        self._batches.clear()
        self._partial.clear()

    def _arm(self, now: bool) -> None:
        if now or self._group_time <= 0:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._group_time, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        cid = self._consumer_id()
        out = []
        if self._cumulative is not None:
            ledger, entry = self._cumulative
            self._cumulative = None
            out.append(encode_command(command(
                T.ACK, consumer_id=cid, ack_type=pb.CommandAck.Cumulative,
                message_id=[pb.MessageIdData(ledgerId=ledger, entryId=entry)])))
        if self._individual or self._partial:
            ids = [pb.MessageIdData(ledgerId=ledger, entryId=entry)
                   for ledger, entry in self._individual]
            ids += [pb.MessageIdData(ledgerId=ledger, entryId=entry, ack_set=words)
                    for (ledger, entry), words in self._partial.items()]
            self._individual = {}
            self._partial = {}
            out.append(encode_command(command(
                T.ACK, consumer_id=cid, ack_type=pb.CommandAck.Individual, message_id=ids)))
        if out:
            self._send(b"".join(out))


def ack_set_words(unacked: set[int]) -> list[int]:
    """Bitset words (signed 64-bit, as on the wire) with a bit set per unacked index."""
    words = [0] * (max(unacked) // 64 + 1)
    for i in unacked:
        words[i >> 6] |= 1 << (i & 63)
    return [to_signed64(w) for w in words]
