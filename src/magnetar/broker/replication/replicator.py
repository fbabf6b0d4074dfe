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
An entry written with a schema goes with it: the remote topic gets the schema
(GetOrCreateSchema, once per schema and connection) and the entry the remote's version.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from magnetar.broker.entries import entry_metadata, split_entry
from magnetar.broker.replication.remote_producer import RemoteError, RemoteProducer
from magnetar.broker.replication.remote_settings import RemoteConfigError, RemoteSettings
from magnetar.broker.replication.throttle import ReplicatorThrottle
from magnetar.protocol import pb
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import build_payload_part, parse_payload_part
from magnetar.storage import Position, SegmentFileMissingError, StorageError

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


class SchemaNeeded(Exception):
    """The entry has a schema version that the remote's version of is not known yet."""

    def __init__(self, version: bytes) -> None:
        super().__init__(f"schema version {version.hex()}")
        self.version = version


def replicated_part(data: bytes | memoryview, local: str, remote: str,
                    schema_versions: dict[bytes, bytes] | None = None,
                    ) -> tuple[bytes | None, int, int]:
    """(the payload part to send to ``remote``, its message count, its publish time in ms);
    the part is None when the entry must not go there (replicated already, or its
    ``replicate_to`` leaves ``remote`` out). With ``schema_versions`` (local -> remote; b"":
    none), the entry's ``schema_version`` becomes the remote's (`SchemaNeeded` when it is not
    in the map)."""
    _, part = split_entry(bytes(data))
    metadata, payload = parse_payload_part(part, verify=False)
    count = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
    published = metadata.publish_time
    if metadata.HasField("replicated_from"):
        return None, count, published
    if metadata.HasField("txnid_most_bits"):  # committed here: plain messages there
        metadata.ClearField("txnid_most_bits")
        metadata.ClearField("txnid_least_bits")
    if metadata.replicate_to and remote not in metadata.replicate_to:
        return None, count, published
    if schema_versions is not None and metadata.schema_version:
        version = schema_versions.get(metadata.schema_version)
        if version is None:
            raise SchemaNeeded(metadata.schema_version)
        if version:
            metadata.schema_version = version
        else:
            metadata.ClearField("schema_version")
    metadata.replicated_from = local
    return build_payload_part(metadata, payload), count, published


class Replicator:
    """Replicates ``topic`` to ``remote``; `start` it, `stop` it (the cursor stays)."""

    def __init__(self, topic: PersistentTopic, local: str, remote: str,
                 settings: Callable[[], RemoteSettings],
                 prepare: Callable[[], Awaitable[None]] | None = None,
                 local_schema: Callable[[bytes], Awaitable[pb.Schema | None]] | None = None,
                 throttle: ReplicatorThrottle | None = None, *,
                 skip_missing: bool = False) -> None:
        """``settings``: how to reach the remote cluster now (`RemoteConfigError` when its
        record does not say); ``prepare``: awaited before each connection (the remote
        partitioned topic); ``local_schema``: the topic's schema of a version;
        ``throttle``: its dispatch rate (``replicatorDispatchRate``; None: no limit);
        ``skip_missing``: what is left of a segment whose file is missing is skipped, not
        read again after a back-off (``autoSkipNonRecoverableData``, as Pulsar's cursors
        skip a ledger that no longer exists)."""
        self.topic = topic
        self.local = local
        self.remote = remote
        self._settings = settings
        self._local_schema = local_schema
        self._prepare = prepare
        self._prepared = False
        self.throttle = throttle
        self.skip_missing = skip_missing
        self._url: str | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.cursor: ManagedCursor | None = None
        self.connected = False
        # the remote producer's connection (`RemoteProducer.connection_id`) and since when
        self.connection_id: str | None = None
        self.connected_since: float | None = None
        self.msg_expired = 0  # entries the broker skipped for it (message TTL, backlog quota)
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
                settings = self._settings()
                self._url = settings.broker_url
                producer = await RemoteProducer.open(
                    settings, self.topic.name, REPL_PREFIX + self.local)
                try:
                    self.connected = True
                    self.connection_id, self.connected_since = producer.connection_id, time.time()
                    backoff = _BACKOFF_MIN_S
                    self.last_error = None
                    log.info("replicator %s -> %s: connected to %s", self.topic.name,
                             self.remote, settings.broker_url)
                    await self._pump(self.cursor, producer)
                finally:
                    self.connected = False
                    self.connection_id = self.connected_since = None
                    producer.close()
            except asyncio.CancelledError:
                raise
            except (TimeoutError, OSError, RemoteError, RemoteConfigError, StorageError,
                    ProtocolError) as exc:
                # one line per cause: the same error again (each retry) goes to debug
                again = str(exc) == self.last_error
                self.last_error = str(exc)
                (log.debug if again else log.warning)(
                    "replicator %s -> %s: %s; retrying", self.topic.name, self.remote, exc)
            except Exception:
                log.exception("replicator %s -> %s failed", self.topic.name, self.remote)
            await asyncio.sleep(backoff)
            backoff = min(_BACKOFF_MAX_S, backoff * 2)

    async def _pump(self, cursor: ManagedCursor, producer: RemoteProducer) -> None:
        """Send from the cursor's mark-delete position on; acknowledge in order; until
        the connection is lost (noticed while idle too: ``connected`` in the stats)."""
        queue: asyncio.Queue[tuple[Position, asyncio.Future[None] | None]] = asyncio.Queue()
        window = asyncio.Semaphore(_WINDOW)
        self._in_flight.clear()
        sender = asyncio.ensure_future(self._send(cursor, producer, queue, window))
        acker = asyncio.ensure_future(self._ack(cursor, queue, window))
        try:
            done, _ = await asyncio.wait({sender, acker, producer.lost},
                                         return_when=asyncio.FIRST_EXCEPTION)
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
            bound = self.topic.readable_last()  # committed transactions only
            if start is None or bound is None or start > bound:
                await self._wake.wait()
                continue
            entries = ledger.read_cached(start, _READ_BATCH)
            if not entries:
                try:
                    entries = list(await ledger.read_cold(start, _READ_BATCH))
                except SegmentFileMissingError as exc:
                    skipped = self._skip_missing(cursor, start, exc)
                    if skipped is None:
                        raise
                    after = skipped
                    continue
            txns = self.topic.txn_buffer
            for position, data in entries:
                if position > bound:
                    break  # past an open transaction: once it ends
                await window.acquire()
                after = position
                try:
                    if txns is not None and txns.hides_txn(entry_metadata(data)):
                        part, published = None, 0  # an aborted transaction's, or a marker
                    else:
                        try:
                            part, count, published = replicated_part(
                                data, self.local, self.remote, producer.schema_versions)
                        except SchemaNeeded as need:
                            await producer.map_schema(need.version, await self._schema(need.version))
                            part, count, published = replicated_part(
                                data, self.local, self.remote, producer.schema_versions)
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
                if self.throttle is not None:  # replicatorDispatchRate
                    await self.throttle.admit()
                    self.throttle.sent(count, len(part))
                queue.put_nowait((position, producer.send(seq, count, part)))
                self.msg_out += count
                self.bytes_out += len(part)
            await producer.drain()

    def _skip_missing(self, cursor: ManagedCursor, start: Position,
                      exc: SegmentFileMissingError) -> Position | None:
        """With ``skip_missing``, what is left from ``start`` of a segment whose file is
        missing is acknowledged on the cursor in one range, with one error log: the last
        position skipped. None: not skipped (the read fails, tried again after the
        back-off)."""
        rest = exc.rest_from(start)
        if not self.skip_missing or rest is None:
            return None
        first, last = rest
        cursor.delete_range(first, last)
        log.error("replicator %s -> %s: skipping %d entries %s-%s of a segment whose file "
                  "is missing (autoSkipNonRecoverableData): %s", self.topic.name,
                  self.remote, last[1] - first[1] + 1, first, last, exc)
        return last

    async def _schema(self, version: bytes) -> pb.Schema | None:
        schema = await self._local_schema(version) if self._local_schema is not None else None
        if schema is None:
            log.warning("replicator %s -> %s: schema version %s not found here; entries "
                        "written with it go without a schema version",
                        self.topic.name, self.remote, version.hex())
        return schema

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
            "outboundConnection": self.connection_id,
            "outboundConnectedSince": (None if self.connected_since is None else
                                       time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                     time.gmtime(self.connected_since))),
        }
