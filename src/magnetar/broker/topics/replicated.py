"""`TopicReplicator`: what a persistent topic and its stats use of a geo-replicator (the
`broker.replication` room above hands its replicators to the topic as this)."""

from __future__ import annotations

from typing import Any, Protocol


class TopicReplicator(Protocol):
    """One remote cluster's replicator of a topic."""

    msg_out: int
    bytes_out: int

    def entries_added(self) -> None:
        """The topic confirmed new entries."""

    def stats(self) -> dict[str, Any]:
        """Pulsar's ``replication`` entry for this remote, rates aside."""
