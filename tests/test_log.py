"""kafkakit.broker.log: the on-disk partition log (pure filesystem, no broker)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from kafkakit.broker.log import (
    FileSlice,
    InvalidBatchError,
    LogConfig,
    LogManager,
    OffsetOutOfRange,
    PartitionLog,
    read_batch_header,
)
from kafkakit.errors import KafkaConfigError
from kafkakit.records import Compression, build_control_batch, compress, decode_batches, encode_batch

NOW = 1_700_000_000_000
HOUR = 3600 * 1000


# ---- building batches ------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)  # zigzag
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _record(offset_delta: int, timestamp_delta: int, value: bytes) -> bytes:
    body = (
        b"\0"
        + _varint(timestamp_delta)
        + _varint(offset_delta)
        + _varint(-1)
        + _varint(len(value))
        + value
        + _varint(0)
    )
    return _varint(len(body)) + body


def make_batch(
    values: list[bytes],
    *,
    timestamps: list[int] | None = None,
    compression: int = 0,
    producer_id: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
) -> bytes:
    """A v2 batch as a client would send it (base offset 0)."""
    stamps = timestamps if timestamps is not None else [NOW + i for i in range(len(values))]
    base_ts = stamps[0]
    records = b"".join(
        _record(i, ts - base_ts, v) for i, (v, ts) in enumerate(zip(values, stamps, strict=True))
    )
    if compression:
        records = compress(compression, records)
    after_crc = struct.pack(
        ">hiqqqhii", attributes | compression, len(values) - 1, base_ts, max(stamps), producer_id,
        0 if producer_id >= 0 else -1, base_sequence, len(values),
    ) + records  # fmt: skip
    body = struct.pack(">ibI", -1, 2, crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(body)) + body


def values_of(data: bytes) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for r in decode_batches(data, "t", 0)]


def open_log(path: Path, **config: object) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**config), now_ms=NOW)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "my-topic-with-dashes-3"


def fill(log: PartitionLog, batches: int, per_batch: int = 3, size: int = 100, now: int = NOW) -> list[bytes]:
    """Append ``batches`` batches; returns every value in offset order."""
    values: list[bytes] = []
    for b in range(batches):
        vs = [f"{b}-{i}-".encode().ljust(size, b"x") for i in range(per_batch)]
        log.append(make_batch(vs, timestamps=[now + b * 10 + i for i in range(per_batch)]), now_ms=now)
        values += vs
    return values


def read_all(log: PartitionLog, start: int = 0, max_bytes: int = 1 << 20) -> list[tuple[int, bytes]]:
    """Every record from ``start`` on, reading slice after slice like a consumer."""
    out: list[tuple[int, bytes]] = []
    offset = start
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes).read_bytes()
        assert data, f"no data at {offset}"
        records = [(o, v) for o, v in values_of(data) if o >= offset]
        out += records
        offset = records[-1][0] + 1
    return out


# ---- append and read -------------------------------------------------------------------------


def test_directory_name_gives_topic_and_partition(log_dir: Path) -> None:
    log = open_log(log_dir)
    assert (log.topic, log.partition) == ("my-topic-with-dashes", 3)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    assert (log_dir / "00000000000000000000.log").exists()
    log.close()


def test_append_assigns_offsets_and_reports_batches(log_dir: Path) -> None:
    log = open_log(log_dir)
    first = log.append(make_batch([b"a", b"b", b"c"]))
    data = bytearray(make_batch([b"d"], producer_id=7, base_sequence=0) + make_batch([b"e", b"f"]))
    original = bytes(data)
    second = log.append(data)
    assert data == original  # the caller's buffer is left alone
    assert (first.base_offset, first.last_offset, first.log_append_time_ms) == (0, 2, -1)
    assert (second.base_offset, second.last_offset) == (3, 5)
    assert [
        (b.base_offset, b.last_offset, b.producer_id, b.base_sequence, b.record_count) for b in second.batches
    ] == [
        (3, 3, 7, 0, 1),
        (4, 5, -1, -1, 2),
    ]
    assert log.log_end_offset == 6
    stored = log.read(0, 1 << 20).read_bytes()
    assert values_of(stored) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e"), (5, b"f")]
    header = read_batch_header(stored, 0)
    assert header.partition_leader_epoch == 0
    # Everything after the 16 rewritten bytes is stored exactly as produced.
    assert stored[16 : header.size] == make_batch([b"a", b"b", b"c"])[16:]
    log.close()


def test_append_and_read_across_segment_rolls(log_dir: Path) -> None:
    log = open_log(log_dir, segment_bytes=2000, index_interval_bytes=300)
    values = fill(log, 40)
    assert len(log.segments) > 5
    names = sorted(p.name for p in log_dir.glob("*.log"))
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments]
    assert all(s.size <= 2000 for s in log.segments)
    assert read_all(log) == list(enumerate(values))
    for offset in range(0, len(values), 7):  # random access anywhere
        assert values_of(log.read(offset, 1).read_bytes())[-1][0] >= offset
    log.close()


def test_read_from_the_middle_of_a_batch_returns_that_batch(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 3, per_batch=5)
    data = log.read(7, 1 << 20).read_bytes()
    assert read_batch_header(data).base_offset == 5
    assert [o for o, _ in values_of(data)][:5] == [5, 6, 7, 8, 9]
    log.close()


def test_max_bytes_gives_whole_batches_and_min_one_batch_gives_a_huge_one(log_dir: Path) -> None:
    log = open_log(log_dir)
    log.append(make_batch([b"x" * 50_000]))
    fill(log, 5)
    one = log.read(0, 100)
    assert one.length == read_batch_header(one.read_bytes()).size > 50_000
    assert log.read(0, 100, min_one_batch=False).length == 0
    batch_size = read_batch_header(log.read(1, 1 << 20).read_bytes()).size
    two = log.read(1, batch_size * 2 + batch_size // 2)
    assert two.length == 2 * batch_size
    assert [o for o, _ in values_of(two.read_bytes())] == list(range(1, 7))
    log.close()


def test_max_offset_bounds_the_read(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 4, per_batch=2)  # batches at 0, 2, 4, 6
    assert [o for o, _ in values_of(log.read(0, 1 << 20, max_offset=4).read_bytes())] == [0, 1, 2, 3]
    assert [o for o, _ in values_of(log.read(0, 1 << 20, max_offset=5).read_bytes())] == [0, 1, 2, 3, 4, 5]
    assert log.read(4, 1 << 20, max_offset=4).length == 0
    log.close()


def test_reads_at_and_beyond_the_ends(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 2)
    end = log.read(6, 1000)
    assert (end.length, end.read_bytes()) == (0, b"")
    with pytest.raises(OffsetOutOfRange) as info:
        log.read(7, 1000)
    assert (info.value.code, info.value.log_start_offset, info.value.log_end_offset) == (1, 0, 6)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 1000)
    log.close()


def test_segment_rolls_on_segment_ms_and_when_an_index_is_full(tmp_path: Path) -> None:
    by_time = open_log(tmp_path / "t-0", segment_ms=HOUR)
    by_time.append(make_batch([b"a"], timestamps=[NOW]), now_ms=NOW)
    by_time.append(make_batch([b"b"], timestamps=[NOW + HOUR // 2]), now_ms=NOW + HOUR // 2)
    assert len(by_time.segments) == 1
    by_time.append(make_batch([b"c"], timestamps=[NOW + 2 * HOUR]), now_ms=NOW + 2 * HOUR)
    assert [s.base_offset for s in by_time.segments] == [0, 2]
    by_time.close()

    # Room for 3 offset entries (and 2 time entries) per segment.
    small_index = open_log(tmp_path / "t-1", index_interval_bytes=0, segment_index_bytes=24)
    fill(small_index, 10)
    assert len(small_index.segments) > 1
    assert all(len(s.offset_index) <= 3 and len(s.time_index) <= 3 for s in small_index.segments)
    assert [o for o, _ in read_all(small_index)] == list(range(30))
    small_index.close()


def test_index_files_use_kafka_formats(log_dir: Path) -> None:
    log = open_log(log_dir, index_interval_bytes=0)
    fill(log, 4, per_batch=2)
    log.close()
    index = (log_dir / "00000000000000000000.index").read_bytes()
    entries = list(struct.iter_unpack(">ii", index))
    batch_size = len(make_batch([b"0-0-".ljust(100, b"x")] * 2))
    # No entry for the first batch (position 0 is implied); then (last relative offset, position).
    assert entries == [(3, batch_size), (5, 2 * batch_size), (7, 3 * batch_size)]
    time_entries = list(struct.iter_unpack(">qi", (log_dir / "00000000000000000000.timeindex").read_bytes()))
    assert time_entries == [(NOW + 11, 3), (NOW + 21, 5), (NOW + 31, 7)]


def test_log_append_time_restamps_the_batch(log_dir: Path) -> None:
    log = open_log(log_dir, message_timestamp_type="LogAppendTime")
    result = log.append(make_batch([b"a", b"b"], timestamps=[5, 6]), now_ms=NOW)
    assert result.log_append_time_ms == NOW
    stored = log.read(0, 1000).read_bytes()
    header = read_batch_header(stored)
    assert header.timestamp_type == 1 and header.max_timestamp == NOW
    assert crc32c(stored[21 : header.size]) == header.crc
    assert [r.timestamp for r in decode_batches(stored, "t", 0)] == [NOW, NOW]
    assert log.offset_for_timestamp(NOW) == (0, NOW)
    log.close()


# ---- validation --------------------------------------------------------------------------------


def _corrupt(batch: bytes, at: int) -> bytes:
    data = bytearray(batch)
    data[at] ^= 0xFF
    return bytes(data)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (_corrupt(make_batch([b"hello"]), 70), 2),  # CRC mismatch
        (make_batch([b"hello"])[:-3], 2),  # truncated
        (make_batch([b"a"]) + make_batch([b"b"])[:40], 2),  # second header cut short
        (_corrupt(make_batch([b"hello"]), 16)[:16] + b"\x01" + make_batch([b"hello"])[17:], 87),  # magic 1
        (make_batch([b"x" * 2000]), 10),  # above max.message.bytes
        (make_batch([b"a"], producer_id=5, base_sequence=-1), 87),  # idempotent batch without a sequence
        (make_batch([b"a"], attributes=0x06), 2),  # unknown codec 6
    ],
)
def test_invalid_appends_raise_and_leave_the_log_unchanged(log_dir: Path, data: bytes, code: int) -> None:
    log = open_log(log_dir, max_message_bytes=1000)
    log.append(make_batch([b"good"]))
    size = log.size_in_bytes
    with pytest.raises(InvalidBatchError) as info:
        log.append(make_batch([b"ok"]) + data)
    assert info.value.code == code
    assert (log.log_end_offset, log.size_in_bytes) == (1, size)
    assert os.path.getsize(log_dir / "00000000000000000000.log") == size
    assert values_of(log.read(0, 1 << 20).read_bytes()) == [(0, b"good")]
    log.close()


def test_record_count_must_match_last_offset_delta(log_dir: Path) -> None:
    batch = bytearray(make_batch([b"a", b"b"]))
    struct.pack_into(">i", batch, 57, 3)  # recordCount 3 vs lastOffsetDelta 1
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    log = open_log(log_dir)
    with pytest.raises(InvalidBatchError) as info:
        log.append(batch)
    assert info.value.code == 87
    with pytest.raises(InvalidBatchError) as info:
        log.append(b"")
    assert info.value.code == 2
    assert log.log_end_offset == 0
    log.close()


# ---- timestamps --------------------------------------------------------------------------------


def test_offset_for_timestamp_finds_the_first_record_at_or_after(log_dir: Path) -> None:
    log = open_log(log_dir, segment_bytes=200, index_interval_bytes=0)
    # Timestamps out of order inside batches, as CreateTime allows.
    log.append(make_batch([b"a", b"b", b"c"], timestamps=[100, 300, 200]))
    log.append(make_batch([b"d", b"e"], timestamps=[250, 400]))
    log.append(make_batch([b"f", b"g", b"h"], timestamps=[500, 450, 600], compression=Compression.GZIP))
    log.append(make_batch([b"i"], timestamps=[700], compression=Compression.LZ4))
    assert len(log.segments) > 1
    assert log.offset_for_timestamp(0) == (0, 100)
    assert log.offset_for_timestamp(150) == (1, 300)
    assert log.offset_for_timestamp(301) == (4, 400)
    assert log.offset_for_timestamp(401) == (5, 500)
    assert log.offset_for_timestamp(501) == (7, 600)
    assert log.offset_for_timestamp(650) == (8, 700)
    assert log.offset_for_timestamp(701) is None
    assert log.max_timestamp_offset() == (8, 700)
    log.close()


def test_max_timestamp_offset_picks_the_record_inside_a_batch(log_dir: Path) -> None:
    log = open_log(log_dir)
    assert log.max_timestamp_offset() == (-1, -1)
    log.append(make_batch([b"a", b"b", b"c"], timestamps=[100, 900, 200]))
    log.append(make_batch([b"d"], timestamps=[500]))
    assert log.max_timestamp_offset() == (1, 900)
    log.close()
    reopened = open_log(log_dir)
    assert reopened.max_timestamp_offset() == (1, 900)
    assert reopened.offset_for_timestamp(300) == (1, 900)
    reopened.close()


# ---- retention ---------------------------------------------------------------------------------


def test_retention_by_time_deletes_old_segments_but_never_the_active_one(log_dir: Path) -> None:
    log = open_log(log_dir, retention_ms=HOUR)
    log.append(make_batch([b"old"], timestamps=[NOW - 3 * HOUR]))
    log.roll()
    log.append(make_batch([b"recent"], timestamps=[NOW - HOUR // 2]))
    log.roll()
    log.append(make_batch([b"expired-but-active"], timestamps=[NOW - 5 * HOUR]))
    assert log.enforce_retention(NOW) == 1
    assert [s.base_offset for s in log.segments] == [1, 2]
    assert log.log_start_offset == 1
    assert not (log_dir / "00000000000000000000.log").exists()
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 1000)
    assert log.enforce_retention(NOW + 10 * HOUR) == 1  # the active segment stays
    assert [s.base_offset for s in log.segments] == [2]
    log.close()


def test_retention_by_size_keeps_at_least_retention_bytes(log_dir: Path) -> None:
    log = open_log(log_dir, segment_bytes=1000, retention_bytes=2500, retention_ms=-1)
    fill(log, 30)
    sizes = [s.size for s in log.segments]
    deleted = log.enforce_retention(NOW)
    assert deleted > 0
    assert log.size_in_bytes >= 2500
    assert log.size_in_bytes - log.segments[0].size < 2500  # one more deletion would go below
    assert len(log.segments) == len(sizes) - deleted
    assert [o for o, _ in read_all(log, log.log_start_offset)] == list(range(log.log_start_offset, 90))
    log.close()


def test_delete_records_before_moves_the_log_start_offset(log_dir: Path) -> None:
    log = open_log(log_dir, segment_bytes=1000)
    fill(log, 12)
    log.delete_records_before(20)
    assert log.log_start_offset == 20
    assert log.segments[0].base_offset <= 20 < log.segments[0].next_offset
    with pytest.raises(OffsetOutOfRange):
        log.read(19, 1000)
    assert read_all(log, 20)[0][0] == 20
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(37)
    log.close()
    assert open_log(log_dir).log_start_offset == 20


def test_a_slice_stays_readable_after_retention_deletes_its_segment(log_dir: Path) -> None:
    log = open_log(log_dir, retention_ms=HOUR)
    log.append(make_batch([b"old"], timestamps=[NOW - 3 * HOUR]))
    piece = log.read(0, 1000)
    log.roll()
    log.append(make_batch([b"new"]))
    assert log.enforce_retention(NOW) == 1
    assert values_of(piece.read_bytes()) == [(0, b"old")]
    newest = log.read(1, 1000)
    log.close()
    assert values_of(newest.read_bytes()) == [(1, b"new")]  # and after close


# ---- restart and recovery ------------------------------------------------------------------------


def crash_image(log_dir: Path) -> Path:
    """The partition directory as a crash would leave it: the files as they are, no marker."""
    copy = log_dir.parent / "crashed" / log_dir.name
    shutil.copytree(log_dir, copy)
    return copy


def test_restart_keeps_data_and_continues_offsets(log_dir: Path) -> None:
    log = open_log(log_dir, segment_bytes=1500)
    values = fill(log, 20)
    segment_count = len(log.segments)
    log.close()
    assert (log_dir / ".kafka_cleanshutdown").exists()
    reopened = open_log(log_dir, segment_bytes=1500)
    assert not (log_dir / ".kafka_cleanshutdown").exists()
    assert (reopened.log_end_offset, len(reopened.segments)) == (60, segment_count)
    assert reopened.append(make_batch([b"next"])).base_offset == 60
    assert read_all(reopened) == [*enumerate(values), (60, b"next")]
    reopened.close()


def test_recovery_truncates_a_torn_tail(log_dir: Path) -> None:
    log = open_log(log_dir, segment_bytes=2000, index_interval_bytes=200)
    values = fill(log, 15)
    crashed = crash_image(log_dir)
    log.close()
    active = crashed / f"{log.segments[-1].base_offset:020d}.log"
    intact_size = active.stat().st_size
    with open(active, "ab") as f:
        f.write(make_batch([b"half", b"written"])[:-20])  # a torn write
    recovered = open_log(crashed, segment_bytes=2000, index_interval_bytes=200)
    assert recovered.log_end_offset == 45
    assert active.stat().st_size == intact_size
    assert read_all(recovered) == list(enumerate(values))
    assert recovered.append(make_batch([b"after"])).base_offset == 45
    recovered.close()


def test_recovery_truncates_garbage_after_the_last_batch(log_dir: Path) -> None:
    log = open_log(log_dir)
    values = fill(log, 5)
    crashed = crash_image(log_dir)
    log.close()
    with open(crashed / "00000000000000000000.log", "ab") as f:
        f.write(os.urandom(37) + b"\0" * 500)
    recovered = open_log(crashed)
    assert recovered.log_end_offset == 15
    assert read_all(recovered) == list(enumerate(values))
    recovered.close()


def test_recovery_cuts_a_batch_with_a_flipped_byte(log_dir: Path) -> None:
    log = open_log(log_dir)
    values = fill(log, 5, size=300)
    crashed = crash_image(log_dir)
    log.close()
    path = crashed / "00000000000000000000.log"
    size = path.stat().st_size
    data = bytearray(path.read_bytes())
    last_batch = (size // 5) * 4  # five batches of equal size: where the last one starts
    data[last_batch + 400] ^= 0x01
    path.write_bytes(bytes(data))
    recovered = open_log(crashed)
    assert recovered.log_end_offset == 12
    assert path.stat().st_size == last_batch
    assert read_all(recovered) == list(enumerate(values[:12]))
    recovered.close()


def test_corruption_in_an_older_segment_drops_what_follows(log_dir: Path) -> None:
    log = open_log(log_dir, segment_bytes=1000)
    fill(log, 12)
    crashed = crash_image(log_dir)
    log.close()
    second = log.segments[1]
    path = crashed / f"{second.base_offset:020d}.log"
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # inside the segment's last batch
    path.write_bytes(bytes(data))
    recovered = open_log(crashed, segment_bytes=1000)
    assert [s.base_offset for s in recovered.segments] == [0, second.base_offset]
    assert recovered.log_end_offset == second.next_offset - 3
    assert [o for o, _ in read_all(recovered)] == list(range(recovered.log_end_offset))
    recovered.close()


def test_unclean_restart_trusts_segments_below_the_recovery_point(log_dir: Path) -> None:
    log = open_log(log_dir, segment_bytes=1000, flush_messages=1)
    fill(log, 6)
    assert log.recovery_point == 18
    crashed = crash_image(log_dir)
    log.close()
    # A flipped byte in a segment below the recovery point is not looked for (as in Kafka) ...
    first = crashed / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    data[-10] ^= 0xFF
    first.write_bytes(bytes(data))
    recovered = open_log(crashed, segment_bytes=1000)
    assert recovered.log_end_offset == 18
    recovered.close()


def test_missing_and_corrupt_indexes_are_rebuilt(log_dir: Path) -> None:
    log = open_log(log_dir, segment_bytes=3000, index_interval_bytes=250)
    values = fill(log, 30)
    log.close()
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    originals = {p.name: p.read_bytes() for p in log_dir.iterdir() if p.suffix in (".index", ".timeindex")}
    (log_dir / f"{bases[0]:020d}.index").unlink()
    (log_dir / f"{bases[1]:020d}.timeindex").unlink()
    with open(log_dir / f"{bases[1]:020d}.index", "ab") as f:
        f.write(b"\x01\x02\x03")  # invalid size
    with open(log_dir / f"{bases[-1]:020d}.index", "r+b") as f:
        f.write(struct.pack(">ii", 999_999, 123))  # nonsense first entry
    reopened = open_log(log_dir, segment_bytes=3000, index_interval_bytes=250)
    assert read_all(reopened) == list(enumerate(values))
    assert reopened.offset_for_timestamp(NOW + 151) == (46, NOW + 151)
    assert reopened.offset_for_timestamp(NOW + 155) == (48, NOW + 160)
    reopened.close()
    rebuilt = {p.name: p.read_bytes() for p in log_dir.iterdir() if p.suffix in (".index", ".timeindex")}
    assert rebuilt == originals


def test_files_of_an_unclean_restart_match_a_clean_one(log_dir: Path) -> None:
    log = open_log(log_dir, segment_bytes=3000, index_interval_bytes=250)
    fill(log, 20)
    crashed = crash_image(log_dir)
    log.close()
    recovered = open_log(crashed, segment_bytes=3000, index_interval_bytes=250)
    recovered.close()
    for path in log_dir.iterdir():
        if path.suffix in (".log", ".index", ".timeindex"):
            assert (crashed / path.name).read_bytes() == path.read_bytes(), path.name


# ---- flush -------------------------------------------------------------------------------------


def test_flush_policy_by_messages_and_by_time(tmp_path: Path) -> None:
    by_count = open_log(tmp_path / "a-0", flush_messages=5)
    fill(by_count, 1)
    assert by_count.recovery_point == 0
    fill(by_count, 1)
    assert by_count.recovery_point == 6
    by_count.close()

    by_time = open_log(tmp_path / "b-0", flush_ms=1000)
    fill(by_time, 1)
    assert not by_time.flush_if_due(NOW + 500)
    assert by_time.flush_if_due(NOW + 1000)
    assert by_time.recovery_point == 3
    assert not by_time.flush_if_due(NOW + 5000)  # nothing new to flush
    by_time.close()


# ---- FileSlice and sendfile --------------------------------------------------------------------


def test_file_slice_works_with_os_sendfile(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 10, size=1000)
    piece = log.read(9, 8000)
    assert isinstance(piece, FileSlice) and piece.position > 0
    left, right = socket.socketpair()
    with left, right:
        sent = 0
        while sent < piece.length:
            sent += os.sendfile(
                left.fileno(), piece.file.fileno(), piece.position + sent, piece.length - sent
            )
        received = b""
        while len(received) < piece.length:
            received += right.recv(65536)
    assert received == piece.read_bytes()
    assert [o for o, _ in values_of(received)][:3] == [9, 10, 11]
    log.close()


async def test_file_slice_works_with_loop_sendfile(log_dir: Path) -> None:
    log = open_log(log_dir)
    fill(log, 50, size=1000)
    piece = log.read(0, 60_000)
    expected = piece.read_bytes()
    received = bytearray()
    done = asyncio.Event()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.extend(await reader.readexactly(piece.length))
        done.set()
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    loop = asyncio.get_running_loop()
    await loop.sendfile(writer.transport, piece.file, piece.position, piece.length)
    await asyncio.wait_for(done.wait(), 10)
    writer.close()
    server.close()
    await server.wait_closed()
    assert bytes(received) == expected
    log.close()


# ---- LogManager and LogConfig ------------------------------------------------------------------


def test_log_manager_reopens_partitions_and_skips_strangers(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig())
    custom = LogConfig.from_topic_configs({"retention.ms": "60000", "cleanup.policy": "compact"}, LogConfig())
    for p in range(3):
        manager.create("orders", p, custom).append(make_batch([f"v{p}".encode()]))
    manager.create("my-events", 0).append(make_batch([b"e"]))
    assert manager.create("orders", 1) is manager.get("orders", 1)
    manager.close()
    (tmp_path / "__meta").mkdir()
    (tmp_path / "not-a-partition-x").mkdir()
    (tmp_path / "stray.txt").write_text("hi")
    broken = tmp_path / "broken-0"
    broken.mkdir()
    (broken / "00000000000000000000.log").mkdir()  # a directory where a file should be

    again = LogManager(tmp_path, LogConfig())
    assert set(again.partitions()) == {("orders", 0), ("orders", 1), ("orders", 2), ("my-events", 0)}
    assert again.offline_dirs == [broken]
    assert again.topics() == {"my-events": [0], "orders": [0, 1, 2]}
    orders = again.get("orders", 2)
    assert (
        orders is not None
        and orders.config.retention_ms == 60000
        and orders.config.cleanup_policy == "compact"
    )
    assert again.topic_config_overrides("orders") == {"retention.ms": "60000", "cleanup.policy": "compact"}
    assert values_of(orders.read(0, 1000).read_bytes()) == [(0, b"v2")]
    again.delete_topic("orders")
    assert again.get("orders", 0) is None
    assert not (tmp_path / "orders-0").exists()
    assert again.enforce_retention(NOW) == 0
    again.flush_due(NOW)
    again.close()


def test_log_config_maps_kafka_topic_configs() -> None:
    config = LogConfig.from_topic_configs(
        {
            "segment.bytes": "1048576",
            "retention.bytes": "-1",
            "flush.messages": str(2**63 - 1),
            "flush.ms": "1000",
            "message.timestamp.type": "LogAppendTime",
            "compression.type": "producer",
        },
        LogConfig(retention_ms=-1),
    )
    assert (config.segment_bytes, config.retention_ms, config.flush_messages, config.flush_ms) == (
        1 << 20,
        -1,
        None,
        1000,
    )
    assert config.log_append_time
    configs = config.to_topic_configs()
    assert configs["flush.messages"] == str(2**63 - 1)
    assert configs["compression.type"] == "producer"
    assert LogConfig.from_topic_configs(configs) == config
    with pytest.raises(KafkaConfigError) as info:
        LogConfig.from_topic_configs({"segment.bytes": "ten"})
    assert info.value.setting == "segment.bytes"
    with pytest.raises(KafkaConfigError):
        LogConfig.from_topic_configs({"message.timestamp.type": "Whenever"})
    with pytest.raises(KafkaConfigError):
        LogConfig(segment_bytes=2**31)


def test_compressed_batches_from_the_records_codec_round_trip(log_dir: Path) -> None:
    log = open_log(log_dir)
    for codec in (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        log.append(encode_batch([(None, f"{codec.name}".encode(), NOW, ())], compression=codec))
    assert [v for _, v in values_of(log.read(0, 1 << 20).read_bytes())] == [
        b"NONE",
        b"GZIP",
        b"SNAPPY",
        b"LZ4",
        b"ZSTD",
    ]
    log.close()


def test_control_batches_and_iter_batches(log_dir: Path) -> None:
    log = open_log(log_dir, segment_bytes=500)
    txn = encode_batch(
        [(None, b"t", NOW, ())], producer_id=9, producer_epoch=1, base_sequence=0, transactional=True
    )
    first = log.append(txn).batches[0]
    marker = log.append(build_control_batch(9, 1, True, 0, NOW)).batches[0]
    fill(log, 6)
    assert (first.is_transactional, first.is_control, first.producer_id) == (True, False, 9)
    assert (marker.base_offset, marker.is_control, marker.is_transactional) == (1, True, True)
    stored = list(log.iter_batches())
    assert len(log.segments) > 1
    assert [h.base_offset for h, _ in stored] == [0, 1, 2, 5, 8, 11, 14, 17]
    assert stored[1][0].is_control and read_batch_header(stored[1][1].read_bytes()).base_offset == 1
    assert [h.base_offset for h, _ in log.iter_batches(9)] == [8, 11, 14, 17]
    log.close()
