"""The source's building blocks without Spark: offset JSON, read limits, ranges, Arrow decoding."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from kafkakit.errors import KafkaConfigError
from kafkakit.records import (
    build_control_batch,
    decode_batches,
    encode_batch,
    iter_batch_headers,
    set_base_offset,
    visible_batches,
)
from kafkakit.spark.arrow import arrow_schema, to_record_batch
from kafkakit.spark.offsets import (
    OffsetRange,
    from_json,
    limit_offsets,
    parse_assign,
    parse_offset_spec,
    split_ranges,
    to_json,
)
from kafkakit.spark.source import Planner, SourceConfig, parse_options
from kafkakit.structs import TopicPartition

from tests.spark.versions import requires_read_limit_api

T0, T1 = TopicPartition("a", 0), TopicPartition("a", 1)


def test_offset_json_is_canonical_and_round_trips() -> None:
    offsets = {TopicPartition("b", 10): 7, TopicPartition("b", 2): 5, T0: 42}
    text = to_json(offsets)
    assert text == '{"a": {"0": 42}, "b": {"2": 5, "10": 7}}'
    assert to_json(dict(reversed(list(offsets.items())))) == text
    assert from_json(text, "startingOffsets") == offsets


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ('["a"]', "JSON offsets"),
        ('{"a": {"x": 1}}', "not a number"),
        ('{"a": {"0": "1"}}', "must be an integer"),
        ('{"a": {"0": -3}}', "negative offsets allowed"),
    ],
)
def test_bad_offset_json_names_the_option(text: str, fragment: str) -> None:
    with pytest.raises(KafkaConfigError, match=fragment) as raised:
        parse_offset_spec(text, "startingOffsets", "latest", ending=False)
    assert raised.value.setting == "startingOffsets"


def test_offset_specs() -> None:
    assert parse_offset_spec(None, "startingOffsets", "latest", ending=False).kind == "latest"
    spec = parse_offset_spec('{"a": {"0": -2, "1": 5}}', "startingOffsets", "latest", ending=False)
    assert spec.per_partition == {T0: -2, T1: 5}
    with pytest.raises(KafkaConfigError, match="earliest"):
        parse_offset_spec("earliest", "endingOffsets", "latest", ending=True)
    with pytest.raises(KafkaConfigError, match="negative"):
        parse_offset_spec('{"a": {"0": -2}}', "endingOffsets", "latest", ending=True)
    assert parse_assign('{"a": [1, 0]}') == [T0, T1]


def test_read_limit_is_proportional_and_moves_every_partition() -> None:
    start = {T0: 0, T1: 100, TopicPartition("b", 0): 5}
    latest = {T0: 300, T1: 200, TopicPartition("b", 0): 5}
    end = limit_offsets(start, latest, 100)
    assert end == {T0: 75, T1: 125, TopicPartition("b", 0): 5}
    assert sum(end[tp] - start[tp] for tp in start) <= 100
    assert limit_offsets(start, latest, 1000) == latest
    tiny = limit_offsets({T0: 0, T1: 0}, {T0: 10, T1: 10}, 1)
    assert tiny == {T0: 1, T1: 1}  # at least one record each, so the query never stalls


def test_split_ranges_for_min_partitions() -> None:
    ranges = [OffsetRange(T0, 0, 90), OffsetRange(T1, 10, 20), OffsetRange(TopicPartition("b", 0), 3, 3)]
    assert split_ranges(ranges, None) == ranges[:2]
    parts = split_ranges(ranges, 10)
    assert [p for p in parts if p.tp == T1] == [OffsetRange(T1, 10, 20)]
    zero = [p for p in parts if p.tp == T0]
    assert len(zero) == 9 and zero[0].start == 0 and zero[-1].end == 90
    assert all(a.end == b.start for a, b in zip(zero[:-1], zero[1:], strict=True))


@pytest.mark.parametrize(
    ("options", "setting"),
    [
        ({"subscribe": "t"}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "h:1"}, "subscribe/subscribePattern/assign"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "assign": '{"t": [0]}'}, "subscribe/subscribePattern/assign"),
        ({"kafka.bootstrap.servers": "h:1", "assign": "t"}, "assign"),
        ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, "subscribePattern"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "{bad"}, "startingOffsets"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.isolation.level": "dirty"}, "kafka.isolation.level"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.fetch.max.wait.ms": "-1"}, "kafka.fetch.max.wait.ms"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.no.such.setting": "1"}, "kafka.no.such.setting"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "minPartitions": "0"}, "minPartitions"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingTimestamp": "soon"}, "startingTimestamp"),
    ],
)
def test_bad_options_fail_naming_the_option(options: dict[str, str], setting: str) -> None:
    with pytest.raises(KafkaConfigError) as raised:
        parse_options(options)
    assert raised.value.setting == setting


def _records(n: int, start_ts: int = 1_700_000_000_000) -> list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]]:
    out: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]] = []
    for i in range(n):
        key = None if i % 7 == 0 else f"k{i}".encode()
        value = None if i % 11 == 5 else (b"v" * (i % 13)) + str(i).encode()
        headers: list[tuple[str, bytes | None]] = [("h", str(i).encode()), ("n", None)] if i % 5 == 0 else []
        out.append((key, value, start_ts + i, headers))
    return out


def _as_rows(batch: pa.RecordBatch) -> list[tuple[object, ...]]:
    d = batch.to_pydict()
    return list(zip(d["key"], d["value"], d["offset"], [t.timestamp() for t in d["timestamp"]], d["headers"], strict=True))


@pytest.mark.parametrize("compression", ["none", "lz4"])
@pytest.mark.parametrize("uniform", [False, True])
def test_arrow_matches_the_reference_decoder(compression: str, uniform: bool) -> None:
    records = [(b"key", b"x" * 100, 1_700_000_000_000, [])] * 300 if uniform else _records(300)
    data = b"".join(
        encode_batch(records[i : i + 100], base_offset=1000 + i, compression=compression) for i in range(0, 300, 100)
    )
    headers = list(iter_batch_headers(data))
    start, end = 1050, 1260
    selected = visible_batches(data, headers, None, start, end, check_crcs=True, where="a-0")
    batch = to_record_batch(data, selected, "a", 0, start, end, include_headers=True)
    assert batch.schema == arrow_schema(True)
    expected = [r for r in decode_batches(data, "a", 0) if start <= r.offset < end]
    assert batch.num_rows == len(expected) == end - start
    rows = _as_rows(batch)
    for row, rec in zip(rows, expected, strict=True):
        assert row[:3] == (rec.key, rec.value, rec.offset)
        assert row[3] == rec.timestamp / 1000
        assert row[4] == [{"key": k, "value": v} for k, v in rec.headers]
    assert set(batch.column("topic").to_pylist()) == {"a"}
    assert set(batch.column("partition").to_pylist()) == {0}
    assert batch.column("timestamp").type == pa.timestamp("us", tz="UTC")


def _marker(pid: int, commit: bool, offset: int) -> bytes:
    buf = bytearray(build_control_batch(pid, 0, commit, 0, 0))
    set_base_offset(buf, 0, offset)
    return bytes(buf)


def test_aborted_batches_and_markers_are_skipped() -> None:
    pid = 9
    committed = encode_batch(_records(3), base_offset=0, producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)
    commit = _marker(pid, True, 3)
    aborted = encode_batch(_records(4), base_offset=4, producer_id=pid, producer_epoch=0, base_sequence=3, transactional=True)
    abort = _marker(pid, False, 8)
    plain = encode_batch(_records(2), base_offset=9)
    data = committed + commit + aborted + abort + plain
    headers = list(iter_batch_headers(data))
    selected = visible_batches(data, headers, [(pid, 4)], 0, 11, check_crcs=True, where="a-0")
    batch = to_record_batch(data, selected, "a", 0, 0, 11, include_headers=False)
    assert batch.column("offset").to_pylist() == [0, 1, 2, 9, 10]
    uncommitted = visible_batches(data, headers, None, 0, 11, check_crcs=True, where="a-0")
    assert to_record_batch(data, uncommitted, "a", 0, 0, 11, False).num_rows == 9
    assert json.loads(to_json({T0: 11})) == {"a": {"0": 11}}


class _FakePlanner(Planner):
    """Stands in for the driver's Admin/Consumer: partitions and their earliest/latest offsets."""

    def __init__(self, config: SourceConfig) -> None:
        super().__init__(config)
        self.earliest_offsets: dict[TopicPartition, int] = {}
        self.latest_offsets: dict[TopicPartition, int] = {}

    def partitions(self) -> list[TopicPartition]:
        return sorted(self.latest_offsets)

    def earliest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.earliest_offsets.get(tp, 0) for tp in tps}

    def latest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.latest_offsets[tp] for tp in tps}

    def close(self) -> None:
        pass


def _stream_reader(**options: str) -> tuple[Any, _FakePlanner]:
    from kafkakit.spark.source import stream_reader

    reader = stream_reader({"kafka.bootstrap.servers": "h:1", "subscribePattern": "a|b", **options}, None)  # type: ignore[arg-type]
    planner = _FakePlanner(reader.config)
    reader._planner = planner
    return reader, planner


@requires_read_limit_api
def test_stream_offsets_limits_new_partitions_and_never_backwards() -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    reader, planner = _stream_reader(maxOffsetsPerTrigger="10", startingOffsets="earliest")
    planner.latest_offsets = {T0: 30, T1: 10}
    start = reader.initialOffset()
    assert start == {"a": {"0": 0, "1": 0}}
    assert reader.getDefaultReadLimit() == ReadMaxRows(10)
    end = reader.latestOffset(start, ReadMaxRows(10))
    assert end == {"a": {"0": 7, "1": 2}}  # 30:10 backlog shared 3:1 (rounded down)
    assert reader.latestOffset(start, ReadAllAvailable()) == {"a": {"0": 30, "1": 10}}
    # A new partition (new topic b) starts at its earliest offset; a shrunk one stays put.
    b0 = TopicPartition("b", 0)
    planner.latest_offsets = {T0: 5, T1: 10, b0: 14}
    planner.earliest_offsets = {b0: 4}
    end = reader.latestOffset({"a": {"0": 7, "1": 2}}, ReadAllAvailable())
    assert end == {"a": {"0": 7, "1": 10}, "b": {"0": 14}}
    parts = reader.partitions({"a": {"0": 7, "1": 2}}, end)
    assert sorted((p.topic, p.partition, p.start, p.end) for p in parts) == [("a", 1, 2, 10), ("b", 0, 4, 14)]


@requires_read_limit_api
def test_available_now_stops_at_the_target() -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

    reader, planner = _stream_reader(maxOffsetsPerTrigger="4")
    assert isinstance(reader, SupportsTriggerAvailableNow)
    planner.latest_offsets = {T0: 6}
    start = {"a": {"0": 0}}
    reader.prepareForTriggerAvailableNow()
    planner.latest_offsets = {T0: 100, T1: 50}  # arrives after the query started: not read
    first = reader.latestOffset(start, ReadMaxRows(4))
    assert first == {"a": {"0": 4, "1": 0}}
    second = reader.latestOffset(first, ReadMaxRows(4))
    assert second == {"a": {"0": 6, "1": 0}}
    assert reader.latestOffset(second, ReadMaxRows(4)) == second


def test_batch_and_stream_only_options() -> None:
    from kafkakit.spark.source import batch_reader, stream_reader

    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "a"}
    with pytest.raises(KafkaConfigError) as raised:
        batch_reader({**base, "startingOffsets": "latest"}, None)  # type: ignore[arg-type]
    assert raised.value.setting == "startingOffsets"
    with pytest.raises(KafkaConfigError) as raised:
        stream_reader({**base, "endingOffsets": "latest"}, None)  # type: ignore[arg-type]
    assert raised.value.setting == "endingOffsets"


def test_offsets_below_log_start_are_data_loss_only_when_asked() -> None:
    from kafkakit.spark.reader import DataLossError, FetchSettings, RangeReader

    strict = RangeReader(FetchSettings("h:1"), T0, 50, 150)
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        strict.after_out_of_range(50, 100, 200)
    with pytest.raises(DataLossError, match="past the end of the log"):
        strict.after_out_of_range(250, 100, 200)
    lenient = RangeReader(FetchSettings("h:1", fail_on_data_loss=False), T0, 50, 150)
    assert lenient.after_out_of_range(50, 100, 200) == 100  # skip the deleted records
    assert lenient.after_out_of_range(250, 100, 200) == 150  # past the log's end: nothing left to read
    assert lenient.after_out_of_range(120, 100, 200) == 120  # in range again (a leader moved): read on
