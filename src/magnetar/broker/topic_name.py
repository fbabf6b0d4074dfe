"""Topic names, parsed and normalised the way Apache Pulsar does it.

Theory of operation
-------------------
A topic name written by a user comes in one of three shapes:

* ``my-topic``                      -> ``persistent://public/default/my-topic``
* ``tenant/ns/my-topic``            -> ``persistent://tenant/ns/my-topic``
* ``{domain}://tenant/ns/my-topic`` (fully qualified; the domain is ``persistent`` or
  ``non-persistent``, matched without regard to case and printed in lower case)

The legacy form with a cluster segment (``persistent://tenant/cluster/ns/topic``) is
accepted too; its namespace is then ``tenant/cluster/ns``.

Tenant, cluster and namespace segments must be non-empty and use only ASCII letters,
digits and ``_-=:.`` (Pulsar's named-entity rule). The local name only has to be
non-empty; Pulsar puts no character restriction on it.

A topic is a *partition* when its name contains ``-partition-`` followed by a canonical
non-negative decimal integer (no sign, no leading zero, fits in a Java ``int``), taken
after the *last* occurrence of the suffix. Anything else (``t-partition-01``,
``t-partition--1``, ``t-partition-x``) is an ordinary topic with partition index -1.

Everything here is pure: no I/O, no imports from other Magnetar layers.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "DEFAULT_NAMESPACE",
    "NON_PERSISTENT",
    "PARTITION_SUFFIX",
    "PERSISTENT",
    "PUBLIC_TENANT",
    "TopicName",
    "ledger_name",
    "namespace_of",
]

PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
PUBLIC_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"

_DOMAINS = (PERSISTENT, NON_PERSISTENT)
_NAMED_ENTITY = re.compile(r"[-=:.\w]*", re.ASCII)
_JAVA_INT_MAX = 2**31 - 1


def _check_entity(kind: str, value: str, full: str) -> None:
    if not value:
        raise ValueError(f"Invalid topic name '{full}': empty {kind}")
    if _NAMED_ENTITY.fullmatch(value) is None:
        raise ValueError(
            f"Invalid topic name '{full}': {kind} '{value}' may only contain "
            "letters, digits and the characters _-=:."
        )


def _partition_index_of(name: str) -> int:
    """Pulsar's rule: the canonical integer after the last ``-partition-``, else -1."""
    pos = name.rfind(PARTITION_SUFFIX)
    if pos < 0:
        return -1
    tail = name[pos + len(PARTITION_SUFFIX) :]
    if not tail.isascii() or not tail.isdigit():
        return -1
    if len(tail) > 1 and tail[0] == "0":
        return -1
    value = int(tail)
    return value if value <= _JAVA_INT_MAX else -1


@dataclass(frozen=True, slots=True)
class TopicName:
    """A parsed, normalised topic name. Build it with :meth:`TopicName.parse`.

    Two ``TopicName`` objects are equal when their full names are equal.
    """

    domain: str
    tenant: str
    cluster: str | None
    namespace_portion: str
    local_name: str

    @staticmethod
    def parse(name: str) -> TopicName:
        """Parse and normalise ``name``; raise :class:`ValueError` if it is not valid."""
        if not isinstance(name, str):
            raise TypeError(f"topic name must be a str, not {type(name).__name__}")
        return _parse_cached(name)

    @staticmethod
    def is_valid(name: str) -> bool:
        try:
            TopicName.parse(name)
        except (ValueError, TypeError):
            return False
        return True

    # ------------------------------------------------------------------ properties

    @property
    def namespace(self) -> str:
        """``tenant/ns`` (or ``tenant/cluster/ns`` for legacy names)."""
        if self.cluster is None:
            return f"{self.tenant}/{self.namespace_portion}"
        return f"{self.tenant}/{self.cluster}/{self.namespace_portion}"

    @property
    def is_persistent(self) -> bool:
        return self.domain == PERSISTENT

    @property
    def is_v2(self) -> bool:
        """True for ``tenant/ns/topic`` names, False for the legacy form with a cluster."""
        return self.cluster is None

    @property
    def partition_index(self) -> int:
        """The partition number, or -1 when this is not a partition of a topic."""
        return _partition_index_of(self.local_name)

    @property
    def is_partition(self) -> bool:
        return self.partition_index >= 0

    @property
    def partitioned_base(self) -> str:
        """The full name without the ``-partition-N`` suffix (the name itself if none)."""
        full = str(self)
        if self.partition_index < 0:
            return full
        return full[: full.rfind(PARTITION_SUFFIX)]

    @property
    def base(self) -> TopicName:
        """:attr:`partitioned_base` as a ``TopicName``."""
        return self if self.partition_index < 0 else TopicName.parse(self.partitioned_base)

    @property
    def schema_name(self) -> str:
        """``tenant/ns/topic`` of the partitioned base, without domain: Pulsar's schema id.

        Partitions of one topic, and its persistent and non-persistent forms, share it.
        """
        base = self.base
        return f"{base.namespace}/{base.local_name}"

    def partition(self, index: int) -> TopicName:
        """The name of partition ``index`` of this topic.

        As in Pulsar, ``index == -1`` or a name that already contains ``-partition-``
        gives back this same name.
        """
        if index == -1 or PARTITION_SUFFIX in str(self):
            return self
        if index < 0:
            raise ValueError(f"Invalid partition index {index}")
        return TopicName.parse(f"{self}{PARTITION_SUFFIX}{index}")

    def __str__(self) -> str:
        return f"{self.domain}://{self.namespace}/{self.local_name}"

    def __repr__(self) -> str:
        return f"TopicName('{self}')"


@lru_cache(maxsize=4096)
def _parse_cached(name: str) -> TopicName:
    original = name
    if "://" not in name:
        parts = name.split("/")
        if len(parts) == 1:
            name = f"{PERSISTENT}://{PUBLIC_TENANT}/{DEFAULT_NAMESPACE}/{name}"
        elif len(parts) == 3:
            name = f"{PERSISTENT}://{name}"
        else:
            raise ValueError(
                f"Invalid short topic name '{original}', it should be in the format of "
                "<tenant>/<namespace>/<topic> or <topic>"
            )

    domain_text, rest = name.split("://", 1)
    domain = domain_text.lower()
    if domain not in _DOMAINS:
        raise ValueError(
            f"Invalid topic name '{original}': unknown domain '{domain_text}' "
            f"(expected '{PERSISTENT}' or '{NON_PERSISTENT}')"
        )

    parts = rest.split("/", 3)
    cluster: str | None
    if len(parts) == 3:
        tenant, ns, local = parts
        cluster = None
    elif len(parts) == 4:
        tenant, cluster, ns, local = parts
        _check_entity("cluster", cluster, original)
    else:
        raise ValueError(
            f"Invalid topic name '{original}': expected {{domain}}://<tenant>/<namespace>/<topic>"
        )
    _check_entity("tenant", tenant, original)
    _check_entity("namespace", ns, original)
    if not local:
        raise ValueError(f"Invalid topic name '{original}': empty topic local name")
    return TopicName(domain, tenant, cluster, ns, local)


def namespace_of(name: str) -> str:
    """The namespace (``tenant/ns``) of a topic given in any accepted form."""
    return TopicName.parse(name).namespace


def ledger_name(topic_name: TopicName) -> str:
    """A filesystem-safe, unique storage name for a persistent topic's managed ledger."""
    text = str(topic_name).split("://", 1)[1]
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
