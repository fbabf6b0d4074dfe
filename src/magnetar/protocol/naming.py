"""Names of tenants, namespaces and topics, checked and normalised the way Apache Pulsar
does it: the one place that says which names are valid, used by the broker, the admin API,
the client and both CLIs (so a name one of them accepts, the others accept too).

Theory of operation
-------------------
Tenant, cluster and namespace names are *named entities*: non-empty, ASCII letters, digits
and ``_-=:.`` only (:func:`check_named_entity`), and not ``.`` or ``..`` (Pulsar's pattern
allows those, but they cannot be metadata path segments). A namespace is ``tenant/namespace`` (or the
legacy ``tenant/cluster/namespace``), checked by :func:`parse_namespace`.

A topic name written by a user comes in one of three shapes:

* ``my-topic``                      -> ``persistent://public/default/my-topic``
* ``tenant/ns/my-topic``            -> ``persistent://tenant/ns/my-topic``
* ``{domain}://tenant/ns/my-topic`` (fully qualified; the domain is ``persistent`` or
  ``non-persistent``, matched without regard to case and printed in lower case)

The legacy form with a cluster segment (``persistent://tenant/cluster/ns/topic``) is
accepted too; its namespace is then ``tenant/cluster/ns``.

The local name only has to be non-empty: Pulsar puts no character restriction on it, so
``my topic?`` is a valid name. Where a name goes into a URL path, each segment is
percent-encoded (:func:`url_segment`, :meth:`TopicName.rest_path`), as Pulsar's admin
client encodes the local name; the HTTP server decodes it back.

A topic is a *partition* when its name contains ``-partition-`` followed by a canonical
non-negative decimal integer (no sign, no leading zero, fits in a Java ``int``), taken
after the *last* occurrence of the suffix. Anything else (``t-partition-01``,
``t-partition--1``, ``t-partition-x``) is an ordinary topic with partition index -1.

Errors are :class:`ValueError` with a one-line message that quotes the name and says what
is wrong with it. Everything here is pure: no I/O, no imports from other Magnetar modules.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote

__all__ = [
    "DEFAULT_NAMESPACE",
    "NON_PERSISTENT",
    "PARTITION_SUFFIX",
    "PERSISTENT",
    "PUBLIC_TENANT",
    "TopicName",
    "check_named_entity",
    "ledger_name",
    "namespace_of",
    "parse_namespace",
    "url_segment",
]

PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
PUBLIC_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"

_DOMAINS = (PERSISTENT, NON_PERSISTENT)
_NAMED_ENTITY = re.compile(r"[-=:.\w]*", re.ASCII)
_JAVA_INT_MAX = 2**31 - 1
# Pulsar's pattern allows them, but as metadata path segments (ZooKeeper's too) they are
# relative paths: refused here, where a user learns it, rather than by the store
_DOT_NAMES = (".", "..")


_ALLOWED = "letters, digits and _-=:."


def check_named_entity(kind: str, value: str) -> str:
    """``value`` if it is a valid tenant, cluster or namespace name (Pulsar's named-entity
    rule: non-empty, ASCII letters, digits and ``_-=:.``), else ValueError naming ``kind``."""
    if not isinstance(value, str):
        raise ValueError(f"{kind} name must be a string, not {type(value).__name__}")
    if not value:
        raise ValueError(f"Invalid {kind} name '': it is empty")
    if _NAMED_ENTITY.fullmatch(value) is None:
        raise ValueError(f"Invalid {kind} name {value!r}: use only {_ALLOWED}")
    if value in _DOT_NAMES:
        raise ValueError(f"Invalid {kind} name {value!r}: not a usable path segment")
    return value


def parse_namespace(name: str) -> tuple[str, str]:
    """``(tenant, namespace)`` of ``tenant/namespace``; ValueError if either part is not a
    valid name or the shape is wrong. The legacy ``tenant/cluster/namespace`` comes back as
    ``(tenant, "cluster/namespace")``."""
    parts = name.split("/") if isinstance(name, str) else []
    if "://" in name or len(parts) not in (2, 3):
        raise ValueError(f"Invalid namespace name {name!r}: expected <tenant>/<namespace>")
    kinds = ("tenant", "cluster", "namespace") if len(parts) == 3 else ("tenant", "namespace")
    for kind, part in zip(kinds, parts, strict=True):
        if not part:
            raise ValueError(f"Invalid namespace name {name!r}: empty {kind}")
        if _NAMED_ENTITY.fullmatch(part) is None:
            raise ValueError(f"Invalid namespace name {name!r}: {kind} {part!r} may only "
                             f"contain {_ALLOWED}")
        if part in _DOT_NAMES:
            raise ValueError(f"Invalid namespace name {name!r}: {kind} {part!r} is not a "
                             "usable path segment")
    return parts[0], "/".join(parts[1:])


def url_segment(text: str) -> str:
    """``text`` percent-encoded as one URL path segment (``/``, ``?``, ``%``, spaces too);
    ValueError for text that is not valid UTF-8 (a lone surrogate)."""
    try:
        return quote(text, safe="")
    except UnicodeEncodeError:
        raise ValueError(f"{text!r} is not valid UTF-8 text") from None


def _check_entity(kind: str, value: str, full: str) -> None:
    if not value:
        raise ValueError(f"Invalid topic name {full!r}: empty {kind}")
    if _NAMED_ENTITY.fullmatch(value) is None:
        raise ValueError(f"Invalid topic name {full!r}: {kind} {value!r} may only contain {_ALLOWED}")
    if value in _DOT_NAMES:
        raise ValueError(f"Invalid topic name {full!r}: {kind} {value!r} is not a usable path segment")


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

    def rest_path(self) -> str:
        """``domain/tenant/ns/local`` for the admin API's URLs, the local name encoded."""
        return f"{self.domain}/{self.namespace}/{url_segment(self.local_name)}"

    def __str__(self) -> str:
        return f"{self.domain}://{self.namespace}/{self.local_name}"

    def __repr__(self) -> str:
        return f"TopicName('{self}')"


@lru_cache(maxsize=4096)
def _parse_cached(name: str) -> TopicName:
    original = name
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: bytes that were not UTF-8 (argv, say)
        raise ValueError(f"Invalid topic name {name!r}: not valid UTF-8 text") from None
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
