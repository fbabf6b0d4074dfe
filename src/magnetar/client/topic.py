"""Topic names as the client uses them: ``my-topic`` -> ``persistent://public/default/my-topic``,
partition names. The rules are ``magnetar.protocol.naming``'s, the broker's own."""

from __future__ import annotations

from magnetar.protocol.naming import PARTITION_SUFFIX, TopicName

__all__ = ["PARTITION_SUFFIX", "base_name", "full_name", "namespace_of", "partition_index",
           "partition_name"]


def full_name(topic: str) -> str:
    """Normalise a short or full topic name to ``domain://tenant/namespace/name``
    (ValueError for a name the broker would refuse)."""
    return str(TopicName.parse(topic))


def partition_name(topic: str, index: int) -> str:
    return f"{topic}{PARTITION_SUFFIX}{index}"


def base_name(topic: str) -> str:
    """The partitioned topic a partition belongs to (or the topic itself)."""
    return TopicName.parse(topic).partitioned_base


def partition_index(topic: str) -> int:
    return TopicName.parse(topic).partition_index


def namespace_of(topic: str) -> str:
    """``tenant/namespace`` of a topic name."""
    return TopicName.parse(topic).namespace
