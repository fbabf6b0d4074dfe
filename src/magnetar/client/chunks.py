"""Reassembly of chunked messages (``num_chunks_from_msg`` > 1), keyed by ``uuid``."""

from __future__ import annotations

from collections import OrderedDict

from magnetar.protocol import pb


class _Pending:
    __slots__ = ("ids", "next_chunk", "parts")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.ids: list[pb.MessageIdData] = []
        self.next_chunk = 0


class ChunkAssembler:
    """Collects chunks in order; drops the oldest incomplete message past ``max_pending``."""

    def __init__(self, max_pending: int = 10) -> None:
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._max = max(1, max_pending)

    def add(self, meta: pb.MessageMetadata, mid: pb.MessageIdData,
            payload: bytes) -> tuple[bytes, list[pb.MessageIdData]] | list[pb.MessageIdData] | None:
        """Returns (whole payload, chunk ids) when complete, None while incomplete, or a
        list of ids to discard when the chunk is out of order."""
        key = meta.uuid
        entry = self._pending.get(key)
        if entry is None:
            if meta.chunk_id != 0:
                return [mid]
            entry = _Pending()
            self._pending[key] = entry
            while len(self._pending) > self._max:
                _, dropped = self._pending.popitem(last=False)
                del dropped
        if meta.chunk_id != entry.next_chunk:
            if meta.chunk_id < entry.next_chunk:
                return [mid]  # a redelivered chunk we already hold
            del self._pending[key]
            return [*entry.ids, mid]
        entry.parts.append(payload)
        entry.ids.append(mid)
        entry.next_chunk += 1
        if entry.next_chunk < meta.num_chunks_from_msg:
            return None
        del self._pending[key]
        return b"".join(entry.parts), entry.ids

    def clear(self) -> None:
        self._pending.clear()
