"""`Replicator`: one persistent topic replicated to one remote cluster (Pulsar's
``PersistentReplicator``).

The durable cursor ``pulsar.repl.{remote}`` on the local topic holds the backlog like a
subscription does. Each stored entry is re-sent to the remote cluster as it was stored (a
batch stays one batch, its payload untouched) with only its metadata changed:
``replicated_from`` = the local cluster. An entry that already carries ``replicated_from``
(it came from another cluster) or whose ``replicate_to`` leaves the remote out is skipped.
The remote producer is named ``pulsar.repl.{local}``; each send's sequence id comes from the
entry's position (`sequence_id_of`: unique, to match receipts), and the remote deduplicates
a replicator's sends by the original producer's name and sequence ids in the metadata (as
Pulsar does; what a restart of the remote replays), so what a restarted replicator sends
again is dropped there.
The cursor moves only past entries the remote has acknowledged (in order).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from magnetar.broker.entries import split_entry
from magnetar.broker.replication.remote_producer import RemoteError, RemoteProducer
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import build_payload_part, parse_payload_part
from magnetar.storage import Position, StorageError

if TYPE_CHECKING:
    from magnetar.broker.topics.topic import PersistentTopic
    from magnetar.storage.cursor import ManagedCursor

log = logging.getLogger(__name__)

#: the prefix of replicator cursor and producer names (Pulsar's ``replicatorPrefix``)
REPL_PREFIX = "pulsar.repl."
#: entries sent and not yet acknowledged by the remote, at most
_WINDOW = 500
_READ_BATCH = 100
_BACKOFF_MIN_S = 0.1
_BACKOFF_MAX_S = 5.0


def cursor_name(remote: str) -> str:
    return REPL_PREFIX + remote


def is_replicator_cursor(name: str) -> bool:
    return name.startswith(REPL_PREFIX)


def sequence_id_of(position: Position) -> int:
    """The sequence id a replicator sends the entry at ``position`` with: increasing with
    the position, the same after any restart."""
    return (position.ledger_id << 32) | position.entry_id


def replicated_part(data: bytes | memoryview, local: str, remote: str) -> tuple[bytes | None, int, int]:
    """(the payload part to send to ``remote``, its message count, its publish time in ms);
    the part is None when the entry must not go there (replicated already, or its
    ``replicate_to`` leaves ``remote`` out)."""
    _, part = split_entry(bytes(data))
    metadata, payload = parse_payload_part(part, verify=False)
    count = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
    published = metadata.publish_time
    if metadata.HasField("replicated_from"):
        return None, count, published
    if metadata.replicate_to and remote not in metadata.replicate_to:
        return None, count, published
    metadata.replicated_from = local
    return build_payload_part(metadata, payload), count, published


class Replicator:
    """Replicates ``topic`` to ``remote``; `start` it, `stop` it (the cursor stays)."""

    def __init__(self, topic: PersistentTopic, local: str, remote: str,
                 broker_url: Callable[[], str | None],
                 prepare: Callable[[], Awaitable[None]] | None = None) -> None:
        """``broker_url``: the remote cluster's ``pulsar://`` URL now (None: unknown);
        ``prepare``: awaited before each connection (the remote partitioned topic)."""
        self.topic = topic
        self.local = local
        self.remote = remote
        self._broker_url = broker_url
        self._prepare = prepare
        self._prepared = False
        self._url: str | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.cursor: ManagedCursor | None = None
        self.connected = False
        self.msg_out = 0
        self.bytes_out = 0
        self.last_error: str | None = None
        # publish times (ms) of the entries sent and not yet acknowledged, oldest first;
        # that of the last one acknowledged (replicationDelayInSeconds)
        self._in_flight: deque[int] = deque()
        self._acked_publish_ms = 0
        # given each entry not sent to the remote (replicated subscriptions read the
        # markers that came from it there: `snapshots.py`)
        self.on_skipped: Callable[[Position, bytes | memoryview], None] | None = None

    def start(self) -> None:
        if self.cursor is None:  # at once: entries appended from now on are replicated
            self.cursor = self.topic.ledger.open_cursor(cursor_name(self.remote), "latest")
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def cancel(self) -> asyncio.Task[None] | None:
        """Stop at once (nothing more is sent or acknowledged); the task, to await."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        self.connected = False
        return task

    async def stop(self) -> None:
        task = self.cancel()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    def entries_added(self) -> None:
        """The topic confirmed new entries (its ``append_listeners``)."""
        self._wake.set()

    async def _run(self) -> None:
        backoff = _BACKOFF_MIN_S
        name = cursor_name(self.remote)
        while True:
            try:
                if self.cursor is None or self.cursor.closed:
                    self.cursor = await self.topic.ledger.open_cursor_async(name, "latest")
                if self._prepare is not None and not self._prepared:
                    await self._prepare()
                    self._prepared = True
                url = self._url = self._broker_url()
                if not url:
                    raise RemoteError(f"cluster {self.remote} has no brokerServiceUrl")
                producer = await RemoteProducer.open(
                    url, self.topic.name, REPL_PREFIX + self.local)
                try:
                    self.connected = True
                    backoff = _BACKOFF_MIN_S
                    log.info("replicator %s -> %s: connected", self.topic.name, self.remote)
                    await self._pump(self.cursor, producer)
                finally:
                    self.connected = False
                    producer.close()
            except asyncio.CancelledError:
                raise
            except (TimeoutError, OSError, RemoteError, StorageError, ProtocolError) as exc:
                self.last_error = str(exc)
                log.warning("replicator %s -> %s: %s; retrying in %.1f s",
                            self.topic.name, self.remote, exc, backoff)
            except Exception:
                log.exception("replicator %s -> %s failed", self.topic.name, self.remote)
            await asyncio.sleep(backoff)
            backoff = min(_BACKOFF_MAX_S, backoff * 2)

    async def _pump(self, cursor: ManagedCursor, producer: RemoteProducer) -> None:
        """Send from the cursor's mark-delete position on; acknowledge in order."""
        queue: asyncio.Queue[tuple[Position, asyncio.Future[None] | None]] = asyncio.Queue()
        window = asyncio.Semaphore(_WINDOW)
        self._in_flight.clear()
        sender = asyncio.ensure_future(self._send(cursor, producer, queue, window))
        acker = asyncio.ensure_future(self._ack(cursor, queue, window))
        try:
            done, _ = await asyncio.wait({sender, acker}, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            for task in (sender, acker):
                task.cancel()
            await asyncio.gather(sender, acker, return_exceptions=True)

    async def _send(self, cursor: ManagedCursor, producer: RemoteProducer,
                    queue: asyncio.Queue[tuple[Position, asyncio.Future[None] | None]],
                    window: asyncio.Semaphore) -> None:
        ledger = self.topic.ledger
        after: Position | None = None
        while True:
            self._wake.clear()
            start = cursor.first_unacked_after(after)
            if start is None:
                await self._wake.wait()
                continue
            entries = ledger.read_cached(start, _READ_BATCH)
            if not entries:
                entries = list(await ledger.read_cold(start, _READ_BATCH))
            for position, data in entries:
                await window.acquire()
                after = position
                try:
                    part, count, published = replicated_part(data, self.local, self.remote)
                except ProtocolError as exc:
                    log.warning("replicator %s -> %s: entry %s skipped: %s",
                                self.topic.name, self.remote, position, exc)
                    part, published = None, 0
                seq = sequence_id_of(position)
                self._in_flight.append(published)
                if part is None:
                    if self.on_skipped is not None:
                        self.on_skipped(position, data)
                    queue.put_nowait((position, None))
                    continue
                queue.put_nowait((position, producer.send(seq, count, part)))
                self.msg_out += count
                self.bytes_out += len(part)
            await producer.drain()

    async def _ack(self, cursor: ManagedCursor,
                   queue: asyncio.Queue[tuple[Position, asyncio.Future[None] | None]],
                   window: asyncio.Semaphore) -> None:
        while True:
            position, receipt = await queue.get()
            if receipt is not None:
                await receipt
            if self._task is None or cursor.closed:
                return  # stopped (the topic unloads): the ledger's cursors are closing
            cursor.mark_delete(position)
            if self._in_flight:
                self._acked_publish_ms = self._in_flight.popleft()
            window.release()

    def stats(self) -> dict[str, Any]:
        """Pulsar's per-remote ``replication`` stats but the rates (`topics.stats` adds
        those). The delay is the age of the oldest entry sent and not yet acknowledged, or,
        when nothing is in flight but a backlog waits, of the last one acknowledged."""
        cursor = self.cursor
        backlog = cursor.backlog() if cursor is not None and not cursor.closed else 0
        delay = 0.0
        oldest = self._in_flight[0] if self._in_flight else (self._acked_publish_ms if backlog else 0)
        if oldest:
            delay = max(0.0, time.time() - oldest / 1000)
        return {
            "msgOutCounter": self.msg_out,
            "bytesOutCounter": self.bytes_out,
            "replicationBacklog": backlog,
            "connected": self.connected,
            "replicationDelayInSeconds": delay,
            "outboundConnection": self._url or "",
        }
