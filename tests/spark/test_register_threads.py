"""Writing through the ``kafkakit`` format from a thread that did not build the session.

Spark resolves a Python data source for ``DataFrame.write`` through the calling JVM
thread's active session, and py4j gives each Python thread a JVM thread of its own, so a
fresh thread finds no ``kafkakit`` format (Spark's behaviour, documented in docs/spark.md).
``kafkakit.spark.register(spark)`` in that thread makes the session active there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from kafkakit.spark import register

from tests.spark.sink_support import create_topic_map, read_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.brokers import BrokerMinServer


def _in_new_thread(work: Callable[[], None]) -> BaseException | None:
    failure: list[BaseException] = []

    def body() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(120)
    assert not thread.is_alive()
    return failure[0] if failure else None


def test_a_write_from_another_thread_needs_register_there(
    spark: SparkSession, broker_min: BrokerMinServer, topic_factory: Callable[[], str]
) -> None:
    topic = topic_factory()
    create_topic_map(broker_min.bootstrap_servers, {topic: 1})

    def write(first: int) -> None:
        df = spark.range(first, first + 10).selectExpr("cast(id as string) as value")
        (
            df.write.format("kafkakit")
            .option("kafka.bootstrap.servers", broker_min.bootstrap_servers)
            .option("topic", topic)
            .mode("append")
            .save()
        )

    # Spark's behaviour: no active session in the new JVM thread, so no Python data source.
    unregistered = _in_new_thread(lambda: write(0))
    assert unregistered is not None and "DATA_SOURCE_NOT_FOUND" in str(unregistered)

    def register_then_write() -> None:
        register(spark)
        write(10)

    assert _in_new_thread(register_then_write) is None
    assert sorted(int(r.value) for r in read_topic(broker_min.bootstrap_servers, topic)) == list(range(10, 20))
