"""Blocking facade over the asyncio client, for scripts and Spark executors.

``magnetar.sync.Client`` runs its own event loop in a daemon thread; every method hands a
coroutine to that loop and waits for it, so the API reads like the official client's
(``pulsar.Client``) without ``await``. Callbacks given to ``send_async`` run on the loop
thread as ``callback(exception_or_None, message_id)``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from magnetar.client import Message, MessageId
from magnetar.client.client import Client as AsyncClient
from magnetar.client.consumer import Consumer as AsyncConsumer
from magnetar.client.producer import Producer as AsyncProducer
from magnetar.client.reader import Reader as AsyncReader

R = TypeVar("R")

__all__ = ["Client", "Consumer", "Producer", "Reader"]


class _LoopThread:
    def __init__(self) -> None:
        try:
            import uvloop

            self.loop = uvloop.new_event_loop()
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
    def __init__(self, lt: _LoopThread, producer: AsyncProducer) -> None:
        self._lt = lt
        self._p = producer

    def topic(self) -> str:
        return self._p.topic()

    def producer_name(self) -> str:
        return self._p.producer_name()

    def last_sequence_id(self) -> int:
        return self._p.last_sequence_id()

    def is_connected(self) -> bool:
        return self._p.is_connected()

    def send(self, content: Any, **kwargs: Any) -> MessageId:
        return self._lt.run(self._p.send(content, **kwargs))

    def send_async(self, content: Any, callback: Callable[..., Any] | None = None,
                   **kwargs: Any) -> concurrent.futures.Future[MessageId]:
        """Queue a message; returns a ``concurrent.futures.Future`` of its id."""
        out: concurrent.futures.Future[MessageId] = concurrent.futures.Future()

        async def enqueue() -> None:
            fut = await self._p.send_async(content, callback, **kwargs)

            def done(f: asyncio.Future[MessageId]) -> None:
                if f.cancelled():
                    out.cancel()
                elif f.exception() is not None:
                    out.set_exception(f.exception())  # type: ignore[arg-type]
                else:
                    out.set_result(f.result())

            fut.add_done_callback(done)

        self._lt.run(enqueue())
        return out

    def flush(self) -> None:
        self._lt.run(self._p.flush())

    def close(self) -> None:
        self._lt.run(self._p.close())


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
        return self._lt.run(self._c.receive(timeout_millis))

    def batch_receive(self) -> list[Message]:
        return self._lt.run(self._c.batch_receive())

    def __iter__(self) -> Iterator[Message]:
        while True:
            yield self.receive()

    def acknowledge(self, message: Message | MessageId) -> None:
        self._lt.run(self._c.acknowledge(message))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        self._lt.run(self._c.acknowledge_cumulative(message))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._lt.run(self._c.negative_acknowledge(message))

    def redeliver_unacknowledged_messages(self) -> None:
        self._lt.run(self._c.redeliver_unacknowledged_messages())

    def seek(self, message_id: MessageId | int) -> None:
        self._lt.run(self._c.seek(message_id))

    def get_last_message_id(self) -> MessageId:
        return self._lt.run(self._c.get_last_message_id())

    def unsubscribe(self) -> None:
        self._lt.run(self._c.unsubscribe())

    def close(self) -> None:
        self._lt.run(self._c.close())


class Reader:
    def __init__(self, lt: _LoopThread, reader: AsyncReader) -> None:
        self._lt = lt
        self._r = reader

    def topic(self) -> str:
        return self._r.topic()

    def read_next(self, timeout_millis: int | None = None) -> Message:
        return self._lt.run(self._r.read_next(timeout_millis))

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
        return Producer(self._lt, self._lt.run(self._client.create_producer(topic, **kwargs)))

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
