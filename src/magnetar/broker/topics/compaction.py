"""Topic compaction, as in Pulsar: the latest message per key, read with ``read_compacted``.

Compacting a topic reads it (its previous compacted view, then what came after that view's
*horizon*, the last position compacted), keeps for each message key only its latest
message (a message with an empty payload deletes its key; messages without a key are
dropped, as Pulsar's default ``topicCompactionRetainNullKey=false`` does) and writes the
surviving entries to a separate managed ledger, each prefixed with its original position:
the compacted view keeps the original message ids. A batch entry that keeps only some of
its messages is rewritten with those alone (the official C++ client delivers messages
marked ``compacted_out``, so they are left out rather than marked); their batch indexes
then count within the rewritten batch.

``CompactedView`` is that view as a ledger: positions up to the horizon are the compacted
entries, later ones the topic's own ledger. A ``read_compacted`` subscription's cursor and
dispatcher read through it, so consumers see the compacted part followed by the tail; the
topic's own data and retention are untouched. Metadata: ``compaction/<topic>`` =
``{"horizon": [l, e], "ledger": name, "entries": n, "at": epoch s}``; compacted ledgers are
named ``<topic ledger>~c0`` / ``~c1`` alternately, so a new view is complete before the
old one is dropped.

Off the event loop: the metadata store calls of `view_async`, `compact` and `delete` (the
``compaction/`` key: read on the storage's readers threads, written on its metadata writer
thread), the compacted ledger's open, close, delete and the reading of its index,
`compact`'s reading of the topic (`iterate_async`: what the read cache lacks is read on
the readers threads), and a dispatcher's reads of the view (`CompactedView.read_cached`
only takes what the read caches hold, `read_cold` reads the compacted ledger on the
readers threads). `view` answers only from memory: `view_async` must have run for the
topic (the connection awaits it before attaching a ``read_compacted`` consumer;
housekeeping starts it and looks at the next pass); this class is the only writer of the
keys, so it also remembers which topics have none. A redelivery's re-read, the
Key_Shared key of a replayed entry and GetLastMessageId go through `cached_entry` (the
read caches only) and `read_positions_cold` (the readers threads). The synchronous `read`
/ `read_entries` remain for tools and tests: nothing in the broker calls them.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from bisect import bisect_left, bisect_right
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from magnetar.broker.entries import entry_metadata, split_entry
from magnetar.protocol.batch import decode_batch, encode_batch
from magnetar.protocol.compression import compress, decompress
from magnetar.protocol.frames import build_payload_part, parse_payload_part
from magnetar.storage import EntryNotFoundError, ManagedLedger, Position, PositionsRead

log = logging.getLogger(__name__)

#: Entry data: ``bytes`` from a read cache, ``memoryview`` from a read from disk.
_Data = TypeVar("_Data", bytes, memoryview)
_In = TypeVar("_In")
_Out = TypeVar("_Out")
_HEADER = struct.Struct(">qq")  # original (ledger id, entry id) before each compacted entry
_YIELD_EVERY = 256  # entries read between two event-loop yields while compacting


@dataclass
class CompactionStatus:
    """Pulsar's LongRunningProcessStatus: NOT_RUN, RUNNING, SUCCESS or ERROR."""

    status: str = "NOT_RUN"
    last_error: str = ""

    def to_json(self) -> dict[str, str]:
        return {"status": self.status, "lastError": self.last_error}


def entry_messages(data: bytes) -> list[tuple[str | None, bool]]:
    """(key, deletes the key) of each message of a stored entry, in batch order."""
    _, part = split_entry(data)
    metadata, payload = parse_payload_part(part, verify=False)
    if not metadata.HasField("num_messages_in_batch"):
        key = metadata.partition_key if metadata.HasField("partition_key") else None
        return [(key, len(payload) == 0 or metadata.null_value)]
    raw = decompress(metadata.compression, payload, metadata.uncompressed_size)
    out = []
    for single, body in decode_batch(raw, metadata.num_messages_in_batch):
        key = single.partition_key if single.HasField("partition_key") else None
        gone = single.compacted_out or single.null_value or len(body) == 0
        out.append((None if single.compacted_out else key, gone))
    return out


def keep_only(data: bytes, keep: set[int]) -> bytes:
    """A batch entry with only the messages whose batch index is in ``keep`` (in order);
    the broker-entry-metadata prefix stays as it was."""
    _, part = split_entry(data)
    prefix = data[: len(data) - len(part)]
    metadata, payload = parse_payload_part(part, verify=False)
    raw = decompress(metadata.compression, payload, metadata.uncompressed_size)
    messages = [m for i, m in enumerate(decode_batch(raw, metadata.num_messages_in_batch))
                if i in keep]
    batch = encode_batch(messages)
    metadata.num_messages_in_batch = len(messages)
    metadata.uncompressed_size = len(batch)
    return prefix + build_payload_part(metadata, compress(metadata.compression, batch))


class CompactedView:
    """A topic's ledger as ``read_compacted`` readers see it (see the module docstring).
    It offers the read API cursors and dispatchers use; anything else goes to the ledger."""

    def __init__(self, ledger: ManagedLedger) -> None:
        self.ledger = ledger
        self.horizon: Position | None = None
        self.compacted: Any = None  # the managed ledger of compacted entries
        self._positions: list[Position] = []  # original positions kept, ascending
        self._where: dict[Position, Position] = {}  # original -> compacted-ledger position

    def install(self, horizon: Position | None, compacted: Any,
                index: list[tuple[Position, Position]]) -> None:
        """Switch to a new compacted state: ``index`` maps original to compacted positions."""
        self.horizon = horizon
        self.compacted = compacted
        self._positions = [orig for orig, _ in index]
        self._where = dict(index)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ledger, name)

    def _after_horizon(self) -> Position:
        h = self.horizon
        assert h is not None
        return Position(h[0], h[1] + 1)

    def kept_positions(self) -> list[Position]:
        return list(self._positions)

    # -- the read API --------------------------------------------------------------

    def read(self, p: Position) -> bytes:
        """One entry of the view, read on the calling thread (blocking: tools and tests;
        the broker uses `cached_entry` and `read_positions_cold`)."""
        if self.horizon is not None and p <= self.horizon:
            where = self._where.get(Position(*p))
            if where is None:
                raise EntryNotFoundError(f"{p} was compacted away")
            return bytes(self.compacted.read(where))[_HEADER.size:]
        return bytes(self.ledger.read(p))

    def read_entries(self, start: Position, max_entries: int, max_bytes: int | None = None
                     ) -> list[tuple[Position, bytes]]:
        """Entries of the view from ``start``, read on the calling thread (blocking, as
        `read`; dispatchers use `read_cached` and `read_cold`)."""
        out: list[tuple[Position, bytes]] = []
        budget = max_bytes
        if self.horizon is not None and start <= self.horizon:
            i = bisect_left(self._positions, start)
            while i < len(self._positions) and len(out) < max_entries:
                p = self._positions[i]
                data = self.read(p)
                out.append((p, data))
                i += 1
                if budget is not None:
                    budget -= len(data)
                    if budget <= 0:
                        return out
            if len(out) >= max_entries:
                return out
            start = self._after_horizon()
        rest = self.ledger.read_entries(start, max_entries - len(out), budget)
        return out + [(p, bytes(d)) for p, d in rest]

    def _compacted_at(self, start: Position) -> Position | None:
        """Where in the compacted ledger the first kept entry ``>= start`` is (None: no
        kept entry is left at or after ``start``, the tail after the horizon is next)."""
        i = bisect_left(self._positions, start)
        return self._where[self._positions[i]] if i < len(self._positions) else None

    def read_cached(self, start: Position, max_entries: int, max_bytes: int | None = None
                    ) -> list[tuple[Position, bytes | memoryview]]:
        """For dispatchers, which read the cache first and the disk off the loop: only what
        the read caches hold (the compacted ledger's for the compacted part, the topic's
        for the tail), never the disk."""
        if self.horizon is not None and start <= self.horizon:
            where = self._compacted_at(start)
            if where is not None:
                return _unwrap(self.compacted.read_cached(where, max_entries, max_bytes))
            start = self._after_horizon()
        return list(self.ledger.read_cached(start, max_entries, max_bytes))

    def read_cold(self, start: Position, max_entries: int, max_bytes: int | None = None
                  ) -> asyncio.Future[list[tuple[Position, memoryview]]]:
        """Entries from ``start`` read on the storage's readers threads: kept entries from
        the compacted ledger (their original positions back), or the topic's tail."""
        if self.horizon is not None and start <= self.horizon:
            where = self._compacted_at(start)
            if where is not None:
                return _mapped(self.compacted.read_cold(where, max_entries, max_bytes), _unwrap)
            start = self._after_horizon()
        return self.ledger.read_cold(start, max_entries, max_bytes)

    def cached_entry(self, p: Position) -> bytes | memoryview | None:
        """The entry at ``p`` if a read cache holds it (the compacted ledger's for the
        compacted part, the topic's for the tail); None otherwise. Never the disk."""
        if self.horizon is not None and p <= self.horizon:
            where = self._where.get(Position(*p))
            if where is None:
                return None  # compacted away: read_positions_cold says so
            data = self.compacted.cached_entry(where)
            return None if data is None else data[_HEADER.size:]
        return self.ledger.cached_entry(p)

    def read_positions_cold(self, positions: list[Position], max_bytes: int | None = None
                            ) -> asyncio.Future[PositionsRead]:
        """The entries at ``positions`` (ascending) read on the storage's readers threads,
        as `ManagedLedger.read_positions_cold`: the kept ones up to the horizon from the
        compacted ledger (with their original positions back; one that was compacted
        away fails with `EntryNotFoundError`), the tail from the topic's ledger. A read
        that asks for both reads the compacted part only: the tail is left for the next."""
        if self.horizon is None or not positions or positions[0] > self.horizon:
            future: asyncio.Future[PositionsRead] = self.ledger.read_positions_cold(
                positions, max_bytes)
            return future
        horizon = self.horizon
        failed: dict[Position, Exception] = {}
        original: dict[Position, Position] = {}  # compacted-ledger position -> original
        for p in positions:
            if p > horizon:
                break
            where = self._where.get(Position(*p))
            if where is None:
                failed[Position(*p)] = EntryNotFoundError(f"{p} was compacted away")
            else:
                original[where] = Position(*p)

        def unwrapped(got: PositionsRead) -> PositionsRead:
            failed.update((original[cpos], err) for cpos, err in got.failed.items())
            return PositionsRead(
                [(original[cpos], data[_HEADER.size:]) for cpos, data in got.entries], failed)

        return _mapped(self.compacted.read_positions_cold(list(original), max_bytes), unwrapped)

    def last_confirmed(self) -> Position | None:
        last = self.ledger.last_confirmed()
        if self.horizon is None or (last is not None and last > self.horizon):
            return last
        return self._positions[-1] if self._positions else None

    def first_position(self) -> Position | None:
        if self.horizon is None:
            return self.ledger.first_position()
        if self._positions:
            return self._positions[0]
        return self.ledger.next_position(self.horizon)

    def next_position(self, p: Position) -> Position | None:
        if self.horizon is None or p >= self.horizon:
            return self.ledger.next_position(p)
        i = bisect_right(self._positions, p)
        if i < len(self._positions):
            return self._positions[i]
        return self.ledger.next_position(self.horizon)

    def count_after(self, p: Position) -> int:
        if self.horizon is None or p >= self.horizon:
            return int(self.ledger.count_after(p))
        kept = len(self._positions) - bisect_right(self._positions, p)
        return kept + int(self.ledger.count_after(self.horizon))

    def count_between(self, start: Position, end: Position) -> int:
        if self.horizon is None or start > self.horizon:
            return int(self.ledger.count_between(start, end))
        top = min(end, self.horizon)
        kept = bisect_right(self._positions, top) - bisect_left(self._positions, start)
        if end > self.horizon:
            kept += int(self.ledger.count_between(self._after_horizon(), end))
        return max(0, kept)

    async def iterate_async(self, last: Position) -> AsyncIterator[tuple[Position, bytes]]:
        """Every entry of the view up to ``last`` (inclusive), in order; what the read cache
        does not hold is read on the storage's readers threads."""
        if self.horizon is not None:
            kept = self._positions
            i = 0
            while i < len(kept) and kept[i] <= last:
                where = self._where[kept[i]]
                chunk = await _read_async(self.compacted, where, 64)
                if not chunk:
                    return
                for cpos, data in chunk:
                    if i >= len(kept) or kept[i] > last:
                        return
                    if cpos != self._where[kept[i]]:  # not the run of kept entries it expected
                        raise EntryNotFoundError(f"compacted entry {cpos} is not {kept[i]}'s")
                    yield kept[i], bytes(data)[_HEADER.size:]
                    i += 1
            p = self.ledger.next_position(self.horizon)
        else:
            p = self.ledger.first_position()
        while p is not None and p <= last:
            chunk = await _read_async(self.ledger, p, 64)
            if not chunk:
                return
            for position, data in chunk:
                if position > last:
                    return
                yield position, bytes(data)
            p = self.ledger.next_position(chunk[-1][0])


class Compactor:
    """Compacts topics and keeps their compacted views (one per loaded topic)."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self._views: dict[str, CompactedView] = {}
        self._status: dict[str, CompactionStatus] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._never: set[str] = set()  # topics known to have no compacted view
        self._loading: dict[str, asyncio.Task[CompactedView | None]] = {}

    def known(self, topic: Any) -> bool:
        """Whether `view` answers without I/O (the view, or its absence, is in memory)."""
        view = self._views.get(topic.name)
        return topic.name in self._never or (view is not None and view.ledger is topic.ledger)

    async def view_async(self, topic: Any) -> CompactedView | None:
        """`view`, with the metadata read, the compacted ledger's open and the reading of
        its index off the loop (concurrent calls for a topic share one load)."""
        if self.known(topic):
            return self.view(topic)
        return await asyncio.shield(self._load_started(topic))

    def _load_started(self, topic: Any) -> asyncio.Task[CompactedView | None]:
        """The task loading the topic's view (started now unless it runs already)."""
        task = self._loading.get(topic.name)
        if task is None:
            task = self._loading[topic.name] = asyncio.ensure_future(self._load_view(topic))
            task.add_done_callback(lambda done: self._view_loaded(topic.name, done))
        return task

    def _view_loaded(self, topic_name: str, task: asyncio.Task[CompactedView | None]) -> None:
        self._loading.pop(topic_name, None)
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            log.error("topic %s: reading its compacted view failed: %s", topic_name, exc)

    async def _load_view(self, topic: Any) -> CompactedView | None:
        storage = self.service.storage
        meta = await storage.read_metadata(self.service.metadata.get, f"compaction/{topic.name}")
        if self.known(topic):  # compacted (or forgotten) meanwhile
            return self.view(topic)
        if meta is None:
            self._never.add(topic.name)
            return None
        compacted = await storage.open_async(meta["ledger"])
        index = []
        start = compacted.first_position()
        last = compacted.last_confirmed()
        while start is not None and last is not None and start <= last:
            chunk = compacted.read_cached(start, 1024, 16 * 1024 * 1024)
            if not chunk:
                chunk = await compacted.read_cold(start, 1024, 16 * 1024 * 1024)
            if not chunk:
                break
            for cpos, data in chunk:
                lid, eid = _HEADER.unpack_from(data)
                index.append((Position(lid, eid), cpos))
            start = compacted.next_position(chunk[-1][0])
        if self.known(topic):
            return self.view(topic)
        if not topic.ledger.is_open:  # unloaded meanwhile: its next load reads the view again
            return None
        view = CompactedView(topic.ledger)
        view.install(Position(*meta["horizon"]), compacted, index)
        self._views[topic.name] = view
        return view

    def view(self, topic: Any) -> CompactedView | None:
        """The topic's compacted view (None if it was never compacted), from memory only:
        `view_async` (or a compaction) must have run for the topic first (`known`), which
        is what the callers do (a Subscribe awaits it in `TopicAttacher.subscribe_work`,
        housekeeping starts it and looks at the next pass). RuntimeError otherwise."""
        view = self._views.get(topic.name)
        if view is not None and view.ledger is topic.ledger:
            return view
        if topic.name in self._never:
            return None
        raise RuntimeError(f"the compacted view of {topic.name} is not loaded: await view_async first")

    def status(self, topic_name: str) -> CompactionStatus:
        return self._status.get(topic_name, CompactionStatus())

    def trigger(self, topic: Any) -> bool:
        """Start compacting ``topic`` in the background; False if it already runs."""
        running = self._running.get(topic.name)
        if running is not None and not running.done():
            return False
        self._status[topic.name] = CompactionStatus("RUNNING")
        self._running[topic.name] = asyncio.ensure_future(self._run(topic))
        return True

    async def _run(self, topic: Any) -> None:
        try:
            await self.compact(topic)
        except Exception as exc:
            log.exception("compaction of %s failed", topic.name)
            self._status[topic.name] = CompactionStatus("ERROR", str(exc))
        else:
            self._status[topic.name] = CompactionStatus("SUCCESS")
        finally:
            self._running.pop(topic.name, None)

    async def compact(self, topic: Any) -> int:
        """Compact ``topic`` now; returns the number of entries in the new view."""
        ledger = topic.ledger
        last = topic.readable_last()  # not past an open transaction's first message
        txns = topic.txn_buffer
        if last is None:
            return 0
        view = await self.view_async(topic) or CompactedView(ledger)
        latest: dict[str, tuple[Position, int]] = {}
        seen = 0
        async for position, data in view.iterate_async(last):  # phase 1: the latest of each key
            if txns is not None and txns.hides_txn(entry_metadata(data)):
                continue  # an aborted transaction's message, or a transaction's marker
            for i, (key, gone) in enumerate(_messages_or_none(data)):
                if key is None:
                    continue
                if gone:
                    latest.pop(key, None)
                else:
                    latest[key] = (position, i)
            seen += 1
            if seen % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
        keep: dict[Position, set[int]] = {}
        for position, i in latest.values():
            keep.setdefault(position, set()).add(i)
        storage = self.service.storage
        meta = await storage.read_metadata(self.service.metadata.get, f"compaction/{topic.name}")
        old_name = meta["ledger"] if meta else None
        base = old_name.rsplit("~", 1)[0] if old_name else f"{ledger.name}"
        name = f"{base}~c1" if old_name and old_name.endswith("~c0") else f"{base}~c0"
        await storage.delete_async(name)  # a leftover of a compaction that failed
        compacted = await storage.open_async(name)
        pending = []
        index: list[tuple[Position, int]] = []
        async for position, data in view.iterate_async(last):  # phase 2: write what stays
            wanted = keep.get(position)
            if not wanted:
                continue
            messages = _messages_or_none(data)
            if len(wanted) < len(messages) or any(gone for _, gone in messages):
                data = keep_only(data, wanted)
            pending.append(compacted.append(_HEADER.pack(*position) + data))
            index.append((position, len(pending) - 1))
            if len(pending) % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
        positions = await asyncio.gather(*pending)
        await storage.write_metadata(self.service.metadata.put, f"compaction/{topic.name}", {
            "horizon": list(last), "ledger": name, "entries": len(index), "at": time.time()})
        self._never.discard(topic.name)
        view.install(last, compacted, [(orig, positions[i]) for orig, i in index])
        self._views[topic.name] = view
        if old_name and old_name != name:
            await storage.delete_async(old_name)
        log.info("topic %s compacted up to %s: %d of %d entries kept", topic.name, last,
                 len(index), seen)
        return len(index)

    def maybe_trigger(self, topic: Any, threshold_bytes: int) -> bool:
        """Automatic compaction (``brokerServiceCompactionThresholdInBytes``): start one when
        the bytes after the compaction horizon (estimated) exceed ``threshold_bytes``."""
        if threshold_bytes <= 0:
            return False
        ledger = topic.ledger
        count = ledger.entry_count()
        if not count:
            return False
        if not self.known(topic):  # read off the loop now, looked at by the next pass
            self._load_started(topic)
            return False
        view = self.view(topic)
        after = ledger.count_after(view.horizon) if view is not None and view.horizon else count
        if after * ledger.size_bytes() / count <= threshold_bytes:
            return False
        return self.trigger(topic)

    def forget(self, topic_name: str) -> None:
        """Drop a topic's view from memory (unloaded or deleted)."""
        view = self._views.pop(topic_name, None)
        self._never.discard(topic_name)
        if view is not None and view.compacted is not None:
            self.service.close_ledger(view.compacted)  # its sealing runs off the loop

    async def delete(self, topic_name: str) -> None:
        """Delete a deleted topic's compacted view: its ``compaction/`` key and compacted
        ledger (read, deleted and written off the loop)."""
        self.forget(topic_name)
        self._status.pop(topic_name, None)
        storage = self.service.storage
        key = f"compaction/{topic_name}"
        meta = await storage.read_metadata(self.service.metadata.get, key)
        if meta is not None:
            await storage.delete_async(meta["ledger"])
            await storage.write_metadata(self.service.metadata.delete, key)


async def _read_async(ledger: Any, start: Position, count: int) -> list[tuple[Position, Any]]:
    """Up to ``count`` entries of a managed ledger from ``start``: from the read cache,
    else from disk on the storage's readers threads."""
    chunk = list(ledger.read_cached(start, count))
    if chunk:
        return chunk
    return list(await ledger.read_cold(start, count))


def _mapped(inner: asyncio.Future[_In], transform: Callable[[_In], _Out]) -> asyncio.Future[_Out]:
    """A future of ``transform`` applied to ``inner``'s result, done when ``inner`` is
    (cancelled or failed as it was)."""
    out: asyncio.Future[_Out] = inner.get_loop().create_future()

    def done(f: asyncio.Future[_In]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
            return
        exc = f.exception()
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(transform(f.result()))

    inner.add_done_callback(done)
    return out


def _unwrap(chunk: Iterable[tuple[Position, _Data]]) -> list[tuple[Position, _Data]]:
    """Compacted-ledger entries as the view's: each one's original position (its header)
    and its data after the header."""
    return [(Position(*_HEADER.unpack_from(data)), data[_HEADER.size:]) for _, data in chunk]


def _messages_or_none(data: bytes) -> list[tuple[str | None, bool]]:
    try:
        return entry_messages(data)
    except Exception:  # an entry we cannot parse has no key for compaction
        return [(None, False)]


__all__ = ["CompactedView", "CompactionStatus", "Compactor", "entry_messages", "keep_only"]
