"""Topics and subscriptions: ``/admin/v2/{persistent|non-persistent}/{tenant}/{ns}/...``.

Topics: list, create (non-partitioned with ``PUT .../{topic}``, partitioned with
``PUT .../{topic}/partitions``), delete, partitions (get, update), stats, internalStats,
partitioned-stats, terminate, unload, lastMessageId. Subscriptions: list, create, delete,
skip, skip_all, resetcursor (by time or message id), expireMessages, peek (position/N).
An operation on a subscription of a partitioned topic applies to every partition, as in
Pulsar. The broker's own operations (BrokerService) do the work; this module parses
requests, checks existence and shapes the answers.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.admin.namespaces import namespace_of
from magnetar.admin.routing import (
    SERVICE,
    RestError,
    RouteTable,
    expect,
    int_param,
    json_body,
    no_content,
    query_flag,
    rates_of,
)
from magnetar.broker import stats as broker_stats
from magnetar.broker.dispatcher import entry_metadata
from magnetar.broker.errors import BrokerError
from magnetar.broker.service import BrokerService
from magnetar.broker.subscription import PersistentSubscription
from magnetar.broker.topic import PersistentTopic, Topic, split_entry
from magnetar.protocol import pb
from magnetar.protocol.compression import decompress
from magnetar.protocol.frames import parse_payload_part
from magnetar.storage import Position

routes = RouteTable("topics")

NS = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}"
T = NS + "/{topic}"
SUB = T + "/subscription/{subscription}"
_LATEST = 2**63 - 1


def topic_of(request: web.Request) -> str:
    """The full topic name of the request; its namespace must exist (404)."""
    namespace_of(request)
    m = request.match_info
    return f"{m['domain']}://{m['tenant']}/{m['namespace']}/{m['topic']}"


def partitions_of(service: BrokerService, name: str) -> int:
    """The partition count of a partitioned topic, 0 for any other name."""
    meta = service.metadata.get(f"partitioned/{service.check_topic_name(name)}")
    return int(meta["partitions"]) if meta is not None else 0


def exists(service: BrokerService, name: str) -> bool:
    """Whether a non-partitioned topic (or a partition) exists."""
    topic_name = service.check_topic_name(name)
    if not topic_name.is_persistent:
        return str(topic_name) in service.topics
    return service.metadata.get(f"topics/{topic_name}") is not None or str(topic_name) in service.topics


def loaded(service: BrokerService, name: str) -> Topic:
    """The (loaded, or loaded now) non-partitioned topic; 404 when it does not exist."""
    if not exists(service, name):
        raise RestError(404, f"Topic {name} not found")
    return service.get_topic(name, create=False)


def persistent(service: BrokerService, name: str) -> PersistentTopic:
    topic = loaded(service, name)
    if not isinstance(topic, PersistentTopic):
        raise RestError(405, "this operation needs a persistent topic")
    return topic


def targets(service: BrokerService, name: str) -> list[str]:
    """The partitions of a partitioned topic, else the topic itself (404 if unknown)."""
    n = partitions_of(service, name)
    if n:
        return [f"{name}-partition-{i}" for i in range(n)]
    if not exists(service, name):
        raise RestError(404, f"Topic {name} not found")
    return [name]


def message_id_doc(position: Position | None, partition: int = -1) -> dict[str, int]:
    if position is None:
        return {"ledgerId": -1, "entryId": -1, "partitionIndex": partition}
    return {"ledgerId": position[0], "entryId": position[1], "partitionIndex": partition}


# ---------------------------------------------------------------------- topics

@routes.route("GET", NS, "List the namespace's topics of this domain (partitions included).")
async def list_topics(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    namespace = namespace_of(request)
    mode = (pb.CommandGetTopicsOfNamespace.PERSISTENT if request.match_info["domain"] == "persistent"
            else pb.CommandGetTopicsOfNamespace.NON_PERSISTENT)
    return web.json_response(service.topics_of_namespace(namespace, mode, None)[0])


@routes.route("GET", NS + "/partitioned", "List the namespace's partitioned topics.")
async def list_partitioned(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    namespace = namespace_of(request)
    prefix = f"partitioned/{request.match_info['domain']}://{namespace}/"
    return web.json_response(sorted(k[len("partitioned/"):] for k in service.metadata.list(prefix)))


@routes.route("PUT", T, "Create a non-partitioned topic (409 if it exists).")
async def create_topic(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    if partitions_of(service, name) or exists(service, name):
        raise RestError(409, f"This topic already exists: {name}")
    service.create_topic(name)
    return no_content()


@routes.route("DELETE", T, "Delete a topic (412 while clients are attached, unless ?force=true).")
async def delete_topic(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    names = targets(service, name)
    if not query_flag(request, "force"):
        for part in names:
            topic = service.topics.get(part)
            if topic is not None and (topic.producers or any(s.consumers for s in topic.subscriptions.values())):
                raise RestError(412, f"Topic {part} has active producers/subscriptions")
    service.delete_topic(name)
    return no_content()


async def _partition_count(request: web.Request) -> int:
    count = expect(await json_body(request), int, "number of partitions")
    if count < 1:
        raise RestError(412, "The number of partitions must be at least 1")
    return count


@routes.route("PUT", T + "/partitions", "Create a partitioned topic (409 if it exists).",
              body="int: number of partitions")
async def create_partitioned(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    count = await _partition_count(request)
    if service.check_topic_name(name).is_partition:
        raise RestError(412, "a partition cannot itself be partitioned")
    if partitions_of(service, name) or exists(service, name):
        raise RestError(409, f"This topic already exists: {name}")
    service.create_partitioned_topic(name, count)
    for i in range(count):
        service.create_topic(f"{name}-partition-{i}")
    return no_content()


@routes.route("POST", T + "/partitions", "Increase the partitions of a partitioned topic.",
              body="int: the new number of partitions")
async def update_partitions(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    count = await _partition_count(request)
    current = partitions_of(service, name)
    if not current:
        raise RestError(404, f"Partitioned topic {name} does not exist")
    if count <= current:
        raise RestError(422, f"The number of partitions must be more than the current {current}")
    service.create_partitioned_topic(name, count)
    for i in range(current, count):
        service.create_topic(f"{name}-partition-{i}")
    return no_content()


@routes.route("GET", T + "/partitions",
              "Partitioned metadata: {\"partitions\": N}, 0 for a non-partitioned topic.")
async def get_partitions(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    if query_flag(request, "checkAllowAutoCreation"):
        count = service.partitioned_metadata(name)  # auto-creates as the binary protocol does
    else:
        count = partitions_of(service, name)
    return web.json_response({"partitions": count})


@routes.route("DELETE", T + "/partitions", "Delete a partitioned topic and all its partitions.")
async def delete_partitioned(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    if not partitions_of(service, name):
        raise RestError(404, f"Partitioned topic {name} does not exist")
    return await delete_topic(request)


@routes.route("GET", T + "/stats", "Topic stats (msgRateIn, msgBacklog, storageSize, publishers, "
              "subscriptions...).")
async def topic_stats(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    if partitions_of(service, name):
        raise RestError(404, f"{name} is a partitioned topic: use partitioned-stats")
    return web.json_response(broker_stats.topic_stats(loaded(service, name), rates_of(request)))


@routes.route("GET", T + "/internalStats", "Managed-ledger stats: ledgers, cursors, positions.")
async def internal_stats(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    return web.json_response(broker_stats.internal_stats(persistent(service, topic_of(request))))


_SUMMED = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter",
           "msgInCounter", "bytesOutCounter", "msgOutCounter", "storageSize", "backlogSize",
           "msgBacklog")
_SUB_SUMMED = ("msgRateOut", "msgThroughputOut", "bytesOutCounter", "msgOutCounter",
               "msgBacklog", "msgBacklogNoDelayed", "unackedMessages")


@routes.route("GET", T + "/partitioned-stats",
              "Stats summed over the partitions (?perPartition=true adds each one's).")
async def partitioned_stats(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    count = partitions_of(service, name)
    if not count:
        raise RestError(404, f"Partitioned topic {name} does not exist")
    rates = rates_of(request)
    total: dict[str, Any] = {key: 0 for key in _SUMMED}
    total.update(publishers=[], subscriptions={}, metadata={"partitions": count}, partitions={})
    for i in range(count):
        part = f"{name}-partition-{i}"
        if not exists(service, part):
            continue
        stats = broker_stats.topic_stats(service.get_topic(part, create=False), rates)
        for key in _SUMMED:
            total[key] += stats[key]
        total["publishers"].extend(stats["publishers"])
        for sub_name, sub in stats["subscriptions"].items():
            merged = total["subscriptions"].setdefault(
                sub_name, {**{k: 0 for k in _SUB_SUMMED}, "type": sub["type"], "consumers": []})
            for key in _SUB_SUMMED:
                merged[key] += sub[key]
            merged["consumers"].extend(sub["consumers"])
        if query_flag(request, "perPartition"):
            total["partitions"][part] = stats
    return web.json_response(total)


@routes.route("POST", T + "/terminate",
              "Terminate a topic: no more messages; returns the last message id.")
async def terminate(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    persistent(service, name)
    return web.json_response(message_id_doc(service.terminate_topic(name)))


@routes.route("PUT", T + "/unload", "Unload a topic (its clients reconnect and reload it).")
async def unload(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    for part in targets(service, topic_of(request)):
        topic = service.topics.get(part)
        if topic is not None:
            service.unload_topic(topic, housekeep=True)
    return no_content()


@routes.route("GET", T + "/lastMessageId", "The id of the last message stored.")
async def last_message_id(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    topic = persistent(service, topic_of(request))
    last = topic.ledger.last_confirmed()
    doc = message_id_doc(last, topic.topic_name.partition_index)
    if last is not None:
        metadata = entry_metadata(topic.ledger.read(last))
        if metadata is not None and metadata.HasField("num_messages_in_batch"):
            doc["batchIndex"] = metadata.num_messages_in_batch - 1
    return web.json_response(doc)


# ---------------------------------------------------------------------- subscriptions

@routes.route("GET", T + "/subscriptions", "The topic's subscriptions (all partitions').")
async def list_subscriptions(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    names: set[str] = set()
    for part in targets(service, topic_of(request)):
        names.update(loaded(service, part).subscriptions)
    return web.json_response(sorted(names))


def _position_of(body: Any) -> tuple[int, int]:
    expect(body, dict, "message id")
    return (int(expect(body.get("ledgerId"), int, "ledgerId")),
            int(expect(body.get("entryId"), int, "entryId")))


@routes.route("PUT", SUB, "Create a durable subscription (409 if it exists); the body picks where "
              "it starts (default latest; ledgerId -1 = earliest).",
              body='MessageId (optional): {"ledgerId": int, "entryId": int}')
async def create_subscription(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = topic_of(request)
    sub = request.match_info["subscription"]
    body = await json_body(request, required=False)
    position = _position_of(body) if body is not None else (_LATEST, _LATEST)
    parts = targets(service, name)
    for part in parts:
        if sub in persistent(service, part).subscriptions:
            raise RestError(409, f"Subscription {sub} already exists for topic {part}")
    for part in parts:
        service.create_subscription(part, sub, earliest=position[0] < 0)
        if 0 <= position[0] < _LATEST:
            service.reset_cursor(part, sub, *position)
    return no_content()


def _subscriptions(request: web.Request) -> list[tuple[str, PersistentSubscription]]:
    """(topic, subscription) on each partition (404 when missing on all)."""
    service = request.app[SERVICE]
    sub = request.match_info["subscription"]
    found = []
    for part in targets(service, topic_of(request)):
        candidate = persistent(service, part).subscriptions.get(sub)
        if isinstance(candidate, PersistentSubscription):
            found.append((part, candidate))
    if not found:
        raise RestError(404, f"Subscription {sub} not found")
    return found


@routes.route("DELETE", SUB, "Delete a subscription (412 with connected consumers, unless "
              "?force=true).")
async def delete_subscription(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    force = query_flag(request, "force")
    found = _subscriptions(request)
    if not force and any(sub.consumers for _, sub in found):
        raise RestError(412, "Subscription has active connected consumers")
    for part, sub in found:
        service.delete_subscription(part, sub.name, force=force)
    return no_content()


@routes.route("POST", SUB + "/skip/{count}", "Skip (acknowledge) the next N messages.")
async def skip(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    count = int_param(request, "count")
    for part, sub in _subscriptions(request):
        service.skip_messages(part, sub.name, count)
    return no_content()


@routes.route("POST", SUB + "/skip_all", "Clear the subscription's backlog.")
async def skip_all(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    for part, sub in _subscriptions(request):
        service.clear_backlog(part, sub.name)
    return no_content()


@routes.route("POST", SUB + "/resetcursor/{timestamp}",
              "Move the subscription to the first message published at or after a time (ms).")
async def reset_by_time(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    timestamp = int_param(request, "timestamp")
    for part, sub in _subscriptions(request):
        service.reset_cursor_by_time(part, sub.name, timestamp)
    return no_content()


@routes.route("POST", SUB + "/resetcursor", "Move the subscription to a message id.",
              body='{"ledgerId": int, "entryId": int, "partitionIndex": int}')
async def reset_by_id(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = await json_body(request)
    ledger_id, entry_id = _position_of(body)
    partition = body.get("partitionIndex", -1)
    for part, sub in _subscriptions(request):
        index = service.check_topic_name(part).partition_index
        if partition in (-1, None) or index in (-1, partition):
            service.reset_cursor(part, sub.name, ledger_id, entry_id)
    return no_content()


@routes.route("POST", SUB + "/expireMessages/{seconds}",
              "Acknowledge the subscription's messages older than N seconds.")
async def expire(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    seconds = int_param(request, "seconds")
    for part, sub in _subscriptions(request):
        service.expire_messages(persistent(service, part), seconds, subscription=sub.name)
    return no_content()


@routes.route("POST", T + "/all_subscription/expireMessages/{seconds}",
              "Acknowledge, on every subscription, the messages older than N seconds.")
async def expire_all(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    seconds = int_param(request, "seconds")
    for part in targets(service, topic_of(request)):
        service.expire_messages(persistent(service, part), seconds)
    return no_content()


@routes.route("GET", SUB + "/position/{n}",
              "Peek the Nth unacknowledged message (1 = the first): its payload, with X-Pulsar-* "
              "headers (message id, publish time, properties).")
async def peek(request: web.Request) -> web.Response:
    n = int_param(request, "n")
    if n < 1:
        raise RestError(412, "the message position starts at 1")
    found = _subscriptions(request)
    if len(found) != 1:
        raise RestError(405, "peek a partition of a partitioned topic, not the whole topic")
    _, sub = found[0]
    position = None
    for i, p in enumerate(sub.cursor.unacked_positions(), 1):
        if i == n:
            position = p
            break
    if position is None:
        raise RestError(404, "Message not found")
    data = sub.topic.ledger.read(position)
    try:
        metadata, payload = parse_payload_part(split_entry(data)[1], verify=False)
        payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    except Exception as exc:
        raise BrokerError(pb.UnknownError, f"message {position} cannot be read: {exc}") from exc
    headers = {
        "X-Pulsar-Message-ID": f"{position[0]}:{position[1]}",
        "X-Pulsar-publish-time": str(metadata.publish_time),
        "X-Pulsar-producer-name": metadata.producer_name,
        "X-Pulsar-sequence-id": str(metadata.sequence_id),
    }
    if metadata.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(metadata.num_messages_in_batch)
    if metadata.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = metadata.partition_key
    if metadata.event_time:
        headers["X-Pulsar-event-time"] = str(metadata.event_time)
    for kv in metadata.properties:
        headers[f"X-Pulsar-PROPERTY-{kv.key}"] = kv.value
    return web.Response(body=payload, headers=headers, content_type="application/octet-stream")
