"""Subscriptions: ``/admin/v2/{persistent|non-persistent}/{tenant}/{ns}/{topic}/subscription...``:
list, create, delete, skip, skip_all, resetcursor (by time or message id), expireMessages,
peek (``position/N``). An operation on a subscription of a partitioned topic applies to
every partition, as in Pulsar; in a cluster it is asked of each partition's owner
(`at_partition_owners`), which loads its partition if need be."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.admin.messages import message_response
from magnetar.admin.routing import (
    SERVICE,
    RestError,
    RouteTable,
    expect,
    int_param,
    json_body,
    no_content,
    query_flag,
)
from magnetar.admin.topics import (
    SUB,
    T,
    at_partition_owners,
    fanned_out,
    loaded,
    persistent,
    read_entry,
    targets,
    topic_of,
)
from magnetar.broker.subscriptions.subscription import PersistentSubscription

routes = RouteTable("subscriptions")

_LATEST = 2**63 - 1


@routes.route("GET", T + "/subscriptions", "The topic's subscriptions (all partitions').")
async def list_subscriptions(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    names: set[str] = set()
    name = topic_of(request)
    outcomes = await at_partition_owners(request, name)
    if outcomes is not None:
        fanned_out(outcomes)  # raises a refusal, as it was given
        for _, listed in outcomes:
            names.update(listed or ())
        return web.json_response(sorted(names))
    for part in await targets(service, name):
        names.update((await loaded(service, part)).subscriptions)
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
    outcomes = await at_partition_owners(request, name)
    if outcomes is not None:
        return fanned_out(outcomes, conflict=True)
    body = await json_body(request, required=False)
    position = _position_of(body) if body is not None else (_LATEST, _LATEST)
    parts = await targets(service, name)
    for part in parts:
        if sub in (await persistent(service, part)).subscriptions:
            raise RestError(409, f"Subscription {sub} already exists for topic {part}")
    for part in parts:
        await service.create_subscription(part, sub, earliest=position[0] < 0)
        if 0 <= position[0] < _LATEST:
            await service.reset_cursor(part, sub, *position)
    return no_content()


async def _subscriptions(request: web.Request) -> list[tuple[str, PersistentSubscription]]:
    """(topic, subscription) on each partition (404 when missing on all)."""
    service = request.app[SERVICE]
    sub = request.match_info["subscription"]
    found = []
    for part in await targets(service, topic_of(request)):
        candidate = (await persistent(service, part)).subscriptions.get(sub)
        if isinstance(candidate, PersistentSubscription):
            found.append((part, candidate))
    if not found:
        raise RestError(404, f"Subscription {sub} not found")
    return found


@routes.route("DELETE", SUB, "Delete a subscription (412 with connected consumers, unless "
              "?force=true).")
async def delete_subscription(request: web.Request) -> web.Response:
    outcomes = await at_partition_owners(request, topic_of(request))
    if outcomes is not None:
        return fanned_out(outcomes)
    service = request.app[SERVICE]
    force = query_flag(request, "force")
    found = await _subscriptions(request)
    if not force and any(sub.consumers for _, sub in found):
        raise RestError(412, "Subscription has active connected consumers")
    for part, sub in found:
        await service.delete_subscription(part, sub.name, force=force)
    return no_content()


@routes.route("POST", SUB + "/skip/{count}", "Skip (acknowledge) the next N messages.")
async def skip(request: web.Request) -> web.Response:
    outcomes = await at_partition_owners(request, topic_of(request))
    if outcomes is not None:
        return fanned_out(outcomes)
    service = request.app[SERVICE]
    count = int_param(request, "count")
    for part, sub in await _subscriptions(request):
        await service.skip_messages(part, sub.name, count)
    return no_content()


@routes.route("POST", SUB + "/skip_all", "Clear the subscription's backlog.")
async def skip_all(request: web.Request) -> web.Response:
    outcomes = await at_partition_owners(request, topic_of(request))
    if outcomes is not None:
        return fanned_out(outcomes)
    service = request.app[SERVICE]
    for part, sub in await _subscriptions(request):
        await service.clear_backlog(part, sub.name)
    return no_content()


@routes.route("POST", SUB + "/resetcursor/{timestamp}",
              "Move the subscription to the first message published at or after a time (ms).")
async def reset_by_time(request: web.Request) -> web.Response:
    outcomes = await at_partition_owners(request, topic_of(request))
    if outcomes is not None:
        return fanned_out(outcomes)
    service = request.app[SERVICE]
    timestamp = int_param(request, "timestamp")
    for part, sub in await _subscriptions(request):
        await service.reset_cursor_by_time(part, sub.name, timestamp)
    return no_content()


@routes.route("POST", SUB + "/resetcursor", "Move the subscription to a message id.",
              body='{"ledgerId": int, "entryId": int, "partitionIndex": int}')
async def reset_by_id(request: web.Request) -> web.Response:
    outcomes = await at_partition_owners(request, topic_of(request))
    if outcomes is not None:
        return fanned_out(outcomes)
    service = request.app[SERVICE]
    body = await json_body(request)
    ledger_id, entry_id = _position_of(body)
    partition = body.get("partitionIndex", -1)
    for part, sub in await _subscriptions(request):
        index = service.check_topic_name(part).partition_index
        if partition in (-1, None) or index in (-1, partition):
            await service.reset_cursor(part, sub.name, ledger_id, entry_id)
    return no_content()


@routes.route("POST", SUB + "/expireMessages/{seconds}",
              "Acknowledge the subscription's messages older than N seconds.")
async def expire(request: web.Request) -> web.Response:
    outcomes = await at_partition_owners(request, topic_of(request))
    if outcomes is not None:
        return fanned_out(outcomes)
    service = request.app[SERVICE]
    seconds = int_param(request, "seconds")
    for part, sub in await _subscriptions(request):
        await service.expire_messages(await persistent(service, part), seconds, subscription=sub.name)
    return no_content()


@routes.route("POST", T + "/all_subscription/expireMessages/{seconds}",
              "Acknowledge, on every subscription, the messages older than N seconds.")
async def expire_all(request: web.Request) -> web.Response:
    outcomes = await at_partition_owners(request, topic_of(request))
    if outcomes is not None:
        return fanned_out(outcomes)
    service = request.app[SERVICE]
    seconds = int_param(request, "seconds")
    for part in await targets(service, topic_of(request)):
        await service.expire_messages(await persistent(service, part), seconds)
    return no_content()


@routes.route("GET", SUB + "/position/{n}",
              "Peek the Nth unacknowledged message (1 = the first): its payload, with X-Pulsar-* "
              "headers (message id, publish time, properties).")
async def peek(request: web.Request) -> web.Response:
    n = int_param(request, "n")
    if n < 1:
        raise RestError(412, "the message position starts at 1")
    found = await _subscriptions(request)
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
    return message_response(position, await read_entry(sub.topic.ledger, position))
