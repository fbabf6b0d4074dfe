"""Reading stored messages over the admin API, at Pulsar's paths: ``examinemessage`` (the Nth
entry from the earliest or the latest), ``ledger/{ledgerId}/entry/{entryId}`` (one entry by
id), and the answer every message read shares with a subscription's peek
(``message_response``: the payload, with ``X-Pulsar-*`` headers)."""

from __future__ import annotations

import re
from urllib.parse import quote

from aiohttp import web

from magnetar.admin.routing import SERVICE, RestError, RouteTable, int_param, query_int
from magnetar.admin.topics import T, partitions_of, persistent, read_entry, topic_of
from magnetar.broker.entries import split_entry
from magnetar.broker.errors import BrokerError
from magnetar.protocol import pb
from magnetar.protocol.compression import decompress
from magnetar.protocol.frames import parse_payload_part
from magnetar.storage import EntryNotFoundError, Position

routes = RouteTable("messages")

# what HTTP allows in a header name (RFC 9110's token) and value (no control characters)
_NOT_TOKEN = re.compile(r"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def property_header(key: str, value: str) -> tuple[str, str]:
    """A message property as Pulsar's ``X-Pulsar-PROPERTY-{key}`` header; a key or value
    that HTTP cannot carry as it is (a space, ``<``, a newline...) is percent-encoded, so
    that the response stays valid for browsers and cannot be split."""
    if _NOT_TOKEN.search(key):
        key = quote(key, safe="")
    if _CONTROL.search(value):
        value = quote(value, safe=" ")
    return f"X-Pulsar-PROPERTY-{key}", value


def message_response(position: Position, data: bytes) -> web.Response:
    """A stored entry as Pulsar's admin API answers a peek: the (decompressed) payload as
    ``application/octet-stream``, its id and metadata in ``X-Pulsar-*`` headers."""
    try:
        metadata, payload = parse_payload_part(split_entry(data)[1], verify=False)
        payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    except Exception as exc:
        raise BrokerError(pb.UnknownError, f"message {position[0]}:{position[1]} cannot be read: "
                          f"{exc}") from exc
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
    if metadata.HasField("replicated_from"):  # it came from that cluster by replication
        headers["X-Pulsar-replicated-from"] = metadata.replicated_from
    for kv in metadata.properties:
        name, value = property_header(kv.key, kv.value)
        headers[name] = value
    return web.Response(body=payload, headers=headers, content_type="application/octet-stream")


async def _one_topic(request: web.Request) -> str:
    """The request's topic, refused (405) when it is a partitioned topic as a whole."""
    service = request.app[SERVICE]
    name = topic_of(request)
    if await partitions_of(service, name):
        raise RestError(405, f"{name} is a partitioned topic: name one partition "
                        f"({name}-partition-0...)")
    return name


@routes.route("GET", T + "/examinemessage",
              "The Nth stored message counted from the earliest or the latest "
              "(?initialPosition=earliest|latest, default latest; ?messagePosition=N, default 1), "
              "with X-Pulsar-* headers.")
async def examine_message(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    initial = request.query.get("initialPosition", "latest").lower()
    if initial not in ("earliest", "latest"):
        raise RestError(412, f"initialPosition must be earliest or latest, not {initial!r}")
    n = query_int(request, "messagePosition", 1)
    topic = await persistent(service, await _one_topic(request))
    position = topic.ledger.position_at(n - 1 if initial == "earliest" else -n)
    if position is None:
        raise RestError(404, f"Could not examine message {n} from the {initial}: the topic "
                        f"{topic.name} stores fewer messages")
    return message_response(position, await read_entry(topic.ledger, position))


@routes.route("GET", T + "/ledger/{ledgerId}/entry/{entryId}",
              "One stored message by its id, with X-Pulsar-* headers (404 if not stored).")
async def message_by_id(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    position = Position(int_param(request, "ledgerId"), int_param(request, "entryId"))
    topic = await persistent(service, await _one_topic(request))
    if not topic.ledger.contains(position):
        raise RestError(404, f"Message {position[0]}:{position[1]} not found in {topic.name}")
    try:
        data = await read_entry(topic.ledger, position)
    except EntryNotFoundError:
        raise RestError(404, f"Message {position[0]}:{position[1]} not found in {topic.name}"
                        ) from None
    return message_response(position, data)
