"""Topic statistics in Apache Pulsar's shapes and field names, and the rates behind them.

``RateTracker.sample()`` reads the message and byte counters of every loaded topic,
producer, subscription and consumer, and keeps the rate of each over the interval since
the previous sample (Pulsar's ``statsUpdateFrequencyInSecs``; the admin server's timer uses
``sample_in_pieces``, which gives the event loop back every 500 topics). ``topic_stats`` and
``internal_stats`` build the JSON documents of Pulsar's ``stats`` and ``internalStats``
endpoints from the live objects plus those rates; the metrics endpoint reads the same.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magnetar.broker.heap import loaded_slices
from magnetar.broker.subscriptions.subscription import PersistentSubscription
from magnetar.broker.topics.dedup import REPLICATOR_PREFIX
from magnetar.broker.topics.topic import PersistentTopic, Topic
from magnetar.protocol import pb
from magnetar.storage import Position

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

Rate = tuple[float, float]  # (messages/s, bytes/s)
_ZERO: Rate = (0.0, 0.0)


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def subscription_counters(sub: Any) -> tuple[int, int]:
    """(messages, bytes) dispatched to the subscription's consumers, connected or gone."""
    gone = sub.out_of_removed
    return (gone.msgs + sum(c.msg_out for c in sub.consumers),
            gone.bytes + sum(c.bytes_out for c in sub.consumers))


def _count(topic: Topic, counters: dict[Any, tuple[int, int]]) -> None:
    """Note ``topic``'s counters (and its producers', subscriptions', consumers')."""
    counters[("in", topic.name)] = (topic.msg_in, topic.bytes_in)
    for producer in topic.producers.values():
        counters[("producer", topic.name, producer.name)] = (producer.msg_in, producer.bytes_in)
    out_msgs = out_bytes = 0
    for name, sub in topic.subscriptions.items():
        msgs, size = subscription_counters(sub)
        out_msgs += msgs
        out_bytes += size
        counters[("sub", topic.name, name)] = (msgs, size)
        for consumer in sub.consumers:
            counters[("consumer", id(consumer))] = (consumer.msg_out, consumer.bytes_out)
    for remote, replicator in getattr(topic, "replicators", {}).items():
        counters[("repl", topic.name, remote)] = (replicator.msg_out, replicator.bytes_out)
        counters[("repl_expired", topic.name, remote)] = (replicator.msg_expired, 0)
        # as Pulsar's: a topic's rate out counts what its replicators send
        out_msgs += replicator.msg_out
        out_bytes += replicator.bytes_out
    counters[("out", topic.name)] = (out_msgs, out_bytes)


def _turn() -> Awaitable[None]:
    """One turn of the loop, between two slices of a sample."""
    return asyncio.sleep(0)


@dataclass
class RateTracker:
    """Counters of the previous sample and the rates computed from them."""

    _previous: dict[Any, tuple[float, int, int]] = field(default_factory=dict)
    rates: dict[Any, Rate] = field(default_factory=dict)

    def sample(self, service: BrokerService, now: float | None = None) -> None:
        """Take a sample of every loaded topic's counters now (``now``: monotonic seconds)."""
        now = time.monotonic() if now is None else now
        counters: dict[Any, tuple[int, int]] = {}
        for topic in list(service.topics.values()):
            _count(topic, counters)
        self._update(counters, now, service.topic_changes.names)

    async def sample_in_pieces(self, service: BrokerService, chunk: int = 500) -> None:
        """`sample`, giving the event loop back every ``chunk`` topics (10,000 topics
        took about 0.1 s in one go); the sample's time is its start."""
        with service.heap.bulk(len(service.topics)):  # (broker/heap.py: the samples kept)
            await self._sample_in_pieces(service, chunk)

    async def _sample_in_pieces(self, service: BrokerService, chunk: int) -> None:
        """Each ``chunk`` topics' counters read and their rates computed in one slice. What
        lives through the slices is a tuple of the loaded topics' names (`heap.topic_names`:
        untracked by the first young collection) and the two dicts kept: a list of the topics
        (100,000) and a dict of every counter (200,000 entries) lived through the whole
        sample as young containers, which each middle-generation collection walked whole."""
        now = time.monotonic()
        kept: dict[Any, tuple[float, int, int]] = {}
        rates: dict[Any, Rate] = {}
        moved: list[str] = []
        async for topics in loaded_slices(service.topics, chunk, _turn):
            counters: dict[Any, tuple[int, int]] = {}
            for topic in topics:  # (those unloaded meanwhile left out)
                _count(topic, counters)
            self._rates_of(counters.items(), now, kept, rates, moved)
        self._previous, self.rates = kept, rates
        service.topic_changes.names.update(moved)  # once they can be read (topics/changes.py)

    def _update(self, counters: dict[Any, tuple[int, int]], now: float,
                changes: set[str] | None = None) -> None:
        kept: dict[Any, tuple[float, int, int]] = {}
        rates: dict[Any, Rate] = {}
        moved: list[str] = []
        self._rates_of(counters.items(), now, kept, rates, moved)
        self._previous, self.rates = kept, rates
        if changes is not None:
            changes.update(moved)

    def _rates_of(self, counters: Iterable[tuple[Any, tuple[int, int]]], now: float,
                  kept: dict[Any, tuple[float, int, int]], rates: dict[Any, Rate],
                  moved: list[str]) -> None:
        """Note ``counters`` in ``kept`` and their rates since the previous sample in
        ``rates``; the topics whose rate in or out differs from the last sample's in ``moved``."""
        previous, last = self._previous, self.rates
        for key, (msgs, size) in counters:
            kept[key] = (now, msgs, size)
            before = previous.get(key)
            rate: Rate | None = None
            if before is not None:
                elapsed = now - before[0]
                if elapsed > 0:
                    rate = rates[key] = (max(0, msgs - before[1]) / elapsed,
                                         max(0, size - before[2]) / elapsed)
            if (key[0] == "in" or key[0] == "out") and last.get(key) != rate:
                moved.append(key[1])

    def rate(self, *key: Any) -> Rate:
        return self.rates.get(key, _ZERO)


def topic_stats(topic: Topic, rates: RateTracker) -> dict[str, Any]:
    """Pulsar's TopicStats of one loaded topic."""
    rate_in = rates.rate("in", topic.name)
    rate_out = rates.rate("out", topic.name)
    publishers = []
    for producer in topic.producers.values():
        if producer.name.startswith(REPLICATOR_PREFIX):
            continue  # another cluster's replicator: under ``replication`` (as Pulsar)
        p_rate = rates.rate("producer", topic.name, producer.name)
        publishers.append({
            "producerId": producer.producer_id,
            "producerName": producer.name,
            "accessMode": pb.ProducerAccessMode.Name(producer.access_mode),
            "msgRateIn": p_rate[0],
            "msgThroughputIn": p_rate[1],
            "averageMsgSize": producer.bytes_in / producer.msg_in if producer.msg_in else 0.0,
            "msgInCounter": producer.msg_in,
            "bytesInCounter": producer.bytes_in,
            "address": producer.cnx.peer,
            "connectedSince": _iso(producer.connected_since),
            "clientVersion": getattr(producer.cnx, "client_version", ""),
        })
    subscriptions = {name: subscription_stats(topic, name, sub, rates)
                     for name, sub in topic.subscriptions.items()}
    storage = backlog_size = 0
    if isinstance(topic, PersistentTopic):
        storage = topic.ledger.size_bytes()
        backlog_size = topic.service.backlog_quota.backlog_bytes(topic)[0]
    out_msgs = sum(s["msgOutCounter"] for s in subscriptions.values())
    out_bytes = sum(s["bytesOutCounter"] for s in subscriptions.values())
    return {
        "msgRateIn": rate_in[0],
        "msgThroughputIn": rate_in[1],
        "msgRateOut": rate_out[0],
        "msgThroughputOut": rate_out[1],
        "bytesInCounter": topic.bytes_in,
        "msgInCounter": topic.msg_in,
        "bytesOutCounter": out_bytes,
        "msgOutCounter": out_msgs,
        "averageMsgSize": topic.bytes_in / topic.msg_in if topic.msg_in else 0.0,
        "msgChunkPublished": False,
        "storageSize": storage,
        "backlogSize": backlog_size,
        "msgBacklog": sum(s["msgBacklog"] for s in subscriptions.values()),
        "publishers": publishers,
        "waitingPublishers": len(topic.waiting_exclusive),
        "subscriptions": subscriptions,
        "replication": replication_stats(topic, rates),
        "deduplicationStatus": "Enabled" if getattr(topic, "dedup", None) is not None else "Disabled",
        "topicEpoch": 0,
        "nonContiguousDeletedMessagesRanges": 0,
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "terminated": topic.terminated,
    }


def replication_stats(topic: Topic, rates: RateTracker) -> dict[str, Any]:
    """Pulsar's ``replication`` section: one entry per remote cluster this topic replicates
    to; what comes in from that cluster's replicator (its producer ``pulsar.repl.{remote}``
    here: the rates, ``inboundConnection``, ``inboundConnectedSince``) in the same entry."""
    inbound = {producer.name[len(REPLICATOR_PREFIX):]: producer
               for producer in topic.producers.values()
               if producer.name.startswith(REPLICATOR_PREFIX)}
    out = {}
    for remote, replicator in getattr(topic, "replicators", {}).items():
        rate = rates.rate("repl", topic.name, remote)
        producer = inbound.get(remote)
        rate_in = rates.rate("producer", topic.name, producer.name) if producer else _ZERO
        out[remote] = {
            "msgRateIn": rate_in[0], "msgThroughputIn": rate_in[1],
            "msgRateOut": rate[0], "msgThroughputOut": rate[1],
            "msgRateExpired": rates.rate("repl_expired", topic.name, remote)[0],
            **replicator.stats(),
            "inboundConnection": producer.cnx.peer if producer else None,
            "inboundConnectedSince": _iso(producer.connected_since) if producer else None,
        }
    return out


def subscription_stats(topic: Topic, name: str, sub: Any, rates: RateTracker) -> dict[str, Any]:
    """Pulsar's SubscriptionStats of one subscription."""
    rate = rates.rate("sub", topic.name, name)
    msgs, size = subscription_counters(sub)
    consumers = []
    for consumer in sub.consumers:
        c_rate = rates.rate("consumer", id(consumer))
        consumers.append({
            "consumerName": consumer.name,
            "msgRateOut": c_rate[0],
            "msgThroughputOut": c_rate[1],
            "bytesOutCounter": consumer.bytes_out,
            "msgOutCounter": consumer.msg_out,
            "msgRateRedeliver": 0.0,
            "availablePermits": max(0, consumer.permits),
            "unackedMessages": consumer.unacked_messages,
            "blockedConsumerOnUnackedMsgs": consumer.blocked_on_unacked,
            "address": consumer.cnx.peer,
            "connectedSince": _iso(consumer.connected_since),
            "metadata": dict(consumer.metadata),
        })
    dispatcher = getattr(sub, "dispatcher", None)
    sub_type = pb.CommandSubscribe.SubType.Name(dispatcher.sub_type) if dispatcher is not None else "Exclusive"
    stats: dict[str, Any] = {
        "msgRateOut": rate[0],
        "msgThroughputOut": rate[1],
        "bytesOutCounter": size,
        "msgOutCounter": msgs,
        "msgRateRedeliver": 0.0,
        "msgBacklog": sub.backlog(),
        "msgBacklogNoDelayed": sub.backlog(),
        "blockedSubscriptionOnUnackedMsgs": bool(getattr(sub, "blocked_on_unacked", False)),
        "msgDelayed": 0,
        "unackedMessages": sum(c.unacked_messages for c in sub.consumers),
        "type": sub_type,
        "msgRateExpired": 0.0,
        "consumers": consumers,
        "isDurable": bool(getattr(sub, "durable", False)),
        "isReplicated": bool(getattr(sub, "replicated", False)),
    }
    if isinstance(sub, PersistentSubscription):
        stats["lastMarkDeletePosition"] = _position(sub.cursor.mark_delete_position)
    return stats


def _position(p: Any) -> str:
    return f"{p[0]}:{p[1]}"


def internal_stats(topic: PersistentTopic) -> dict[str, Any]:
    """Pulsar's PersistentTopicInternalStats (managed-ledger view) of a loaded topic."""
    ledger = topic.ledger
    last = ledger.last_confirmed()
    ledgers = []
    for lid in ledger.segment_ids():
        entries = ledger.count_between(Position(lid, 0), Position(lid, 2**62))
        ledgers.append({"ledgerId": lid, "entries": entries, "offloaded": False,
                        "underReplicated": False})
    cursors = {}
    for name, sub in topic.subscriptions.items():
        if not isinstance(sub, PersistentSubscription):
            continue
        cursor = sub.cursor
        read = cursor.read_position
        cursors[name] = {
            "markDeletePosition": _position(cursor.mark_delete_position),
            "readPosition": _position(read) if read is not None else (
                _position((last[0], last[1] + 1)) if last is not None else "-1:-1"),
            "waitingReadOp": False,
            "pendingReadOps": 0,
            "messagesConsumedCounter": 0,
            "cursorLedger": -1,
            "individuallyDeletedMessages": "[" + ",".join(
                f"({_position(a)}..{_position(b)}]" for a, b in cursor.individually_deleted
            ) + "]",
            "numberOfEntriesSinceFirstNotAckedMessage": cursor.backlog(),
            "totalNonContiguousDeletedMessagesRange": len(cursor.individually_deleted),
            "state": "Open",
            "active": bool(sub.consumers),
            "durable": sub.durable,
        }
    current = ledgers[-1] if ledgers else {"entries": 0}
    return {
        "entriesAddedCounter": ledger.entry_count(),
        "numberOfEntries": ledger.entry_count(),
        "totalSize": ledger.size_bytes(),
        "currentLedgerEntries": current["entries"],
        "currentLedgerSize": 0,
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": 0,
        "lastConfirmedEntry": _position(last) if last is not None else "-1:-1",
        "state": "Terminated" if topic.terminated else "LedgerOpened",
        "ledgers": ledgers,
        "cursors": cursors,
    }
