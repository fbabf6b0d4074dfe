"""Blocking facade over the asyncio client, for scripts and Spark executors.

``magnetar.sync.Client`` runs its own event loop in a daemon thread; every method hands a
coroutine to that loop and waits for it, so the API reads like the official client's
(``pulsar.Client``) without ``await``. Callbacks given to ``send_async`` run on the loop
thread as ``callback(exception_or_None, message_id)``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from magnetar.client import AlreadyClosed, Message, MessageId, TopicSchema
from magnetar.client.client import Client as AsyncClient
from magnetar.client.consumer import Consumer as AsyncConsumer
from magnetar.client.producer import Producer as AsyncProducer
from magnetar.client.reader import Reader as AsyncReader
from magnetar.client.transaction import Transaction as AsyncTransaction

R = TypeVar("R")

__all__ = ["Client", "Consumer", "Producer", "Reader", "Transaction"]


class _LoopThread:
    def __init__(self) -> None:
        try:
            import uvloop

            self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="magnetar-client",
                                       daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        if threading.current_thread() is self.thread:
            raise RuntimeError("magnetar.sync called from its own event loop thread")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


class Producer:
    """Blocking producer. ``send_async`` hands messages to the loop in bulk: they are
    buffered and drained by one task per burst, so the per-message cost is an append."""

    def __init__(self, lt: _LoopThread, producer: AsyncProducer, buffer_limit: int) -> None:
        self._lt = lt
        self._p = producer
        self._buf: deque[tuple[Any, Any, dict[str, Any], concurrent.futures.Future[Any]]] = \
            deque()
        self._lock = threading.Lock()
        self._draining = False
        self._space = threading.Semaphore(max(1, buffer_limit))
        self._drain_task: asyncio.Task[None] | None = None

    def topic(self) -> str:
        return self._p.topic()

    def producer_name(self) -> str:
        return self._p.producer_name()

    def last_sequence_id(self) -> int:
        return self._p.last_sequence_id()

    def is_connected(self) -> bool:
        return self._p.is_connected()

    def send(self, content: Any, **kwargs: Any) -> MessageId:
        """Publish and wait for the receipt (after anything ``send_async`` queued)."""
        return self.send_async(content, None, **kwargs).result()

    def send_async(self, content: Any, callback: Callable[..., Any] | None = None,
                   **kwargs: Any) -> concurrent.futures.Future[MessageId]:
        """Queue a message; returns a ``concurrent.futures.Future`` of its id. Blocks only
        while ``buffer_limit`` messages wait to be handed to the event loop."""
        out: concurrent.futures.Future[MessageId] = concurrent.futures.Future()
        if isinstance(kwargs.get("txn"), Transaction):
            kwargs["txn"] = kwargs["txn"]._t
        self._space.acquire()
        with self._lock:
            self._buf.append((content, callback, kwargs, out))
            schedule = not self._draining
            self._draining = True
        if schedule:
            self._lt.loop.call_soon_threadsafe(self._start_drain)
        return out

    def _start_drain(self) -> None:
        self._drain_task = self._lt.loop.create_task(self._drain())

    async def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._buf:
                    self._draining = False
                    return
                items = list(self._buf)
                self._buf.clear()
            for content, callback, kwargs, out in items:
                self._space.release()
                try:
                    fut = await self._p.send_async(content, callback, **kwargs)
                except Exception as exc:
                    out.set_exception(exc)
                    continue
                fut.add_done_callback(functools.partial(_settle, out))

    async def _flush(self) -> None:
        task = self._drain_task
        if task is not None and not task.done():
            await asyncio.shield(task)
        await self._p.flush()

    def flush(self) -> None:
        self._lt.run(self._flush())

    def close(self, flush: bool = True) -> None:
        """Close; ``flush=False`` fails what is not sent yet instead of sending it."""
        if flush:
            self.flush()
            self._lt.run(self._p.close())
            return
        self._lt.run(self._close_unflushed())

    async def _close_unflushed(self) -> None:
        with self._lock:
            items = list(self._buf)
            self._buf.clear()
        for *_, out in items:
            self._space.release()
            out.set_exception(AlreadyClosed("producer closed without flushing"))
        task = self._drain_task
        if task is not None and not task.done():
            await asyncio.shield(task)
        await self._p.close(flush=False)


def _settle(out: concurrent.futures.Future[Any], fut: asyncio.Future[Any]) -> None:
    if fut.cancelled():
        out.cancel()
    elif (exc := fut.exception()) is not None:
        out.set_exception(exc)
    else:
        out.set_result(fut.result())


class Consumer:
    def __init__(self, lt: _LoopThread, consumer: AsyncConsumer) -> None:
        self._lt = lt
        self._c = consumer

    def topic(self) -> str:
        return self._c.topic()

    def subscription_name(self) -> str:
        return self._c.subscription_name()

    def consumer_name(self) -> str:
        return self._c.consumer_name()

    def is_connected(self) -> bool:
        return self._c.is_connected()

    def receive(self, timeout_millis: int | None = None) -> Message:
        # a queued message is taken right here; only an empty queue costs a trip to the loop
        msg = self._c.take_threadsafe()
        if msg is not None:
            return msg
        return self._lt.run(self._c.receive(timeout_millis))

    def batch_receive(self) -> list[Message]:
        return self._lt.run(self._c.batch_receive())

    def __iter__(self) -> Iterator[Message]:
        while True:
            yield self.receive()

    def acknowledge(self, message: Message | MessageId, txn: Transaction | None = None) -> None:
        self._lt.run(self._c.acknowledge(message, _async_txn(txn)))

    def acknowledge_cumulative(self, message: Message | MessageId,
                               txn: Transaction | None = None) -> None:
        self._lt.run(self._c.acknowledge_cumulative(message, _async_txn(txn)))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._lt.run(self._c.negative_acknowledge(message))

    def redeliver_unacknowledged_messages(self) -> None:
        self._lt.run(self._c.redeliver_unacknowledged_messages())

    def pause_message_listener(self) -> None:
        self._lt.loop.call_soon_threadsafe(self._c.pause_message_listener)

    def resume_message_listener(self) -> None:
        self._lt.loop.call_soon_threadsafe(self._c.resume_message_listener)

    def seek(self, message_id: MessageId | int) -> None:
        self._lt.run(self._c.seek(message_id))

    def get_last_message_id(self) -> MessageId:
        return self._lt.run(self._c.get_last_message_id())

    def unsubscribe(self) -> None:
        self._lt.run(self._c.unsubscribe())

    def close(self) -> None:
        self._lt.run(self._c.close())


class Transaction:
    """Blocking handle to a transaction (``Client.new_transaction`` / ``transaction``)."""

    def __init__(self, lt: _LoopThread, txn: AsyncTransaction) -> None:
        self._lt = lt
        self._t = txn

    @property
    def id(self) -> tuple[int, int]:
        return self._t.id

    @property
    def state(self) -> str:
        return self._t.state

    def commit(self) -> None:
        self._lt.run(self._t.commit())

    def abort(self) -> None:
        self._lt.run(self._t.abort())

    def __repr__(self) -> str:
        return repr(self._t)


def _async_txn(txn: Transaction | None) -> AsyncTransaction | None:
    return None if txn is None else txn._t


class Reader:
    def __init__(self, lt: _LoopThread, reader: AsyncReader) -> None:
        self._lt = lt
        self._r = reader

    def topic(self) -> str:
        return self._r.topic()

    def read_next(self, timeout_millis: int | None = None) -> Message:
        # like Consumer.receive: a queued message is taken (and acknowledged) right here
        self._r._messages_only()
        c = self._r._consumer
        msg = c.take_threadsafe()
        if msg is None:
            return self._lt.run(self._r.read_next(timeout_millis))
        c.ack_cumulative_later(msg)
        return msg

    def read_batch(self, max_messages: int, timeout_millis: int | None = None) -> list[Message]:
        return self._lt.run(self._r.read_batch(max_messages, timeout_millis))

    def has_message_available(self) -> bool:
        return self._lt.run(self._r.has_message_available())

    def seek(self, message_id: MessageId | int) -> None:
        self._lt.run(self._r.seek(message_id))

    def get_last_message_id(self) -> MessageId:
        return self._lt.run(self._r.get_last_message_id())

    def is_connected(self) -> bool:
        return self._r.is_connected()

    def close(self) -> None:
        self._lt.run(self._r.close())


class Client:
    """Blocking client; keyword arguments as ``magnetar.Client`` / ``pulsar.Client``."""

    def __init__(self, service_url: str, **kwargs: Any) -> None:
        self._lt = _LoopThread()

        async def make() -> AsyncClient:
            return AsyncClient(service_url, **kwargs)

        self._client = self._lt.run(make())
        self._closed = False

    def create_producer(self, topic: str, **kwargs: Any) -> Producer:
        limit = kwargs.get("max_pending_messages", 1000)
        return Producer(self._lt, self._lt.run(self._client.create_producer(topic, **kwargs)),
                        limit)

    def subscribe(self, topic: Any, subscription_name: str, **kwargs: Any) -> Consumer:
        """As ``pulsar.Client.subscribe``; a ``message_listener(consumer, message)`` runs
        in a worker thread, so it may call this consumer's blocking methods."""
        listener = kwargs.pop("message_listener", None)
        consumer = Consumer(self._lt, self._lt.run(
            self._client.subscribe(topic, subscription_name, **kwargs)))
        if listener is not None:
            async def call(_: object, msg: Message) -> None:
                await asyncio.to_thread(listener, consumer, msg)

            async def start() -> None:
                consumer._c._start_listener(call, consumer)

            self._lt.run(start())
        return consumer

    def create_reader(self, topic: str, start_message_id: MessageId, **kwargs: Any) -> Reader:
        return Reader(self._lt, self._lt.run(
            self._client.create_reader(topic, start_message_id, **kwargs)))

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._lt.run(self._client.get_topic_partitions(topic))

    def get_topics_of_namespace(self, namespace: str, mode: Any = 0) -> list[str]:
        return self._lt.run(self._client.get_topics_of_namespace(namespace, mode))

    def get_schema(self, topic: str) -> TopicSchema | None:
        return self._lt.run(self._client.get_schema(topic))

    def new_transaction(self, timeout_ms: int = 60_000) -> Transaction:
        """Open a transaction (the client needs ``enable_transaction=True``)."""
        return Transaction(self._lt, self._lt.run(self._client.new_transaction(timeout_ms)))

    def transaction(self, most_bits: int, least_bits: int) -> Transaction:
        """A handle to the existing transaction ``(most_bits, least_bits)``."""
        return Transaction(self._lt, self._client.transaction(most_bits, least_bits))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._lt.run(self._client.close(), timeout=60)
        finally:
            self._lt.stop()

    shutdown = close

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
