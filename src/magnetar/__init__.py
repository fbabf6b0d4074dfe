"""Magnetar: the Apache Pulsar wire protocol in Python (broker, client, Spark pipeline)."""

__version__ = "0.1.0"

from magnetar.client import Client as Client
from magnetar.client import CompressionType as CompressionType
from magnetar.client import ConsumerType as ConsumerType
from magnetar.client import InitialPosition as InitialPosition
from magnetar.client import MessageId as MessageId
