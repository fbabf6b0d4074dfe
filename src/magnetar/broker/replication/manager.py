"""`ReplicationManager`: which replicators run (Pulsar's ``PersistentTopic.checkReplication``).

A loaded persistent topic of a namespace whose ``replication_clusters`` lists clusters other
than this broker's runs one `Replicator` for each; a cluster taken out of the list stops its
replicator and drops its cursor; an unloaded topic's replicators stop (the cursors stay, and
the next load resumes from them). The stored topics of replicated namespaces are loaded when
the broker starts and, in a cluster, when it takes a bundle (`preload`): a topic that moved
here with a backlog and no client replicates on. How to reach the remote (URLs, TLS, credentials:
`remote_settings`) is worked out from its cluster record and the broker's ``brokerClient*``
keys each time a replicator connects, so an updated record takes effect at the next try.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from magnetar.broker.replication.remote_admin import ensure_partitioned
from magnetar.broker.replication.remote_settings import (
    RemoteConfigError,
    RemoteSettings,
    remote_settings,
)
from magnetar.broker.replication.replicator import (
    REPL_PREFIX,
    Replicator,
    is_replicator_cursor,
)
from magnetar.broker.replication.snapshots import ReplicatedSubscriptionsController
from magnetar.broker.replication.throttle import ReplicatorThrottle
from magnetar.broker.topic_name import TopicName
from magnetar.broker.topics.topic import PersistentTopic
from magnetar.protocol import pb

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

__all__ = ["ReplicationManager", "is_replicator_cursor"]

log = logging.getLogger(__name__)


class ReplicationManager:
    """The replicators of the broker's loaded topics, by topic name and remote cluster."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.local = service.config.clusterName
        self.replicators: dict[str, dict[str, Replicator]] = {}
        # replicated subscriptions: one controller per replicated topic (snapshots.py)
        self.controllers: dict[str, ReplicatedSubscriptionsController] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._preload: asyncio.Future[None] | None = None
        self._preloads: set[asyncio.Future[None]] = set()  # those of bundles taken here

    def remotes_of(self, topic: PersistentTopic) -> set[str]:
        """The remote clusters ``topic`` is replicated to by its namespace's policy."""
        clusters = self.service.policies.get(topic.topic_name.namespace).replication_clusters
        return {c for c in clusters or () if c != self.local}

    def _settings(self, remote: str) -> RemoteSettings:
        try:
            record = self.service.namespaces.cluster_data(remote)
        except Exception as exc:  # NotFound: the record was deleted meanwhile
            raise RemoteConfigError(f"cluster {remote}: {exc}") from None
        return remote_settings(remote, record, self.service.config)

    async def _local_schema(self, topic: str, version: bytes) -> pb.Schema | None:
        found = await self.service.topic_schemas.get_schema_async(topic, version)
        return found[0] if found is not None else None

    async def _remote_partitions(self, topic: PersistentTopic, remote: str) -> None:
        """A partition replicates into the same partition of the remote partitioned topic,
        created there with the local count when missing."""
        base = topic.topic_name.base
        meta = await self.service.storage.read_metadata(self.service.metadata.get, f"partitioned/{base}")
        if not meta:
            return  # a partition-named topic that is not part of a partitioned topic here
        await ensure_partitioned(self._settings(remote), base, int(meta["partitions"]))

    def topic_loaded(self, topic: PersistentTopic) -> None:
        self.check(topic)

    def check(self, topic: PersistentTopic) -> None:
        """Start and stop ``topic``'s replicators to match its namespace's policy."""
        if not topic.topic_name.is_persistent or self.service.topics.get(topic.name) is not topic:
            return
        wanted = self.remotes_of(topic)
        running = self.replicators.setdefault(topic.name, {})
        for remote in sorted(wanted - running.keys()):
            prepare = partial(self._remote_partitions, topic, remote) if topic.topic_name.is_partition else None
            replicator = Replicator(topic, self.local, remote, partial(self._settings, remote),
                                    prepare, partial(self._local_schema, topic.name),
                                    ReplicatorThrottle(self.service.policies, topic.topic_name),
                                    skip_missing=self.service.config.autoSkipNonRecoverableData)
            running[remote] = replicator
            topic.replicators[remote] = replicator
            replicator.start()
        for remote in sorted(running.keys() - wanted):
            self._stop(topic, running.pop(remote))
        for name in list(topic.ledger.cursors()):  # cursors of clusters no longer listed
            if is_replicator_cursor(name) and name[len(REPL_PREFIX):] not in wanted:
                topic.ledger.delete_cursor(name)
                log.info("replication of %s to %s stopped; cursor dropped",
                         topic.name, name[len(REPL_PREFIX):])
        self._follow_subscriptions(topic, running)
        if not running:
            self.replicators.pop(topic.name, None)

    def _running(self, name: str) -> dict[str, Replicator]:
        return self.replicators.get(name) or {}

    def _follow_subscriptions(self, topic: PersistentTopic, running: dict[str, Replicator]) -> None:
        """Run the topic's replicated-subscriptions controller while it replicates (and
        ``enableReplicatedSubscriptions``); its replicators hand it the markers they skip."""
        controller = self.controllers.get(topic.name)
        if not running or not self.service.config.enableReplicatedSubscriptions:
            if controller is not None:
                self.controllers.pop(topic.name).stop()
            return
        if controller is None:
            controller = self.controllers[topic.name] = ReplicatedSubscriptionsController(
                topic, self.local, self.service.config, partial(self._running, topic.name))
            controller.start()
        for replicator in running.values():
            replicator.on_skipped = partial(controller.inbound, replicator.remote)

    def _stop(self, topic: PersistentTopic, replicator: Replicator) -> None:
        """Stop ``replicator`` now; its task ends in the background."""
        topic.replicators.pop(replicator.remote, None)
        task = replicator.cancel()
        if task is not None:
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    def policies_changed(self, namespace: str) -> None:
        for topic in list(self.service.topics.values()):
            if isinstance(topic, PersistentTopic) and topic.topic_name.namespace == namespace:
                self.check(topic)

    def topic_unloaded(self, topic: PersistentTopic) -> None:
        """Stop ``topic``'s replicators now (before its ledger closes); cursors stay."""
        controller = self.controllers.pop(topic.name, None)
        if controller is not None:
            controller.stop()
        for replicator in self.replicators.pop(topic.name, {}).values():
            self._stop(topic, replicator)

    def start(self) -> None:
        """Load the stored topics of replicated namespaces (as Pulsar loads an owned
        bundle's topics), so that their backlogs replicate without waiting for a client."""
        self._preload = asyncio.ensure_future(self._load_replicated())

    def preload(self, namespace: str, contains: Callable[[str], bool]) -> None:
        """Load the stored topics of ``namespace`` that ``contains`` holds, if it is
        replicated: a bundle this broker has just taken (moved here, or its owner died), so
        that the replicators of its topics resume from their cursors without waiting for a
        client of each (Pulsar's ``loadNamespaceTopics``)."""
        if not self._replicated(namespace):
            return
        task = asyncio.ensure_future(self._load_replicated(namespace, contains))
        self._preloads.add(task)
        task.add_done_callback(self._preloads.discard)

    def _replicated(self, namespace: str) -> bool:
        clusters = self.service.policies.get(namespace).replication_clusters
        return bool({c for c in clusters or ()} - {self.local})

    async def _load_replicated(self, namespace: str | None = None,
                               contains: Callable[[str], bool] | None = None) -> None:
        """Load the stored topics of ``namespace`` (None: of every replicated namespace)
        that ``contains`` holds (None: all)."""
        service = self.service
        namespaces = {namespace} if namespace is not None else {
            ns for tenant in service.namespaces.tenants()
            for ns in service.namespaces.namespaces(tenant) if self._replicated(ns)}
        if not namespaces:
            return
        names = await service.storage.read_metadata(service.stored_topic_names)
        for name in sorted(names):
            if TopicName.parse(name).namespace not in namespaces or name in service.topics \
                    or (contains is not None and not contains(name)):
                continue
            try:
                await service.load_topic(name, create=False)
            except Exception as exc:  # not served here (a cluster), or gone meanwhile
                log.info("replicated topic %s not loaded: %s", name, exc)

    async def stop(self) -> None:
        preloads = [*self._preloads, *([self._preload] if self._preload is not None else [])]
        for task in preloads:
            task.cancel()
        await asyncio.gather(*preloads, return_exceptions=True)
        for controller in self.controllers.values():
            controller.stop()
        self.controllers.clear()
        for name in list(self.replicators):
            for replicator in self.replicators.pop(name).values():
                await replicator.stop()
        if self._stopping:
            await asyncio.gather(*list(self._stopping), return_exceptions=True)
