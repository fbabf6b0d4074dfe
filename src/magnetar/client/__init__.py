"""Pure-Python asyncio Pulsar client, API-compatible with the official ``pulsar`` module
(add ``await``). See ``magnetar.sync`` for a blocking facade."""

from magnetar.client.auth import (
    AuthBasic,
    Authentication,
    AuthenticationBasic,
    AuthenticationToken,
    AuthToken,
)
from magnetar.client.client import Client
from magnetar.client.consumer import Consumer
from magnetar.client.enums import (
    CompressionType,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    PartitionsRoutingMode,
    RegexSubscriptionMode,
)
from magnetar.client.errors import (
    AlreadyClosed,
    ConnectError,
    MessageTooBig,
    ProducerQueueIsFull,
    PulsarException,
    ServerError,
    Timeout,
)
from magnetar.client.message import Message
from magnetar.client.message_id import MessageId
from magnetar.client.policies import ConsumerBatchReceivePolicy, ConsumerDeadLetterPolicy
from magnetar.client.producer import Producer
from magnetar.client.reader import Reader
from magnetar.client.schema import AvroSchema, BytesSchema, JsonSchema, Schema, StringSchema

__all__ = [
    "AlreadyClosed",
    "AuthBasic",
    "AuthToken",
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationToken",
    "AvroSchema",
    "BytesSchema",
    "Client",
    "CompressionType",
    "ConnectError",
    "Consumer",
    "ConsumerBatchReceivePolicy",
    "ConsumerDeadLetterPolicy",
    "ConsumerType",
    "HashingScheme",
    "InitialPosition",
    "JsonSchema",
    "Message",
    "MessageId",
    "MessageTooBig",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerQueueIsFull",
    "PulsarException",
    "Reader",
    "RegexSubscriptionMode",
    "Schema",
    "ServerError",
    "StringSchema",
    "Timeout",
]
