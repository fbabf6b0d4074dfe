"""A Magnetar asyncio client driven from Spark's synchronous code, and the few client
calls the data source needs (topic discovery, last message ids, topic schemas).

``Session`` owns a private event loop. On executors the loop runs only inside
``session.run(coro)`` (no thread, no hand-off per message: the task's thread drives it);
on the driver, whose stream reader lives across triggers, ``threaded=True`` keeps the loop
running in a daemon thread so keep-alives are answered between triggers.

Only the client's public API is used, here and in the rest of this package:
``get_topics_of_namespace``, ``get_schema``, readers made with ``deliver_entries=True``
(``Reader.read_entries``: whole entries, see ``magnetar.client.entry``) and
``Client.close(flush=False)``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from magnetar.client import AuthenticationBasic, AuthenticationToken, Client, MessageId
from magnetar.client.reader import Reader
from magnetar.client.topic import base_name, full_name, namespace_of
from magnetar.protocol import pb
from magnetar.spark.options import ClientSettings

log = logging.getLogger(__name__)
R = TypeVar("R")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()


def _authentication(settings: ClientSettings) -> Any:
    if settings.auth is None:
        return None
    kind, params = settings.auth
    if kind == "token":
        token = params[len("token:"):] if params.startswith("token:") else params
        return AuthenticationToken(token)
    user, _, password = params.partition(":")
    if params.startswith("{"):
        import json

        d = json.loads(params)
        user, password = d.get("userId", ""), d.get("password", "")
    return AuthenticationBasic(user, password)


class Session:
    """One client on one private event loop; ``run(coro)`` executes a coroutine on it."""

    def __init__(self, settings: ClientSettings, threaded: bool = False) -> None:
        self.settings = settings
        self.loop = _new_loop()
        self._thread: threading.Thread | None = None
        if threaded:
            self._thread = threading.Thread(target=self.loop.run_forever,
                                            name="magnetar-spark", daemon=True)
            self._thread.start()

        async def make() -> Client:
            return Client(settings.service_url, authentication=_authentication(settings),
                          **settings.client_kwargs)

        self.client: Client = self.run(make())
        self._last_id_readers: dict[str, Reader] = {}

    def run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        if self._thread is None:
            return self.loop.run_until_complete(coro)
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise

    def close(self) -> None:
        self._shut(flush=True)

    def abandon(self) -> None:
        """Close without flushing producers: their open batches are not sent (a failed
        write task must not publish a batch cut short by the failure: its retry cuts the
        same rows into whole batches, see ``writer``)."""
        self._shut(flush=False)

    def _shut(self, flush: bool) -> None:
        """Close the client (best effort), then stop and close the loop."""
        try:
            self.run(self.client.close(flush=flush), timeout=30)
        except Exception as exc:
            log.info("closing the pulsar client (flush=%s) failed: %s", flush, exc)
        if self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.close()

    # ------------------------------------------------------------ discovery
    def partitions_of(self, topics: tuple[str, ...], pattern: str | None) -> list[str]:
        """The topic partitions (or non-partitioned topics) to read, sorted."""
        return self.run(self._partitions_of(topics, pattern))

    async def _partitions_of(self, topics: tuple[str, ...], pattern: str | None) -> list[str]:
        if pattern is not None:
            full = pattern if "://" in pattern else full_name(pattern)
            regex = re.compile(full)
            found = await self.client.get_topics_of_namespace(namespace_of(full))
            return sorted({t for t in found if regex.fullmatch(t) or
                           regex.fullmatch(base_name(t))})
        names = await asyncio.gather(*(self.client.get_topic_partitions(t) for t in topics))
        return sorted({n for group in names for n in group})

    async def topic_schema(self, topic: str) -> tuple[int, bytes] | None:
        """(schema type, definition) of a topic, or None when it has no schema."""
        found = await self.client.get_schema(topic)
        if found is None:
            return None
        return pb.Schema.Type.Value(found.type), found.definition

    # ------------------------------------------------------------ last ids
    def last_ids(self, partitions: list[str]) -> dict[str, tuple[int, int, int]]:
        """Key of the last stored message of each partition ((L, -1, -1) when empty)."""
        return self.run(self._last_ids(partitions))

    async def _last_ids(self, partitions: list[str]) -> dict[str, tuple[int, int, int]]:
        async def one(topic: str) -> tuple[str, tuple[int, int, int]]:
            reader = self._last_id_readers.get(topic)
            if reader is None:
                reader = await self.client.create_reader(topic, MessageId.latest,
                                                         receiver_queue_size=1)
                self._last_id_readers[topic] = reader
            mid = await reader.get_last_message_id()
            return topic, (mid.ledger_id(), mid.entry_id(), mid.batch_index())

        return dict(await asyncio.gather(*(one(t) for t in partitions)))
