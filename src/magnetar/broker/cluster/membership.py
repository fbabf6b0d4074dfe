"""Joining and leaving a cluster: the glue between a running `BrokerService` and its
`ClusterCoordinator` (``metadataStoreUrl=zk:...``).

``join_cluster`` opens the metadata store session, registers the broker under its id
(``host:webPort``) with its URLs and advertised listeners, and wires the broker's side of
ownership: a bundle lost without being released (session expired or not heard from for
its timeout, key deleted) has its loaded topics unloaded at once, so their clients look
them up again; with ``zookeeperSessionExpiredPolicy=reconnect`` (Magnetar's default) a new
session registers the broker again (`BrokerRegistry`) and bundles are taken again through
compare-and-set as lookups come; with ``shutdown`` (Pulsar's default) a lost session stops
the broker, as Pulsar's does. The load report's measured fields come from `LoadSampler`
(CPU, memory, bandwidth, message rates, per owned bundle too); the leader's shedding calls
other brokers with this broker's ``brokerClient*`` credentials (`BrokerClientCredentials`).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from magnetar import __version__
from magnetar.broker.cluster.bundles import BundleRange, topic_hash
from magnetar.broker.cluster.coordinator import ClusterCoordinator
from magnetar.broker.cluster.load_report import (
    LoadSampler,
    memory_limit_mb,
    nic_speed_kbps,
    topic_counters,
)
from magnetar.broker.cluster.records import ListenerUrls, OwnerData
from magnetar.broker.cluster.shedding import THRESHOLD_SHEDDER, Shedder, ThresholdSettings
from magnetar.broker.config.broker_client import BrokerClientCredentials
from magnetar.broker.topic_name import TopicName, ledger_name
from magnetar.metadata import SessionEvent, create_metadata_store

if TYPE_CHECKING:
    from magnetar.broker.config.broker_config import BrokerConfig
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.topic import Topic

log = logging.getLogger(__name__)


def _unloaded(name: str, done: asyncio.Future[Any]) -> None:
    """A lost bundle's topic closed (its ledger's close may fail: fenced by a new owner)."""
    if not done.cancelled() and done.exception() is not None:
        log.info("topic %s: closing it after its bundle was lost: %s", name, done.exception())


def broker_id_of(service_url: str, web_url: str | None) -> str:
    """Pulsar's broker id, ``host:webPort`` (``host:port`` of the binary service without a
    web service)."""
    parts = urlsplit(web_url or service_url)
    return f"{parts.hostname}:{parts.port}"


async def join_cluster(service: BrokerService, urls: dict[str, str | None],
                       on_shutdown: Callable[[], None] | None = None) -> ClusterCoordinator:
    """Open the metadata session, register this broker and return its coordinator."""
    config = service.config
    service_url = urls.get("brokerServiceUrl") or urls.get("brokerServiceUrlTls") or ""
    me = OwnerData(
        urls.get("brokerServiceUrl") or "", urls.get("brokerServiceUrlTls") or "",
        urls.get("webServiceUrl") or "", urls.get("webServiceUrlTls") or "",
        {name: ListenerUrls(listener.url or "", listener.tls_url or "")
         for name, listener in service.listeners.by_name.items()})
    # the broker's own cluster metadata session when it has one (one session per broker)
    store = service.metadata_store
    own_store = store is None
    if store is None:
        store = await create_metadata_store(
            config.metadataStoreUrl,
            session_timeout_s=config.metadataStoreSessionTimeoutMillis / 1000,
            session_expired_policy=config.zookeeperSessionExpiredPolicy)
    sampler = LoadSampler(os.cpu_count() or 1,
                          nic_speed_kbps(config.loadBalancerOverrideBrokerNicSpeedGbps),
                          memory_limit_mb())

    placed: dict[str, tuple[str, int]] = {}  # topic -> (namespace, hash): never changes

    def load() -> dict[str, Any]:
        owned: dict[str, list[tuple[BundleRange, str]]] = {}
        for namespace, bundle in coordinator.ownership.owned:
            owned.setdefault(namespace, []).append((bundle, f"{namespace}/{bundle.name}"))

        def bundle_of(topic: str) -> str | None:
            where = placed.get(topic)
            if where is None:
                where = placed[topic] = (TopicName.parse(topic).namespace, topic_hash(topic))
            for bundle, name in owned.get(where[0], ()):
                if bundle.contains(where[1]):
                    return name
            return None

        topics = {name: topic_counters(topic) for name, topic in service.topics.items()}
        for gone in placed.keys() - topics.keys():
            del placed[gone]
        names = [name for bundles in owned.values() for _, name in bundles]
        return {**sampler.sample(topics, bundle_of, names), "version": __version__}

    def in_bundle(namespace: str, bundle: BundleRange) -> list[Topic]:
        return [topic for name, topic in service.topics.items()
                if TopicName.parse(name).namespace == namespace
                and bundle.contains(topic_hash(name))]

    def lost(namespace: str, bundle: BundleRange) -> None:
        for topic in in_bundle(namespace, bundle):
            log.info("topic %s: its bundle %s was lost; unloading", topic.name, bundle)
            service.unload_topic(topic).add_done_callback(partial(_unloaded, topic.name))

    async def unload_topics(namespace: str, bundle: BundleRange,
                            moving_to: OwnerData | None) -> None:
        topics = in_bundle(namespace, bundle)
        for topic in topics:
            if moving_to is not None:
                topic.moving_to = (moving_to.service_url, moving_to.service_url_tls)
        closing = [service.unload_topic(topic) for topic in topics]
        await asyncio.gather(*closing, return_exceptions=True)

    def session(event: SessionEvent) -> None:
        if event != SessionEvent.SESSION_LOST:
            return
        if config.zookeeperSessionExpiredPolicy.strip().lower() == "shutdown":
            log.error("metadata session expired (zookeeperSessionExpiredPolicy=shutdown): "
                      "stopping the broker")
            if on_shutdown is not None:
                on_shutdown()
        else:
            log.warning("metadata session lost (zookeeperSessionExpiredPolicy=reconnect): "
                        "its bundles' topics unloaded, their clients look them up again; "
                        "a new session registers this broker again")

    coordinator = ClusterCoordinator(
        store, broker_id_of(service_url, urls.get("webServiceUrl")), me, load,
        default_bundles=config.defaultNumberOfNamespaceBundles,
        report_interval_s=config.loadBalancerReportUpdateMinIntervalMillis / 1000,
        on_lost=lost, dead_owner_wait_s=config.dead_owner_lookup_wait_s())
    coordinator.unload_topics = unload_topics
    coordinator.on_acquired = lambda namespace, bundle: service.replication.preload(
        namespace, lambda name: bundle.contains(topic_hash(name)))
    coordinator.overload_threshold = float(config.loadBalancerBrokerOverloadedThresholdPercentage)

    def fence_epoch(ledger: str) -> int | None:
        """The epoch a topic's ledger is fenced with (None: not a topic's ledger)."""
        try:
            topic = "persistent://" + base64.urlsafe_b64decode(ledger + "=" * (-len(ledger) % 4)
                                                               ).decode()
            if ledger_name(TopicName.parse(topic)) != ledger:
                return None  # a compacted view's ledger, or another non-topic name
        except ValueError:
            return None
        return coordinator.epoch_of(topic)

    if config.magnetarSharedStorage:
        service.storage.fence_epoch = fence_epoch
    store.register_session_listener(session)
    coordinator.owns_store = own_store
    try:
        await coordinator.start()
    except BaseException:
        if own_store:
            await store.close()
        raise
    if config.loadBalancerSheddingEnabled:
        coordinator.shedder = _shedder(coordinator, config)
        coordinator.shedder.start()
    log.info("joined the cluster at %s as %s", config.metadataStoreUrl, coordinator.broker_id)
    return coordinator


async def request_unload(credentials: BrokerClientCredentials, web_url: str, web_url_tls: str,
                         bundle: str) -> None:
    """Ask the broker at ``web_url`` (``web_url_tls`` with ``brokerClientTlsEnabled``) to
    unload ``bundle`` (``tenant/ns/0xL_0xU``), as this broker: Pulsar's admin call, with
    the ``brokerClient*`` credentials. RuntimeError when it is refused."""
    namespace, _, bundle_range = bundle.rpartition("/")
    await peer_request(credentials, web_url, web_url_tls, "PUT",
                       f"/admin/v2/namespaces/{namespace}/{bundle_range}/unload")


class PeerRequestError(RuntimeError):
    """An admin call to another broker that it refused, with its HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


async def peer_request(credentials: BrokerClientCredentials, web_url: str, web_url_tls: str,
                       method: str, path: str, body: Any = None) -> Any:
    """One admin call to another broker of the cluster, as this broker (the
    ``brokerClient*`` credentials), with ``authoritative=true``: its decoded JSON answer
    (None when it has none). A 307 (the bundle changed owner meanwhile) is followed with
    the credentials (aiohttp drops them on a redirect to another host:port), never from
    TLS to plain text. ``body``: sent as JSON. `PeerRequestError` (a RuntimeError) when
    it is refused."""
    import aiohttp  # the admin layer's HTTP client, only for these calls

    base = credentials.web_url(web_url, web_url_tls)
    url = f"{base}{path}{'&' if '?' in path else '?'}authoritative=true"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        for _ in range(3):
            async with session.request(method, url, headers=credentials.headers(),
                                       allow_redirects=False, json=body,
                                       ssl=credentials.ssl_context or True) as resp:
                location = resp.headers.get("Location")
                if resp.status in (307, 308) and location:
                    if credentials.tls and not location.startswith("https://"):
                        raise RuntimeError(f"{method} {url}: redirected off TLS to {location}")
                    url = location
                    continue
                if resp.status >= 300:
                    raise PeerRequestError(
                        f"{method} {url}: HTTP {resp.status} {await resp.text()}", resp.status)
                return await resp.json() if resp.content_type == "application/json" else None
    raise RuntimeError(f"{method} {url}: too many redirects")


def _shedder(coordinator: ClusterCoordinator, config: BrokerConfig) -> Shedder:
    credentials = BrokerClientCredentials.from_config(config)
    if config.authenticationEnabled and credentials.kind == "none":
        log.warning("authenticationEnabled but no brokerClientAuthenticationPlugin: the "
                    "leader's unload calls to other brokers will be refused, so load "
                    "shedding cannot move bundles off them")

    async def unload(broker_id: str, bundle: str) -> None:
        brokers = await coordinator.registry.live()
        data = brokers.get(broker_id)
        if data is not None and (data.web_url or data.web_url_tls):
            await request_unload(credentials, data.web_url, data.web_url_tls, bundle)

    interval = config.magnetarLoadBalancerSheddingIntervalSeconds \
        or 60.0 * config.loadBalancerSheddingIntervalMinutes
    threshold = None
    if config.loadBalancerLoadSheddingStrategy.strip() == THRESHOLD_SHEDDER:
        threshold = ThresholdSettings(
            float(config.loadBalancerBrokerThresholdShedderPercentage),
            config.loadBalancerHistoryResourcePercentage, config.loadBalancerCPUResourceWeight,
            config.loadBalancerMemoryResourceWeight,
            config.loadBalancerBandwithInResourceWeight,
            config.loadBalancerBandwithOutResourceWeight,
            config.loadBalancerBundleUnloadMinThroughputThreshold * 2**20)
    return Shedder(lambda: coordinator.is_leader, coordinator.registry.live, unload, interval,
                   float(config.loadBalancerBrokerOverloadedThresholdPercentage),
                   60.0 * config.loadBalancerSheddingGracePeriodMinutes, threshold)


#: How long leaving the cluster may take before the broker stops without it (its keys
#: go with its session anyway).
LEAVE_TIMEOUT_S = 10.0


async def leave_cluster(coordinator: ClusterCoordinator) -> None:
    """Release this broker's bundles and registry entry, then close the session. Best
    effort, bounded by `LEAVE_TIMEOUT_S` (said in the log when it runs out)."""
    log.info("leaving the cluster as %s", coordinator.broker_id)
    bound = asyncio.timeout(LEAVE_TIMEOUT_S)
    try:
        async with bound:
            if coordinator.shedder is not None:
                await coordinator.shedder.stop()
            await coordinator.stop()
    except TimeoutError:
        pass  # said below
    except Exception as exc:  # the store is gone already: the session's end frees them
        log.warning("leaving the cluster: %s", exc or type(exc).__name__)
    if bound.expired():  # (also when a step swallowed the cancellation)
        log.warning("leaving the cluster: not done in %g s; stopping without it",
                    LEAVE_TIMEOUT_S)
    if coordinator.owns_store:
        await coordinator.store.close()
