"""PySpark registers any importable top-level ``pyspark_<name>`` module exposing
``DefaultSource``: with Magnetar installed, ``spark.read.format("pulsar")`` needs no call.
Only the small ``source`` module is imported here; readers and writers load on use."""

from magnetar.spark.source import PulsarDataSource as DefaultSource

__all__ = ["DefaultSource"]
