"""Service discovery over HTTP, for a client given ``http://`` or ``https://`` as its
service URL (as ``pulsar.Client("http://localhost:8080")`` is): topic lookup through
``/lookup/v2/topic/...``, partition counts and namespace listings through the admin API,
then the binary protocol to the broker the lookup named (schemas are asked there). A web
service URL naming several brokers (``http://h1:8080,h2:8080``) is asked host by host in
turn, passing over a host that cannot be reached.

Credentials go as HTTP headers (``Authorization: Bearer`` for tokens, ``Basic`` for basic
auth); a TLS client certificate goes through the same SSL context as the binary connections."""

from __future__ import annotations

import logging
import ssl
from typing import Any
from urllib.parse import quote

import aiohttp

from magnetar.client.auth import Authentication
from magnetar.client.errors import AuthenticationError, ConnectError, LookupError, server_error
from magnetar.client.lookup import schema_of
from magnetar.client.pool import ConnectionPool
from magnetar.client.service_url import ServiceNameResolver, service_hosts
from magnetar.protocol import pb

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
    """``persistent://t/ns/x`` -> ``persistent/t/ns/x`` (each part URL-quoted)."""
    domain, rest = topic.split("://", 1)
    return "/".join(quote(part, safe="") for part in [domain, *rest.split("/")])


class HttpLookupService:
    """The ``LookupService`` calls, answered by a broker's web service."""

    def __init__(self, pool: ConnectionPool, web_url: str, use_tls: bool, timeout: float,
                 auth: Authentication | None, ssl_context: ssl.SSLContext | None,
                 listener_name: str | None = None) -> None:
        self._pool = pool
        self._bases = ServiceNameResolver(service_hosts(web_url))
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
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout))
        body: Any = None
        status = 0
        url = path
        for attempt in range(len(self._bases)):
            url = self._bases.next() + path
            try:
                async with self._session.get(
                        url, params=params, headers=self._headers(),
                        ssl=self._ssl or True if url.startswith("https:") else True) as resp:
                    body = await resp.json(content_type=None) \
                        if resp.content_length != 0 else None
                    status = resp.status
                break
            except aiohttp.ClientConnectionError as exc:  # retried, as an unreachable broker is
                if attempt + 1 == len(self._bases):
                    raise ConnectError(f"GET {url}: {exc}") from exc
                log.info("web service %s unreachable: %s", url, exc)
            except (aiohttp.ClientError, ValueError) as exc:
                raise LookupError(f"GET {url}: {exc}") from exc
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
