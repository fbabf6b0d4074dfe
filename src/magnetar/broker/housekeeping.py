"""The broker's periodic work and when it runs (Pulsar's ``BrokerService`` monitors:
``startInactivityMonitor``, ``startMessageExpiryMonitor``, ``startBacklogQuotaChecker``...).

`Housekeeping` owns the background tasks started with the broker and cancelled at stop:

- keep-alive pings on every connection (``keepAliveIntervalSeconds``);
- read-cache eviction by age (``managedLedgerCacheEvictionTimeThresholdMillis``);
- topic housekeeping (`run`, every min(retention, message expiry, backlog quota check
  interval)): per loaded persistent topic, `housekeep_topic`: message TTL
  (message_expiry.py), backlog quotas (backlog_quota.py), dedup snapshot (dedup_snapshot.py),
  retention trim, compaction threshold;
- idle-topic unloading (`unload_idle_topics`, ``magnetarTopicUnloadIdleSeconds``), from the
  last-use times it keeps (`touch`, `forget`);
- the sweep of unloaded topics (sweep.py's `IdleTopicSweeper.run_pass`,
  ``magnetarIdleTopicSweepIntervalSeconds``).

Everything runs on the broker's event loop; an error in one round is logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from magnetar.broker.topic import PersistentTopic

if TYPE_CHECKING:
    from magnetar.broker.policies import Policies
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)


class Housekeeping:
    """Schedules and runs the broker's periodic work (see the module's docstring)."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        # monotonic time each loaded topic was last looked up or seen in use (idle unloading)
        self.topic_used: dict[str, float] = {}
        self.tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ scheduling

    def start(self) -> None:
        """Start the periodic tasks the configuration asks for (on the running loop)."""
        cfg = self.service.config
        self.tasks.append(asyncio.create_task(self._keepalive_loop()))
        self.tasks.append(asyncio.create_task(self._housekeeping_loop()))
        if cfg.managedLedgerCacheEvictionTimeThresholdMillis > 0:
            self.tasks.append(asyncio.create_task(self._cache_eviction_loop()))
        if cfg.magnetarTopicUnloadIdleSeconds > 0:
            self.tasks.append(asyncio.create_task(self._unload_loop()))
        if cfg.magnetarIdleTopicSweepIntervalSeconds > 0:
            self.tasks.append(asyncio.create_task(self._sweep_loop()))

    def stop(self) -> None:
        """Cancel the periodic tasks."""
        for task in self.tasks:
            task.cancel()

    async def _keepalive_loop(self) -> None:
        interval = max(1, self.service.config.keepAliveIntervalSeconds)
        while True:
            await asyncio.sleep(interval)
            for cnx in list(self.service.connections):
                cnx.keepalive_tick()

    async def _cache_eviction_loop(self) -> None:
        """Entries past managedLedgerCacheEvictionTimeThresholdMillis leave the read cache
        even when no append comes to push them out."""
        age = self.service.config.managedLedgerCacheEvictionTimeThresholdMillis / 1000
        while True:
            await asyncio.sleep(age)
            self.service.storage.evict_expired_cache()

    async def _housekeeping_loop(self) -> None:
        cfg = self.service.config
        interval = max(1, min(cfg.retentionCheckIntervalInSeconds,
                              cfg.messageExpiryCheckIntervalInMinutes * 60,
                              cfg.backlogQuotaCheckIntervalInSeconds))
        while True:
            await asyncio.sleep(interval)
            try:
                self.run()
            except Exception:
                log.exception("housekeeping failed")

    async def _unload_loop(self) -> None:
        idle = self.service.config.magnetarTopicUnloadIdleSeconds
        interval = max(1.0, min(60.0, idle / 2))
        while True:
            await asyncio.sleep(interval)
            names = list(self.service.topics)
            # unloading costs ~0.1 ms a topic, plus its housekeeping: yield often
            for i in range(0, len(names), 64):
                try:
                    self.unload_idle_topics(names=names[i : i + 64])
                except Exception:
                    log.exception("unloading idle topics failed")
                await asyncio.sleep(0)

    async def _sweep_loop(self) -> None:
        interval = self.service.config.magnetarIdleTopicSweepIntervalSeconds
        while True:
            await asyncio.sleep(interval)
            try:
                await self.service.sweeper.run_pass()
            except Exception:
                log.exception("sweeping unloaded topics failed")

    # ------------------------------------------------------------------ topic housekeeping

    def run(self, now: float | None = None) -> None:
        """The periodic work on every loaded persistent topic (see `housekeep_topic`;
        unloaded ones are the idle-topic sweep's). ``now`` (epoch seconds) is for tests."""
        topics = self.service.topics
        now = time.time() if now is None else now
        for topic in list(topics.values()):
            if isinstance(topic, PersistentTopic) and topics.get(topic.name) is topic:
                self.housekeep_topic(topic, now)

    def housekeep_topic(self, topic: PersistentTopic, now: float | None = None) -> None:
        """One topic's periodic work, in this order: message TTL, backlog quotas, dedup
        snapshot (and forgetting long-gone producers), retention (deleting consumed
        segments). Errors are logged, never raised."""
        service = self.service
        now = time.time() if now is None else now
        inactive_ms = service.config.brokerDeduplicationProducerInactivityTimeoutMinutes * 60_000
        try:
            policies = service.policies.get(topic.topic_name.namespace)
            if policies.message_ttl_seconds > 0:
                service.expirer.expire_messages(topic, policies.message_ttl_seconds, now)
            service.backlog_quota.enforce(topic, now)
            if topic.dedup is not None:
                if topic.dedup.purge_inactive(inactive_ms):
                    topic.dedup_unsaved += 1
                service.dedup_snapshots.save(topic)
            # the trim waits for that snapshot to land: replay must not need what it drops
            service.dedup_snapshots.when_saved(topic, lambda: self.trim(topic, policies))
            service.compactor.maybe_trigger(topic, service.config.brokerServiceCompactionThresholdInBytes)
        except Exception:
            log.exception("housekeeping of topic %s failed", topic.name)

    @staticmethod
    def trim(topic: PersistentTopic, policies: Policies) -> None:
        """Retention: delete the topic's consumed segments outside the retention window
        (nothing once the ledger is closed: an unloaded topic is trimmed by the sweep)."""
        if topic.ledger.is_open:
            topic.ledger.trim(policies.retention_time_seconds, policies.retention_size_bytes)

    # ------------------------------------------------------------------ idle topics

    def touch(self, name: str, now: float | None = None) -> None:
        """A loaded topic was just looked up or used (``now``: time.monotonic())."""
        self.topic_used[name] = time.monotonic() if now is None else now

    def forget(self, name: str) -> None:
        """A topic left the loaded set."""
        self.topic_used.pop(name, None)

    def unload_idle_topics(self, now: float | None = None, names: list[str] | None = None) -> int:
        """Unload every topic (of ``names``, default all loaded ones) that has had no
        producer and no consumer for magnetarTopicUnloadIdleSeconds (``now``:
        time.monotonic(), for tests); returns how many. An idle loaded topic costs memory
        (ledger index, cursors, dispatchers) and, until its segments are evicted, file
        descriptors; unloaded, it costs nothing and its next use reloads it from storage,
        as after a restart. Each is housekept (TTL, quotas, retention) just before, which
        also tells the idle-topic sweep when it next needs a look."""
        service = self.service
        idle = service.config.magnetarTopicUnloadIdleSeconds
        if idle <= 0:
            return 0
        now = time.monotonic() if now is None else now
        used = self.topic_used
        unloaded = 0
        for name in list(service.topics) if names is None else names:
            topic = service.topics.get(name)
            if topic is None:
                continue
            if topic.producers or topic.waiting_exclusive or any(
                sub.consumers for sub in topic.subscriptions.values()
            ):
                used[name] = now
            elif now - used.setdefault(name, now) >= idle:
                try:
                    service.unload_topic(topic, housekeep=True)
                except Exception:
                    log.exception("unloading topic %s failed", name)
                unloaded += 1
        if unloaded:
            log.debug("unloaded %d idle topics (%d still loaded)", unloaded, len(service.topics))
        return unloaded
