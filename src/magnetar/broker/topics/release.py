"""What an unloaded topic lets go of, so that reference counting alone frees it.

The broker freezes what topic loads build out of the garbage collector's reach
(`magnetar.broker.heap`): a cycle left between an unloaded topic and its parts would keep
them in memory for good. `release_topic` breaks the topic's side of them once its ledger is
closed (the storage breaks the ledger's: its cursors, its file jobs' callbacks).
"""

from __future__ import annotations

from magnetar.broker.topics.topic import PersistentTopic, Topic


def release_topic(topic: Topic) -> None:
    """Drop the unloaded ``topic``'s references to its subscriptions and producers (they
    point back at it), and a persistent topic's ledger callback and replicators."""
    topic.subscriptions = {}
    topic.producers = {}
    if isinstance(topic, PersistentTopic):
        if topic.ledger.after_appends == topic._appends_done:
            topic.ledger.after_appends = None
            topic.ledger.on_change = None  # (holds the broker's set and the name, not the topic)
        topic.replicators = {}
        topic.snapshot_listener = None
