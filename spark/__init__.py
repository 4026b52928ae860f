"""kafkakit.spark: a PySpark (Spark 4 Python Data Source API) source and sink for Kafka.

``register(spark)`` makes the ``kafkakit`` format available to ``spark.read``,
``spark.readStream``, ``DataFrame.write`` and ``DataFrame.writeStream``.
Importing this package does not import pyspark; install it with
``pip install "kafkakit[spark]"``.  See docs/spark.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = "kafkakit"

__all__ = ["FORMAT", "register", "local_session"]


def register(spark: SparkSession) -> None:
    """Register the ``kafkakit`` data source with ``spark`` (idempotent)."""
    from kafkakit.spark.datasource import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)


def local_session(app_name: str = "kafkakit", master: str = "local[2]", **conf: str) -> SparkSession:
    """A local SparkSession with a Java runtime found or provided, and ``kafkakit`` registered."""
    from kafkakit.spark.session import local_session as _local_session

    return _local_session(app_name, master, **conf)
