"""Magnetar: the Apache Pulsar wire protocol in Python (broker, client, Spark pipeline)."""

__version__ = "0.1.0"
