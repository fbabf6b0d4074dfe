"""Joining and leaving a cluster: the glue between a running `BrokerService` and its
`ClusterCoordinator` (``metadataStoreUrl=zk:...``).

``join_cluster`` opens the metadata store session, registers the broker under its id
(``host:webPort``) with its URLs and advertised listeners, and wires the broker's side of
ownership: a bundle lost without being released (session expired, key deleted) has its
loaded topics unloaded at once, so their clients look them up again; with
``zookeeperSessionExpiredPolicy=shutdown`` (Pulsar's default) a lost session also stops
the broker, as Pulsar's does. The load report carries CPU time used since the last report
(``cpu.limit`` is 100 per core), loaded topics, producers and consumers.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from magnetar import __version__
from magnetar.broker.cluster.bundles import BundleRange, topic_hash
from magnetar.broker.cluster.coordinator import ClusterCoordinator
from magnetar.broker.cluster.records import ListenerUrls, OwnerData
from magnetar.broker.cluster.shedding import Shedder
from magnetar.broker.topic_name import TopicName, ledger_name
from magnetar.metadata import SessionEvent, create_metadata_store

if TYPE_CHECKING:
    from magnetar.broker.config.broker_config import BrokerConfig
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.topic import Topic

log = logging.getLogger(__name__)


def broker_id_of(service_url: str, web_url: str | None) -> str:
    """Pulsar's broker id, ``host:webPort`` (``host:port`` of the binary service without a
    web service)."""
    parts = urlsplit(web_url or service_url)
    return f"{parts.hostname}:{parts.port}"


class _CpuMeter:
    """CPU time this process used between two readings, in percent of one core."""

    def __init__(self) -> None:
        self._cpu = time.process_time()
        self._wall = time.monotonic()

    def read(self) -> float:
        cpu, wall = time.process_time(), time.monotonic()
        used = 100.0 * (cpu - self._cpu) / max(wall - self._wall, 1e-6)
        self._cpu, self._wall = cpu, wall
        return used


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
    cpu = _CpuMeter()
    cores = os.cpu_count() or 1

    def load() -> dict[str, Any]:
        producers = consumers = 0
        for topic in service.topics.values():
            producers += len(topic.producers)
            consumers += sum(len(sub.consumers) for sub in topic.subscriptions.values())
        return {"cpu_usage": cpu.read(), "cpu_limit": 100.0 * cores,
                "num_topics": len(service.topics), "num_producers": producers,
                "num_consumers": consumers, "version": __version__}

    def in_bundle(namespace: str, bundle: BundleRange) -> list[Topic]:
        return [topic for name, topic in service.topics.items()
                if TopicName.parse(name).namespace == namespace
                and bundle.contains(topic_hash(name))]

    def lost(namespace: str, bundle: BundleRange) -> None:
        for topic in in_bundle(namespace, bundle):
            log.info("topic %s: its bundle %s was lost; unloading", topic.name, bundle)
            service.unload_topic(topic)

    async def unload_topics(namespace: str, bundle: BundleRange,
                            moving_to: OwnerData | None) -> None:
        topics = in_bundle(namespace, bundle)
        for topic in topics:
            if moving_to is not None:
                topic.moving_to = (moving_to.service_url, moving_to.service_url_tls)
        closing = [service.unload_topic(topic) for topic in topics]
        await asyncio.gather(*closing, return_exceptions=True)

    def session(event: SessionEvent) -> None:
        if event == SessionEvent.SESSION_LOST and config.zookeeperSessionExpiredPolicy == "shutdown":
            log.error("metadata session expired (zookeeperSessionExpiredPolicy=shutdown): "
                      "stopping the broker")
            if on_shutdown is not None:
                on_shutdown()

    coordinator = ClusterCoordinator(
        store, broker_id_of(service_url, urls.get("webServiceUrl")), me, load,
        default_bundles=config.defaultNumberOfNamespaceBundles,
        report_interval_s=config.loadBalancerReportUpdateMinIntervalMillis / 1000,
        on_lost=lost, dead_owner_wait_s=config.dead_owner_lookup_wait_s())
    coordinator.unload_topics = unload_topics

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


def _shedder(coordinator: ClusterCoordinator, config: BrokerConfig) -> Shedder:
    async def unload(broker_id: str, bundle: str) -> None:
        brokers = await coordinator.registry.live()
        data = brokers.get(broker_id)
        if data is None or not data.web_url:
            return
        namespace, _, bundle_range = bundle.rpartition("/")
        import aiohttp  # the admin layer's HTTP client, only for this call

        url = f"{data.web_url}/admin/v2/namespaces/{namespace}/{bundle_range}/unload"
        async with aiohttp.ClientSession() as session, \
                session.put(url, params={"authoritative": "true"}) as resp:
            if resp.status >= 300:
                raise RuntimeError(f"PUT {url}: HTTP {resp.status}")

    interval = config.magnetarLoadBalancerSheddingIntervalSeconds \
        or 60.0 * config.loadBalancerSheddingIntervalMinutes
    return Shedder(lambda: coordinator.is_leader, coordinator.registry.live, unload, interval,
                   float(config.loadBalancerBrokerOverloadedThresholdPercentage),
                   60.0 * config.loadBalancerSheddingGracePeriodMinutes)


async def leave_cluster(coordinator: ClusterCoordinator) -> None:
    """Release this broker's bundles and registry entry, then close the session. Best
    effort, bounded: with the session lost its keys are gone anyway."""
    log.info("leaving the cluster as %s", coordinator.broker_id)
    try:
        async with asyncio.timeout(10):
            if coordinator.shedder is not None:
                await coordinator.shedder.stop()
            await coordinator.stop()
    except Exception as exc:  # the store is gone already: the session's end frees them
        log.warning("leaving the cluster: %s", exc or type(exc).__name__)
    if coordinator.owns_store:
        await coordinator.store.close()
