"""Consumer pieces that need no broker: settings validation and read_committed filtering."""

from __future__ import annotations

from typing import Any

import pytest
from kafkakit.consumer import Consumer
from kafkakit.consumer import partition_state as partition_state_module
from kafkakit.consumer.fetcher import Fetcher, FetcherConfig, _decode_committed
from kafkakit.consumer.partition_state import Chunk, PartitionState
from kafkakit.errors import CorruptRecordError, IllegalStateError, KafkaConfigError
from kafkakit.records import (
    build_control_batch,
    decode_batch_list,
    encode_batch,
    iter_batch_headers,
    set_base_offset,
)
from kafkakit.structs import TopicPartition

TP = TopicPartition("t", 0)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("auto_offset_reset", "smallest"),
        ("isolation_level", "serializable"),
        ("fetch_max_wait_ms", -1),
        ("fetch_min_bytes", -5),
        ("fetch_max_bytes", 0),
        ("max_partition_fetch_bytes", "1MB"),
        ("request_timeout_ms", 0),
        ("retry_backoff_ms", -1),
        ("max_poll_records", 0),
        ("metadata_max_age_ms", True),
        ("key_deserializer", "utf-8"),
        ("value_deserializer", 42),
        ("client_id", 7),
    ],
)
def test_bad_settings_name_the_setting(setting: str, value: Any) -> None:
    with pytest.raises(KafkaConfigError) as info:
        Consumer(bootstrap_servers="localhost:9092", **{setting: value})
    assert info.value.setting == setting


def test_request_timeout_must_exceed_fetch_wait() -> None:
    with pytest.raises(KafkaConfigError) as info:
        Consumer(bootstrap_servers="localhost:9092", fetch_max_wait_ms=5000, request_timeout_ms=5000)
    assert info.value.setting == "request_timeout_ms"


def test_bad_bootstrap_is_a_config_error() -> None:
    with pytest.raises(KafkaConfigError) as info:
        Consumer(bootstrap_servers="host:notaport")
    assert info.value.setting == "bootstrap_servers"


def test_read_committed_is_accepted() -> None:
    Consumer(bootstrap_servers="localhost:9092", isolation_level="read_committed")


async def test_assignment_checks_without_a_broker() -> None:
    consumer = Consumer(bootstrap_servers="localhost:9092")
    consumer.assign([TopicPartition("a", 0), ("a", 1)])
    assert consumer.assignment() == {TopicPartition("a", 0), TopicPartition("a", 1)}
    with pytest.raises(TypeError):
        consumer.assign(TopicPartition("a", 0))
    with pytest.raises(TypeError):
        consumer.assign(["a"])
    with pytest.raises(IllegalStateError):
        consumer.seek(TopicPartition("b", 0), 5)
    with pytest.raises(ValueError):
        consumer.seek(TopicPartition("a", 0), -1)
    with pytest.raises(IllegalStateError):
        consumer.pause(TopicPartition("b", 0))
    consumer.pause(TopicPartition("a", 1))
    assert consumer.paused() == {TopicPartition("a", 1)}
    consumer.resume(TopicPartition("a", 1))
    assert consumer.paused() == set()
    with pytest.raises(IllegalStateError, match="start"):
        await consumer.getmany()
    assert consumer.highwater(TopicPartition("a", 0)) is None


# -- read_committed filtering on hand-built batches --------------------------------

PID_ABORTED = 7
PID_COMMITTED = 8


def _chunk(data: bytes, fetch_offset: int, next_offset: int, aborted: list[tuple[int, int]] | None) -> Chunk:
    return Chunk(data, fetch_offset, next_offset, aborted, list(iter_batch_headers(data)))


def _decode_all(chunk: Chunk, tp: TopicPartition, check_crc: bool) -> list[Any]:
    """Every record of the chunk, decoded piece by piece as the fetcher does."""
    out: list[Any] = []
    while chunk.next_batch < len(chunk.batches):
        piece = chunk.next_piece()
        assert piece
        out += decode_batch_list(
            chunk.data, piece, tp.topic, tp.partition, check_crc=check_crc, min_offset=chunk.fetch_offset
        )
    return out


def _txn_batch(pid: int, base_offset: int, values: list[bytes]) -> bytes:
    batch = encode_batch(
        [(None, v, 1000, []) for v in values],
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    return bytes(batch)


def _marker(pid: int, offset: int, commit: bool) -> bytes:
    batch = bytearray(build_control_batch(pid, 0, commit, 0, 1000))
    set_base_offset(batch, 0, offset)
    return bytes(batch)


def _interleaved_log() -> bytes:
    # offsets: 0-1 aborted txn, 2-3 committed txn, 4 ABORT marker, 5 COMMIT marker, 6 plain record
    return b"".join(
        [
            _txn_batch(PID_ABORTED, 0, [b"a0", b"a1"]),
            _txn_batch(PID_COMMITTED, 2, [b"c2", b"c3"]),
            _marker(PID_ABORTED, 4, commit=False),
            _marker(PID_COMMITTED, 5, commit=True),
            encode_batch([(None, b"p6", 1000, [])], base_offset=6),
        ]
    )


def test_read_committed_drops_aborted_transactions_and_markers() -> None:
    chunk = _chunk(_interleaved_log(), 0, 7, [(PID_ABORTED, 0)])
    records = _decode_committed(chunk, TP, True)
    assert [(r.offset, r.value) for r in records] == [(2, b"c2"), (3, b"c3"), (6, b"p6")]


def test_without_aborted_list_everything_but_markers_is_returned() -> None:
    chunk = _chunk(_interleaved_log(), 0, 7, None)
    records = _decode_all(chunk, TP, True)
    assert [r.offset for r in records] == [0, 1, 2, 3, 6]


def test_records_before_the_fetch_offset_are_dropped() -> None:
    chunk = _chunk(
        encode_batch([(None, b"v%d" % i, 1000, []) for i in range(5)], base_offset=10), 12, 15, None
    )
    assert [r.offset for r in _decode_all(chunk, TP, True)] == [12, 13, 14]


def test_crc_mismatch_is_reported() -> None:
    batch = bytearray(encode_batch([(None, b"value", 1000, [])]))
    batch[-2] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        _decode_all(_chunk(bytes(batch), 0, 1, None), TP, True)
    assert [r.offset for r in _decode_all(_chunk(bytes(batch), 0, 1, None), TP, False)] == [0]


# -- handing out a fetch piece by piece ------------------------------------------------


def _fetcher(value_deserializer: Any = None) -> Fetcher:
    config = FetcherConfig(
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        partition_max_bytes=1 << 20,
        isolation_level=0,
        auto_offset_reset="earliest",
        check_crcs=True,
        retry_backoff=0.1,
        request_timeout=30.0,
        key_deserializer=None,
        value_deserializer=value_deserializer,
    )
    return Fetcher(None, config)  # type: ignore[arg-type]  # draining needs no cluster


def _batches(sizes: list[int], base_offset: int) -> bytes:
    out = []
    offset = base_offset
    for size in sizes:
        out.append(encode_batch([(None, b"v%d" % (offset + i), 1000, []) for i in range(size)], base_offset=offset))
        offset += size
    return b"".join(out)


def test_getmany_hands_out_a_fetch_one_piece_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without max_records each drain returns the next piece (whole batches up to the piece size);
    the position follows every record handed out and ends past the trailing control batch."""
    monkeypatch.setattr(partition_state_module, "PIECE_RECORDS", 100)
    data = _batches([60, 30, 50, 250, 10], 100) + _marker(PID_COMMITTED, 500, commit=True)
    state = PartitionState(TP, 1 << 20)
    state.seek(100)
    state.chunks.append(_chunk(data, 100, 501, None))
    state.buffered_bytes = len(data)
    fetcher = _fetcher()
    pieces = []
    while state.chunks:
        records = fetcher.drain([state], None).get(TP, [])
        pieces.append([r.offset for r in records])
        if state.chunks:
            assert state.position == pieces[-1][-1] + 1
    assert [len(p) for p in pieces] == [90, 50, 250, 10]
    assert sum(pieces, []) == list(range(100, 500))
    assert state.position == 501 and state.buffered_bytes == 0


def test_max_records_cuts_across_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_state_module, "PIECE_RECORDS", 100)
    data = _batches([60, 30, 50, 250, 10], 0)
    state = PartitionState(TP, 1 << 20)
    state.seek(20)  # the fetch started inside the first batch
    state.chunks.append(_chunk(data, 20, 400, None))
    fetcher = _fetcher()
    seen: list[int] = []
    while state.chunks:
        records = fetcher.drain([state], 45)[TP]
        assert 0 < len(records) <= 45
        seen += [r.offset for r in records]
        assert state.position == seen[-1] + 1
    assert seen == list(range(20, 400))


def test_a_failing_deserializer_loses_no_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """The piece whose deserialization raised is decoded again by the next drain, not skipped."""
    monkeypatch.setattr(partition_state_module, "PIECE_RECORDS", 10)
    failures = [1]

    def flaky(value: bytes) -> str:
        if value == b"v15" and failures:
            failures.pop()
            raise ValueError("bad value")
        return value.decode()

    data = _batches([10, 10, 10], 0)
    state = PartitionState(TP, 1 << 20)
    state.seek(0)
    state.chunks.append(_chunk(data, 0, 30, None))
    fetcher = _fetcher(flaky)
    assert [r.value for r in fetcher.drain([state], None)[TP]] == [f"v{i}" for i in range(10)]
    with pytest.raises(ValueError, match="bad value"):
        fetcher.drain([state], None)
    assert state.position == 10
    rest = fetcher.drain([state], None)[TP] + fetcher.drain([state], None)[TP]
    assert [r.value for r in rest] == [f"v{i}" for i in range(10, 30)]
