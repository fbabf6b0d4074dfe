"""Topic names: ``my-topic`` -> ``persistent://public/default/my-topic``, partition names."""

from __future__ import annotations

import re

PARTITION_SUFFIX = "-partition-"
_PARTITION_RE = re.compile(r"^(.*)-partition-(\d+)$")


def full_name(topic: str) -> str:
    """Normalise a short or full topic name to ``domain://tenant/namespace/name``."""
    if "://" in topic:
        return topic
    parts = topic.split("/")
    if len(parts) == 1:
        return f"persistent://public/default/{topic}"
    if len(parts) == 3:
        return f"persistent://{topic}"
    raise ValueError(f"invalid topic name {topic!r}")


def partition_name(topic: str, index: int) -> str:
    return f"{topic}{PARTITION_SUFFIX}{index}"


def base_name(topic: str) -> str:
    """The partitioned topic a partition belongs to (or the topic itself)."""
    m = _PARTITION_RE.match(topic)
    return m.group(1) if m else topic


def partition_index(topic: str) -> int:
    m = _PARTITION_RE.match(topic)
    return int(m.group(2)) if m else -1


def namespace_of(topic: str) -> str:
    """``tenant/namespace`` of a full topic name."""
    rest = full_name(topic).split("://", 1)[1]
    tenant, ns, _ = rest.split("/", 2)
    return f"{tenant}/{ns}"
