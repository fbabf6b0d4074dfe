"""Topics: ``/admin/v2/{persistent|non-persistent}/{tenant}/{ns}/...``.

List, create (non-partitioned with ``PUT .../{topic}``, partitioned with
``PUT .../{topic}/partitions``), delete, partitions (get, update), stats, internalStats,
partitioned-stats, terminate, unload, lastMessageId, compaction (trigger, status).
The broker's own operations
(BrokerService) do the work; this module parses requests, checks existence and shapes the
answers. Subscriptions are in ``subscriptions.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from magnetar.admin.namespaces import namespace_of
from magnetar.admin.routing import (
    SERVICE,
    RestError,
    RouteTable,
    expect,
    json_body,
    json_list_response,
    no_content,
    query_flag,
    query_int,
    rates_of,
)
from magnetar.broker.entries import entry_metadata
from magnetar.broker.service import BrokerService
from magnetar.broker.topics import stats as broker_stats
from magnetar.broker.topics.topic import PersistentTopic, Topic
from magnetar.broker.topics.transaction_buffer import ends_settled
from magnetar.protocol import pb
from magnetar.storage import EntryNotFoundError, Position

routes = RouteTable("topics")

NS = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}"
T = NS + "/{topic}"
SUB = T + "/subscription/{subscription}"


def topic_of(request: web.Request) -> str:
    """The full topic name of the request; its namespace must exist (404)."""
    namespace_of(request)
    m = request.match_info
    return f"{m['domain']}://{m['tenant']}/{m['namespace']}/{m['topic']}"


async def partitions_of(service: BrokerService, name: str) -> int:
    """The partition count of a partitioned topic, 0 for any other name (read off the loop)."""
    key = f"partitioned/{service.check_topic_name(name)}"
    meta = await service.storage.read_metadata(service.metadata.get, key)
    if meta is None and service.cluster is not None:  # created elsewhere a moment ago?
        meta = await service.metadata.read_through(key)
    return int(meta["partitions"]) if meta is not None else 0


async def exists(service: BrokerService, name: str) -> bool:
    """Whether a non-partitioned topic (or a partition) exists (read off the loop)."""
    topic_name = service.check_topic_name(name)
    if str(topic_name) in service.topics:
        return True
    if not topic_name.is_persistent:
        return False
    key = f"topics/{topic_name}"
    return await service.storage.read_metadata(service.metadata.get, key) is not None


async def loaded(service: BrokerService, name: str) -> Topic:
    """The (loaded, or loaded now off the loop) non-partitioned topic; 404 when it does
    not exist."""
    if not await exists(service, name):
        raise RestError(404, f"Topic {name} not found")
    return await service.admin_topic(name)


async def persistent(service: BrokerService, name: str) -> PersistentTopic:
    topic = await loaded(service, name)
    if not isinstance(topic, PersistentTopic):
        raise RestError(405, "this operation needs a persistent topic")
    return topic


async def targets(service: BrokerService, name: str) -> list[str]:
    """The partitions of a partitioned topic, else the topic itself (404 if unknown)."""
    n = await partitions_of(service, name)
    if n:
        return [f"{name}-partition-{i}" for i in range(n)]
    if not await exists(service, name):
        raise RestError(404, f"Topic {name} not found")
    return [name]


async def read_entry(ledger: Any, position: Position) -> bytes:
    """One stored entry: from the read cache, else read on the storage's readers threads
    (a slow disk delays only this request). EntryNotFoundError if there is none."""
    chunk = ledger.read_cached(position, 1)
    if not chunk:
        chunk = await ledger.read_cold(position, 1)
    if not chunk or chunk[0][0] != position:
        raise EntryNotFoundError(f"{ledger.name}: no entry at {position[0]}:{position[1]}")
    return bytes(chunk[0][1])


def message_id_doc(position: Position | None, partition: int = -1) -> dict[str, int]:
    if position is None:
        return {"ledgerId": -1, "entryId": -1, "partitionIndex": partition}
    return {"ledgerId": position[0], "entryId": position[1], "partitionIndex": partition}


# ---------------------------------------------------------------------- topics

@routes.route("GET", NS, "List the namespace's topics of this domain (partitions included), in "
              "name order; paged with ?limit=N (at most N names) and ?after=NAME (only names "
              "past NAME, the last of the page before).")
async def list_topics(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    namespace = namespace_of(request)
    mode = (pb.CommandGetTopicsOfNamespace.PERSISTENT if request.match_info["domain"] == "persistent"
            else pb.CommandGetTopicsOfNamespace.NON_PERSISTENT)
    limit = query_int(request, "limit")
    after = request.query.get("after") or None
    return await json_list_response(
        await service.topics_of_namespace_page(namespace, mode, after, limit))


@routes.route("GET", NS + "/partitioned", "List the namespace's partitioned topics.")
async def list_partitioned(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    namespace = namespace_of(request)
    prefix = f"partitioned/{request.match_info['domain']}://{namespace}/"
    stored = await service.storage.read_metadata(service.metadata.list, prefix)
    return web.json_response(sorted(k[len("partitioned/"):] for k in stored))


@routes.route("PUT", T, "Create a non-partitioned topic (409 if it exists).")
async def create_topic(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    if await partitions_of(service, name) or await exists(service, name):
        raise RestError(409, f"This topic already exists: {name}")
    await service.create_topic(name)
    return no_content()


@routes.route("DELETE", T, "Delete a topic (412 while clients are attached, unless ?force=true).")
async def delete_topic(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    names = await targets(service, name)
    if not query_flag(request, "force"):
        for part in names:
            topic = service.topics.get(part)
            if topic is not None and (topic.producers or any(s.consumers for s in topic.subscriptions.values())):
                raise RestError(412, f"Topic {part} has active producers/subscriptions")
    await service.delete_topic(name)
    return no_content()


async def _partition_count(request: web.Request) -> int:
    count: int = expect(await json_body(request), int, "number of partitions")
    if count < 1:
        raise RestError(412, "The number of partitions must be at least 1")
    limit = request.app[SERVICE].config.maxNumPartitionsPerPartitionedTopic
    if limit > 0 and count > limit:  # Pulsar: 412 past maxNumPartitionsPerPartitionedTopic
        raise RestError(412, f"The number of partitions must be at most {limit} "
                             "(maxNumPartitionsPerPartitionedTopic)")
    return count


@routes.route("PUT", T + "/partitions", "Create a partitioned topic (409 if it exists).",
              body="int: number of partitions")
async def create_partitioned(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    count = await _partition_count(request)
    if service.check_topic_name(name).is_partition:
        raise RestError(412, "a partition cannot itself be partitioned")
    if await partitions_of(service, name) or await exists(service, name):
        raise RestError(409, f"This topic already exists: {name}")
    await service.create_partitioned_topic_async(name, count)
    for i in range(count):
        await service.create_topic(f"{name}-partition-{i}")
    return no_content()


@routes.route("POST", T + "/partitions", "Increase the partitions of a partitioned topic.",
              body="int: the new number of partitions")
async def update_partitions(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    count = await _partition_count(request)
    current = await partitions_of(service, name)
    if not current:
        raise RestError(404, f"Partitioned topic {name} does not exist")
    if count <= current:
        raise RestError(422, f"The number of partitions must be more than the current {current}")
    await service.create_partitioned_topic_async(name, count)
    for i in range(current, count):
        await service.create_topic(f"{name}-partition-{i}")
    return no_content()


@routes.route("GET", T + "/partitions",
              "Partitioned metadata: {\"partitions\": N}, 0 for a non-partitioned topic.")
async def get_partitions(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    if query_flag(request, "checkAllowAutoCreation"):
        # auto-creates as the binary protocol does
        count = await service.partitioned_metadata_async(name)
    else:
        count = await partitions_of(service, name)
    return web.json_response({"partitions": count})


@routes.route("DELETE", T + "/partitions", "Delete a partitioned topic and all its partitions.")
async def delete_partitioned(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    if not await partitions_of(service, name):
        raise RestError(404, f"Partitioned topic {name} does not exist")
    return await delete_topic(request)


@routes.route("GET", T + "/stats", "Topic stats (msgRateIn, msgBacklog, storageSize, publishers, "
              "subscriptions...).")
async def topic_stats(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    if await partitions_of(service, name):
        raise RestError(404, f"{name} is a partitioned topic: use partitioned-stats")
    return web.json_response(broker_stats.topic_stats(await loaded(service, name), rates_of(request)))


@routes.route("GET", T + "/internalStats", "Managed-ledger stats: ledgers, cursors, positions.")
async def internal_stats(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    return web.json_response(broker_stats.internal_stats(await persistent(service, topic_of(request))))


_SUMMED = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter",
           "msgInCounter", "bytesOutCounter", "msgOutCounter", "storageSize", "backlogSize",
           "msgBacklog")
#: a remote's replication stats summed over the partitions (Pulsar's ReplicatorStats.add):
#: the rest is ``connected`` (all partitions' replicators are) and the largest delay
_REPL_SUMMED = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut",
                "msgRateExpired", "replicationBacklog", "msgOutCounter", "bytesOutCounter")
_SUB_SUMMED = ("msgRateOut", "msgThroughputOut", "bytesOutCounter", "msgOutCounter",
               "msgBacklog", "msgBacklogNoDelayed", "unackedMessages")


@routes.route("GET", T + "/partitioned-stats",
              "Stats summed over the partitions (?perPartition=true adds each one's).")
async def partitioned_stats(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    count = await partitions_of(service, name)
    if not count:
        raise RestError(404, f"Partitioned topic {name} does not exist")
    rates = rates_of(request)
    total: dict[str, Any] = {key: 0 for key in _SUMMED}
    total.update(publishers=[], subscriptions={}, replication={},
                 metadata={"partitions": count}, partitions={})
    for i in range(count):
        part = f"{name}-partition-{i}"
        stats = await _served_elsewhere_stats(service, part)
        if stats is None:
            if not await exists(service, part):
                continue
            stats = broker_stats.topic_stats(await service.admin_topic(part), rates)
        for key in _SUMMED:
            total[key] += stats[key]
        total["publishers"].extend(stats["publishers"])
        for sub_name, sub in stats["subscriptions"].items():
            merged = total["subscriptions"].setdefault(
                sub_name, {**{k: 0 for k in _SUB_SUMMED}, "type": sub["type"], "consumers": []})
            for key in _SUB_SUMMED:
                merged[key] += sub[key]
            merged["consumers"].extend(sub["consumers"])
        for remote, repl in stats.get("replication", {}).items():
            _add_replication(total["replication"], remote, repl)
        if query_flag(request, "perPartition"):
            total["partitions"][part] = stats
    return web.json_response(total)


def _add_replication(total: dict[str, Any], remote: str, repl: dict[str, Any]) -> None:
    """Add one partition's replication stats to ``remote``'s in ``total``."""
    merged = total.get(remote)
    if merged is None:
        total[remote] = {**{key: repl.get(key, 0) for key in _REPL_SUMMED},
                         "connected": bool(repl.get("connected")),
                         "replicationDelayInSeconds": repl.get("replicationDelayInSeconds", 0.0)}
        return
    for key in _REPL_SUMMED:
        merged[key] += repl.get(key, 0)
    merged["connected"] = merged["connected"] and bool(repl.get("connected"))
    merged["replicationDelayInSeconds"] = max(merged["replicationDelayInSeconds"],
                                              repl.get("replicationDelayInSeconds", 0.0))


async def _served_elsewhere_stats(service: BrokerService, part: str) -> dict[str, Any] | None:
    """In a cluster, a partition another broker serves: its stats, asked of that broker
        (as Pulsar's partitioned stats do; loading it here would fence its owner out of the
        shared storage). A free partition is placed as a lookup would (here or there).
        None when this broker serves it (the caller reads it here)."""
    cluster = service.cluster
    if cluster is None or not part.startswith("persistent://") or cluster.owns(part):
        return None
    from magnetar.broker.cluster.membership import peer_request
    from magnetar.broker.config.broker_client import BrokerClientCredentials

    found = await cluster.lookup(part)
    if found.connect:
        return None  # taken here just now
    path = "/admin/v2/persistent/" + part.removeprefix("persistent://") + "/stats"
    try:
        stats = await peer_request(BrokerClientCredentials.from_config(service.config),
                                   found.owner.web_url, found.owner.web_url_tls, "GET", path)
    except (RuntimeError, OSError) as exc:
        raise RestError(503, f"stats of {part} from its owner {found.owner.web_url}: {exc}"
                        ) from None
    if not isinstance(stats, dict):
        raise RestError(503, f"stats of {part}: its owner answered no stats")
    return stats


async def at_partition_owners(request: web.Request, name: str
                              ) -> list[tuple[int, Any]] | None:
    """In a cluster, the request about the partitioned topic ``name`` made again for each
    of its partitions, at that partition's owner (this broker too, through the same
    path), as this broker with ``authoritative=true`` (`peer_request`): each partition's
    (HTTP status, answer). A free partition is placed as a lookup would place it, and
    its owner-to-be takes it when the request arrives. None outside a cluster or for a
    topic that is not partitioned: the caller does the work here."""
    service = request.app[SERVICE]
    cluster = service.cluster
    if cluster is None or not name.startswith("persistent://"):
        return None
    count = await partitions_of(service, name)
    if not count:
        return None
    from magnetar.broker.cluster.membership import PeerRequestError, peer_request
    from magnetar.broker.config.broker_client import BrokerClientCredentials

    credentials = BrokerClientCredentials.from_config(service.config)
    body = await json_body(request, required=False)
    segments = request.rel_url.raw_path.split("/")  # '', admin, v2, domain, t, ns, topic, ...
    query = request.rel_url.raw_query_string

    async def one(i: int) -> tuple[int, Any]:
        part = f"{name}-partition-{i}"
        path = "/".join([*segments[:6], f"{segments[6]}-partition-{i}", *segments[7:]])
        if query:
            path += f"?{query}"
        found = await cluster.lookup(part)
        owner = cluster.me if found.connect else found.owner
        try:
            return 200, await peer_request(credentials, owner.web_url, owner.web_url_tls,
                                           request.method, path, body)
        except PeerRequestError as exc:
            return exc.status, str(exc)
        except (RuntimeError, OSError) as exc:
            return 503, f"{part} at its owner {owner.web_url}: {exc}"

    return list(await asyncio.gather(*(one(i) for i in range(count))))


def fanned_out(outcomes: list[tuple[int, Any]], conflict: bool = False) -> web.Response:
    """The answer to a request made at every partition's owner (`at_partition_owners`):
    204 when each partition did it; 409 if one had it already (``conflict``: a create);
    404 when none had what was asked for; else the first refusal, as it was given."""
    failed = [(status, answer) for status, answer in outcomes if status >= 300]
    if not failed:
        return no_content()
    if conflict and any(status == 409 for status, _ in failed):
        raise RestError(409, next(str(a) for st, a in failed if st == 409))
    if any(status != 404 for status, _ in failed):
        status, answer = next((st, a) for st, a in failed if st != 404)
        raise RestError(status, str(answer))
    if len(failed) == len(outcomes):
        raise RestError(404, str(failed[0][1]))
    return no_content()


@routes.route("POST", T + "/terminate",
              "Terminate a topic: no more messages; returns the last message id.")
async def terminate(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    await persistent(service, name)
    return web.json_response(message_id_doc(await service.terminate_topic(name)))


@routes.route("PUT", T + "/unload", "Unload a topic (its clients reconnect and reload it).")
async def unload(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    closing = []
    for part in await targets(service, topic_of(request)):
        topic = service.topics.get(part)
        if topic is not None:
            closing.append(service.unload_topic(topic, housekeep=True))
    await asyncio.gather(*closing)  # answered once the ledgers are closed (off the loop)
    return no_content()


@routes.route("GET", T + "/lastMessageId", "The id of the last message stored.")
async def last_message_id(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    topic = await persistent(service, topic_of(request))
    await ends_settled(topic)  # a transaction ending: its lingering marker written, durable
    last = topic.readable_last()  # not past an open transaction's first message
    doc = message_id_doc(last, topic.topic_name.partition_index)
    if last is not None:
        metadata = entry_metadata(await read_entry(topic.ledger, last))
        if metadata is not None and metadata.HasField("num_messages_in_batch"):
            doc["batchIndex"] = metadata.num_messages_in_batch - 1
    return web.json_response(doc)


@routes.route("PUT", T + "/compaction", "Start compacting the topic (latest message per key).")
async def compact(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    topic = await persistent(service, topic_of(request))
    if not service.compactor.trigger(topic):
        raise RestError(409, f"Compaction already in progress on {topic.name}")
    return no_content()


@routes.route("GET", T + "/compaction", "Compaction status: NOT_RUN, RUNNING, SUCCESS or ERROR.")
async def compaction_status(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    topic = await persistent(service, topic_of(request))
    return web.json_response(service.compactor.status(topic.name).to_json())
