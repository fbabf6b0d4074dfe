"""Fixtures: a real broker on a free TCP port, driven by the official pulsar-client.

``broker`` runs a BrokerService in a background thread with its own event loop (one per test
module), so tests can also reach broker internals the way the admin layer will
(``broker.call(fn)`` runs ``fn`` on the broker's loop and returns its result).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
import uvloop

from magnetar.broker.config import BrokerConfig
from magnetar.broker.service import BrokerService

#: The official client logs every connection at INFO; tests only want its warnings.
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


class ThreadedBroker:
    def __init__(self, data_dir: Path, **settings: Any) -> None:
        self.config = BrokerConfig.load(
            None, magnetarDataDir=str(data_dir), brokerServicePort=0, bindAddress="127.0.0.1",
            **settings,
        )
        self.loop = uvloop.new_event_loop()
        self.service: BrokerService | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> ThreadedBroker:
        self.thread.start()
        self.service = self.call_async(self._start)
        return self

    async def _start(self) -> BrokerService:
        service = BrokerService(self.config)
        await service.start()
        return service

    @property
    def url(self) -> str:
        assert self.service is not None
        return f"pulsar://127.0.0.1:{self.service.port}"

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the broker's loop; awaited there when it returns an awaitable
        (the admin operations that may load a topic are coroutines)."""
        async def run() -> Any:
            result = fn(*args)
            return await result if inspect.isawaitable(result) else result

        return self.call_async(run)

    def call_async(self, coro_fn: Callable[[], Any]) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro_fn(), self.loop)
        return fut.result(timeout=30)

    def stop(self) -> None:
        if self.service is not None:
            with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
                self.call_async(self.service.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():  # its descriptors (epoll, eventfd, io_uring...) go too
            self.loop.close()


def start_broker(tmp_path: Path, **settings: Any) -> ThreadedBroker:
    return ThreadedBroker(tmp_path / "data", **settings).start()


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[Callable[..., ThreadedBroker]]:
    """``make(**settings)`` starts a broker on a fresh data dir; all are stopped at teardown."""
    started: list[ThreadedBroker] = []

    def make(**settings: Any) -> ThreadedBroker:
        b = start_broker(tmp_path / f"b{len(started)}", **settings)
        started.append(b)
        return b

    yield make
    for b in started:
        b.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedBroker]:
    b = start_broker(tmp_path_factory.mktemp("broker"))
    yield b
    b.stop()


@pytest.fixture
def client(broker: ThreadedBroker) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    yield c
    c.close()


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:10]}"
