"""Pure-Python asyncio Pulsar client, API-compatible with the official ``pulsar`` module:
same class, method and keyword names; add ``await``. ``magnetar.sync`` is the blocking facade.

    async with magnetar.Client("pulsar://localhost:6650") as client:
        producer = await client.create_producer("my-topic", batching_enabled=True)
        msg_id = await producer.send(b"hello")
        consumer = await client.subscribe("my-topic", "my-sub")
        msg = await consumer.receive(timeout_millis=1000)
        await consumer.acknowledge(msg)

``batching_type=BatchingType.KeyBased`` (with ``batching_enabled``) keeps one batch per
key, for Key_Shared subscriptions; ``max_pending_messages_across_partitions`` bounds a
partitioned producer's total as the official clients do (``// partitions`` each).

Differences worth knowing: ``send_async`` is awaited (only to wait for room when
``block_if_queue_full``) and returns an ``asyncio.Future``; callbacks receive
``(exception_or_None, message_id)`` instead of ``(Result, message_id)``.
"""

from magnetar.client.auth import (
    AuthBasic,
    Authentication,
    AuthenticationBasic,
    AuthenticationToken,
    AuthToken,
)
from magnetar.client.client import Client
from magnetar.client.consumer import Consumer
from magnetar.client.entry import Entry
from magnetar.client.enums import (
    BatchingType,
    CompressionType,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
)
from magnetar.client.errors import (
    AlreadyClosed,
    AuthenticationError,
    ConnectError,
    InvalidTxnStatus,
    MessageTooBig,
    NotAllowed,
    ProducerFenced,
    ProducerQueueIsFull,
    PulsarException,
    ServerError,
    Timeout,
    TlsError,
    TransactionConflict,
    TransactionCoordinatorNotFound,
    TransactionHasOperationFailed,
    TransactionNotFound,
)
from magnetar.client.message import Message
from magnetar.client.message_id import MessageId
from magnetar.client.policies import ConsumerBatchReceivePolicy, ConsumerDeadLetterPolicy
from magnetar.client.producer import Producer
from magnetar.client.reader import Reader
from magnetar.client.schema import (
    AvroSchema,
    BytesSchema,
    JsonSchema,
    Schema,
    StringSchema,
    TopicSchema,
)
from magnetar.client.transaction import Transaction

__all__ = [
    "AlreadyClosed",
    "AuthBasic",
    "AuthToken",
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationError",
    "AuthenticationToken",
    "AvroSchema",
    "BatchingType",
    "BytesSchema",
    "Client",
    "CompressionType",
    "ConnectError",
    "Consumer",
    "ConsumerBatchReceivePolicy",
    "ConsumerDeadLetterPolicy",
    "ConsumerType",
    "Entry",
    "HashingScheme",
    "InitialPosition",
    "InvalidTxnStatus",
    "JsonSchema",
    "Message",
    "MessageId",
    "MessageTooBig",
    "NotAllowed",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "ProducerFenced",
    "ProducerQueueIsFull",
    "PulsarException",
    "Reader",
    "RegexSubscriptionMode",
    "Schema",
    "ServerError",
    "StringSchema",
    "Timeout",
    "TlsError",
    "TopicSchema",
    "Transaction",
    "TransactionConflict",
    "TransactionCoordinatorNotFound",
    "TransactionHasOperationFailed",
    "TransactionNotFound",
]
