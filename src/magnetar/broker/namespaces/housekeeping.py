"""The broker's periodic work and when it runs (Pulsar's ``BrokerService`` monitors:
``startInactivityMonitor``, ``startMessageExpiryMonitor``, ``startBacklogQuotaChecker``...).

`Housekeeping` owns the background tasks started with the broker and cancelled at stop:

- keep-alive pings on every connection (``keepAliveIntervalSeconds``);
- read-cache eviction by age (``managedLedgerCacheEvictionTimeThresholdMillis``);
- closing the segment files nobody used for a while (``magnetarCloseIdleFilesSeconds``), a
  slice at a time;
- topic housekeeping (`run`, every min(retention, message expiry, backlog quota check
  interval)): per loaded persistent topic, `housekeep_topic`: message TTL
  (message_expiry.py), backlog quotas (backlog_quota.py), dedup snapshot (dedup_snapshot.py),
  retention trim, compaction threshold;
- idle-topic unloading (`unload_idle_topics`, ``magnetarTopicUnloadIdleSeconds``), from the
  last-use times it keeps (`touch`, `forget`);
- the sweep of unloaded topics (sweep.py's `IdleTopicSweeper.run_pass`,
  ``magnetarIdleTopicSweepIntervalSeconds``);
- subscription expiry and inactive-topic deletion (inactivity.py's `InactivityMonitor`).

Everything is decided on the broker's event loop; the disk work a topic's housekeeping
needs (the TTL search by publish time, the read of the oldest unacknowledged entry when the
read cache lacks it, retention's ``stat`` and ``unlink`` of segment files) runs on the
storage's reader threads while the loop goes on. So a round is a few coroutines
(`_WORKERS`) taking the topics in turn: a topic whose disk stalls holds up one of them and
its own housekeeping, not the others', and a later round skips a topic whose housekeeping
is still under way. Most topics' housekeeping finishes without waiting for anything, so
the workers hand the loop back once the budget per turn of the loop that the periodic
rounds share is spent (`TurnShare`, turns.py: the inactivity round, the idle-topic sweep
and the rate sample take theirs from it too): a round over 100,000 loaded topics is ~1 s
of work, never one stall of the loop. `run`, `housekeep_topic` and `unload_idle_topics`
return a future done once their work is (awaiting it is optional).
An error is logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from magnetar.broker.heap import topic_names
from magnetar.broker.namespaces.inactivity import InactivityMonitor
from magnetar.broker.topics.topic import PersistentTopic
from magnetar.storage import StorageError
from magnetar.storage.episodes import Episode

if TYPE_CHECKING:
    from magnetar.broker.namespaces.policies import Policies
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.topic import Topic

log = logging.getLogger(__name__)

#: Topics a housekeeping round works on at once (each waits for one disk job at a time).
_WORKERS = 4
#: idle segment files closed per turn of the loop: a round closes every file made a round
#: before it (~20,000 while topics are created: 35-90 ms of the loop in one go)
IDLE_FILES_SLICE = 1000

_F = TypeVar("_F", bound="asyncio.Future[Any]")


def in_use(topic: Topic) -> bool:
    """Whether ``topic`` has a producer (or one waiting for exclusive access) or a consumer."""
    return bool(topic.producers or topic.waiting_exclusive
                or any(sub.consumers for sub in topic.subscriptions.values())
                or getattr(topic, "replicators", None))  # geo-replicated


class Housekeeping:
    """Schedules and runs the broker's periodic work (see the module's docstring)."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        # monotonic time each loaded topic was last looked up or seen in use (idle unloading)
        self.topic_used: dict[str, float] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self._busy: dict[str, asyncio.Future[None]] = {}  # topic -> its housekeeping under way
        self._unloading: set[str] = set()  # topics an idle unload is housekeeping / unloading
        self._work: set[asyncio.Future[Any]] = set()  # rounds and unloads under way
        self.inactivity = InactivityMonitor(service)
        #: how often a housekeeping round let the loop serve others (`TurnShare`)
        self.round_yields = 0

    # ------------------------------------------------------------------ scheduling

    def start(self) -> None:
        """Start the periodic tasks the configuration asks for (on the running loop)."""
        cfg = self.service.config
        self.tasks.append(asyncio.create_task(self._keepalive_loop()))
        self.tasks.append(asyncio.create_task(self._housekeeping_loop()))
        if cfg.managedLedgerCacheEvictionTimeThresholdMillis > 0:
            self.tasks.append(asyncio.create_task(self._cache_eviction_loop()))
        if cfg.magnetarCloseIdleFilesSeconds > 0:
            self.tasks.append(asyncio.create_task(self._idle_files_loop()))
        if cfg.magnetarTopicUnloadIdleSeconds > 0:
            self.tasks.append(asyncio.create_task(self._unload_loop()))
        if cfg.magnetarIdleTopicSweepIntervalSeconds > 0:
            self.tasks.append(asyncio.create_task(self._sweep_loop()))
        self.tasks.append(asyncio.create_task(self._inactivity_loop()))

    def stop(self) -> None:
        """Cancel the periodic tasks and the work they started that is still under way."""
        for task in self.tasks:
            task.cancel()
        for work in list(self._work):
            work.cancel()

    def keep(self, work: _F) -> _F:
        """Hold ``work`` until it is done (the loop keeps only weak references to tasks);
        `stop` cancels it if it is not."""
        self._work.add(work)
        work.add_done_callback(self._work.discard)
        return work

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

    async def _idle_files_loop(self) -> None:
        """Segment files unused for one to two periods are closed (their descriptors free),
        `IDLE_FILES_SLICE` a turn of the loop."""
        interval = self.service.config.magnetarCloseIdleFilesSeconds
        while True:
            await asyncio.sleep(interval)
            closed = 0
            for closed_now in self.service.storage.close_idle_files_in_slices(IDLE_FILES_SLICE):
                closed += closed_now
                await asyncio.sleep(0)
            if closed:
                log.debug("closed %d idle segment files", closed)

    async def _housekeeping_loop(self) -> None:
        cfg = self.service.config
        interval = max(1, min(cfg.retentionCheckIntervalInSeconds,
                              cfg.messageExpiryCheckIntervalInMinutes * 60,
                              cfg.backlogQuotaCheckIntervalInSeconds))
        while True:
            await asyncio.sleep(interval)
            try:
                self.run()  # not awaited: a stalled topic must not hold up the next round
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
                    self.unload_idle_topics(names=names[i : i + 64])  # (not awaited, as `run`)
                except Exception:
                    log.exception("unloading idle topics failed")
                await asyncio.sleep(0)

    async def _inactivity_loop(self) -> None:
        while True:
            await asyncio.sleep(self.inactivity.interval())
            try:
                await self.inactivity.run()
            except Exception:
                log.exception("expiring subscriptions and inactive topics failed")

    async def _sweep_loop(self) -> None:
        interval = self.service.config.magnetarIdleTopicSweepIntervalSeconds
        failing = Episode(log, "sweeping unloaded topics")
        while True:
            await asyncio.sleep(interval)
            try:
                await self.service.sweeper.run_pass()
            except (StorageError, OSError) as exc:  # the data directory not answering
                failing.failed(exc)
                continue
            except Exception:
                log.exception("sweeping unloaded topics failed")
            failing.succeeded()

    # ------------------------------------------------------------------ topic housekeeping

    def run(self, now: float | None = None) -> asyncio.Future[Any]:
        """The periodic work on every loaded persistent topic (see `housekeep_topic`;
        unloaded ones are the idle-topic sweep's), but those whose housekeeping is still
        under way; ``_WORKERS`` topics at a time. ``now`` (epoch seconds) is for tests. The
        future is done once every topic's work is, disk work included."""
        topics = self.service.topics
        now = time.time() if now is None else now
        # the names, copied in C, each checked by the workers: a list comprehension picking
        # the due topics here held the loop ~0.1 s at 100,000 topics; and a tuple of
        # strings is untracked by the first young collection (heap.py), while a list of the
        # topics lived through the round in the old generation, walked by every full one
        due = topic_names(topics)
        busy, busy_at_start = self._busy, set(self._busy)
        queue = iter(due)
        # an idle topic's housekeeping (policies, quotas, dedup, retention) completes
        # without waiting for anything, ~10 us a topic: without handing the loop back the
        # round ran through every loaded topic in one go (about a second at 100,000). The
        # workers take their topics within the periodic rounds' shared budget per turn of
        # the loop (turns.py; a slice of its own per worker held the loop _WORKERS slices
        # in every turn, and each other round's slice came on top)
        share = self.service.turns

        async def worker() -> None:
            for name in queue:
                if await share.pause():  # (before the topic: its time counts in the turn)
                    self.round_yields += 1
                topic = topics.get(name)
                if (isinstance(topic, PersistentTopic) and name not in busy
                        and name not in busy_at_start):
                    await self._housekeep(topic, now)

        return self.keep(asyncio.gather(*(worker() for _ in range(min(_WORKERS, len(due))))))

    def housekeep_topic(self, topic: PersistentTopic, now: float | None = None) -> asyncio.Future[None]:
        """One topic's periodic work, in this order: message TTL, backlog quotas, dedup
        snapshot (and forgetting long-gone producers), retention (deleting consumed
        segments, once that snapshot landed), compaction threshold; after any
        housekeeping of the topic still under way. The future is done once all of it is
        (the disk work runs off the loop); errors are logged, never raised."""
        now = time.time() if now is None else now
        return self.keep(asyncio.ensure_future(self._housekeep(topic, now)))

    async def _housekeep(self, topic: PersistentTopic, now: float) -> None:
        """`housekeep_topic`'s work: one housekeeping of a topic at a time."""
        name = topic.name
        while (previous := self._busy.get(name)) is not None:
            await asyncio.wait([previous])
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._busy[name] = done
        try:
            await self._housekeep_steps(topic, now)
        except Exception:
            log.exception("housekeeping of topic %s failed", name)
        finally:
            if self._busy.get(name) is done:
                del self._busy[name]
            done.set_result(None)

    async def _housekeep_steps(self, topic: PersistentTopic, now: float) -> None:
        """The steps of `housekeep_topic`, each after the disk work of the one before;
        none once the topic is unloaded or its ledger closed meanwhile."""
        service = self.service
        inactive_ms = service.config.brokerDeduplicationProducerInactivityTimeoutMinutes * 60_000
        policies = service.policies.for_topic(topic.topic_name)
        if policies.message_ttl_seconds > 0:
            await service.expirer.expire_messages(topic, policies.message_ttl_seconds, now)
            if not self._loaded(topic):
                return
        await service.backlog_quota.enforce(topic, now)
        if not self._loaded(topic):
            return
        if topic.dedup is not None:
            if topic.dedup.purge_inactive(inactive_ms):
                topic.dedup_unsaved += 1
            service.dedup_snapshots.save(topic)
        # the trim waits for that snapshot to land: replay must not need what it drops
        if await self._snapshot_landed(topic) and self._loaded(topic):
            await self.trim(topic, policies)
        if self._loaded(topic):
            service.compactor.maybe_trigger(topic, service.config.brokerServiceCompactionThresholdInBytes)

    def _loaded(self, topic: PersistentTopic) -> bool:
        """Whether ``topic`` is still the loaded one of its name, its ledger open."""
        return self.service.topics.get(topic.name) is topic and topic.ledger.is_open

    async def _snapshot_landed(self, topic: PersistentTopic) -> bool:
        """Wait until no dedup snapshot of ``topic`` is being written: True if those that
        were all landed (False if one failed: `DedupSnapshots.when_saved`)."""
        snapshots = self.service.dedup_snapshots
        landed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def saved() -> None:
            if not landed.done():
                landed.set_result(None)

        snapshots.when_saved(topic, saved)
        if not landed.done():
            await snapshots.written(topic.name)
        return landed.done()

    @staticmethod
    async def trim(topic: PersistentTopic, policies: Policies) -> None:
        """Retention: delete the topic's consumed segments outside the retention window
        (`ManagedLedger.trim_async`: the files' stat and unlink off the loop; nothing once
        the ledger is closed: an unloaded topic is trimmed by the sweep)."""
        if topic.ledger.is_open:
            await topic.ledger.trim_async(policies.retention_time_seconds,
                                          policies.retention_size_bytes)

    # ------------------------------------------------------------------ idle topics

    def touch(self, name: str, now: float | None = None) -> None:
        """A loaded topic was just looked up or used (``now``: time.monotonic())."""
        self.topic_used[name] = time.monotonic() if now is None else now

    def forget(self, name: str) -> None:
        """A topic left the loaded set."""
        self.topic_used.pop(name, None)

    def unload_idle_topics(self, now: float | None = None,
                           names: list[str] | None = None) -> asyncio.Future[int]:
        """Unload every topic (of ``names``, default all loaded ones) that has had no
        producer and no consumer for magnetarTopicUnloadIdleSeconds (``now``:
        time.monotonic(), for tests); the future gives how many, once they are unloaded.
        An idle loaded topic costs memory (ledger index, cursors, dispatchers) and, until
        its segments are evicted, file descriptors; unloaded, it costs nothing and its next
        use reloads it from storage, as after a restart. Each is housekept (TTL, quotas,
        retention) just before, which also tells the idle-topic sweep when it next needs a
        look, and stays loaded if a client came meanwhile (`BrokerService.unload_if_idle`).
        A topic whose unload is under way already is left to it."""
        service = self.service
        idle = service.config.magnetarTopicUnloadIdleSeconds
        unloading: list[Awaitable[bool]] = []
        if idle > 0:
            now = time.monotonic() if now is None else now
            used = self.topic_used
            for name in list(service.topics) if names is None else names:
                topic = service.topics.get(name)
                if topic is None or name in self._unloading:
                    continue
                if in_use(topic):
                    used[name] = now
                elif now - used.setdefault(name, now) >= idle:
                    try:
                        future = service.unload_if_idle(topic)
                    except Exception:
                        log.exception("unloading topic %s failed", name)
                        continue
                    self._unloading.add(name)
                    future.add_done_callback(partial(self._unload_done, name))
                    unloading.append(future)
        return self.keep(asyncio.ensure_future(self._count_unloaded(unloading)))

    def _unload_done(self, name: str, _future: asyncio.Future[bool]) -> None:
        self._unloading.discard(name)

    async def _count_unloaded(self, unloading: list[Awaitable[bool]]) -> int:
        """How many of the unloads ``unloading`` unloaded their topic (once all are done)."""
        unloaded = 0
        for outcome in await asyncio.gather(*unloading, return_exceptions=True):
            if isinstance(outcome, BaseException):
                log.error("unloading an idle topic failed: %r", outcome)
            elif outcome:
                unloaded += 1
        if unloaded:
            log.debug("unloaded %d idle topics (%d still loaded)", unloaded, len(self.service.topics))
        return unloaded
