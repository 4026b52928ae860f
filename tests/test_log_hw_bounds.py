"""Log maintenance on replicated logs stays below the high watermark (Kafka's rules).

Retention deletes only segments wholly below the HW (the log start never passes it) and the
log cleaner compacts only below the HW: a record at or above it may still be truncated by a
leader change, so it must neither be compacted nor let an older record of its key go.  A
single-replica log's HW is its end, so nothing changes there.
"""

from __future__ import annotations

from pathlib import Path

from kafkakit.broker.log import LogConfig, LogManager, PartitionLog
from kafkakit.broker.log.cleaner_task import LogCleaner
from kafkakit.records import build_control_batch, decode_batch, encode_batch
from test_log import HOUR, NOW, fill, make_batch, read_all

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "600", "min.cleanable.dirty.ratio": "0.01"}


def _replicated(tmp_path: Path, configs: dict[str, str]) -> tuple[LogManager, PartitionLog]:
    manager = LogManager(tmp_path / "data", LogConfig())
    log = manager.create("t", 0, LogConfig.from_topic_configs(configs), single_replica=False)
    return manager, log


def _put(log: PartitionLog, key: str, value: str) -> int:
    return log.append(encode_batch([(key.encode(), value.encode(), NOW, ())])).base_offset


def _records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for header, data in log.iter_batches():
        for record in decode_batch(data.read_bytes(), 0, header, "t", 0):
            out.append((record.offset, record.key, record.value))
    return out


# ---- retention -------------------------------------------------------------------------------


def test_retention_by_time_deletes_only_segments_below_the_high_watermark(tmp_path: Path) -> None:
    _, log = _replicated(tmp_path, {"segment.bytes": "1000", "retention.ms": str(HOUR)})
    fill(log, 12, now=NOW - 5 * HOUR)  # every record expired; 36 records in 4-record segments
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4 and log.high_watermark == 0
    assert log.enforce_retention(NOW) == 0  # nothing committed yet: nothing deleted
    hw = bases[2] + 1  # inside the third segment
    log.update_high_watermark(hw)
    assert log.enforce_retention(NOW) == 2  # the two segments wholly below the HW
    assert log.log_start_offset == bases[2] <= log.high_watermark
    assert [o for o, _ in read_all(log, log.log_start_offset)] == list(range(bases[2], 36))
    log.update_high_watermark(log.log_end_offset)
    assert log.enforce_retention(NOW) == len(bases) - 3  # all but the active one now
    assert [s.base_offset for s in log.segments] == [bases[-1]]


def test_retention_by_size_waits_for_the_high_watermark(tmp_path: Path) -> None:
    _, log = _replicated(tmp_path, {"segment.bytes": "1000", "retention.bytes": "1000", "retention.ms": "-1"})
    fill(log, 20)
    hw = log.segments[1].base_offset  # exactly the end of the first segment
    log.update_high_watermark(hw)
    assert log.enforce_retention(NOW) == 1  # far over retention.bytes, but only one segment is committed
    assert log.log_start_offset == hw
    log.update_high_watermark(log.log_end_offset)
    assert log.enforce_retention(NOW) > 0
    assert log.size_in_bytes >= 1000 and log.size_in_bytes - log.segments[0].size < 1000


def test_a_single_replica_log_keeps_its_retention(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=1000, retention_ms=HOUR), now_ms=NOW)
    fill(log, 12, now=NOW - 5 * HOUR)
    segments = len(log.segments)
    assert log.high_watermark == log.log_end_offset
    assert log.enforce_retention(NOW) == segments - 1


# ---- compaction ------------------------------------------------------------------------------


def test_the_cleaner_compacts_only_below_the_high_watermark(tmp_path: Path) -> None:
    manager, log = _replicated(tmp_path, COMPACT)
    cleaner = LogCleaner(manager)
    written = [(_put(log, f"k{i % 4}", f"v{i}"), f"k{i % 4}", f"v{i}") for i in range(80)]
    assert len(log.segments) > 5
    assert cleaner.clean_log_now(log, NOW, force=True) is None  # HW 0: nothing committed to clean

    hw = log.segments[3].base_offset + 2  # inside the fourth segment
    log.update_high_watermark(hw)
    result = cleaner.clean_log_now(log, NOW, force=True)
    assert result is not None and result.end_offset <= hw
    records = _records(log)
    # At and above the HW every record is as written.
    assert [r for r in records if r[0] >= hw] == [(o, k.encode(), v.encode()) for o, k, v in written if o >= hw]
    # Below it, a record is gone only if its key has a newer record below the end of the map.
    kept_below = {r[0] for r in records if r[0] < hw}
    for offset, key, _ in written:
        if offset >= result.end_offset:
            continue
        newer = [o for o, k, _ in written if k == key and offset < o < result.end_offset]
        assert (offset in kept_below) == (not newer), (offset, key, newer)
    assert cleaner.checkpoint("t", 0) == result.end_offset

    log.update_high_watermark(log.log_end_offset)
    active_base = log.segments[-1].base_offset
    result = cleaner.clean_log_now(log, NOW, force=True)
    assert result is not None and result.end_offset == active_base
    below_active = [r for r in _records(log) if r[0] < active_base]
    assert len(below_active) == len({r[1] for r in below_active})  # one record per key left


def test_a_batch_straddling_the_high_watermark_is_not_mapped(tmp_path: Path) -> None:
    manager, log = _replicated(tmp_path, COMPACT)
    cleaner = LogCleaner(manager)
    first = _put(log, "a", "old")
    for i in range(30):
        _put(log, f"f{i % 3}", "x" * 20)
    straddling = log.append(encode_batch([(b"a", b"new", NOW, ()), (b"b", b"y", NOW, ())])).base_offset
    for i in range(30):
        _put(log, f"g{i % 3}", "x" * 20)
    log.update_high_watermark(straddling + 1)  # "a"=new is below it, "b" is not
    result = cleaner.clean_log_now(log, NOW, force=True)
    assert result is not None and result.end_offset <= straddling
    assert (first, b"a", b"old") in _records(log)  # its newer value is not wholly committed
    log.update_high_watermark(log.log_end_offset)
    cleaner.clean_log_now(log, NOW, force=True)
    assert (first, b"a", b"old") not in _records(log)


def test_an_abort_marker_above_the_high_watermark_keeps_the_transaction_unstable(tmp_path: Path) -> None:
    manager, log = _replicated(tmp_path, COMPACT)
    cleaner = LogCleaner(manager)
    pid, epoch = 7, 0
    aborted = log.append(
        encode_batch([(b"a", b"aborted", NOW, ())], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                     transactional=True)
    ).base_offset  # fmt: skip
    for i in range(30):
        _put(log, f"f{i % 3}", "x" * 20)
    marker = log.append(build_control_batch(pid, epoch, False, 0, NOW)).base_offset
    for i in range(30):
        _put(log, f"g{i % 3}", "x" * 20)
    log.update_high_watermark(marker)  # the ABORT is written, not replicated
    result = cleaner.clean_log_now(log, NOW, force=True)
    # The transaction is open as far as the cleaner may know: nothing from its first offset on.
    assert result is None or result.end_offset <= aborted
    assert (aborted, b"a", b"aborted") in _records(log)
    log.update_high_watermark(log.log_end_offset)
    assert cleaner.clean_log_now(log, NOW, force=True) is not None
    assert (aborted, b"a", b"aborted") not in _records(log)


def test_the_background_cleaner_skips_a_replicated_log_with_nothing_committed(tmp_path: Path) -> None:
    manager, log = _replicated(tmp_path, COMPACT)
    cleaner = LogCleaner(manager)
    for i in range(60):
        log.append(make_batch([f"v{i}".encode()]))  # keyless is fine for the range check
    assert cleaner._candidates(NOW) == []  # HW 0: not worth cleaning, whatever the ratio
    log.update_high_watermark(log.log_end_offset)
    assert [c[0] for c in cleaner._candidates(NOW)] == [log]
