"""The kafkakit Spark source end to end: local[2] Spark reading real brokers.

Batch reads check every column against what was produced; the streaming tests
check micro-batch sizes under maxOffsetsPerTrigger, a restart from the
checkpoint (no duplicate, no loss), partitions appearing mid-stream, and
read_committed against aborted transactions.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from kafkakit import Admin, NewTopic, Producer

from tests.spark.versions import requires_read_limit_api

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from tests.brokers import RunningBroker

BASE_TS = 1_700_000_000_000


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    async def create() -> None:
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, num_partitions=partitions)])

    asyncio.run(create())


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int, first: int = 0) -> None:
    """Records ``i`` (``first`` ..) to partition ``i % partitions``: key k<i>, value v<i>, timestamp BASE_TS + i."""

    async def produce() -> None:
        async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
            futures = [
                await producer.send(
                    topic,
                    value=f"v{i}".encode(),
                    key=None if i % 10 == 3 else f"k{i}".encode(),
                    partition=i % partitions,
                    timestamp_ms=BASE_TS + i,
                    headers=[("i", str(i).encode())] if i % 2 else [],
                )
                for i in range(first, first + partitions * per_partition)
            ]
            await asyncio.gather(*futures)

    asyncio.run(produce())


def _reader(spark: SparkSession, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("kafkakit").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader


def _values(df: DataFrame) -> list[str]:
    return sorted(bytes(r.value).decode() for r in df.select("value").collect())


def test_batch_read_returns_every_column(spark: SparkSession, broker_min: RunningBroker, topic: str) -> None:
    bootstrap = broker_min.bootstrap_servers
    _create(bootstrap, topic, 3)
    _produce(bootstrap, topic, 3, 20)
    df = _reader(spark, bootstrap, subscribe=topic, includeHeaders="true").load()
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]
    rows = df.collect()
    assert len(rows) == 60
    by_index = {int(bytes(r.value).decode()[1:]): r for r in rows}
    assert sorted(by_index) == list(range(60))
    for i, row in by_index.items():
        assert row.key == (None if i % 10 == 3 else f"k{i}".encode())
        assert row.topic == topic
        assert row.partition == i % 3
        assert row.offset == i // 3
        assert row.timestamp.astimezone(UTC) == datetime.fromtimestamp((BASE_TS + i) / 1000, UTC)
        assert row.timestampType == 0
        assert [(h.key, bytes(h.value)) for h in row.headers] == ([("i", str(i).encode())] if i % 2 else [])


def test_batch_read_between_json_offsets(spark: SparkSession, broker_min: RunningBroker, topic: str) -> None:
    bootstrap = broker_min.bootstrap_servers
    _create(bootstrap, topic, 2)
    _produce(bootstrap, topic, 2, 10)
    df = _reader(
        spark,
        bootstrap,
        assign=json.dumps({topic: [0, 1]}),
        startingOffsets=json.dumps({topic: {"0": 3, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 5, "1": -1}}),
        minPartitions="4",
    ).load()
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, 3), (0, 4)] + [(1, o) for o in range(10)]
    assert df.rdd.getNumPartitions() >= 4  # minPartitions split the ranges
    assert "headers" not in df.columns


def test_startingTimestamp(spark: SparkSession, broker_min: RunningBroker, topic: str) -> None:  # noqa: N802
    bootstrap = broker_min.bootstrap_servers
    _create(bootstrap, topic, 1)
    _produce(bootstrap, topic, 1, 10)
    df = _reader(spark, bootstrap, subscribe=topic, startingTimestamp=str(BASE_TS + 7)).load()
    assert _values(df) == ["v7", "v8", "v9"]


def _transactional(bootstrap: str, topic: str) -> None:
    """c0..c4 committed, a0..a4 aborted, c5..c9 committed, all in partition 0."""

    async def produce() -> None:
        async with Producer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-tx") as producer:
            await producer.init_transactions()
            for values, commit in (
                [f"c{i}" for i in range(5)], True), ([f"a{i}" for i in range(5)], False), (
                [f"c{i}" for i in range(5, 10)], True
            ):
                producer.begin_transaction()
                for value in values:
                    await producer.send(topic, value=value.encode(), partition=0)
                await producer.flush()  # on the log before the abort (unsent records are just dropped)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()

    asyncio.run(produce())


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_read_committed_excludes_aborted_records(
    spark: SparkSession, broker: RunningBroker, topic_factory: Callable[[], str], isolation: str
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory()
    _create(bootstrap, topic, 1)
    _transactional(bootstrap, topic)
    options = {"subscribe": topic}
    if isolation == "read_uncommitted":
        options["kafka.isolation.level"] = isolation
    got = _values(_reader(spark, bootstrap, **options).load())
    committed = sorted(f"c{i}" for i in range(10))
    if isolation == "read_committed":
        assert got == committed
    else:
        assert got == sorted(committed + [f"a{i}" for i in range(5)])


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"subscribe": "x"}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "x", "assign": '{"x": [0]}'}, "assign"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "x", "startingOffsets": '{"x": {"0": '}, "startingOffsets"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "x", "kafka.isolation.level": "x"}, "kafka.isolation.level"),
    ],
)
def test_bad_options_fail_at_load_naming_the_option(
    spark: SparkSession, options: dict[str, str], named: str
) -> None:
    reader = spark.read.format("kafkakit")
    for key, value in options.items():
        reader = reader.option(key, value)
    started = time.monotonic()
    with pytest.raises(Exception, match=named.replace(".", r"\.")) as raised:
        reader.load()
    assert "KafkaConfigError" in str(raised.value)  # raised by the source's option check, surfaced by Spark
    assert time.monotonic() - started < 30


def test_endingOffsets_on_a_stream_fails_at_start(spark: SparkSession, tmp_path: Path) -> None:  # noqa: N802
    df = (
        spark.readStream.format("kafkakit")
        .option("kafka.bootstrap.servers", "127.0.0.1:1")
        .option("subscribe", "x")
        .option("endingOffsets", "latest")
        .load()
    )
    with pytest.raises(Exception, match="endingOffsets"):
        query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
        try:
            query.awaitTermination(60)
        finally:
            query.stop()


# -- streaming --------------------------------------------------------------------------------------


class _Collector:
    """foreachBatch target: every micro-batch's (batch id, rows) as the driver saw it."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple[str, int, int]]]] = []
        self._lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = [(r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect()]
        with self._lock:
            self.batches.append((batch_id, rows))

    def rows(self) -> list[tuple[str, int, int]]:
        with self._lock:
            return [row for _, rows in self.batches for row in rows]


def _stream(spark: SparkSession, bootstrap: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("kafkakit").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    df: DataFrame = reader.load()
    return df


def _available_now(df: DataFrame, checkpoint: Path, collector: _Collector) -> None:
    query = (
        df.writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180), "the AvailableNow query did not finish"
        assert query.exception() is None
    finally:
        query.stop()


@requires_read_limit_api
def test_stream_limits_batches_and_restarts_from_checkpoint(
    spark: SparkSession, broker: RunningBroker, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = topic_factory()
    _create(bootstrap, topic, 2)
    _produce(bootstrap, topic, 2, 25)  # 50 records
    df = _stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="20")
    first = _Collector()
    _available_now(df, tmp_path / "ckpt", first)
    sizes = [len(rows) for _, rows in first.batches if rows]
    assert sizes == [20, 20, 10], sizes  # 10 + 10 per partition per batch, then the rest
    assert sorted(first.rows()) == sorted((topic, p, o) for p in range(2) for o in range(25))
    # More data, then a restart on the same checkpoint: only the new records, each once.
    _produce(bootstrap, topic, 2, 5, first=50)
    second = _Collector()
    _available_now(df, tmp_path / "ckpt", second)
    assert sorted(second.rows()) == sorted((topic, p, o) for p in range(2) for o in range(25, 30))
    assert [b for b, _ in second.batches][0] > max(b for b, _ in first.batches)


def test_stream_picks_up_new_partitions(
    spark: SparkSession, broker_min: RunningBroker, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    """A topic created mid-stream that matches subscribePattern is read from its earliest offset."""
    bootstrap = broker_min.bootstrap_servers
    first, second = topic_factory(), topic_factory()
    prefix = first[: first.rindex("-")]
    assert second.startswith(prefix)
    _create(bootstrap, first, 1)
    _produce(bootstrap, first, 1, 5)
    collector = _Collector()
    df = _stream(spark, bootstrap, subscribePattern=prefix + "-.*", startingOffsets="earliest")
    query = (
        df.writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        _wait_for(lambda: len(collector.rows()) >= 5, query)
        _create(bootstrap, second, 2)
        _produce(bootstrap, second, 2, 3)
        _wait_for(lambda: len(collector.rows()) >= 11, query)
    finally:
        query.stop()
    expected = [(first, 0, o) for o in range(5)] + [(second, p, o) for p in range(2) for o in range(3)]
    assert sorted(collector.rows()) == sorted(expected)


def _wait_for(condition: Callable[[], bool], query: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the stream")
        time.sleep(0.2)

