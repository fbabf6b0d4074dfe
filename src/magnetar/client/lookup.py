"""Binary-protocol service discovery: topic lookup (following redirects), partition
metadata, schemas and namespace topic listings (``http_lookup`` does the same over HTTP).

A service URL may name several brokers: each discovery request goes to the next one in
turn, passing over those that cannot be reached. A lookup then follows ``Redirect``
answers (sending back their ``authoritative`` flag) until a broker answers ``Connect``."""

from __future__ import annotations

import logging

from magnetar.client.connection import Connection
from magnetar.client.errors import ConnectError, LookupError, server_error
from magnetar.client.pool import ConnectionPool
from magnetar.client.service_url import ServiceNameResolver
from magnetar.client.topic import base_name
from magnetar.protocol import pb

log = logging.getLogger(__name__)
T = pb.BaseCommand
R = pb.CommandLookupTopicResponse
MAX_REDIRECTS = 20


class LookupService:
    def __init__(self, pool: ConnectionPool, service_urls: list[str], use_tls: bool,
                 timeout: float, listener_name: str | None = None) -> None:
        self._pool = pool
        self._listener = listener_name
        self._resolver = ServiceNameResolver(service_urls)
        self._tls = use_tls
        self._timeout = timeout

    async def _service_cnx(self) -> Connection:
        """A connection to the next service host that answers."""
        failure: ConnectError | None = None
        for _ in range(len(self._resolver)):
            address = self._resolver.next()
            try:
                return await self._pool.get(address)
            except ConnectError as exc:
                log.info("service host %s unreachable: %s", address, exc)
                failure = exc
        assert failure is not None
        raise failure

    async def lookup(self, topic: str) -> str:
        """Address of the broker that owns ``topic``."""
        cnx = await self._service_cnx()
        service_address = address = cnx.address
        authoritative = False
        for hop in range(MAX_REDIRECTS):
            if hop:
                cnx = await self._pool.get(address)
            extra = {"advertised_listener_name": self._listener} if self._listener else {}
            resp = await cnx.request(T.LOOKUP, timeout=self._timeout, topic=topic,
                                     authoritative=authoritative, **extra)
            if resp.response == R.Failed:
                if resp.HasField("error"):
                    raise server_error(resp.error, resp.message)
                raise LookupError(f"lookup of {topic} failed: {resp.message}")
            target = (resp.brokerServiceUrlTls if self._tls and resp.brokerServiceUrlTls
                      else resp.brokerServiceUrl) or address
            if resp.response == R.Connect:
                if resp.proxy_through_service_url:
                    return service_address
                return target
            authoritative = resp.authoritative
            address = target
            log.debug("lookup of %s redirected to %s", topic, address)
        raise LookupError(f"too many redirects looking up {topic}")

    async def partitions(self, topic: str) -> int:
        """Number of partitions (0 for a non-partitioned topic)."""
        cnx = await self._service_cnx()
        resp = await cnx.request(T.PARTITIONED_METADATA, timeout=self._timeout, topic=topic)
        if resp.HasField("response") and resp.response == \
                pb.CommandPartitionedTopicMetadataResponse.Failed:
            raise server_error(resp.error, resp.message)
        return int(resp.partitions)

    async def get_schema(self, topic: str) -> pb.Schema | None:
        """The latest schema of ``topic`` (of its partitioned base), None when it has none."""
        return await schema_of(await self._service_cnx(), topic, self._timeout)

    async def topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        cnx = await self._service_cnx()
        resp = await cnx.request(T.GET_TOPICS_OF_NAMESPACE, timeout=self._timeout,
                                 namespace=namespace, mode=mode)
        return list(resp.topics)

    async def close(self) -> None:
        """Nothing of its own to close: its connections belong to the pool."""


async def schema_of(cnx: Connection, topic: str, timeout: float) -> pb.Schema | None:
    """Ask ``cnx`` for the latest schema of ``topic`` (of its partitioned base); None if none."""
    resp = await cnx.request(T.GET_SCHEMA, timeout=timeout, topic=base_name(topic))
    if resp.HasField("error_code") or not resp.HasField("schema"):
        return None
    schema: pb.Schema = resp.schema
    return schema
