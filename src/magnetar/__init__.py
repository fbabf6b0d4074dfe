"""Magnetar: the Apache Pulsar wire protocol in Python (broker, client, Spark pipeline)."""

__version__ = "0.1.0"

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
