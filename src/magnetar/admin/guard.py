"""The web port's hygiene against slow or greedy clients: header and body read timeouts, a
connection cap, one body-size limit for every endpoint.

Theory of operation. `GuardedSite` listens like aiohttp's ``TCPSite`` (backlog
``httpServerAcceptQueueSize``) but wraps each connection's aiohttp protocol in a
`GuardedConnection`, counted by the site's `ConnectionGuard`:

- past ``max_connections`` open connections a new one is answered ``503`` and closed at
  once (``maxHttpServerConnections``, at most what the descriptor limit leaves for HTTP);
- a request's headers must all arrive within ``header_timeout`` seconds of its first byte
  (of the connection's start, for the first request); otherwise the connection is closed
  (``408``). The clock stops when aiohttp hands the request to the application:
  `body_middleware` says so (`ConnectionGuard.started`);
- `body_middleware` then reads the whole body before any handler runs: past
  ``httpMaxRequestSize`` (by ``Content-Length`` or while reading a chunked one) the answer is
  ``413``, and a body not complete within ``body_timeout`` seconds is ``408``; both close the
  connection. A handler that reads the body gets it from aiohttp's cache, one that does
  not has still been held to the limit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_BUSY = b"too many HTTP connections (maxHttpServerConnections); retry\n"
_REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
            b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY), _BUSY))
_SLOW = b"request headers not received in time\n"
_TIMED_OUT = (b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
              b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(_SLOW), _SLOW))


class ConnectionGuard:
    """The limits of one web port, and its open connections."""

    def __init__(self, max_connections: int, header_timeout: float, body_timeout: float,
                 max_body: int) -> None:
        self.max_connections = max_connections  # 0: no cap
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.max_body = max_body  # <= 0: no limit
        self.open = 0
        self.refused = 0
        self.timed_out = 0
        self._by_handler: dict[object, GuardedConnection] = {}

    def wrap(self, inner: asyncio.Protocol) -> GuardedConnection:
        return GuardedConnection(self, inner)

    def started(self, handler: object) -> None:
        """aiohttp's protocol ``handler`` has a request's headers (the header clock stops)."""
        conn = self._by_handler.get(handler)
        if conn is not None:
            conn.request_started()

    def finished(self, handler: object) -> None:
        conn = self._by_handler.get(handler)
        if conn is not None:
            conn.request_finished()

    def _opened(self, conn: GuardedConnection) -> bool:
        if self.max_connections and self.open >= self.max_connections:
            self.refused += 1
            if self.refused == 1 or self.refused % 1000 == 0:
                log.warning("refusing HTTP connection: %d open (maxHttpServerConnections or "
                            "the descriptors left for HTTP); %d refused so far",
                            self.open, self.refused)
            return False
        self.open += 1
        self._by_handler[conn.inner] = conn
        return True

    def _closed(self, conn: GuardedConnection) -> None:
        self.open -= 1
        self._by_handler.pop(conn.inner, None)


class GuardedConnection(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind the guard's cap and header clock."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.admitted = False
        self.busy = False  # a request is with the application
        self._clock: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.guard._opened(self):
            transport.write(_REFUSED)  # type: ignore[attr-defined]
            transport.close()
            return
        self.admitted = True
        self.inner.connection_made(transport)
        self._start_clock()

    def _start_clock(self) -> None:
        if self._clock is None:
            loop = asyncio.get_running_loop()
            self._clock = loop.call_later(self.guard.header_timeout, self._too_slow)

    def _stop_clock(self) -> None:
        if self._clock is not None:
            self._clock.cancel()
            self._clock = None

    def _too_slow(self) -> None:
        self._clock = None
        if self.busy or self.transport is None or self.transport.is_closing():
            return
        self.guard.timed_out += 1
        log.debug("closing an HTTP connection: request headers not complete within %.0f s",
                  self.guard.header_timeout)
        self.transport.write(_TIMED_OUT)
        self.transport.close()

    def request_started(self) -> None:
        self.busy = True
        self._stop_clock()

    def request_finished(self) -> None:
        self.busy = False

    def data_received(self, data: bytes) -> None:
        if not self.admitted:
            return
        if not self.busy:
            self._start_clock()  # a new request's first bytes (no-op if already running)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.admitted else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_clock()
        if self.admitted:
            self.admitted = False
            self.guard._closed(self)
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self.inner.resume_writing()


class GuardedSite(web.TCPSite):
    """aiohttp's ``TCPSite`` with each connection behind ``guard``."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, guard: ConnectionGuard,
                 accept: bool = True, **kwargs: Any) -> None:
        """``accept=False``: bind the port but accept nothing until `accept_connections`."""
        super().__init__(runner, host, port, **kwargs)
        self.guard = guard
        self.accept = accept

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        guard = self.guard
        self._server = await loop.create_server(
            lambda: guard.wrap(server()), self._host, self._port, ssl=self._ssl_context,
            backlog=self._backlog, reuse_address=self._reuse_address, start_serving=self.accept)
        self._bound_port = self._server.sockets[0].getsockname()[1]

    async def accept_connections(self) -> None:
        """Start accepting (a site started with ``accept=False``)."""
        if self._server is not None:
            await self._server.start_serving()


GUARD: web.AppKey[ConnectionGuard] = web.AppKey("connection_guard", ConnectionGuard)


def _closing(response: web.Response) -> web.Response:
    response.force_close()
    return response


@web.middleware
async def body_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Stop the header clock; read the whole body within the limits (module docstring)."""
    guard = request.app[GUARD]
    protocol = request.protocol
    guard.started(protocol)
    try:
        if request.body_exists:
            length = request.content_length
            if guard.max_body > 0 and length is not None and length > guard.max_body:
                return _closing(_too_large(guard.max_body, length))
            try:
                async with asyncio.timeout(guard.body_timeout):
                    await request.read()
            except TimeoutError:
                return _closing(web.json_response(
                    {"reason": f"request body not received within {guard.body_timeout:.0f} s"},
                    status=408))
            except web.HTTPRequestEntityTooLarge:  # a chunked body, past the limit
                return _closing(_too_large(guard.max_body, None))
        return await handler(request)
    finally:
        guard.finished(protocol)


def _too_large(limit: int, size: int | None) -> web.Response:
    what = f"{size} bytes" if size is not None else f"over {limit} bytes"
    return web.json_response(
        {"reason": f"request body too large ({what}; httpMaxRequestSize is {limit})"},
        status=413)
