"""The kafkakit sink: batch and streaming writes, input columns, and options checked up front.

Runs in the shared local[2] session (no task retries) against broker_min; each
test writes to topics of its own and reads them back with a kafkakit consumer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kafkakit.errors import KafkaConfigError
from kafkakit.spark.sink import DEFAULT_TRANSACTION_TIMEOUT_MS, sink_config
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from tests.spark.sink_support import create_topic_map, read_topic

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

    from tests.brokers import BrokerMinServer

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def _schema(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields])  # type: ignore[arg-type]


# -- options and columns, checked before any task runs ------------------------------------------

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}


@pytest.mark.parametrize(
    ("options", "schema", "setting", "reason"),
    [
        ({}, _schema(("value", BinaryType())), "kafka.bootstrap.servers", "required"),
        (BOOT, _schema(("value", BinaryType())), "topic", "'topic' option"),
        ({**BOOT, "topic": " "}, _schema(("value", BinaryType())), "topic", "empty"),
        ({**BOOT, "topic": "t"}, _schema(("key", BinaryType())), "value", "needs a 'value' column"),
        ({**BOOT, "topic": "t"}, _schema(("value", LongType())), "value", "must be binary or string"),
        (
            {**BOOT, "topic": "t"},
            _schema(("value", BinaryType()), ("key", IntegerType())),
            "key",
            "binary or string",
        ),
        (BOOT, _schema(("value", BinaryType()), ("topic", BinaryType())), "topic", "must be string"),
        (
            {**BOOT, "topic": "t"},
            _schema(("value", BinaryType()), ("partition", LongType())),
            "partition",
            "int",
        ),
        (
            {**BOOT, "topic": "t"},
            _schema(("value", BinaryType()), ("headers", ArrayType(StringType()))),
            "headers",
            "array<struct<key:string,value:binary>>",
        ),
        (
            {**BOOT, "topic": "t", "exactlyOnce": "yes"},
            _schema(("value", BinaryType())),
            "exactlyOnce",
            "true or false",
        ),
        (
            {**BOOT, "topic": "t", "exactlyOnce": "true"},
            _schema(("value", BinaryType())),
            "transactionalIdPrefix",
            "required",
        ),
        (
            {**BOOT, "topic": "t", "transactionalIdPrefix": "p"},
            _schema(("value", BinaryType())),
            "exactlyOnce",
            "need exactlyOnce=true",
        ),
        (
            {**BOOT, "topic": "t", "kafka.linger.ms": "-1"},
            _schema(("value", BinaryType())),
            "kafka.linger.ms",
            "at least 0",
        ),
        ({**BOOT, "topic": "t", "kafka.acks": "2"}, _schema(("value", BinaryType())), "kafka.acks", "acks"),
        (
            {**BOOT, "topic": "t", "kafka.sasl.kerberos.service.name": "kafka"},
            _schema(("value", BinaryType())),
            "kafka.sasl.kerberos.service.name",
            "not a setting",
        ),
        (
            {**BOOT, "topic": "t", "kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JKS",
             "kafka.ssl.truststore.location": "/ca.jks"},
            _schema(("value", BinaryType())),
            "kafka.ssl.truststore.type",
            "keytool",
        ),
        (
            {**BOOT, "topic": "t", "exactlyOnce": "true", "transactionalIdPrefix": "p", "kafka.acks": "1"},
            _schema(("value", BinaryType())),
            "kafka.acks",
            "must be 'all'",
        ),
        (
            {
                **BOOT,
                "topic": "t",
                "exactlyOnce": "true",
                "transactionalIdPrefix": "p",
                "kafka.transaction.timeout.ms": "0",
            },
            _schema(("value", BinaryType())),
            "kafka.transaction.timeout.ms",
            ">= 1",
        ),
    ],
)
def test_bad_options_and_columns_name_the_culprit(
    options: dict[str, str], schema: StructType, setting: str, reason: str
) -> None:
    with pytest.raises(KafkaConfigError) as raised:
        sink_config(options, schema)
    assert raised.value.setting == setting, raised.value
    assert reason in str(raised.value)


def test_options_are_case_insensitive_and_the_topic_option_wins() -> None:
    schema = _schema(
        ("VALUE", StringType()), ("Key", BinaryType()), ("topic", StringType()), ("partition", IntegerType())
    )
    config = sink_config(
        {
            "Kafka.Bootstrap.Servers": "h:1",
            "TOPIC": "fixed",
            "exactlyonce": "TRUE",
            "transactionalidprefix": "etl",
            "kafka.linger.ms": "7",
        },
        schema,
    )
    assert (
        config.topic == "fixed" and config.layout.topic is None
    )  # as in Spark: the option overrides the column
    assert config.layout.value == "VALUE" and config.layout.value_is_string
    assert config.layout.key == "Key" and not config.layout.key_is_string
    assert config.layout.partition == "partition"
    assert config.two_phase is not None
    assert config.two_phase.control_topic == "kafkakit-spark-control-etl"
    assert config.two_phase.transaction_timeout_ms == DEFAULT_TRANSACTION_TIMEOUT_MS
    assert config.two_phase.transactional_id(3, 1) == "etl.3.1"
    assert config.producer_settings["linger_ms"] == 7


def test_a_bad_column_fails_the_spark_write_before_any_task(
    spark: SparkSession, broker_min: BrokerMinServer
) -> None:
    df = spark.createDataFrame([(1,)], "value long")
    with pytest.raises(Exception, match="value") as raised:
        df.write.format("kafkakit").option("kafka.bootstrap.servers", broker_min.bootstrap_servers).option(
            "topic", "never-written"
        ).mode("append").save()
    assert "must be binary or string" in str(raised.value)


# -- batch writes ----------------------------------------------------------------------------------


def test_batch_write_keys_headers_partitions(
    spark: SparkSession, broker_min: BrokerMinServer, topic_factory: Callable[[], str]
) -> None:
    topic = topic_factory()
    create_topic_map(broker_min.bootstrap_servers, {topic: 3})
    rows = [
        (f"v{i}", f"k{i}".encode(), i % 3, [("h", f"{i}".encode()), ("n", None)] if i % 2 else None)
        for i in range(60)
    ]
    df = spark.createDataFrame(
        rows,
        _schema(
            ("value", StringType()), ("key", BinaryType()), ("partition", IntegerType()), ("headers", HEADERS)
        ),
    ).repartition(2)
    (
        df.write.format("kafkakit")
        .option("kafka.bootstrap.servers", broker_min.bootstrap_servers)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    records = read_topic(broker_min.bootstrap_servers, topic)
    assert len(records) == 60
    by_value = {r.value: r for r in records}
    for i in range(60):
        r = by_value[f"v{i}".encode()]
        assert r.key == f"k{i}".encode()
        assert r.partition == i % 3
        expected = [("h", f"{i}".encode()), ("n", None)] if i % 2 else []
        assert [tuple(h) for h in r.headers] == expected


def test_batch_write_topic_column_and_null_partition(
    spark: SparkSession, broker_min: BrokerMinServer, topic_factory: Callable[[], str]
) -> None:
    left, right = topic_factory(), topic_factory()
    create_topic_map(broker_min.bootstrap_servers, {left: 2, right: 1})
    rows = [(b"x%d" % i, left if i % 2 else right, None) for i in range(40)]
    df = spark.createDataFrame(
        rows, _schema(("value", BinaryType()), ("topic", StringType()), ("partition", IntegerType()))
    )
    df.write.format("kafkakit").option("kafka.bootstrap.servers", broker_min.bootstrap_servers).mode(
        "append"
    ).save()
    got_left = sorted(r.value for r in read_topic(broker_min.bootstrap_servers, left))
    got_right = sorted(r.value for r in read_topic(broker_min.bootstrap_servers, right))
    assert got_left == sorted(b"x%d" % i for i in range(40) if i % 2)
    assert got_right == sorted(b"x%d" % i for i in range(40) if not i % 2)


def test_batch_write_exactly_once_commits_atomically(
    spark: SparkSession, broker_min: BrokerMinServer, topic_factory: Callable[[], str]
) -> None:
    topic = topic_factory()
    create_topic_map(broker_min.bootstrap_servers, {topic: 2})
    df = spark.range(0, 500, numPartitions=3).selectExpr("cast(id as string) as value")
    (
        df.write.format("kafkakit")
        .option("kafka.bootstrap.servers", broker_min.bootstrap_servers)
        .option("topic", topic)
        .option("exactlyOnce", "true")
        .option("transactionalIdPrefix", topic)
        .mode("append")
        .save()
    )
    values = sorted(int(r.value) for r in read_topic(broker_min.bootstrap_servers, topic))
    assert values == list(range(500))


# -- streaming writes (at-least-once) -----------------------------------------------------------------


def _json_input(directory: Path, files: int, per_file: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        lines = [json.dumps({"n": f * per_file + i}) for i in range(per_file)]
        (directory / f"part-{f:03d}.json").write_text("\n".join(lines) + "\n")


def test_streaming_write_at_least_once(
    spark: SparkSession, broker_min: BrokerMinServer, topic_factory: Callable[[], str], tmp_path: Path
) -> None:
    topic = topic_factory()
    create_topic_map(broker_min.bootstrap_servers, {topic: 2})
    _json_input(tmp_path / "in", files=3, per_file=50)
    stream = (
        spark.readStream.schema("n long")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
        .selectExpr("cast(n as string) as key", "concat('v', cast(n as string)) as value")
    )
    query = (
        stream.writeStream.format("kafkakit")
        .option("kafka.bootstrap.servers", broker_min.bootstrap_servers)
        .option("topic", topic)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert len([p for p in query.recentProgress if p["numInputRows"]]) == 3  # three micro-batches
    records = read_topic(broker_min.bootstrap_servers, topic)
    assert sorted(r.value for r in records) == sorted(b"v%d" % n for n in range(150))
    assert all(r.value == b"v" + r.key for r in records)


# -- rows and Arrow batches to records (no Spark) ------------------------------------------------


def test_row_and_arrow_paths_build_the_same_records() -> None:
    import pyarrow as pa
    from kafkakit.spark.sink import Layout, arrow_chunk, row_chunks
    from pyspark.sql import Row

    layout = Layout("value", True, key="key", topic="topic", partition="partition", headers="headers")
    rows = [
        Row(
            value="a",
            key=bytearray(b"k"),
            topic="t1",
            partition=1,
            headers=[Row(key="h", value=bytearray(b"x"))],
        ),
        Row(value=None, key=None, topic="t2", partition=None, headers=None),
    ]
    (from_rows,) = row_chunks(iter(rows), layout)
    batch = pa.RecordBatch.from_pylist(
        [
            {
                "value": "a",
                "key": b"k",
                "topic": "t1",
                "partition": 1,
                "headers": [{"key": "h", "value": b"x"}],
            },
            {"value": None, "key": None, "topic": "t2", "partition": None, "headers": None},
        ],
        schema=pa.schema(
            [
                ("value", pa.string()),
                ("key", pa.binary()),
                ("topic", pa.string()),
                ("partition", pa.int32()),
                ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
            ]
        ),
    )
    from_arrow = arrow_chunk(batch, layout)
    assert from_rows == from_arrow
    assert from_arrow.values == [b"a", None] and from_arrow.keys == [b"k", None]
    assert from_arrow.topics == ["t1", "t2"] and from_arrow.partitions == [1, None]
    assert from_arrow.headers == [[("h", b"x")], None]


def test_a_null_topic_without_the_option_is_an_error() -> None:
    from kafkakit.spark.sink import Chunk, _groups

    chunk = Chunk([b"a", b"b"], topics=["t", None])
    with pytest.raises(ValueError, match="null 'topic'"):
        list(_groups(chunk, None))
    by_partition = Chunk([b"a", b"b", b"c"], partitions=[1, None, 1])
    assert list(_groups(by_partition, "t")) == [("t", 1, [0, 2]), ("t", None, [1])]
