"""Connection pool: one shared, handshaken connection per broker address."""

from __future__ import annotations

import asyncio
import logging
import ssl
from urllib.parse import urlsplit

from magnetar.client.auth import Authentication
from magnetar.client.connection import Connection
from magnetar.client.errors import ConnectError

log = logging.getLogger(__name__)


def split_address(url: str) -> tuple[str, int, bool]:
    """``pulsar://h:p`` or ``pulsar+ssl://h:p`` -> (host, port, tls)."""
    parts = urlsplit(url.split(",")[0] if "://" in url else "pulsar://" + url)
    tls = parts.scheme in ("pulsar+ssl", "pulsars")
    if parts.scheme not in ("pulsar", "pulsar+ssl", "pulsars"):
        raise ValueError(f"unsupported service URL {url!r} (use pulsar://, pulsar+ssl://, "
                         "http:// or https://)")
    return parts.hostname or "localhost", parts.port or (6651 if tls else 6650), tls


def check_service_url(url: str) -> str:
    """``url`` if it is a usable service URL, else ValueError with a hint: a scheme
    (``pulsar://``, ``pulsar+ssl://``, ``http://``, ``https://``), a host and a valid port."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("the service URL is empty (e.g. pulsar://localhost:6650)")
    if "://" not in url:
        raise ValueError(f"service URL {url!r} has no scheme: use pulsar://{url} (or "
                         "http://host:8080 for the web service)")
    parts = urlsplit(url.split(",")[0])
    if parts.scheme not in ("pulsar", "pulsar+ssl", "pulsars", "http", "https"):
        raise ValueError(f"unsupported service URL {url!r} (use pulsar://, pulsar+ssl://, "
                         "http:// or https://)")
    try:
        parts.port  # noqa: B018 (raises for a port that is not a number in range)
    except ValueError:
        raise ValueError(f"service URL {url!r} has an invalid port") from None
    if not parts.hostname:
        raise ValueError(f"service URL {url!r} has no host (e.g. pulsar://localhost:6650)")
    return url


def is_web_url(url: str) -> bool:
    """Whether a service URL names a broker's web service (``http://`` or ``https://``)."""
    return url.startswith(("http://", "https://"))


class ConnectionPool:
    """Opens connections on demand and forgets them when they close."""

    def __init__(self, auth: Authentication | None, ssl_context: ssl.SSLContext | None,
                 connection_timeout: float, keepalive: float = 30.0) -> None:
        self.connection_timeout = connection_timeout
        self._auth = auth
        self._keepalive = keepalive
        self._ssl = ssl_context
        self._timeout = connection_timeout
        self._conns: dict[str, asyncio.Future[Connection]] = {}
        self.closed = False
        #: whether any broker (or web service) has answered yet: until then, an
        #: unreachable one is given up after the connection timeout
        self.reached = False

    async def get(self, address: str) -> Connection:
        if self.closed:
            raise ConnectError("client is closed")
        fut = self._conns.get(address)
        if fut is not None:
            if not fut.done():
                return await asyncio.shield(fut)
            if fut.exception() is None and not fut.result().closed:
                return fut.result()
        fut = asyncio.get_running_loop().create_future()
        self._conns[address] = fut
        try:
            cnx = await self._open(address)
        except BaseException as exc:
            self._conns.pop(address, None)
            fut.set_exception(exc)
            fut.exception()
            raise
        cnx.on_close.append(lambda c: self._forget(address, c))
        self.reached = True
        fut.set_result(cnx)
        return cnx

    async def _open(self, address: str) -> Connection:
        host, port, tls = split_address(address)
        ctx = None
        if tls:
            ctx = self._ssl or ssl.create_default_context()
        log.debug("connecting to %s", address)
        return await Connection.open(host, port, address=address, auth=self._auth,
                                     ssl_context=ctx, server_hostname=host,
                                     timeout=self._timeout, keepalive=self._keepalive)

    def connect_budget(self) -> float | None:
        """How long to retry an unreachable broker: the connection timeout until one was
        reached, else no limit of its own (the operation timeout applies)."""
        return None if self.reached else self.connection_timeout

    def _forget(self, address: str, cnx: Connection) -> None:
        fut = self._conns.get(address)
        if fut is not None and fut.done() and fut.exception() is None and fut.result() is cnx:
            del self._conns[address]

    def close(self) -> None:
        self.closed = True
        for fut in list(self._conns.values()):
            if fut.done() and fut.exception() is None:
                fut.result().close()
            elif not fut.done():
                fut.cancel()
        self._conns.clear()
