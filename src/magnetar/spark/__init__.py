"""PySpark data source ``pulsar`` over Magnetar's asyncio client: batch and streaming
reads and writes as Arrow batches, with no JVM jars and no admin URL.

``format("pulsar")`` works once ``magnetar`` is installed (the top-level module
``pyspark_pulsar`` is found by PySpark); ``spark.dataSource.register(PulsarDataSource)``
works too. Modules, one job each: ``options`` (parse and check options), ``offsets``
(bounds and their JSON), ``schema`` (columns), ``session`` (a client on a private event
loop), ``planning`` (bounds on the driver), ``ranges`` (read one range on an executor),
``arrow`` (messages to record batches), ``batch`` / ``stream`` (readers), ``writer``
(sinks), ``source`` (the ``DataSource``).
"""

from magnetar.spark.source import PulsarDataSource

__all__ = ["PulsarDataSource"]
