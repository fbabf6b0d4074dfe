"""Marker entries a persistent topic's owner writes itself (``protocol.markers``; the
replication room's replicated-subscription controller is the writer): appended like a
message, with the broker entry metadata when it is on, but through no producer, so no
deduplication and no in counters. Subscriptions and replicators hear of them as of any
new entry."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.broker.entries import with_entry_metadata
from magnetar.broker.errors import BrokerError
from magnetar.protocol import pb
from magnetar.storage import StorageError

if TYPE_CHECKING:
    from magnetar.broker.topics.topic import PersistentTopic
    from magnetar.storage import Position


def append_marker(topic: PersistentTopic, part: bytes,
                  linger_s: float = 0.0) -> asyncio.Future[Position]:
    """Store the marker payload part ``part`` in ``topic``; the future: its position once
    durable (StorageError, or BrokerError when the topic takes no entries now: failed
    before this returns). ``linger_s``: it may wait that long for the next append, to be
    written and synced with it (`ManagedLedger.append_then`)."""
    done: asyncio.Future[Position] = asyncio.get_running_loop().create_future()

    def stored(position: Position | None, exc: BaseException | None) -> None:
        if done.done():
            return
        if position is None:
            done.set_exception(exc or StorageError("append failed"))
        else:
            done.set_result(position)

    append_marker_then(topic, part, stored, linger_s)
    return done


def append_marker_then(topic: PersistentTopic, part: bytes,
                       on_done: Callable[[Position | None, BaseException | None], None],
                       linger_s: float = 0.0) -> None:
    """`append_marker` without a future: ``on_done(position, None)`` once the marker is
    durable, ``on_done(None, error)`` if it failed, called from the storage's completion
    of its batch (no turn of the event loop in between), or before this returns when the
    topic takes no entries now."""
    cluster = topic.service.cluster
    if topic.terminated or (cluster is not None and not cluster.lease_ok()):
        on_done(None, BrokerError(pb.ServiceNotReady, f"topic {topic.name} takes no markers now"))
        return
    data = part
    if topic.entry_index >= 0:
        topic.entry_index += 1
        data = with_entry_metadata(part, topic.entry_index - 1)

    def stored(position: Position | None, exc: BaseException | None) -> None:
        if position is not None:
            topic.entries_confirmed()
        on_done(position, exc)

    topic.ledger.append_then(data, stored, None, linger_s)
