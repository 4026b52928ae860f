"""The sink's Arrow write path outside Spark: columns to records, grouping, the per-worker producer.

The Spark end-to-end tests (test_sink.py) cover the same code inside Spark;
these feed ``arrow_chunk`` and the at-least-once task writer Arrow batches
directly, against both brokers, and compare what the broker stores with the
input byte for byte.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from kafkakit.errors import UnknownTopicOrPartitionError
from kafkakit.spark import sink
from kafkakit.spark.sink import Chunk, Layout, SinkConfig, arrow_chunk

from tests.brokers import RunningBroker
from tests.spark.sink_support import create_topic_map, read_topic

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
SCHEMA = pa.schema(
    [
        ("value", pa.string()),
        ("key", pa.binary()),
        ("partition", pa.int32()),
        ("headers", HEADERS),
    ]
)
FULL = Layout("value", True, key="key", partition="partition", headers="headers")


def _batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=SCHEMA)


def test_columns_that_say_nothing_are_left_out() -> None:
    batch = _batch(
        [
            {"value": "été", "key": None, "partition": None, "headers": []},
            {"value": None, "key": None, "partition": None, "headers": None},
        ]
    )
    chunk = arrow_chunk(batch, FULL)
    assert chunk.values == ["été".encode(), None]  # a string column is sent as its UTF-8 bytes
    assert chunk.keys is None and chunk.partitions is None and chunk.headers is None


def test_columns_with_something_are_kept_row_for_row() -> None:
    batch = _batch(
        [
            {"value": "a", "key": b"k", "partition": None, "headers": None},
            {"value": "b", "key": None, "partition": 2, "headers": [{"key": "h", "value": None}]},
        ]
    )
    chunk = arrow_chunk(batch, FULL)
    assert chunk.values == [b"a", b"b"] and chunk.keys == [b"k", None]
    assert chunk.partitions == [None, 2] and chunk.headers == [None, [("h", None)]]


def test_groups_of_one_topic_column_and_of_mixed_topics() -> None:
    one = Chunk([b"1", b"2", b"3"], topics=["t", "t", "t"], partitions=[None, None, None])
    assert list(sink._groups(one, None)) == [("t", None, None)]  # every row, no positions list
    mixed = Chunk([b"1", b"2", b"3"], topics=["t", "u", "t"])
    assert list(sink._groups(mixed, None)) == [("t", None, [0, 2]), ("u", None, [1])]
    by_partition = Chunk([b"1", b"2", b"3"], topics=["t", "t", "t"], partitions=[1, None, 1])
    assert list(sink._groups(by_partition, None)) == [("t", 1, [0, 2]), ("t", None, [1])]
    with pytest.raises(ValueError, match="null 'topic'"):
        list(sink._groups(Chunk([b"1", b"2"], topics=[None, None]), "default"))


def _config(bootstrap: str, topic: str, layout: Layout = FULL) -> SinkConfig:
    return SinkConfig(bootstrap, topic, layout, {"acks": "all"})


def _write(config: SinkConfig, batches: list[pa.RecordBatch]) -> int:
    chunks = (arrow_chunk(b, config.layout) for b in batches)
    # write_task without Spark's TaskContext: the same writer a task runs.
    return sink._write_at_least_once(config, chunks, None, 0, 0)


def test_the_broker_stores_the_input_bytes(broker: RunningBroker, topic: str) -> None:
    create_topic_map(broker.bootstrap_servers, {topic: 3})
    mixed = _batch(
        [
            {
                "value": "plain",
                "key": b"\x00k1",
                "partition": 0,
                "headers": [{"key": "h1", "value": b"\xff"}],
            },
            {"value": None, "key": b"tombstone", "partition": 0, "headers": None},
            {"value": "ünïcödé", "key": None, "partition": 0, "headers": [{"key": "h", "value": None}]},
            {"value": "", "key": b"", "partition": 0, "headers": []},
        ]
    )
    # Equally long values with no key or headers: send_batch's uniform encoder, several batches.
    uniform = [f"{i:0100d}" for i in range(20_000)]
    bulk = pa.RecordBatch.from_pylist(
        [{"value": v, "key": None, "partition": 1, "headers": None} for v in uniform], schema=SCHEMA
    )
    config = _config(broker.bootstrap_servers, topic)
    assert _write(config, [mixed, bulk]) == 4 + len(uniform)
    records = read_topic(broker.bootstrap_servers, topic)
    got = {p: [r for r in records if r.partition == p] for p in (0, 1, 2)}
    assert [(r.key, r.value, list(r.headers)) for r in got[0]] == [
        (b"\x00k1", b"plain", [("h1", b"\xff")]),
        (b"tombstone", None, []),
        (None, "ünïcödé".encode(), [("h", None)]),
        (b"", b"", []),
    ]
    assert [r.value for r in got[1]] == [v.encode() for v in uniform]
    assert all(r.key is None and not r.headers for r in got[1]) and got[2] == []


def test_tasks_of_a_worker_share_one_producer_and_a_failed_task_drops_it(
    broker: RunningBroker, topic: str
) -> None:
    create_topic_map(broker.bootstrap_servers, {topic: 2})
    layout = Layout("value", True, partition="partition")
    config = _config(broker.bootstrap_servers, topic, layout)
    key = sink._producer_key(config)
    rows = [{"value": str(i), "key": None, "partition": i % 2, "headers": None} for i in range(100)]
    assert _write(config, [_batch(rows)]) == 100
    kept = sink._producers[key]
    assert _write(config, [_batch(rows)]) == 100
    assert sink._producers[key] is kept  # the second task reused it
    bad = _batch([{"value": "x", "key": None, "partition": 7, "headers": None}])
    with pytest.raises(UnknownTopicOrPartitionError):
        _write(config, [bad])
    assert key not in sink._producers  # the failed task's producer was stopped, not kept
    assert _write(config, [_batch(rows)]) == 100  # the next task starts a new one
    assert sink._producers[key] is not kept
    values = sorted(int(r.value) for r in read_topic(broker.bootstrap_servers, topic))
    assert values == sorted(list(range(100)) * 3)
