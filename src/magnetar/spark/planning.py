"""Driver-side planning: which partitions, and the bounds of each one's range.

Offsets given by the user (``earliest``, ``latest``, per-topic message ids) and publish
times (``startingTime`` / ``endingTime`` and pushed-down ``__publishTime`` filters) are
turned into concrete bounds here, once, so executors never decide what a range holds.
A publish time is resolved with a throw-away durable subscription and a seek by time (the
broker's binary search), after checking the last message's time so an empty answer does
not have to wait for a timeout.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from magnetar.client import InitialPosition, MessageId
from magnetar.client.topic import base_name, partition_index
from magnetar.spark.offsets import EARLIEST, Bound, before
from magnetar.spark.session import Session


def _spec_for(spec: str | dict[str, str | Bound], topic: str, default: str) -> str | Bound:
    if isinstance(spec, str):
        return spec
    if topic in spec:
        return spec[topic]
    return spec.get(base_name(topic), default)


def start_bounds(session: Session, partitions: list[str], spec: str | dict[str, Any],
                 start_time: int | None, last: dict[str, Bound]) -> dict[str, Bound]:
    """The ``after`` bound of each partition for a starting spec or time."""
    if start_time is not None:
        return session.run(_by_time(session, partitions, start_time, last))
    out = {}
    for t in partitions:
        s = _spec_for(spec, t, "earliest")
        out[t] = EARLIEST if s == "earliest" else last[t] if s == "latest" \
            else before(s)  # type: ignore[arg-type]
    return out


def end_bounds(session: Session, partitions: list[str], spec: str | dict[str, Any],
               end_time: int | None, last: dict[str, Bound]) -> dict[str, Bound]:
    """The inclusive ``upto`` bound of each partition for an ending spec or time."""
    if end_time is not None:
        return session.run(_by_time(session, partitions, end_time, last))
    out = {}
    for t in partitions:
        s = _spec_for(spec, t, "latest")
        out[t] = last[t] if s == "latest" else EARLIEST if s == "earliest" \
            else before(s)  # type: ignore[arg-type]
    return out


async def _by_time(session: Session, partitions: list[str], ms: int,
                   last: dict[str, Bound]) -> dict[str, Bound]:
    """Per partition, the bound just before the first message published at or after
    ``ms`` (the last message's key when there is none)."""
    client = session.client

    async def one(topic: str) -> tuple[str, Bound]:
        if last[topic][1] < 0:
            return topic, last[topic]
        ledger, entry, _ = last[topic]
        tail = await client.create_reader(topic,
                                          MessageId(partition_index(topic), ledger, entry),
                                          start_message_id_inclusive=True,
                                          receiver_queue_size=1)
        try:
            msg = await tail.read_next(timeout_millis=int(client.operation_timeout_seconds() * 1000))
        finally:
            await tail.close()
        if msg.publish_timestamp() < ms:
            return topic, last[topic]
        sub = await client.subscribe(topic, f"spark-seek-{uuid.uuid4().hex[:12]}",
                                     initial_position=InitialPosition.Earliest,
                                     receiver_queue_size=1)
        try:
            await sub.seek(ms)
            first = await sub.receive(timeout_millis=int(client.operation_timeout_seconds() * 1000))
            mid = first.message_id()
            return topic, before((mid.ledger_id(), mid.entry_id(), mid.batch_index()))
        finally:
            await sub.unsubscribe()

    return dict(await asyncio.gather(*(one(t) for t in partitions)))
