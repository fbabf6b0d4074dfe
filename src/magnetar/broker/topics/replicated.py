"""`TopicReplicator`: what a persistent topic, its stats and the broker's backlog rules use
of a geo-replicator (the `broker.replication` room above hands its replicators to the topic
as this)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from magnetar.storage.cursor import ManagedCursor


class TopicReplicator(Protocol):
    """One remote cluster's replicator of a topic."""

    msg_out: int
    bytes_out: int
    #: entries the broker moved its cursor past (message TTL, backlog-quota eviction)
    msg_expired: int
    #: its durable cursor ``pulsar.repl.{remote}`` (None until opened): it holds the
    #: backlog as a subscription's does (backlog quotas and message TTL count it)
    cursor: ManagedCursor | None

    def entries_added(self) -> None:
        """The topic confirmed new entries."""

    def stats(self) -> dict[str, Any]:
        """Pulsar's ``replication`` entry for this remote, rates aside."""
