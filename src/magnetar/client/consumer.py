"""``Consumer``: the public consumer over one or many topics (partitions, lists, regex).

Every underlying ``TopicConsumer`` feeds one shared queue; ``receive`` takes from it and
returns the message's permit to the consumer it came from. Acks, negative acks and the ack
timeout are routed back to that consumer. Messages redelivered ``max_redeliver_count``
times are republished to the dead-letter topic and acknowledged instead of redelivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magnetar.client.entry import Entry
from magnetar.client.enums import ConsumerType, InitialPosition
from magnetar.client.errors import AlreadyClosed, PulsarException, Timeout
from magnetar.client.message import Message
from magnetar.client.message_id import MessageId
from magnetar.client.policies import ConsumerBatchReceivePolicy, ConsumerDeadLetterPolicy
from magnetar.client.schema import BytesSchema, Schema
from magnetar.client.topic import base_name
from magnetar.client.topic_consumer import TopicConsumer
from magnetar.client.trackers import Key, RedeliveryTimer

if TYPE_CHECKING:
    from magnetar.client.client import Client
    from magnetar.client.producer import Producer
    from magnetar.client.transaction import Transaction

log = logging.getLogger(__name__)


@dataclass
class ConsumerConf:
    subscription_name: str
    consumer_type: ConsumerType = ConsumerType.Exclusive
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    unacked_messages_timeout_ms: int | None = None
    negative_ack_redelivery_delay_ms: int = 60000
    is_read_compacted: bool = False
    properties: dict[str, str] = field(default_factory=dict)
    initial_position: InitialPosition = InitialPosition.Latest
    replicate_subscription_state_enabled: bool = False
    max_pending_chunked_message: int = 10
    start_message_id_inclusive: bool = False
    batch_receive_policy: ConsumerBatchReceivePolicy | None = None
    dead_letter_policy: ConsumerDeadLetterPolicy | None = None
    durable: bool = True
    ack_group_time_ms: int = 100
    batch_index_ack_enabled: bool = False
    pattern_auto_discovery_period: float = 60
    deliver_entries: bool = False  # whole entries (``Entry``), not messages


class Consumer:
    """Receives messages; create with ``Client.subscribe``."""

    def __init__(self, client: Client, topic_label: str, conf: ConsumerConf,
                 schema: Schema) -> None:
        self._client = client
        self._topic_label = topic_label
        self._conf = conf
        self._schema = schema
        self._value_schema = None if isinstance(schema, BytesSchema) else schema
        self._children: list[TopicConsumer] = []
        self._by_topic: dict[str, TopicConsumer] = {}
        self._queue: deque[Message] = deque()
        self._queue_lock = threading.Lock()
        self._taken_elsewhere: deque[Message] = deque()
        self._cumulative_later: deque[Message] = deque()
        self._catch_up_due = False
        self._loop = asyncio.get_running_loop()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._dlq = conf.dead_letter_policy
        self._dlq_producers: dict[str, asyncio.Task[Producer]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._unacked = RedeliveryTimer(
            (conf.unacked_messages_timeout_ms or 0) / 1000.0, self._redeliver,
            tick=None) if conf.unacked_messages_timeout_ms else None
        self._nacks = RedeliveryTimer(conf.negative_ack_redelivery_delay_ms / 1000.0,
                                      self._redeliver)
        self._discovery: asyncio.Task[None] | None = None
        self._listener_task: asyncio.Task[None] | None = None
        self._listener_gate = asyncio.Event()
        self._listener_gate.set()

    def _start_listener(self, listener: Any, target: Any) -> None:
        """Call ``listener(target, message)`` for every message (``message_listener``);
        a coroutine function is awaited. Errors are logged, not raised."""

        gate = self._listener_gate

        async def loop() -> None:
            while not self._closed:
                await gate.wait()
                try:
                    msg = await self.receive()
                except AlreadyClosed:
                    return
                # paused while waiting: the message is held until resumed
                await gate.wait()
                try:
                    result = listener(target, msg)
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    log.exception("message listener failed")

        self._listener_task = asyncio.get_running_loop().create_task(loop())

    def pause_message_listener(self) -> None:
        """Stop handing messages to the ``message_listener`` until resumed (they stay in
        the receiver queue; at most one is held back by the listener)."""
        self._listener_gate.clear()

    def resume_message_listener(self) -> None:
        """Resume handing messages to the ``message_listener``."""
        self._listener_gate.set()

    # ------------------------------------------------------------- children
    async def _add_topics(self, topics: list[tuple[str, int]],
                          start: MessageId | None = None) -> None:
        new = []
        for topic, partition in topics:
            if topic in self._by_topic:
                continue
            child = TopicConsumer(self, topic, partition, start)
            self._by_topic[topic] = child
            new.append(child)
        results = await asyncio.gather(*(c.start() for c in new), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            for c in new:
                self._by_topic.pop(c.topic, None)
            await asyncio.gather(*(c.close() for c in new), return_exceptions=True)
            raise errors[0]
        self._children.extend(new)

    def _start_discovery(self, pattern: re.Pattern[str], namespace: str, mode: int) -> None:
        async def loop() -> None:
            while not self._closed:
                await asyncio.sleep(self._conf.pattern_auto_discovery_period)
                try:
                    topics = await self._client._lookup.topics_of_namespace(namespace, mode)
                    fresh = [(t, -1) for t in topics
                             if pattern.match(t) and t not in self._by_topic]
                    if fresh:
                        await self._add_topics(fresh)
                except PulsarException as exc:
                    log.info("pattern discovery failed: %s", exc)

        self._discovery = asyncio.get_running_loop().create_task(loop())

    # ---------------------------------------------------------------- queue
    def _enqueue(self, msg: Message) -> None:
        self._queue.append(msg)
        if self._waiters:
            self._wake()

    def _enqueue_many(self, msgs: Iterable[Message]) -> None:
        queue = self._queue
        before = len(queue)
        queue.extend(msgs)
        if self._waiters:
            self._wake(len(queue) - before)

    def _wake(self, n: int = 1) -> None:
        """Wake up to ``n`` receivers waiting for a message."""
        while self._waiters and n > 0:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                n -= 1

    def _drop_from(self, child: TopicConsumer) -> int:
        """Remove the queued messages of ``child``; returns how many."""
        self._catch_up()
        with self._queue_lock:
            before = len(self._queue)
            if before:
                # (``_consumer``: messages and, for entry readers, ``Entry`` objects)
                self._queue = deque(m for m in self._queue if m._consumer is not child)
            return before - len(self._queue)

    def _take(self) -> Message:
        """The next queued message, taken (``IndexError`` when there is none)."""
        msg = self._queue.popleft()
        self._account(msg)
        return msg

    def _account(self, msg: Message) -> None:
        """A message was handed to the application: note it, and give its permit back to
        its consumer (``Flow`` once half the queue is due)."""
        child: TopicConsumer = msg._entry.consumer
        child.last_taken = msg
        child._permits += 1
        if child._permits >= child._threshold:
            child.send_flow()
        if self._unacked is not None:
            self._unacked.add((child, msg._entry.key))

    def take_queued(self, max_messages: int) -> list[Message]:
        """Up to ``max_messages`` of the messages already received, without waiting."""
        out: list[Message] = []
        take = self._take
        queue = self._queue
        with contextlib.suppress(IndexError):
            while queue and len(out) < max_messages:
                out.append(take())
        return out

    # The blocking facade (``magnetar.sync``) takes queued messages from its own thread,
    # without a round trip through the event loop per message: ``deque.popleft`` is atomic,
    # ``_queue_lock`` keeps it apart from ``_drop_from``, and the loop thread catches up on
    # the bookkeeping (``_account``) in bulk, before it waits for messages or drops some.
    _CATCH_UP_EVERY = 32

    def take_threadsafe(self) -> Message | None:
        """A queued message taken from any thread, or None when none is queued."""
        with self._queue_lock:
            try:
                msg = self._queue.popleft()
            except IndexError:
                return None
        pending = self._taken_elsewhere
        pending.append(msg)
        if len(pending) >= self._CATCH_UP_EVERY and not self._catch_up_due:
            self._catch_up_due = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to do
                self._loop.call_soon_threadsafe(self._catch_up)
        return msg

    def ack_cumulative_later(self, msg: Message) -> None:
        """From any thread: acknowledge ``msg`` cumulatively at the next catch-up (the
        blocking ``Reader.read_next``; only the latest such message counts)."""
        self._cumulative_later.append(msg)

    def _catch_up(self) -> None:
        self._catch_up_due = False
        pending = self._taken_elsewhere
        account = self._account
        with contextlib.suppress(IndexError):
            while pending:
                account(pending.popleft())
        later = self._cumulative_later
        if later:
            last: dict[TopicConsumer, Message] = {}
            with contextlib.suppress(IndexError):
                while later:
                    msg = later.popleft()
                    last[msg._entry.consumer] = msg
            for child, msg in last.items():
                child.ack_cumulative(msg.message_id())

    def take_entries(self, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` of the entries already received (``deliver_entries``),
        without waiting; each returns its messages' permits."""
        out: list[Entry] = []
        queue: deque[Any] = self._queue
        while queue and len(out) < max_entries:
            entry: Entry = queue.popleft()
            child: TopicConsumer = entry._consumer
            child.last_dequeued = entry.last_message_id()
            child._permits += entry._count
            if child._permits >= child._threshold:
                child.send_flow()
            out.append(entry)
        return out

    async def receive_entries(self, max_entries: int,
                              timeout_millis: int | None = None) -> list[Entry]:
        """Entries (``deliver_entries``): waits ``timeout_millis`` for the first (``Timeout``
        if none comes), then takes up to ``max_entries`` of those already received."""
        if not self._conf.deliver_entries:
            raise PulsarException("receive_entries needs a consumer made with "
                                  "deliver_entries=True")
        if not self._queue:
            timeout = None if timeout_millis is None else timeout_millis / 1000.0
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            while not self._queue:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    raise Timeout("no entry received in time")
                await self._wait(remaining)
        return self.take_entries(max_entries)

    async def _wait(self, timeout: float | None) -> None:
        if self._closed:
            raise AlreadyClosed("consumer is closed")
        w = asyncio.get_running_loop().create_future()
        self._waiters.append(w)
        try:
            if timeout is None:
                await w
            else:
                async with asyncio.timeout(timeout):
                    await w
        except TimeoutError:
            raise Timeout("no message received in time") from None
        finally:
            if not w.done():
                w.cancel()

    # -------------------------------------------------------------- receive
    def topic(self) -> str:
        return self._topic_label

    def subscription_name(self) -> str:
        return self._conf.subscription_name

    def consumer_name(self) -> str:
        return self._conf.consumer_name or ""

    def is_connected(self) -> bool:
        return not self._closed and all(c.connected for c in self._children)

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """Next message; raises ``Timeout`` after ``timeout_millis`` (default: wait)."""
        try:
            msg = self._queue.popleft()
        except IndexError:
            return await self._receive_wait(timeout_millis)
        # the hot path: ``_account`` inlined
        child: TopicConsumer = msg._entry.consumer
        child.last_taken = msg
        child._permits += 1
        if child._permits >= child._threshold:
            child.send_flow()
        if self._unacked is not None:
            self._unacked.add((child, msg._entry.key))
        return msg

    async def _receive_wait(self, timeout_millis: int | None) -> Message:
        if self._taken_elsewhere or self._cumulative_later:
            self._catch_up()  # what the blocking facade took is accounted for first
        timeout = None if timeout_millis is None else timeout_millis / 1000.0
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            while not self._queue:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    raise Timeout("no message received in time")
                await self._wait(remaining)
            with contextlib.suppress(IndexError):  # another thread may have been quicker
                return self._take()

    async def batch_receive(self) -> list[Message]:
        """Messages up to the batch-receive policy's count/bytes, or what came by its timeout."""
        policy = self._conf.batch_receive_policy or ConsumerBatchReceivePolicy()
        max_n = policy.max_num_message if policy.max_num_message > 0 else 1 << 30
        max_bytes = policy.max_num_bytes if policy.max_num_bytes > 0 else 1 << 62
        loop = asyncio.get_running_loop()
        deadline = loop.time() + policy.timeout_ms / 1000.0
        out: list[Message] = []
        size = 0
        while len(out) < max_n and size < max_bytes:
            if self._queue:
                try:
                    msg = self._take()
                except IndexError:
                    continue
                out.append(msg)
                size += msg._entry.data_size(msg._index)
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                await self._wait(remaining)
            except Timeout:
                break
        return out

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except AlreadyClosed:
            raise StopAsyncIteration from None

    # ----------------------------------------------------------------- acks
    def _child_for(self, mid: MessageId) -> TopicConsumer:
        if len(self._children) == 1:
            return self._children[0]
        if mid._topic is not None and mid._topic in self._by_topic:
            return self._by_topic[mid._topic]
        for c in self._children:
            if c.partition == mid._partition >= 0:
                return c
        raise ValueError(f"cannot tell which topic {mid} belongs to")

    @staticmethod
    def _mid(message: Message | MessageId) -> MessageId:
        return message._id if isinstance(message, Message) else message

    async def acknowledge(self, message: Message | MessageId,
                          txn: Transaction | None = None) -> None:
        """Acknowledge one message (sent grouped, within ``ack_group_time``). With ``txn``
        the acknowledgement belongs to that transaction: sent at once, awaited (the
        broker's AckResponse), taking effect when the transaction commits."""
        if txn is not None:
            await self._ack_in_txn(message, txn, cumulative=False)
            return
        if isinstance(message, Message):  # no MessageId needed
            entry = message._entry
            child = entry.consumer
            key = entry.key
            whole_entry = child.ack_at(key, message._index, entry.chunk_ids)
        else:
            child = self._child_for(message)
            key = (message._ledger_id, message._entry_id)
            whole_entry = child.ack_at(key, message._batch_index, message._chunk_ids)
        if self._unacked is not None and whole_entry:
            self._unacked.remove((child, key))
        if self._nacks._due and whole_entry:
            self._nacks.remove((child, key))

    async def acknowledge_cumulative(self, message: Message | MessageId,
                                     txn: Transaction | None = None) -> None:
        """Acknowledge this message and everything before it on its topic/partition
        (``txn``: in that transaction, as ``acknowledge``)."""
        if int(self._conf.consumer_type) in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise PulsarException("cumulative acknowledgement is not allowed on shared "
                                  "subscriptions")
        if txn is not None:
            await self._ack_in_txn(message, txn, cumulative=True)
            return
        mid = self._mid(message)
        child = message._consumer if isinstance(message, Message) else self._child_for(mid)
        child.ack_cumulative(mid)
        if self._unacked is not None:
            for k in [k for k in list(self._unacked._due)
                      if k[0] is child and k[1] <= (mid._ledger_id, mid._entry_id)]:
                self._unacked.remove(k)

    async def _ack_in_txn(self, message: Message | MessageId, txn: Transaction,
                          cumulative: bool) -> None:
        mid = self._mid(message)
        child = message._consumer if isinstance(message, Message) else self._child_for(mid)
        await txn._add_subscription(child.topic, child.subscription)
        await child.ack_in_txn(mid, txn.id, cumulative)
        key = (mid._ledger_id, mid._entry_id)
        if self._unacked is not None:
            for k in [k for k in list(self._unacked._due)
                      if k[0] is child and (k[1] <= key if cumulative else k[1] == key)]:
                self._unacked.remove(k)

    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Have the message redelivered after ``negative_ack_redelivery_delay_ms``."""
        mid = self._mid(message)
        child = message._consumer if isinstance(message, Message) else self._child_for(mid)
        key = (child, (mid._ledger_id, mid._entry_id))
        if self._unacked is not None:
            self._unacked.remove(key)
        self._nacks.add(key)

    async def redeliver_unacknowledged_messages(self) -> None:
        for c in self._children:
            c.redeliver_all()

    def _redeliver(self, keys: list[Key]) -> None:
        by_child: dict[TopicConsumer, list[tuple[int, int]]] = {}
        for child, key in keys:
            by_child.setdefault(child, []).append(key)
        for child, entries in by_child.items():
            if child._closed:
                continue
            dead: list[tuple[tuple[int, int], list[Message]]] = []
            if self._dlq is not None:
                live = []
                for key in entries:
                    msgs = child.take_dlq(key)
                    if msgs:
                        dead.append((key, msgs))
                    else:
                        live.append(key)
                entries = live
            if dead:
                self._spawn(self._dead_letter(child, dead, entries))
            else:
                child.redeliver(entries)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def dead_letter_topic(self, child: TopicConsumer) -> str:
        assert self._dlq is not None
        return self._dlq.dead_letter_topic or \
            f"{base_name(child.topic)}-{self._conf.subscription_name}-DLQ"

    async def _dlq_producer(self, topic: str) -> Producer:
        task = self._dlq_producers.get(topic)
        if task is None:
            assert self._dlq is not None
            task = asyncio.get_running_loop().create_task(self._client.create_producer(
                topic, initial_subscription_name=self._dlq.initial_subscription_name))
            self._dlq_producers[topic] = task
        return await task

    async def _dead_letter(self, child: TopicConsumer,
                           dead: list[tuple[tuple[int, int], list[Message]]],
                           live: list[tuple[int, int]]) -> None:
        try:
            producer = await self._dlq_producer(self.dead_letter_topic(child))
            for key, msgs in dead:
                for msg in msgs:
                    props = msg.properties()
                    props["REAL_TOPIC"] = msg.topic_name()
                    props["ORIGIN_MESSAGE_ID"] = str(msg.message_id())
                    await producer.send(msg.data(), properties=props,
                                        partition_key=msg.partition_key() or None)
                child._acks.individual(key)
            child.flush_acks()
        except PulsarException as exc:
            log.warning("dead-lettering failed, redelivering instead: %s", exc)
            live = live + [k for k, _ in dead]
        child.redeliver(live)

    # ------------------------------------------------------------ operations
    async def seek(self, message_id: MessageId | int) -> None:
        """Reset the subscription to a message id or a publish time (ms since epoch)."""
        self._catch_up()
        targets = self._children
        if isinstance(message_id, MessageId) and message_id._partition >= 0 \
                and len(self._children) > 1:
            targets = [c for c in self._children if c.partition == message_id._partition]
        if self._unacked is not None:
            self._unacked.clear()
        self._nacks.clear()
        await asyncio.gather(*(c.seek(message_id) for c in targets))

    async def get_last_message_id(self) -> MessageId:
        if len(self._children) != 1:
            raise PulsarException("get_last_message_id needs a single-topic consumer")
        return await self._children[0].get_last_message_id()

    async def unsubscribe(self) -> None:
        await asyncio.gather(*(c.unsubscribe() for c in self._children))
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._catch_up()
        self._closed = True
        if self._discovery is not None:
            self._discovery.cancel()
        if self._listener_task is not None and \
                self._listener_task is not asyncio.current_task():
            self._listener_task.cancel()
        if self._unacked is not None:
            self._unacked.clear()
        self._nacks.clear()
        for w in self._waiters:
            if not w.done():
                w.set_exception(AlreadyClosed("consumer closed"))
        await asyncio.gather(*(c.close() for c in self._children), return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        for task in self._dlq_producers.values():
            if task.done() and task.exception() is None:
                await task.result().close()
            else:
                task.cancel()
        self._client._forget(self)

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
