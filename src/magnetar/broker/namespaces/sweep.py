"""Housekeeping for persistent topics that are not loaded: retention, message TTL and
backlog-quota eviction apply to every topic, busy or idle.

The broker unloads idle topics (``magnetarTopicUnloadIdleSeconds``), and
`BrokerService.run_housekeeping` only visits loaded ones; without this sweep an idle topic
would keep consumed data past its retention, and a backlog past its TTL, until its next use.

How a pass (`IdleTopicSweeper.run_pass`, every ``magnetarIdleTopicSweepIntervalSeconds``)
keeps its cost bounded with thousands of idle topics:

- The persistent topics come from the metadata store (``topics/...`` keys), listed in a
  worker thread. Loaded topics are skipped: the regular housekeeping covers them.
- Each topic housekept while loaded (by this sweep, or just before an idle unload) gets a
  *due time*: when TTL, a time quota or the retention window can next change something
  (`next_due`; infinite when only new messages or consumers could). Until then, and while
  its namespace policies stay the same, the pass skips it with a dict lookup.
- A topic without a due time (first pass after a start, or policies changed) is first
  judged from its segment files alone (`magnetar.storage.offline.segment_files`, one
  ``scandir`` per topic, in a worker thread, 256 topics per call): with no TTL or time
  quota to apply, a single segment or an oldest segment still inside the retention window
  means nothing to do before a known time, without loading anything.
- The remaining topics are loaded (`BrokerService.load_topic`: the ledger's recovery scan
  and stored state read off the event loop), housekept with exactly the rules of loaded
  topics (`BrokerService.housekeep_topic`: its disk reads, stats and unlinks off the loop
  too) and unloaded (`BrokerService.unload_if_idle`), at most
  ``magnetarIdleTopicSweepMaxTopics`` per pass; the next pass resumes after the last one
  loaded (round robin). The pass yields to the event loop after each load and every 256
  names, so clients are served in between.

Concurrency: the topic is loaded (in ``service.topics``) while it is housekept, so clients
may come in between: a client that asked for the topic before sees it loaded (the sweep
skips it); one whose own `load_topic` began while the sweep's was under way
(`service.loading`) shares the ledger's scan, and the sweep then leaves the topic loaded for
it; one that attaches a producer or consumer while it is housekept keeps it loaded too;
one that asks after the unload loads it again, as after any unload. A topic a client's
`load_topic` is loading is left alone like a loaded one.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from magnetar.broker.errors import BrokerError
from magnetar.broker.heap import add_in_slices
from magnetar.broker.namespaces.policies import Policies
from magnetar.broker.topic_name import TopicName, ledger_name
from magnetar.broker.topics.topic import PersistentTopic
from magnetar.storage import Position, StorageError
from magnetar.storage.offline import SegmentFile, segment_files

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

_EVICTION = "consumer_backlog_eviction"
_CHUNK = 256
#: names added per slice to the set of the stored topics' names at a pass's start
_LISTED_SLICE = 5000
_LAST_ENTRY = 2**62


class Due(NamedTuple):
    """When an unloaded topic may next need housekeeping, under which policies."""

    at: float
    policies: Policies


@dataclass
class SweepStats:
    """What one pass did."""

    topics: int = 0  # persistent topics listed
    loaded: int = 0  # loaded, housekept and unloaded again
    judged_from_files: int = 0  # given a due time from their segment files alone
    not_due: int = 0  # skipped: a due time in the future
    deferred: int = 0  # due, but over the pass's budget: next pass


def _expiry_seconds(policies: Policies) -> list[float]:
    """The ages past which unacknowledged messages go: TTL, and the time quota under the
    eviction policy (checked when the oldest is older than the quota)."""
    ages: list[float] = []
    if policies.message_ttl_seconds > 0:
        ages.append(float(policies.message_ttl_seconds))
    if policies.backlog_quota_policy == _EVICTION and policies.backlog_quota_limit_seconds > 0:
        ages.append(float(policies.backlog_quota_limit_seconds))
    return ages


def needs_cursors(policies: Policies) -> bool:
    """True when the policies act on backlog (TTL, quota eviction), which only the loaded
    ledger and cursors tell."""
    return bool(_expiry_seconds(policies)) or (
        policies.backlog_quota_policy == _EVICTION and policies.backlog_quota_limit_bytes >= 0
    )


def due_from_files(policies: Policies, files: list[SegmentFile] | None, now: float) -> float | None:
    """A due time judged from segment files alone, or None when the topic must be loaded to
    tell (retention may delete something now, or backlog rules apply)."""
    if files is None:
        return math.inf  # no ledger: nothing stored yet
    if needs_cursors(policies):
        return None
    if len(files) < 2:
        return math.inf  # the last segment is never trimmed
    retention_s = policies.retention_time_seconds
    size_limit = policies.retention_size_bytes
    oldest = files[0]
    expired = retention_s >= 0 and now - oldest.mtime >= retention_s
    over = size_limit >= 0 and sum(f.size for f in files) > size_limit
    if expired or over:
        return None  # deletable if consumed: load to see the cursors
    return oldest.mtime + retention_s if retention_s >= 0 else math.inf


async def next_due(topic: PersistentTopic, policies: Policies, now: float) -> float:
    """When housekeeping may next change something on ``topic`` if nothing is published or
    acknowledged meanwhile: the oldest backlog reaching its TTL or time quota, or the oldest
    consumed segment leaving the retention window. Call right after housekeeping it. The
    oldest backlog entry's publish time comes from memory or the read cache, else from the
    storage's reader threads, as does the segment file's modification time."""
    due = math.inf
    ledger = topic.ledger
    ages = _expiry_seconds(policies)
    if ages:
        try:
            published = await topic.oldest_backlog_publish_time_async()
        except StorageError:
            published = None
        if published is not None:
            due = min(due, published + min(ages))
    retention_s = policies.retention_time_seconds
    ids = ledger.segment_ids()
    if retention_s > 0 and len(ids) >= 2:
        # trim stopped at the oldest segment: if it is consumed, only the window keeps it
        first_id = ids[0]
        count = ledger.count_between(Position(first_id, 0), Position(first_id, _LAST_ENTRY))
        consumed = ledger.slowest_mark_delete() if ledger.cursors() else ledger.last_confirmed()
        if count and consumed is not None and Position(first_id, count - 1) <= consumed:
            mtime = await ledger.segment_mtime_async(first_id)
            due = min(due, (now if mtime is None else mtime) + retention_s)
    return due


def _due_inputs(topic: PersistentTopic) -> tuple[object, ...]:
    """What `next_due` depends on that clients change: new entries, acknowledgements,
    trims."""
    ledger = topic.ledger
    return (ledger.last_confirmed(), topic.oldest_backlog_position(),
            ledger.slowest_mark_delete(), ledger.segment_ids()[:1])


class IdleTopicSweeper:
    """Runs housekeeping on unloaded persistent topics, a bounded number per pass."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._due: dict[str, Due] = {}
        self._names: dict[str, TopicName] = {}
        self._resume: str | None = None

    # -- bookkeeping the service calls ----------------------------------------------------

    async def record(self, topic: PersistentTopic, now: float) -> None:
        """``topic`` was just housekept and is being unloaded: remember its due time (its
        reads off the loop; if the topic changed meanwhile, nothing is known of it)."""
        policies = self.service.policies.for_topic(topic.topic_name)
        before = _due_inputs(topic)
        due = await next_due(topic, policies, now)
        if _due_inputs(topic) == before:
            self._due[topic.name] = Due(due, policies)
        else:
            self._due.pop(topic.name, None)

    def forget(self, name: str) -> None:
        """Nothing is known any more about ``name`` (unloaded without housekeeping, deleted)."""
        self._due.pop(name, None)

    def due_time(self, name: str) -> float | None:
        """The recorded due time of an unloaded topic (None: unknown, or recorded under
        policies that have changed since), for tests and stats."""
        due = self._due.get(name)
        return None if due is None or self._stale(name) else due.at

    # -- the pass -----------------------------------------------------------------------

    async def run_pass(self, now: float | None = None, max_topics: int | None = None) -> SweepStats:
        """One sweep over the unloaded persistent topics (``now``: epoch seconds, for tests;
        ``max_topics``: loads allowed, default magnetarIdleTopicSweepMaxTopics)."""
        service = self.service
        budget = service.config.magnetarIdleTopicSweepMaxTopics if max_topics is None else max_topics
        names = await asyncio.to_thread(self._persistent_topics)
        stats = SweepStats(topics=len(names))
        # a set of every stored topic's name, made in slices (in one call, 100,000 names
        # held the loop ~10 ms, on top of the other rounds starting at the same mark)
        listed: set[str] = set()
        await add_in_slices(listed, names, _LISTED_SLICE, service.turns.pause)
        for stale in [n for n in self._due if n not in listed]:
            del self._due[stale]
        for stale in [n for n in self._names if n not in listed]:
            del self._names[stale]
        start = bisect.bisect_right(names, self._resume) if self._resume is not None else 0
        order = names[start:] + names[:start]
        for i in range(0, len(order), _CHUNK):
            await service.turns.pause()  # (the periodic rounds' budget per turn, turns.py)
            chunk = order[i : i + _CHUNK]
            clock = time.time() if now is None else now
            unknown = [n for n in chunk if n not in service.topics and self._stale(n)]
            if unknown:
                files = await asyncio.to_thread(self._segment_files, unknown)
                clock = time.time() if now is None else now
                for name in unknown:
                    if name not in files:
                        continue  # could not list: load it
                    policies = self._policies(name)
                    due = due_from_files(policies, files[name], clock)
                    if due is not None:
                        self._due[name] = Due(due, policies)
                        stats.judged_from_files += 1
            for name in chunk:
                if name in service.topics:
                    continue
                known = self._due.get(name)
                if known is not None and not self._stale(name) and known.at > clock:
                    stats.not_due += 1
                    continue
                if stats.loaded >= budget:
                    stats.deferred += 1
                    continue
                if await self.sweep_topic(name, clock):
                    stats.loaded += 1
                    self._resume = name
                    await asyncio.sleep(0)  # let clients in between two topics
                    clock = time.time() if now is None else now
        if stats.loaded or stats.deferred:
            log.info("idle topic sweep: %d topics housekept, %d deferred to the next pass, "
                     "%d not due", stats.loaded, stats.deferred, stats.not_due)
        return stats

    async def sweep_topic(self, name: str, now: float | None = None) -> bool:
        """Load ``name`` (off the loop, `BrokerService.load_topic`), then housekeep it as a
        loaded topic, note its next due time and unload it (`BrokerService.unload_if_idle`).
        False if it is loaded, being loaded (or gone) and was left alone; a client that
        began loading it, or attached to it, meanwhile keeps it loaded."""
        service = self.service
        if name in service.topics or name in service.loading:
            return False
        now = time.time() if now is None else now
        try:
            topic = await service.load_topic(name, create=False)
        except BrokerError:  # deleted meanwhile
            self._due.pop(name, None)
            return False
        except StorageError as exc:
            log.error("idle topic sweep: cannot load %s: %s", name, exc)
            self._due[name] = Due(now + service.config.magnetarIdleTopicSweepIntervalSeconds,
                                  self._policies(name))
            return False
        if not isinstance(topic, PersistentTopic):
            return False
        if name in service.loading:  # a client is loading it too: it stays loaded for them
            return True
        try:
            # housekept (its disk work off the loop), then unloaded unless a client came
            # meanwhile, its ledger closed (off the loop): a slow disk slows the pass only
            await service.unload_if_idle(topic, now)
        except (StorageError, OSError) as exc:  # expected when the disk fails: no traceback
            log.error("idle topic sweep: unloading %s failed: %s", name, exc)
            self._due[name] = Due(now + service.config.magnetarIdleTopicSweepIntervalSeconds,
                                  self._policies(name))
        except Exception:  # one broken topic must not stop the pass
            log.exception("idle topic sweep: unloading %s failed", name)
            self._due[name] = Due(now + service.config.magnetarIdleTopicSweepIntervalSeconds,
                                  self._policies(name))
        return True

    # -- helpers --------------------------------------------------------------------------

    def _stale(self, name: str) -> bool:
        due = self._due.get(name)
        if due is None:
            return True
        policies = self._policies(name)
        # the same object while the policies stay the same (PolicyStore caches them): a
        # dataclass comparison of every field, per unloaded topic and pass, was most of a
        # pass's time on the loop
        return due.policies is not policies and due.policies != policies

    def _policies(self, name: str) -> Policies:
        topic = self._names.get(name)
        if topic is None:
            topic = self._names[name] = TopicName.parse(name)
        return self.service.policies.for_topic(topic)

    def _persistent_topics(self) -> list[str]:
        """Every persistent topic the metadata store knows, in name order (worker thread):
        their keys only. Reading and parsing every topic's value as well held the GIL for
        most of a second at 100,000 topics, every pass, and the event loop waited for it
        after each of its system calls (sends of 60-500 ms every 60 s)."""
        cut = len("topics/")
        return [key[cut:] for key in self.service.metadata.keys("topics/persistent://")]

    def _segment_files(self, names: list[str]) -> dict[str, list[SegmentFile] | None]:
        """The segment files of each topic's ledger (worker thread: only reads)."""
        storage = self.service.storage
        out: dict[str, list[SegmentFile] | None] = {}
        failed: list[tuple[str, Exception]] = []
        for name in names:
            try:
                out[name] = segment_files(storage, ledger_name(TopicName.parse(name)))
            except (OSError, StorageError) as exc:
                failed.append((name, exc))
        if failed:  # one line for the lot (a data directory not answering fails them all)
            log.warning("idle topic sweep: cannot list the segments of %d topics (%s: %s%s)",
                        len(failed), failed[0][0], failed[0][1],
                        "; ..." if len(failed) > 1 else "")
        return out
