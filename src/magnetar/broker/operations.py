"""`AdminOperations`: what the admin API does to topics and subscriptions through the
service: terminate, delete (a partitioned topic with its partitions), stats, and the cursor
operations of the subscription endpoints (create, reset by id or time, skip, clear backlog,
delete); a change of policies applied to the loaded topics, and in a cluster the
bundle of a topic an admin call is about taken here when it is free. An unloaded topic is loaded off the loop (`load_topic`) and the operation runs in
the turn the load ends; stored state is answered once it is stored. A mixin of
`BrokerService`, over the fields and topic-registry methods it declares; also the listing of
a namespace's topics (GetTopicsOfNamespace, the admin list)."""

from __future__ import annotations

import asyncio
import bisect
from typing import TYPE_CHECKING, Any

from magnetar.broker.errors import BrokerError
from magnetar.broker.namespaces.housekeeping import Housekeeping
from magnetar.broker.namespaces.policies import PolicyStore
from magnetar.broker.namespaces.sweep import IdleTopicSweeper
from magnetar.broker.subscriptions.subscription import PersistentSubscription
from magnetar.broker.topic_name import TopicName, ledger_name
from magnetar.broker.topics.compaction import Compactor
from magnetar.broker.topics.dedup_snapshot import DedupSnapshots
from magnetar.broker.topics.listing import topics_in_namespace
from magnetar.broker.topics.topic import (
    PersistentTopic,
    Topic,
)
from magnetar.protocol import pb
from magnetar.storage import (
    ManagedLedgerFactory,
    MetadataStore,
    Position,
)

_PERSISTENT_MODES = (pb.CommandGetTopicsOfNamespace.PERSISTENT, pb.CommandGetTopicsOfNamespace.ALL)
#: the modes that list the loaded non-persistent topics too
_LIVE_MODES = (pb.CommandGetTopicsOfNamespace.NON_PERSISTENT, pb.CommandGetTopicsOfNamespace.ALL)

if TYPE_CHECKING:
    from magnetar.broker.cluster.coordinator import ClusterCoordinator
    from magnetar.broker.replication.manager import ReplicationManager


class AdminOperations:
    """Topic and subscription operations of the admin API; see the module docstring."""

    # what the operations use of the service (set up by `BrokerService.__init__`)
    storage: ManagedLedgerFactory
    metadata: MetadataStore
    topics: dict[str, Topic]
    deleting: set[str]
    compactor: Compactor
    dedup_snapshots: DedupSnapshots
    housekeeping: Housekeeping
    sweeper: IdleTopicSweeper
    policies: PolicyStore
    cluster: ClusterCoordinator | None
    replication: ReplicationManager

    # the topic registry's (`BrokerService`)
    def check_topic_name(self, name: str) -> TopicName:
        raise NotImplementedError

    async def load_topic(self, name: str, create: bool = True) -> Topic:
        raise NotImplementedError

    async def claim_topic(self, name: str) -> None:
        """In a cluster, an admin call about a persistent topic takes its bundle here if it
        is free and not placed elsewhere (an owner loads its topics on demand);
        ServiceNotReady if another broker keeps it."""
        if self.cluster is not None and name.startswith("persistent://"):
            claim = self.cluster.claim(name)
            if claim is not None:
                await claim

    def policies_changed(self, namespace: str) -> None:
        """The policies of ``namespace`` (or of one of its topics) changed: its loaded
        topics apply them now (a publish throttle lifted, blocked dispatchers woken)."""
        for topic in list(self.topics.values()):
            if topic.topic_name.namespace == namespace:
                topic.limits.refresh()
                for sub in topic.subscriptions.values():
                    if isinstance(sub, PersistentSubscription) and sub.dispatcher is not None:
                        sub.dispatcher.schedule()
        self.replication.policies_changed(namespace)

    async def admin_topic(self, name: str) -> Topic:
        """The topic an admin operation is about, loaded (never created): in a cluster,
        its bundle taken here first if it is free (`claim_topic`)."""
        await self.claim_topic(name)
        return await self.load_topic(name, create=False)

    async def terminate_topic(self, name: str) -> Position | None:
        """Terminate a persistent topic (loaded off the loop if need be); its flag is
        stored off the loop too (`PersistentTopic.terminate`)."""
        topic = await self.admin_topic(name)
        if not isinstance(topic, PersistentTopic):
            raise BrokerError(pb.NotAllowedError, "only persistent topics can be terminated")
        return await topic.terminate()

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its data, subscriptions and dedup state (clients still
        attached are disconnected). A partitioned topic's name deletes every partition
        and the partitioned metadata. TopicNotFound if there is no such topic.

        The topic leaves memory at once (its clients are closed, its ledger is closed to
        them); the metadata reads and deletes, the ledger's files and rows and the
        compacted view's are awaited off the loop. Meanwhile the topic cannot be loaded
        again (ServiceNotReady, which clients retry)."""
        topic_name = self.check_topic_name(name)
        key = str(topic_name)
        read, write = self.storage.read_metadata, self.storage.write_metadata
        partitioned = await read(self.metadata.get, f"partitioned/{key}")
        if partitioned is not None:
            for i in range(int(partitioned["partitions"])):
                partition = f"{key}-partition-{i}"
                if (partition in self.topics
                        or await read(self.metadata.get, f"topics/{partition}") is not None):
                    await self.delete_topic(partition)
            await write(self.metadata.delete, f"partitioned/{key}")
            await self.policies.clear_topic(topic_name)
            return
        self.deleting.add(key)
        try:
            topic = self.topics.pop(key, None)
            self.housekeeping.forget(key)
            self.sweeper.forget(key)
            self.compactor.forget(key)
            if topic is not None:
                topic.close_all()
                if isinstance(topic, PersistentTopic):
                    self.replication.topic_unloaded(topic)
                for sub in topic.subscriptions.values():
                    if isinstance(sub, PersistentSubscription):
                        sub.close_dispatcher()
            compacted = asyncio.ensure_future(self.compactor.delete(key))
            try:
                if not topic_name.is_persistent:
                    if topic is None:
                        raise BrokerError(pb.TopicNotFound, f"topic {key} does not exist")
                    return
                stored = await self.storage.delete_async(ledger_name(topic_name))
                known = await write(self.metadata.delete, f"topics/{key}")
                self.dedup_snapshots.delete(key)
                if topic is None and not known and not stored:
                    raise BrokerError(pb.TopicNotFound, f"topic {key} does not exist")
                if not topic_name.is_partition:  # a topic's own policies go with it
                    await self.policies.clear_topic(topic_name)
            finally:
                await compacted
        finally:
            self.deleting.discard(key)

    async def topic_stats(self, name: str) -> dict[str, Any]:
        return (await self.admin_topic(name)).stats()

    # ------------------------------------------------------------------ cursor operations
    # (what the admin API's subscription endpoints call; an unloaded topic is loaded off
    # the loop, `load_topic`, and the operation itself runs in the turn the load ends)

    async def durable_subscription(self, topic_name: str, subscription: str) -> PersistentSubscription:
        topic = await self.admin_topic(topic_name)
        sub = topic.subscriptions.get(subscription)
        if not isinstance(sub, PersistentSubscription):
            raise BrokerError(
                pb.SubscriptionNotFound, f"subscription {subscription} not found on {topic_name}"
            )
        return sub

    async def create_subscription(self, topic_name: str, subscription: str, earliest: bool = False) -> None:
        topic = await self.admin_topic(topic_name)
        if not isinstance(topic, PersistentTopic):
            raise BrokerError(pb.NotAllowedError, "only persistent topics keep subscriptions")
        if subscription not in topic.subscriptions:
            cursor = await topic.ledger.open_cursor_async(
                subscription, "earliest" if earliest else "latest")  # stored off the loop
            if subscription not in topic.subscriptions and not cursor.closed:
                topic.subscriptions[subscription] = PersistentSubscription(
                    topic, subscription, cursor, durable=True)

    async def reset_cursor(self, topic_name: str, subscription: str, ledger_id: int, entry_id: int) -> None:
        """Move a subscription to a message id (its consumers reconnect, as on Seek);
        answered once the cursor's new position is stored (off the loop)."""
        sub = await self.durable_subscription(topic_name, subscription)
        sub.seek_to_id(Position(ledger_id, entry_id))
        sub.disconnect_consumers()
        await sub.cursor.persist_async()

    async def reset_cursor_by_time(self, topic_name: str, subscription: str, publish_time_ms: int) -> None:
        sub = await self.durable_subscription(topic_name, subscription)
        await sub.seek_to_time_async(publish_time_ms)
        sub.disconnect_consumers()
        await sub.cursor.persist_async()

    async def skip_messages(self, topic_name: str, subscription: str, count: int) -> int:
        """Acknowledge the next ``count`` unacknowledged entries; returns how many were skipped."""
        sub = await self.durable_subscription(topic_name, subscription)
        skipped: list[Position] = []
        for position in sub.cursor.unacked_positions():
            if len(skipped) >= count:
                break
            skipped.append(position)
        if skipped:
            sub.cursor.delete(skipped)
            if sub.dispatcher is not None:
                sub.dispatcher.rewind()
            await sub.cursor.persist_async()  # answered once stored (off the loop)
        return len(skipped)

    async def clear_backlog(self, topic_name: str, subscription: str) -> None:
        sub = await self.durable_subscription(topic_name, subscription)
        last = sub.topic.ledger.last_confirmed()
        if last is not None:
            sub.cursor.mark_delete(last)
            if sub.dispatcher is not None:
                sub.dispatcher.rewind()
            await sub.cursor.persist_async()  # answered once stored (off the loop)

    async def delete_subscription(self, topic_name: str, subscription: str, force: bool = False) -> None:
        """Delete a durable subscription; with ``force``, its consumers are disconnected first."""
        sub = await self.durable_subscription(topic_name, subscription)
        if sub.consumers and not force:
            raise BrokerError(pb.ConsumerBusy, f"subscription {subscription} has active consumers")
        if sub.consumers:
            sub.disconnect_consumers()
            sub.close_dispatcher()
        deleting = sub.topic.delete_subscription(subscription)
        if deleting is not None:  # answered once the cursor's row is gone (off the loop)
            await asyncio.wrap_future(deleting)

    def topics_of_namespace(
        self, namespace: str, mode: int, pattern: str | None
    ) -> tuple[list[str], bool]:
        """The topics of a namespace (GetTopicsOfNamespace's ``mode``), filtered by
        ``pattern`` when RE2 can run it; (names, whether the pattern was applied)."""
        stored = self.stored_topic_names(namespace) if mode in _PERSISTENT_MODES else set()
        return self.namespace_topics(stored, namespace, mode, pattern)

    async def topics_of_namespace_async(
        self, namespace: str, mode: int, pattern: str | None
    ) -> tuple[list[str], bool]:
        """`topics_of_namespace` on the storage's threads: the metadata store listed, the
        names filtered and sorted there (at 100,000 topics ~150 ms of work, which held
        the event loop); only a copy of the loaded topics' names is taken on the loop,
        for the non-persistent ones (`listing.py` on why the sort goes in slices)."""
        live: tuple[str, ...] = ()
        if mode in _LIVE_MODES:
            live = tuple(self.topics)  # (a copy in C: the thread must not walk the dict)
        return await self.storage.read_metadata(self._listed, namespace, mode, pattern, live)

    def _listed(self, namespace: str, mode: int, pattern: str | None,
                live: tuple[str, ...]) -> tuple[list[str], bool]:
        """`topics_of_namespace_async`'s part on a reader thread (metadata store reads and
        ``live``, a copy of the loaded topics' names, only)."""
        stored = self.stored_topic_names(namespace) if mode in _PERSISTENT_MODES else set()
        return self.namespace_topics(stored, namespace, mode, pattern, live)

    def stored_topic_names(self, namespace: str | None = None) -> set[str]:
        """Every persistent topic the metadata store knows (only ``namespace``'s keys read, if
        given), partitions included. Only metadata store calls: safe in a worker thread."""
        under = "" if namespace is None else f"{namespace}/"
        skip = len("topics/")
        names = {key[skip:] for key in self.metadata.keys(f"topics/persistent://{under}")}
        names.update(self._stored_partitions(under, None))
        return names

    def _stored_partitions(self, under: str, after: str | None) -> list[str]:
        """The partitions of the partitioned topics stored under ``under`` (past ``after``)."""
        names: list[str] = []
        for key, meta in self.metadata.list(f"partitioned/persistent://{under}").items():
            base = key[len("partitioned/"):]
            parts = (f"{base}-partition-{i}" for i in range(int(meta["partitions"])))
            names.extend(parts if after is None else (n for n in parts if n > after))
        return names

    def stored_topic_page(self, namespace: str, after: str | None, limit: int) -> list[str]:
        """At least the first ``limit`` persistent topics of ``namespace`` (in name order)
        past ``after`` the metadata store knows, partitions included (unsorted, maybe a
        few more): read as a range of keys, not the whole namespace. Safe in a worker
        thread."""
        prefix = f"topics/persistent://{namespace}/"
        skip = len("topics/")
        found: list[str] = []
        cursor = None if after is None else "topics/" + after
        while len(found) < limit:
            keys = self.metadata.keys(prefix, cursor, limit)
            found.extend(topics_in_namespace([k[skip:] for k in keys], namespace, None)[0])
            if len(keys) < limit:
                break
            cursor = keys[-1]
        found.extend(self._stored_partitions(f"{namespace}/", after))
        return found

    async def topics_of_namespace_page(
        self, namespace: str, mode: int, after: str | None, limit: int | None
    ) -> list[str]:
        """The topics of a namespace (as `topics_of_namespace_async`, no pattern) past the
        name ``after`` (None: from the first), at most ``limit`` (None: all): pages that
        follow each other by the last name of the one before cover the list once, also
        while topics are created meanwhile (a page holds every name between its ends)."""
        if limit is None:
            names = (await self.topics_of_namespace_async(namespace, mode, None))[0]
        else:
            stored: set[str] = set()
            if mode in _PERSISTENT_MODES:
                stored = set(await self.storage.read_metadata(
                    self.stored_topic_page, namespace, after, limit))
            names = self.namespace_topics(stored, namespace, mode, None)[0]
        if after is not None:
            names = names[bisect.bisect_right(names, after):]
        return names if limit is None else names[:limit]

    def namespace_topics(
        self, stored: set[str], namespace: str, mode: int, pattern: str | None,
        live: tuple[str, ...] | None = None,
    ) -> tuple[list[str], bool]:
        """`topics_of_namespace` given the stored persistent topic names (and ``live``, the
        loaded topics' names, off the loop; None: read them here, on the loop)."""
        names = set(stored)
        if mode in _LIVE_MODES:
            loaded = self.topics if live is None else live
            names.update(n for n in loaded if n.startswith("non-persistent://"))
        return topics_in_namespace(names, namespace, pattern)
