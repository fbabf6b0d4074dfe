"""Topic statistics in Apache Pulsar's shapes and field names, and the rates behind them.

``RateTracker.sample()`` reads the message and byte counters of every loaded topic,
producer, subscription and consumer, and keeps the rate of each over the interval since
the previous sample (Pulsar's ``statsUpdateFrequencyInSecs``; the admin server's timer uses
``sample_in_pieces``, within the periodic rounds' budget per turn of the loop). ``topic_stats`` and
``internal_stats`` build the JSON documents of Pulsar's ``stats`` and ``internalStats``
endpoints from the live objects plus those rates; the metrics endpoint reads the same.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from magnetar.broker.heap import add_in_slices, dismantle, loaded_slices
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


#: the kinds of counters a sample reads: a topic's in and out, each producer's,
#: subscription's, consumer's and replicator's
KINDS = ("in", "out", "producer", "sub", "consumer", "repl", "repl_expired")


def rate_key(kind: str, *of: Any) -> Any:
    """A counter's key in its kind's dicts (``of``: what it is of): the topic's name
    (``in``, ``out``), the consumer's id, else the topic's name and the producer's,
    subscription's or remote's joined by a NUL. A string or a number, never a tuple
    (`Counters`)."""
    if kind == "in" or kind == "out" or kind == "consumer":
        return of[0]
    return "\x00".join(of)


def _by_kind() -> dict[str, dict[Any, Any]]:
    """An empty dict per kind (`KINDS`)."""
    return {kind: {} for kind in KINDS}


class KindTable:
    """Rates by kind (`KINDS`) and key (`rate_key`), computed from two samples: messages/s
    and bytes/s, only those not zero (an idle topic has none). Dicts of strings and numbers,
    which the garbage collector never tracks."""

    __slots__ = ("bytes", "msgs")

    def __init__(self) -> None:
        self.msgs: dict[str, dict[Any, float]] = _by_kind()
        self.bytes: dict[str, dict[Any, float]] = _by_kind()

    def get(self, kind: str, key: Any) -> Rate:
        """(messages, bytes) of ``key`` (0.0 each when absent)."""
        return (self.msgs[kind].get(key, 0.0), self.bytes[kind].get(key, 0.0))

    def __len__(self) -> int:
        return sum(map(len, self.msgs.values()))


#: the dicts a sample's counters of one kind are spread over (by the key's hash)
SHARDS = 64
#: a counter's messages and bytes in one int: ``messages << 64 | bytes``
_SHIFT = 64
_LOW = (1 << _SHIFT) - 1


class Counters:
    """A sample's counters by kind and key, each a packed int (messages << 64 | bytes), each
    kind's spread over `SHARDS` dicts by the key's hash. Dicts of strings and ints, never
    tracked by the garbage collector: with a tuple per counter, a dict of every topic was
    walked by the young collections while a sample was made (17-30 ms each at 100,000
    topics) and by full ones after (26-44 ms). Shards: one dict of 100,000 keys grows by
    doubling while a sample fills it, each step a copy of the whole in one slice of the
    loop (four such dicts: up to 30 ms at once); a shard grows a few hundred keys at a time."""

    __slots__ = ("shards",)

    def __init__(self) -> None:
        self.shards: dict[str, list[dict[Any, int]]] = {
            kind: [{} for _ in range(SHARDS)] for kind in KINDS}

    def dicts(self) -> list[dict[Any, int]]:
        """Every dict (to `dismantle` them)."""
        return [shard for shards in self.shards.values() for shard in shards]

    def __len__(self) -> int:
        return sum(map(len, self.dicts()))


def _count(topic: Topic, counted: dict[str, dict[Any, int]]) -> None:
    """Note ``topic``'s counters (and its producers', subscriptions', consumers'), packed."""
    name = topic.name
    counted["in"][name] = topic.msg_in << _SHIFT | topic.bytes_in
    for producer in topic.producers.values():
        counted["producer"][rate_key("producer", name, producer.name)] = (
            producer.msg_in << _SHIFT | producer.bytes_in)
    out_msgs = out_bytes = 0
    for sub_name, sub in topic.subscriptions.items():
        sub_msgs, sub_bytes = subscription_counters(sub)
        out_msgs += sub_msgs
        out_bytes += sub_bytes
        counted["sub"][rate_key("sub", name, sub_name)] = sub_msgs << _SHIFT | sub_bytes
        for consumer in sub.consumers:
            counted["consumer"][id(consumer)] = consumer.msg_out << _SHIFT | consumer.bytes_out
    for remote, replicator in getattr(topic, "replicators", {}).items():
        key = rate_key("repl", name, remote)
        counted["repl"][key] = replicator.msg_out << _SHIFT | replicator.bytes_out
        counted["repl_expired"][key] = replicator.msg_expired << _SHIFT
        # as Pulsar's: a topic's rate out counts what its replicators send
        out_msgs += replicator.msg_out
        out_bytes += replicator.bytes_out
    counted["out"][name] = out_msgs << _SHIFT | out_bytes


class RateTracker:
    """Counters of the previous sample and the rates computed from them (`Counters`,
    `KindTable`: nothing the garbage collector tracks, however many topics)."""

    def __init__(self) -> None:
        self._at = 0.0  # when the previous sample was taken (monotonic seconds)
        self._previous = Counters()
        self.rates = KindTable()

    def sample(self, service: BrokerService, now: float | None = None) -> None:
        """Take a sample of every loaded topic's counters now (``now``: monotonic seconds)."""
        now = time.monotonic() if now is None else now
        kept, rates, moved = Counters(), KindTable(), list[str]()
        counted: dict[str, dict[Any, int]] = _by_kind()
        for topic in list(service.topics.values()):
            _count(topic, counted)
        self._rates_of(counted, now, kept, rates, moved)
        self._previous, self.rates, self._at = kept, rates, now
        service.topic_changes.names.update(moved)

    async def sample_in_pieces(self, service: BrokerService, chunk: int = 100) -> None:
        """`sample`, ``chunk`` topics at a time (10,000 topics took about 0.1 s in one
        go), within the periodic rounds' shared budget per turn of the loop
        (``service.turns``, broker/turns.py); the sample's time is its start. Then the
        names of the topics whose rates moved are noted (topics/changes.py) and the
        previous sample freed, each a slice at a time (a sample of 100,000 topics has
        200,000 keys: noted or freed in one call, 15-50 ms of the loop)."""
        pause = service.turns.pause
        replaced, moved = await self._sample_in_pieces(service, chunk, pause)
        await add_in_slices(service.topic_changes.names, moved, chunk * 10, pause)
        await dismantle(replaced.dicts(), chunk * 4, pause)

    async def _sample_in_pieces(self, service: BrokerService, chunk: int,
                                pause: Callable[[], Awaitable[Any]]
                                ) -> tuple[Counters, list[str]]:
        """Each ``chunk`` topics' counters read and their rates computed in one slice. What
        lives through the slices is a tuple of the loaded topics' names (`heap.topic_names`:
        untracked by the first young collection) and what is kept (untracked: a list of
        the topics lived through the whole sample as a young container, which each
        middle-generation collection walked whole). Returns the previous sample's counters
        (for the caller to `dismantle`: only the tracker reads them; the rates replaced
        may still be read by a /metrics build, and are few: none of an idle topic) and
        the topics whose rate moved."""
        now = time.monotonic()
        kept, rates, moved = Counters(), KindTable(), list[str]()
        async for topics in loaded_slices(service.topics, chunk, pause):
            counted: dict[str, dict[Any, int]] = _by_kind()
            for topic in topics:  # (those unloaded meanwhile left out)
                _count(topic, counted)
            self._rates_of(counted, now, kept, rates, moved)
        replaced = self._previous
        self._previous, self.rates, self._at = kept, rates, now
        return replaced, moved

    def _rates_of(self, counted: dict[str, dict[Any, int]], now: float, kept: Counters,
                  rates: KindTable, moved: list[str]) -> None:
        """Note ``counted`` in ``kept`` and their rates since the previous sample in
        ``rates`` (those not zero); the topics whose rate in or out differs from the last
        sample's in ``moved``."""
        elapsed = now - self._at
        shard_of = SHARDS - 1
        for kind, now_counted in counted.items():
            if not now_counted:
                continue
            before_shards, kept_shards = self._previous.shards[kind], kept.shards[kind]
            rate_msgs, rate_bytes = rates.msgs[kind], rates.bytes[kind]
            last_msgs, last_bytes = self.rates.msgs[kind], self.rates.bytes[kind]
            watched = kind == "in" or kind == "out"
            for key, packed in now_counted.items():
                shard = hash(key) & shard_of
                kept_shards[shard][key] = packed
                msg_rate = byte_rate = 0.0
                before = before_shards[shard].get(key)
                if before is not None and elapsed > 0:
                    msg_rate = max(0, (packed >> _SHIFT) - (before >> _SHIFT)) / elapsed
                    byte_rate = max(0, (packed & _LOW) - (before & _LOW)) / elapsed
                    if msg_rate:
                        rate_msgs[key] = msg_rate
                    if byte_rate:
                        rate_bytes[key] = byte_rate
                if watched and (msg_rate != last_msgs.get(key, 0.0)
                                or byte_rate != last_bytes.get(key, 0.0)):
                    moved.append(key)

    def rate(self, kind: str, *of: Any) -> Rate:
        """(messages/s, bytes/s) of one counter over the last two samples, e.g.
        ``rate("in", topic)``, ``rate("sub", topic, subscription)``,
        ``rate("consumer", id(consumer))``; zeros when unknown."""
        return self.rates.get(kind, rate_key(kind, *of))

    def set_rate(self, rate: Rate, kind: str, *of: Any) -> None:
        """Set one rate as if sampled (for tests and tools)."""
        key = rate_key(kind, *of)
        for table, value in ((self.rates.msgs[kind], rate[0]), (self.rates.bytes[kind], rate[1])):
            if value:
                table[key] = value
            else:
                table.pop(key, None)


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
