"""The broker's name for ``magnetar.protocol.naming``: topic, namespace and tenant names are
checked in that one module (client and broker alike); this re-exports it for broker code."""

from __future__ import annotations

from magnetar.protocol.naming import (
    DEFAULT_NAMESPACE,
    NON_PERSISTENT,
    PARTITION_SUFFIX,
    PERSISTENT,
    PUBLIC_TENANT,
    TopicName,
    check_named_entity,
    ledger_name,
    namespace_of,
    parse_namespace,
    url_segment,
)

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
