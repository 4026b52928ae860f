"""A local SparkSession set up for kafkakit (used by the examples, the tests and the benchmarks)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from kafkakit.spark.java import ensure_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_session(app_name: str = "kafkakit", master: str = "local[2]", **conf: str) -> SparkSession:
    """Start (or reuse) a local SparkSession with ``kafkakit`` registered.

    Python workers run this interpreter (otherwise Spark starts whatever
    ``python3`` is on PATH, which may lack pyarrow and kafkakit).
    """
    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from kafkakit.spark import register
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).master(master)
    defaults = {
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    for key, value in {**defaults, **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
