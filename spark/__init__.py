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
    """Register the ``kafkakit`` data source with ``spark`` (idempotent), and make ``spark``
    the calling thread's active session.

    Spark finds a Python data source for ``DataFrame.write`` and ``writeStream`` through
    the *calling thread's* active session (``DataSource.lookupDataSource``), not the
    session the DataFrame belongs to; reads use the session itself.  A thread that did
    not build the session has none, so its writes fail with ``DATA_SOURCE_NOT_FOUND``.
    Call ``register(spark)`` once in each such thread (it is cheap) before writing.
    """
    from kafkakit.spark.datasource import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
    _make_active_in_this_thread(spark)


def _make_active_in_this_thread(spark: SparkSession) -> None:
    # Classic (py4j) sessions only: Spark Connect resolves formats on the server per session.
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return
    jvm = spark._jvm
    assert jvm is not None
    type(spark)._get_j_spark_session_class(jvm).setActiveSession(jsession)


def local_session(app_name: str = "kafkakit", master: str = "local[2]", **conf: str) -> SparkSession:
    """A local SparkSession with a Java runtime found or provided, and ``kafkakit`` registered."""
    from kafkakit.spark.session import local_session as _local_session

    return _local_session(app_name, master, **conf)
