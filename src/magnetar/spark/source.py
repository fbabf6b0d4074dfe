"""``PulsarDataSource``: the data source named ``pulsar``, wiring options, schema, readers
and writers together. Everything here runs at planning time on the driver's Python
worker; wrong options fail here with a message that says what to set."""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from magnetar.spark.options import (
    PulsarOptionError,
    SinkOptions,
    SourceOptions,
)
from magnetar.spark.schema import (
    ValueFormat,
    check_user_schema,
    default_schema,
    value_format_of,
)

log = logging.getLogger(__name__)


class PulsarDataSource(DataSource):
    """``spark.read.format("pulsar")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "pulsar"

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self._fmt: ValueFormat | None = None

    def _value_format(self, opts: SourceOptions) -> ValueFormat:
        """From the schema of the first topic that has one (binary when none has)."""
        if self._fmt is None:
            from magnetar.spark.session import Session

            session = Session(opts.client)
            try:
                parts = session.partitions_of(opts.topics, opts.pattern)
                fmt = ValueFormat()
                for topic in (opts.topics or tuple(parts)):
                    found = session.run(session.topic_schema(topic))
                    if found is not None:
                        fmt = value_format_of(*found)
                        break
            finally:
                session.close()
            self._fmt = fmt
        return self._fmt

    def schema(self) -> StructType:
        # batch or stream is not known yet: the options must make sense for one of them
        # (``reader`` / ``streamReader`` check them again for their own mode)
        try:
            opts = SourceOptions.parse(self.options)
        except PulsarOptionError as batch_error:
            try:
                opts = SourceOptions.parse(self.options, streaming=True)
            except PulsarOptionError:
                raise batch_error from None
        return default_schema(self._value_format(opts))

    def _checked(self, schema: StructType, opts: SourceOptions) -> ValueFormat:
        fmt = self._value_format(opts)
        try:
            check_user_schema(schema, fmt)
        except ValueError as exc:
            raise PulsarOptionError(str(exc)) from None
        return fmt

    def reader(self, schema: StructType) -> DataSourceReader:
        from magnetar.spark.batch import (
            PulsarBatchReader,
            PulsarPushdownReader,
            pushdown_planning,
        )

        opts = SourceOptions.parse(self.options)
        kind = PulsarPushdownReader if pushdown_planning() else PulsarBatchReader
        return kind(opts, schema, self._checked(schema, opts))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from magnetar.spark.stream import PulsarStreamReader

        opts = SourceOptions.parse(self.options, streaming=True)
        return PulsarStreamReader(opts, schema, self._checked(schema, opts))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from magnetar.spark.writer import PulsarBatchWriter

        if overwrite:
            raise PulsarOptionError("the pulsar sink only appends: use mode('append') "
                                    "(a topic cannot be overwritten)")
        return PulsarBatchWriter(_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from magnetar.spark.writer import PulsarStreamWriter

        if overwrite:
            raise PulsarOptionError("the pulsar sink supports outputMode('append') only")
        return PulsarStreamWriter(_sink_options(self.options), schema)


def _sink_options(options: Any) -> SinkOptions:
    """The sink's options; exactly-once is checked against the broker now, at the start
    of the job, on the driver (a broker without transaction coordinators fails here)."""
    opts = SinkOptions.parse(options)
    if opts.exactly_once:
        from magnetar.spark.txns import check_coordinators

        check_coordinators(opts)
    return opts
