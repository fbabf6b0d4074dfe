"""Magnetar: the Apache Pulsar wire protocol in Python (broker, client, Spark pipeline).

The client's names (``magnetar.Client``, ``magnetar.MessageId``...) are loaded on first use,
so that ``import magnetar.storage`` or the broker does not import the client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from magnetar.client import AuthenticationBasic as AuthenticationBasic
    from magnetar.client import AuthenticationToken as AuthenticationToken
    from magnetar.client import AvroSchema as AvroSchema
    from magnetar.client import BatchingType as BatchingType
    from magnetar.client import BytesSchema as BytesSchema
    from magnetar.client import Client as Client
    from magnetar.client import CompressionType as CompressionType
    from magnetar.client import ConsumerBatchReceivePolicy as ConsumerBatchReceivePolicy
    from magnetar.client import ConsumerDeadLetterPolicy as ConsumerDeadLetterPolicy
    from magnetar.client import ConsumerType as ConsumerType
    from magnetar.client import HashingScheme as HashingScheme
    from magnetar.client import InitialPosition as InitialPosition
    from magnetar.client import JsonSchema as JsonSchema
    from magnetar.client import MessageId as MessageId
    from magnetar.client import PartitionsRoutingMode as PartitionsRoutingMode
    from magnetar.client import ProducerAccessMode as ProducerAccessMode
    from magnetar.client import PulsarException as PulsarException
    from magnetar.client import RegexSubscriptionMode as RegexSubscriptionMode
    from magnetar.client import StringSchema as StringSchema
    from magnetar.client import Transaction as Transaction

_CLIENT_NAMES = frozenset({
    "AuthenticationBasic",
    "AuthenticationToken",
    "AvroSchema",
    "BatchingType",
    "BytesSchema",
    "Client",
    "CompressionType",
    "ConsumerBatchReceivePolicy",
    "ConsumerDeadLetterPolicy",
    "ConsumerType",
    "HashingScheme",
    "InitialPosition",
    "JsonSchema",
    "MessageId",
    "PartitionsRoutingMode",
    "ProducerAccessMode",
    "PulsarException",
    "RegexSubscriptionMode",
    "StringSchema",
    "Transaction",
})


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        return getattr(importlib.import_module("magnetar.client"), name)
    raise AttributeError(f"module 'magnetar' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_CLIENT_NAMES])
