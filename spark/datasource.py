"""The ``kafkakit`` Spark data source: one class that Spark asks for readers and writers.

The reading side lives in :mod:`kafkakit.spark.source`, the writing side in
:mod:`kafkakit.spark.sink`; this module only wires them to Spark's API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkakit.spark import FORMAT
from pyspark.sql.datasource import DataSource

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType


class KafkaDataSource(DataSource):
    """``spark.read.format("kafkakit")`` and friends; options as in Spark's Kafka connector."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        from kafkakit.spark.source import source_schema

        return source_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from kafkakit.spark.source import batch_reader

        return batch_reader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's name)
        from kafkakit.spark.source import stream_reader

        return stream_reader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kafkakit.spark.sink import batch_writer

        return batch_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        from kafkakit.spark.sink import stream_writer

        return stream_writer(self.options, schema, overwrite)
