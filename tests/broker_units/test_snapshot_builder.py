"""A replicated-subscription snapshot under way (`broker.replication.snapshots.SnapshotBuilder`)."""

from __future__ import annotations

from magnetar.broker.replication.snapshots import SnapshotBuilder
from magnetar.protocol.markers import ClusterPosition


def test_one_remote_completes_with_its_response() -> None:
    builder = SnapshotBuilder({"B"}, data_in=5, now=0.0)
    assert builder.received(ClusterPosition("B", 1, 2)) == "done"
    assert builder.responses == {"B": ClusterPosition("B", 1, 2)}


def test_several_remotes_need_two_rounds_and_keep_the_first_answers() -> None:
    builder = SnapshotBuilder({"B", "C"}, data_in=5, now=0.0)
    assert builder.received(ClusterPosition("B", 1, 2)) == "wait"
    assert builder.received(ClusterPosition("C", 3, 4)) == "again"
    assert builder.received(ClusterPosition("C", 3, 9)) == "wait"
    assert builder.received(ClusterPosition("B", 1, 7)) == "done"
    # the first round's positions: what each remote had when first asked
    assert builder.responses == {"B": ClusterPosition("B", 1, 2), "C": ClusterPosition("C", 3, 4)}
