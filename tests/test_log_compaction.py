"""The log cleaner (kafkakit.broker.log.cleaner): compaction rules on the log itself, no broker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from kafkakit.broker.log import InvalidBatchError, LogConfig, LogManager, PartitionLog, check_record_set_keys
from kafkakit.broker.log.checkpoint import read_offsets_checkpoint
from kafkakit.broker.log.cleaner import DELETE_HORIZON_BIT, Throttler
from kafkakit.broker.log.cleaner_task import CLEANER_CHECKPOINT_FILE, CleanerConfig, LogCleaner
from kafkakit.broker.producer_state import PartitionProducerState, ProducerStateError
from kafkakit.records import Compression, build_control_batch, decode_batch, encode_batch

NOW = int(time.time() * 1000)
DAY = 24 * 3600 * 1000
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "1000", "min.cleanable.dirty.ratio": "0.01"}


def _log(tmp_path: Path, **overrides: str) -> tuple[LogManager, PartitionLog, LogCleaner]:
    manager = LogManager(tmp_path / "data", LogConfig())
    config = LogConfig.from_topic_configs({**COMPACT, **overrides})
    return manager, manager.create("t", 0, config), LogCleaner(manager)


def _put(log: PartitionLog, key: str, value: str | None, ts: int = NOW, **kw: object) -> int:
    batch = encode_batch([(key.encode(), None if value is None else value.encode(), ts, ())], **kw)  # type: ignore[arg-type]
    return log.append(batch).base_offset


def _filler(log: PartitionLog, n: int = 40) -> None:
    """New dirty data: a pass only runs when there is some."""
    for i in range(n):
        _put(log, f"f{i % 4}", "z" * 30)


def _batches(log: PartitionLog) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, record count, attributes) of every stored batch."""
    return [(h.base_offset, h.last_offset, h.record_count, h.attributes) for h, _ in log.iter_batches()]


def _records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for header, data in log.iter_batches():
        raw = data.read_bytes()
        for record in decode_batch(raw, 0, header, "t", 0):
            out.append((record.offset, record.key, record.value))
    return out


def test_latest_value_per_key_offsets_kept_and_active_segment_untouched(tmp_path: Path) -> None:
    _, log, cleaner = _log(tmp_path)
    written = [(_put(log, f"k{i % 7}", f"v{i}"), f"k{i % 7}", f"v{i}") for i in range(120)]
    active_base = log.segments[-1].base_offset
    active_before = [r for r in _records(log) if r[0] >= active_base]
    assert len(log.segments) > 3

    result = cleaner.clean_log_now(log)

    assert result is not None and result.end_offset == active_base
    records = _records(log)
    offsets = [r[0] for r in records]
    assert offsets == sorted(offsets) and set(offsets) <= {w[0] for w in written}
    assert [r for r in records if r[0] >= active_base] == active_before  # active segment as it was
    cleaned = [r for r in records if r[0] < active_base]
    latest_below = {k: (o, v) for o, k, v in written if o < active_base}
    assert sorted((o, k.encode(), v.encode()) for k, (o, v) in latest_below.items()) == cleaned
    assert log.log_end_offset == 120
    assert read_offsets_checkpoint(tmp_path / "data" / CLEANER_CHECKPOINT_FILE) == {("t", 0): active_base}


def test_second_pass_starts_at_checkpoint_and_groups_small_segments(tmp_path: Path) -> None:
    _, log, cleaner = _log(tmp_path)
    for i in range(60):
        _put(log, f"k{i % 3}", f"a{i}")
    assert cleaner.clean_log_now(log) is not None
    segments_after_first = len(log.segments)
    # Nothing new is dirty: no pass (the ratio is 0).
    assert cleaner.clean_log_now(log) is None
    checkpoint = cleaner.checkpoint("t", 0)
    for i in range(60):
        _put(log, f"k{i % 3}", f"b{i}")
    result = cleaner.clean_log_now(log)
    assert result is not None
    assert checkpoint is not None and result.stats.first_dirty_offset == checkpoint
    assert result.stats.segments_after < result.stats.segments_before  # small cleaned segments merged
    assert len(log.segments) < segments_after_first + 8
    values = {k: v for _, k, v in _records(log)}
    assert values == {b"k0": b"b57", b"k1": b"b58", b"k2": b"b59"}


def test_tombstones_kept_for_delete_retention_ms_then_removed(tmp_path: Path) -> None:
    _, log, cleaner = _log(tmp_path, **{"delete.retention.ms": "60000"})
    _put(log, "gone", "x")
    _put(log, "stay", "y")
    tomb = _put(log, "gone", None)
    for i in range(40):
        _put(log, f"f{i % 4}", "z" * 30)
    cleaner.clean_log_now(log, now_ms=NOW)
    records = _records(log)
    assert (tomb, b"gone", None) in records  # kept on the first clean...
    tomb_batch = next(b for b in _batches(log) if b[0] == tomb)
    assert tomb_batch[3] & DELETE_HORIZON_BIT  # ...with a delete horizon stamped in its batch
    # Before the horizon a later pass keeps it; after it the tombstone goes.
    for i in range(40):
        _put(log, f"f{i % 4}", "w" * 30)
    cleaner.clean_log_now(log, now_ms=NOW + 30_000, force=True)
    assert (tomb, b"gone", None) in _records(log)
    for i in range(40):
        _put(log, f"f{i % 4}", "q" * 30)
    cleaner.clean_log_now(log, now_ms=NOW + 61_000, force=True)
    keys = {k for _, k, _ in _records(log)}
    assert b"gone" not in keys and b"stay" in keys


def test_aborted_transactions_and_markers(tmp_path: Path) -> None:
    _, log, cleaner = _log(tmp_path, **{"delete.retention.ms": "1000"})
    pid, epoch = 7, 0
    txn = {"producer_id": pid, "producer_epoch": epoch, "transactional": True}
    aborted_at = log.append(encode_batch([(b"a", b"aborted", NOW, ())], base_sequence=0, **txn)).base_offset  # type: ignore[arg-type]
    abort_marker = log.append(build_control_batch(pid, epoch, False, 0, NOW)).base_offset
    committed = log.append(encode_batch([(b"c", b"committed", NOW, ())], base_sequence=1, **txn)).base_offset  # type: ignore[arg-type]
    commit_marker = log.append(build_control_batch(pid, epoch, True, 0, NOW)).base_offset
    for i in range(40):
        _put(log, f"f{i % 4}", "z" * 30)

    cleaner.clean_log_now(log, now_ms=NOW)
    bases = {b[0]: b for b in _batches(log)}
    assert aborted_at not in bases  # aborted data removed
    assert abort_marker in bases  # its marker stays while the pass saw its data
    assert committed in bases and commit_marker in bases
    assert (committed, b"c", b"committed") in _records(log)

    _filler(log)
    cleaner.clean_log_now(log, now_ms=NOW + 10, force=True)
    bases = {b[0]: b for b in _batches(log)}
    assert bases[abort_marker][3] & DELETE_HORIZON_BIT  # no data left: horizon stamped
    assert commit_marker in bases  # the committed data is still there: marker kept

    _filler(log)
    cleaner.clean_log_now(log, now_ms=NOW + 5000, force=True)
    bases = {b[0]: b for b in _batches(log)}
    assert abort_marker not in bases  # removed after delete.retention.ms
    assert commit_marker in bases
    state = PartitionProducerState.load(log)
    assert state.last_stable_offset(log.high_watermark) == log.high_watermark  # no phantom open txn


def test_idempotent_producer_state_survives_cleaning_and_restart(tmp_path: Path) -> None:
    manager, log, cleaner = _log(tmp_path)
    pid, epoch = 42, 3
    seq = 0
    for i in range(30):
        batch = encode_batch(
            [(b"same-key", f"v{i}".encode(), NOW, ()), (b"same-key", f"w{i}".encode(), NOW, ())],
            producer_id=pid, producer_epoch=epoch, base_sequence=seq,
        )  # fmt: skip
        log.append(batch)
        seq += 2
    for i in range(40):  # other data so the producer's last batch is in a cleanable segment
        _put(log, f"o{i % 3}", "x" * 40)
    cleaner.clean_log_now(log)
    producer_batches = [(h, d) for h, d in log.iter_batches() if h.producer_id == pid]
    assert len(producer_batches) == 1  # only the producer's last batch is left...
    last = producer_batches[0][0]
    assert last.base_sequence == seq - 2 and last.last_offset_delta == 1  # ...with its sequences
    manager.close()

    reopened = LogManager(tmp_path / "data", LogConfig())
    log2 = reopened.get("t", 0)
    assert log2 is not None
    state = PartitionProducerState.load(log2)
    follow = encode_batch(
        [(b"same-key", b"next", NOW, ())], producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )
    from kafkakit.broker.log import read_batch_header

    assert state.check([read_batch_header(follow)]) is None  # in sequence after the restart
    gap = encode_batch([(b"k", b"v", NOW, ())], producer_id=pid, producer_epoch=epoch, base_sequence=seq + 5)
    with pytest.raises(ProducerStateError):
        state.check([read_batch_header(gap)])
    result = log2.append(follow)
    assert result.base_offset == log2.log_end_offset - 1


def test_producer_whose_records_are_all_superseded_keeps_an_empty_batch(tmp_path: Path) -> None:
    _, log, cleaner = _log(tmp_path)
    pid = 9
    log.append(encode_batch([(b"k", b"old", NOW, ())], producer_id=pid, producer_epoch=0, base_sequence=0))
    for i in range(40):
        _put(log, "k" if i == 0 else f"o{i % 3}", "x" * 40)
    cleaner.clean_log_now(log)
    mine = [
        (h.base_offset, h.record_count, h.base_sequence)
        for h, _ in log.iter_batches()
        if h.producer_id == pid
    ]
    assert mine == [(0, 0, 0)]  # empty, but the sequence state is there
    assert all(r[1] != b"k" or r[2] != b"old" for r in _records(log))


def test_compressed_batches_are_rewritten_with_their_codec(tmp_path: Path) -> None:
    _, log, cleaner = _log(tmp_path)
    for i in range(20):
        records = [(f"k{j}".encode(), f"v{i}-{j}".encode(), NOW, ()) for j in range(5)]
        log.append(encode_batch(records, compression=Compression.GZIP))
    for i in range(20):
        _put(log, f"x{i % 2}", "y" * 50)
    cleaner.clean_log_now(log)
    values = {k: v for _, k, v in _records(log) if k is not None and k.startswith(b"k")}
    assert values == {f"k{j}".encode(): f"v19-{j}".encode() for j in range(5)}
    assert all(h.attributes & 0x07 == Compression.GZIP for h, _ in log.iter_batches() if h.record_count == 5)


def test_min_compaction_lag_and_max_compaction_lag(tmp_path: Path) -> None:
    _, log, cleaner = _log(tmp_path, **{"min.compaction.lag.ms": str(DAY)})
    for i in range(60):
        _put(log, f"k{i % 3}", f"v{i}")
    assert cleaner.clean_log_now(log, now_ms=NOW) is None  # everything is younger than the lag
    assert cleaner.clean_log_now(log, now_ms=NOW + 2 * DAY) is not None

    _, log2, cleaner2 = _log(
        tmp_path / "b", **{"min.cleanable.dirty.ratio": "0.99", "max.compaction.lag.ms": "1000"}
    )
    for i in range(60):
        _put(log2, f"k{i % 3}", f"v{i}", ts=NOW - 10_000)
    assert cleaner2.clean_log_now(log2, now_ms=NOW) is not None  # overdue: cleaned despite the ratio


def test_io_budget_is_respected(tmp_path: Path) -> None:
    manager, log, _ = _log(tmp_path, **{"segment.bytes": "20000"})
    for i in range(400):
        _put(log, f"k{i % 20}", "v" * 200)
    rate = 200_000
    cleaner = LogCleaner(manager, CleanerConfig(io_max_bytes_per_second=rate))
    started = time.monotonic()
    result = cleaner.clean_log_now(log)
    elapsed = time.monotonic() - started
    assert result is not None
    io_bytes = result.stats.bytes_read
    assert io_bytes > 50_000
    assert elapsed >= io_bytes / rate * 0.9
    assert result.stats.throttled_seconds > 0


def test_throttler_sleeps_the_difference() -> None:
    clock = [0.0]
    slept: list[float] = []
    throttler = Throttler(1000.0, clock=lambda: clock[0], sleep=slept.append)
    throttler.maybe_throttle(500)
    assert slept == [0.5]
    clock[0] = 2.0
    throttler.maybe_throttle(500)  # 1000 bytes in 2 s is under budget
    assert slept == [0.5]


def test_record_set_without_key_is_refused_for_a_compacted_topic() -> None:
    keyed = encode_batch([(b"k", b"v", NOW, ())])
    check_record_set_keys(keyed, "t", 0)  # fine
    mixed = keyed + encode_batch([(b"k", b"v", NOW, ()), (None, b"v", NOW, ())], compression=Compression.LZ4)
    with pytest.raises(InvalidBatchError) as info:
        check_record_set_keys(mixed, "t", 0)
    assert info.value.code == 87
    assert str(info.value) == "Compacted topic cannot accept message without key in topic partition t-0."
    check_record_set_keys(b"garbage" * 20, "t", 0)  # malformed: left for the append to refuse


def test_compact_only_log_ignores_retention_ms(tmp_path: Path) -> None:
    _, log, _ = _log(tmp_path, **{"retention.ms": "1000"})
    for i in range(60):
        _put(log, f"k{i}", "v", ts=NOW - DAY)
    assert log.enforce_retention(NOW) == 0
    manager = LogManager(tmp_path / "other", LogConfig())
    both = manager.create(
        "t",
        0,
        LogConfig.from_topic_configs({**COMPACT, "cleanup.policy": "compact,delete", "retention.ms": "1000"}),
    )
    for i in range(60):
        _put(both, f"k{i}", "v", ts=NOW - DAY)
    assert both.enforce_retention(NOW) > 0


def test_cleaner_configs_use_kafka_names_and_defaults() -> None:
    config = LogConfig()
    topic = config.to_topic_configs()
    assert topic["delete.retention.ms"] == "86400000"
    assert topic["min.cleanable.dirty.ratio"] == "0.5"
    assert topic["min.compaction.lag.ms"] == "0"
    assert topic["max.compaction.lag.ms"] == str(2**63 - 1)
    custom = LogConfig.from_topic_configs(
        {"min.cleanable.dirty.ratio": "0.25", "cleanup.policy": "compact,delete"}
    )
    assert custom.min_cleanable_dirty_ratio == 0.25 and custom.compact and custom.delete


def test_large_keys_values_and_timestamps_survive_the_rewrite(tmp_path: Path) -> None:
    _, log, cleaner = _log(tmp_path, **{"segment.bytes": "30000", "delete.retention.ms": "5"})
    big_key = b"K" * 300
    records = [
        (big_key, b"x" * 20000, NOW - 5_000_000, ()),
        (b"small", b"y", NOW + 7, (("h", b"header-value"),)),
        (big_key, None, NOW - 1, ()),  # a tombstone: the batch is rebuilt with a delete horizon
        (b"other", b"z" * 70, NOW, ()),
    ]
    log.append(encode_batch(records))  # type: ignore[arg-type]
    for i in range(30):
        _put(log, f"f{i % 2}", "w" * 5000)
    cleaner.clean_log_now(log, now_ms=NOW)
    kept = []
    for header, data in log.iter_batches():
        for record in decode_batch(data.read_bytes(), 0, header, "t", 0):
            if record.offset < 4:
                kept.append((record.offset, record.key, record.value, record.timestamp, list(record.headers)))
    assert [k[:3] for k in kept] == [(1, b"small", b"y"), (2, big_key, None), (3, b"other", b"z" * 70)]
    assert [k[3] for k in kept] == [NOW + 7, NOW - 1, NOW]  # timestamps unchanged by the new base
    assert kept[0][4] == [("h", b"header-value")]


def test_swap_skipped_when_retention_removed_a_segment_meanwhile(tmp_path: Path) -> None:
    from kafkakit.broker.log.cleaner import LogSnapshot, clean_snapshot

    _, log, cleaner = _log(tmp_path)
    for i in range(120):
        _put(log, f"k{i % 7}", f"v{i}")
    result = clean_snapshot(LogSnapshot.of(log, None), NOW)  # the worker-thread part
    assert result is not None
    cleaned_files = [new.log_path for _, new in result.groups]
    assert all(path.exists() for path in cleaned_files)
    log.delete_records_before(log.segments[1].base_offset)  # the event loop deleted a segment meanwhile
    before = _records(log)
    assert cleaner.swap_in(result) is False
    assert _records(log) == before  # nothing swapped
    assert not any(path.exists() for path in cleaned_files)  # and the cleaned copies are gone
    assert cleaner.checkpoint("t", 0) is None


async def test_background_cleaner_keeps_the_event_loop_responsive(tmp_path: Path) -> None:
    manager, log, _ = _log(tmp_path, **{"segment.bytes": "50000"})
    for i in range(3000):
        _put(log, f"k{i % 50}", "v" * 100)
    cleaner = LogCleaner(manager, CleanerConfig(backoff_ms=20, io_max_bytes_per_second=2_000_000))
    task = asyncio.create_task(cleaner.run())
    loop = asyncio.get_running_loop()
    worst_lag = 0.0
    appended = 0
    started = loop.time()
    while cleaner.passes == 0 and loop.time() - started < 20:
        before = loop.time()
        await asyncio.sleep(0.005)
        worst_lag = max(worst_lag, loop.time() - before - 0.005)
        _put(log, f"k{appended % 50}", f"during-{appended}")  # appends go on during the pass
        appended += 1
        assert log.read(0, 1 << 16).length > 0  # and reads
    await cleaner.stop()
    await task
    assert cleaner.passes >= 1 and appended > 20
    assert worst_lag < 0.25, f"event loop blocked for {worst_lag:.3f}s"
    latest = {k: v for _, k, v in _records(log)}
    assert latest[f"k{(appended - 1) % 50}".encode()] == f"during-{appended - 1}".encode()
    offsets = [o for o, _, _ in _records(log)]
    assert offsets == sorted(set(offsets))


async def test_a_log_the_cleaner_cannot_read_is_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, log, cleaner = _log(tmp_path)
    for i in range(120):
        _put(log, f"k{i % 7}", f"v{i}")
    first = log.segments[0]
    second_batch = next(position for position, _ in first.headers() if position > 0)
    with open(first.log_path, "r+b") as f:  # a broken magic byte in the second batch
        f.seek(second_batch + 16)
        f.write(b"\x09")
    before = [p.name for p in log.directory.iterdir()]
    assert await cleaner.clean_once() is None
    assert "uncleanable until restart" in caplog.text
    assert sorted(p.name for p in log.directory.iterdir()) == sorted(before)  # no .cleaned leftovers
    caplog.clear()
    assert cleaner.passes == 0 and await cleaner.clean_once() is None
    assert "uncleanable" not in caplog.text  # not retried until restart
    assert cleaner.checkpoint("t", 0) is None


def test_compacted_log_rolls_by_max_compaction_lag(tmp_path: Path) -> None:
    _, log, _ = _log(tmp_path, **{"segment.bytes": str(1 << 20), "max.compaction.lag.ms": "1000"})
    _put(log, "a", "1", ts=NOW)
    _put(log, "a", "2", ts=NOW + 500)
    assert len(log.segments) == 1
    _put(log, "a", "3", ts=NOW + 2000)  # older than max.compaction.lag.ms: the active segment rolls
    assert len(log.segments) == 2
    manager = LogManager(tmp_path / "plain", LogConfig())
    plain = manager.create("t", 0, LogConfig.from_topic_configs({"max.compaction.lag.ms": "1000"}))
    for ts in (NOW, NOW + 2000):
        _put(plain, "a", "x", ts=ts)
    assert len(plain.segments) == 1  # a delete-only log rolls by segment.ms alone
