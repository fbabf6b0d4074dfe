"""Service discovery over HTTP, for a client given ``http://`` or ``https://`` as its
service URL (as ``pulsar.Client("http://localhost:8080")`` is): topic lookup through
``/lookup/v2/topic/...``, partition counts and namespace listings through the admin API,
then the binary protocol to the broker the lookup named (schemas are asked there).

Credentials go as HTTP headers (``Authorization: Bearer`` for tokens, ``Basic`` for basic
auth); a TLS client certificate goes through the same SSL context as the binary connections."""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
from typing import Any
from urllib.parse import quote

import aiohttp

from magnetar.client.auth import Authentication
from magnetar.client.errors import (
    AuthenticationError,
    ConnectError,
    LookupError,
    UnknownHost,
    WrongServiceUrl,
    server_error,
)
from magnetar.client.lookup import schema_of
from magnetar.client.pool import ConnectionPool
from magnetar.protocol import pb
from magnetar.protocol.naming import TopicName

log = logging.getLogger(__name__)

#: HTTP statuses and the wire error a binary lookup would have answered instead.
_STATUS_ERRORS = {
    403: pb.AuthorizationError,
    404: pb.TopicNotFound,
    412: pb.MetadataError,
    429: pb.TooManyRequests,
    503: pb.TooManyRequests,
}

_NAMESPACE_MODES: dict[int, str] = {
    pb.CommandGetTopicsOfNamespace.PERSISTENT: "PERSISTENT",
    pb.CommandGetTopicsOfNamespace.NON_PERSISTENT: "NON_PERSISTENT",
    pb.CommandGetTopicsOfNamespace.ALL: "ALL",
}


def topic_path(topic: str) -> str:
    """``persistent://t/ns/x`` -> ``persistent/t/ns/x`` (the local name URL-encoded)."""
    return TopicName.parse(topic).rest_path()


def _reason(exc: aiohttp.ClientConnectionError) -> str:
    """The OS's words for a failed connection (aiohttp's own repeat the host and port)."""
    cause = getattr(exc, "os_error", None)
    if isinstance(cause, OSError):
        return os.strerror(cause.errno) if cause.errno else str(cause)
    return str(exc)


class HttpLookupService:
    """The ``LookupService`` calls, answered by a broker's web service."""

    def __init__(self, pool: ConnectionPool, web_url: str, use_tls: bool, timeout: float,
                 auth: Authentication | None, ssl_context: ssl.SSLContext | None,
                 listener_name: str | None = None) -> None:
        self._pool = pool
        self._base = web_url.rstrip("/")
        self._tls = use_tls
        self._timeout = timeout
        self._auth = auth
        self._ssl = ssl_context
        self._listener = listener_name
        self._session: aiohttp.ClientSession | None = None

    def _headers(self) -> dict[str, str]:
        return self._auth.http_headers() if self._auth is not None else {}

    async def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(
                total=self._timeout, connect=self._pool.connection_timeout))
        url = self._base + path
        try:
            async with self._session.get(url, params=params, headers=self._headers(),
                                         ssl=self._ssl or True if url.startswith("https:") else True,
                                         ) as resp:
                text = await resp.text(errors="replace")
                status = resp.status
        except aiohttp.ServerDisconnectedError as exc:
            if self._pool.reached:  # it answered before: retried, as a restart is
                raise ConnectError(f"GET {url}: {exc}") from exc
            raise WrongServiceUrl(f"GET {url}: no HTTP answer: if that is the broker's binary "
                                  "port, use pulsar:// (http:// is for the web service port)"
                                  ) from None
        except aiohttp.ClientConnectionError as exc:  # retried, as an unreachable broker is
            cause = getattr(exc, "os_error", None)
            if isinstance(cause, socket.gaierror) and cause.errno != socket.EAI_AGAIN:
                raise UnknownHost(f"GET {url}: unknown host {self._base.split('://')[-1]!r}") from None
            raise ConnectError(f"GET {url}: {_reason(exc)}") from exc
        except aiohttp.ClientError as exc:
            raise LookupError(f"GET {url}: {exc}") from exc
        self._pool.reached = True
        try:
            body = json.loads(text) if text.strip() else None
        except ValueError:
            if status < 300:
                raise LookupError(f"GET {url}: not a JSON answer: {text[:200]!r}") from None
            body = {"reason": text.strip()[:200]}
        if status < 300:
            return body
        reason = body.get("reason", "") if isinstance(body, dict) else ""
        message = f"GET {url}: HTTP {status} {reason}".rstrip()
        if status == 401:
            raise AuthenticationError(message)
        if status in _STATUS_ERRORS:
            raise server_error(_STATUS_ERRORS[status], message)
        raise LookupError(message)

    async def lookup(self, topic: str) -> str:
        """Address (``pulsar://`` or ``pulsar+ssl://``) of the broker that serves ``topic``."""
        params = {"listenerName": self._listener} if self._listener else None
        answer = await self._get(f"/lookup/v2/topic/{topic_path(topic)}", params)
        url = answer.get("brokerUrlTls") if self._tls else answer.get("brokerUrl")
        if not url:
            raise LookupError(f"lookup of {topic} named no {'TLS ' if self._tls else ''}broker URL "
                              f"(answer: {answer})")
        return str(url)

    async def partitions(self, topic: str) -> int:
        """Number of partitions (0 for a non-partitioned topic)."""
        answer = await self._get(f"/admin/v2/{topic_path(topic)}/partitions",
                                 {"checkAllowAutoCreation": "true"})
        return int(answer.get("partitions", 0))

    async def get_schema(self, topic: str) -> pb.Schema | None:
        """The latest schema of ``topic``, asked of the broker that serves it."""
        cnx = await self._pool.get(await self.lookup(topic))
        return await schema_of(cnx, topic, self._timeout)

    async def topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        tenant, name = namespace.split("/", 1)
        answer = await self._get(f"/admin/v2/namespaces/{quote(tenant)}/{quote(name)}/topics",
                                 {"mode": _NAMESPACE_MODES.get(mode, "PERSISTENT")})
        return [str(topic) for topic in answer]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
