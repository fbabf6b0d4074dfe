"""What a replicator asks of the remote cluster's admin API (its ``serviceUrl``): that a
partitioned topic exists there with the local partition count (Pulsar's replicator creates
it when missing). Over ``https://`` (the record's ``serviceUrlTls``) with the TLS settings
and the credentials of `RemoteSettings` when they say so. A record listing several brokers
(``http://s1:8080,s2:8080``) has them tried in turn until one can be reached."""

from __future__ import annotations

import aiohttp

from magnetar.broker.replication.remote_producer import RemoteError
from magnetar.broker.replication.remote_settings import RemoteSettings
from magnetar.broker.topic_name import TopicName
from magnetar.protocol.service_urls import split_service_url

_TIMEOUT = aiohttp.ClientTimeout(total=30, sock_connect=10)


async def ensure_partitioned(settings: RemoteSettings, base: TopicName, partitions: int) -> None:
    """Create ``base`` with ``partitions`` on the cluster at ``settings.admin_url`` when it
    is not a partitioned topic there yet (RemoteError when that fails)."""
    service_url = settings.admin_url
    scheme = "https://" if settings.ssl_context is not None else "http://"
    if not service_url.startswith(scheme):
        key = "serviceUrlTls" if settings.ssl_context is not None else "serviceUrl"
        raise RemoteError(f"the remote cluster has no {key} ({scheme}...) to create {base} "
                          f"there: {service_url!r}")
    failures: list[str] = []
    for web in split_service_url(service_url):
        url = f"{web.rstrip('/')}/admin/v2/{base.rest_path()}/partitions"
        try:
            await _ensure_at(settings, url, partitions)
            return
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            failures.append(f"{url}: {exc or type(exc).__name__}")  # the next broker
        except aiohttp.ClientError as exc:
            raise RemoteError(f"{url}: {exc}") from exc
    raise RemoteError("; ".join(failures) or f"no admin URL in {service_url!r}")


async def _ensure_at(settings: RemoteSettings, url: str, partitions: int) -> None:
    async with aiohttp.ClientSession(
            timeout=_TIMEOUT, headers=settings.http_headers(),
            connector=aiohttp.TCPConnector(ssl=settings.ssl_context or False)) as session:
        async with session.get(url) as response:
            if response.status != 200:
                raise RemoteError(f"GET {url}: HTTP {response.status}: {(await response.text())[:200]}")
            if int((await response.json()).get("partitions", 0)) > 0:
                return
        async with session.put(url, json=partitions) as response:
            if response.status not in (204, 409):  # 409: created meanwhile
                raise RemoteError(f"PUT {url}: HTTP {response.status}: {await response.text()}")
