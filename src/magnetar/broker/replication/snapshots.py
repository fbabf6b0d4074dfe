"""Replicated subscriptions (Pulsar's PIP-33 ``ReplicatedSubscriptionsController``): one
per replicated topic on its owner, while ``enableReplicatedSubscriptions`` is on.

Theory of operation. Clusters A and B replicate a topic both ways; a subscription created
with ``replicate_subscription_state`` is *replicated*: where it acknowledged in A, its
namesake in B follows. Positions differ between clusters, so A asks for consistent pairs
of positions through marker entries written into the topic itself (`protocol.markers`),
which replicators carry like any entry and dispatchers never hand to consumers:

1. Every ``replicatedSubscriptionsSnapshotFrequencyMillis``, if the topic has a replicated
   subscription, every replicator is connected and data came in since the last completed
   snapshot began, A writes a SNAPSHOT_REQUEST (id, source A) into its topic.
2. B's replicator towards A reads the request, which A's replicator stored in B at position
   pB (the replicator whose remote is the marker's ``replicated_from`` handles it), and B
   writes a SNAPSHOT_RESPONSE (id, B at pB) for A only (``replicate_to``).
3. A's replicator towards B reads the response, stored in A at pA. Once every remote
   answered (with more than one remote, twice: a second round catches what the remotes
   exchanged meanwhile), A writes a SNAPSHOT (id, local pA, {B: pB}) for itself only.
   Everything B had at pB reached A before pA.
4. A's replicated subscriptions read the snapshot like any entry (`SnapshotCache`); when
   one's mark-delete position passes pA, A writes an UPDATE (subscription, {B: pB}).
5. B's replicator towards A reads the update and moves B's subscription of that name to pB
   as a cumulative acknowledgement would (creating it, from the earliest entry, if missing).

A snapshot that does not complete within ``replicatedSubscriptionsSnapshotTimeoutSeconds``
is dropped. Nothing here is on the publish or dispatch path but the marker test the
dispatchers make on metadata they parse anyway.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from magnetar.broker.entries import entry_metadata, split_entry
from magnetar.broker.subscriptions.subscription import PersistentSubscription
from magnetar.broker.topics.markers import append_marker
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import parse_payload_part
from magnetar.protocol.markers import (
    ClusterPosition,
    Snapshot,
    SnapshotRequest,
    SnapshotResponse,
    Update,
    decode_marker,
    marker_part,
)
from magnetar.storage import Position

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.replication.replicator import Replicator
    from magnetar.broker.topics.topic import PersistentTopic

log = logging.getLogger(__name__)


class SnapshotBuilder:
    """One snapshot under way: the responses of the remote clusters (Pulsar's
    ``ReplicatedSubscriptionsSnapshotBuilder``)."""

    def __init__(self, remotes: set[str], data_in: int, now: float) -> None:
        self.snapshot_id = str(uuid.uuid4())
        self.remotes = frozenset(remotes)
        self.missing = set(remotes)
        self.responses: dict[str, ClusterPosition] = {}
        self.rounds_left = 2 if len(remotes) > 1 else 1
        self.started = now
        self.data_in = data_in  # the topic's data messages in when it started
        self.final_pending = False

    def received(self, response: ClusterPosition) -> str:
        """Note a response: "wait" (more to come), "again" (ask once more: a second
        round), "done" (complete: write the snapshot)."""
        self.responses.setdefault(response.cluster, response)
        self.missing.discard(response.cluster)
        if self.missing:
            return "wait"
        self.rounds_left -= 1
        if self.rounds_left > 0:
            self.missing = set(self.remotes)
            return "again"
        return "done"


class ReplicatedSubscriptionsController:
    """Snapshots and updates of one topic's replicated subscriptions (see the module)."""

    def __init__(self, topic: PersistentTopic, local: str, config: BrokerConfig,
                 replicators: Callable[[], Mapping[str, Replicator]]) -> None:
        self.topic = topic
        self.local = local
        self.frequency_s = max(0.01, config.replicatedSubscriptionsSnapshotFrequencyMillis / 1000)
        self.timeout_s = max(1.0, float(config.replicatedSubscriptionsSnapshotTimeoutSeconds))
        self._replicators = replicators
        self.pending: dict[str, SnapshotBuilder] = {}
        self.last_completed_start = 0.0
        self._completed_data_in = 0  # the data count when the last completed snapshot began
        self.completed = 0  # snapshots completed (tests, logs)
        self._timer: asyncio.TimerHandle | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self.topic.snapshot_listener = self
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.frequency_s, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.topic.snapshot_listener is self:
            self.topic.snapshot_listener = None
        self.pending.clear()

    def _tick(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.frequency_s, self._tick)
        try:
            self.start_snapshot()
        except Exception:
            log.exception("replicated subscriptions of %s: snapshot failed", self.topic.name)

    # -- snapshots ---------------------------------------------------------------------

    def _data_in(self) -> int:
        """Messages the topic took in that are data (markers from other clusters aside)."""
        return self.topic.msg_in - self.topic.markers_in

    def has_replicated_subscriptions(self) -> bool:
        return any(isinstance(s, PersistentSubscription) and s.replicated
                   for s in self.topic.subscriptions.values())

    def start_snapshot(self) -> str | None:
        """Begin a snapshot if one is due (see the module); its id, or None."""
        now = time.monotonic()
        for snapshot_id in [i for i, b in self.pending.items() if now - b.started > self.timeout_s]:
            log.debug("%s: snapshot %s timed out", self.topic.name, snapshot_id)
            del self.pending[snapshot_id]
        if not self.has_replicated_subscriptions():
            return None
        if not self.last_completed_start and self.pending:
            return None  # none ever completed: the pending one's timeout paces the retries
        data_in = self._data_in()
        if data_in == self._completed_data_in:
            return None  # no data since the last completed snapshot began
        replicators = self._replicators()
        if not replicators or not all(r.connected for r in replicators.values()):
            return None
        builder = SnapshotBuilder(set(replicators), data_in, now)
        self.pending[builder.snapshot_id] = builder
        self._write(SnapshotRequest(builder.snapshot_id, self.local))
        return builder.snapshot_id

    def _write(self, marker: SnapshotRequest | SnapshotResponse | Snapshot | Update,
               replicate_to: str | None = None) -> asyncio.Future[Position]:
        stored = append_marker(self.topic, marker_part(marker, replicate_to))
        stored.add_done_callback(self._write_failed)
        return stored

    def _write_failed(self, f: asyncio.Future[Position]) -> None:
        if not f.cancelled() and f.exception() is not None:
            log.info("%s: a replicated-subscription marker was not stored: %s",
                     self.topic.name, f.exception())

    # -- markers from the other clusters -----------------------------------------------

    def inbound(self, remote: str, position: Position, data: bytes | memoryview) -> None:
        """An entry ``remote``'s replicator did not send there (the replicator's
        ``on_skipped``): a marker that came from ``remote`` is handled here."""
        metadata = entry_metadata(data)  # (no copy of the payload of a message)
        if metadata is None or not metadata.HasField("marker_type") or metadata.replicated_from != remote:
            return  # a message, or a marker of another cluster's (its replicator has it)
        try:
            _, part = split_entry(data)
            _, payload = parse_payload_part(part, verify=False)
            marker = decode_marker(metadata.marker_type, payload)
        except ProtocolError as exc:
            log.warning("%s: unreadable marker from %s at %s: %s", self.topic.name, remote, position, exc)
            return
        if isinstance(marker, SnapshotRequest):
            self._write(SnapshotResponse(marker.snapshot_id, ClusterPosition(self.local, *position)),
                        replicate_to=marker.source_cluster)
        elif isinstance(marker, SnapshotResponse):
            self._response(position, marker)
        elif isinstance(marker, Update):
            self._update(marker)

    def _response(self, position: Position, response: SnapshotResponse) -> None:
        builder = self.pending.get(response.snapshot_id)
        if builder is None or builder.final_pending:
            return  # late (timed out) or already complete
        verdict = builder.received(response.cluster)
        if verdict == "again":
            self._write(SnapshotRequest(builder.snapshot_id, self.local))
        elif verdict == "done":
            builder.final_pending = True
            snapshot = Snapshot(builder.snapshot_id, (position[0], position[1]),
                                tuple(builder.responses[c] for c in sorted(builder.responses)))
            stored = self._write(snapshot, replicate_to=self.local)
            stored.add_done_callback(lambda f: self._completed(builder, f))

    def _completed(self, builder: SnapshotBuilder, f: asyncio.Future[Position]) -> None:
        if f.cancelled() or f.exception() is not None:
            builder.final_pending = False
            return
        self.pending.pop(builder.snapshot_id, None)
        self.last_completed_start = builder.started
        self._completed_data_in = builder.data_in
        self.completed += 1

    def _update(self, update: Update) -> None:
        mine = [c for c in update.clusters if c.cluster == self.local]
        if not mine:
            return
        position = Position(mine[-1].ledger_id, mine[-1].entry_id)
        sub = self.topic.subscriptions.get(update.subscription)
        if isinstance(sub, PersistentSubscription) and sub.durable:
            sub.mark_delete_to(position)
            return
        if sub is not None:
            return  # a Reader's of that name: not a durable subscription
        task = asyncio.ensure_future(self._create(update.subscription, position))
        task.add_done_callback(_log_failure)

    async def _create(self, name: str, position: Position) -> None:
        """Create the subscription an update names (from the earliest entry, replicated),
        then move it to ``position``."""
        topic = self.topic
        cursor = await topic.ledger.open_cursor_async(name, "earliest")
        sub = topic.subscriptions.get(name)
        if sub is None and not cursor.closed:
            sub = PersistentSubscription(topic, name, cursor, durable=True)
            topic.subscriptions[name] = sub
            sub.set_replicated(True)
            log.info("%s: subscription %s created by a replicated-subscription update",
                     topic.name, name)
        if isinstance(sub, PersistentSubscription) and sub.durable:
            sub.mark_delete_to(position)

    # -- the local subscriptions (`SnapshotListener`) ------------------------------------

    def local_subscription_updated(self, subscription: str, snapshot: Snapshot) -> None:
        """A replicated subscription's mark-delete position passed ``snapshot``: tell
        the other clusters where their copy of it stands."""
        self._write(Update(subscription, snapshot.clusters))


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("replicated subscription update not applied: %s", task.exception())
