"""The partition log on a full disk: a failed write is a clear error and leaves no corrupt log.

A failed append (possibly after part of it was written) raises LogStorageError
(KAFKA_STORAGE_ERROR) and leaves the files as they were: the log reopens clean with every
earlier record, and appends work again once there is space.  Rolling a segment, writing the
indexes, the epoch cache and the flush checkpoints fail the same way, without leaving a log
that can no longer be appended to.  The disk is full for real (tests/disk_faults.py): a
filled tmpfs where this machine may mount one, else a file size limit (RLIMIT_FSIZE).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kafkakit.broker.log import LogConfig, LogStorageError, PartitionLog, read_batch_header
from kafkakit.broker.log.errors import KAFKA_STORAGE_ERROR
from test_log import NOW, fill, make_batch, read_all

from tests import disk_faults

needs_tmpfs = pytest.mark.skipif(not disk_faults.tmpfs_available(), reason="cannot mount a tmpfs here")


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name != disk_faults.FILLER}


def _segment_bytes(log: PartitionLog) -> bytes:
    return b"".join(s.log_path.read_bytes() for s in log.segments)


def test_an_append_cut_short_by_the_file_size_limit_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig(), now_ms=NOW)
    values = fill(log, 5)
    before, segment_file = _segment_bytes(log), log.segments[-1].log_path
    big = make_batch([b"x" * 2000])
    with disk_faults.file_size_limit(len(before) + 100), pytest.raises(LogStorageError) as failed:
        log.append(big)  # 100 bytes fit: a short write, then EFBIG
    assert failed.value.code == KAFKA_STORAGE_ERROR and "File too large" in str(failed.value)
    assert segment_file.read_bytes() == before  # the partial batch was cut off again
    assert log.log_end_offset == 15 and [v for _, v in read_all(log)] == values
    assert log.append(big).base_offset == 15  # room again: the same offset is assigned
    # A crash now (no close): recovery finds every batch whole.
    reopened = PartitionLog.open(directory, LogConfig(), now_ms=NOW)
    assert [v for _, v in read_all(reopened)] == [*values, b"x" * 2000]
    assert reopened.segments[-1].truncated_bytes == 0


@needs_tmpfs
def test_a_full_disk_fails_appends_cleanly_and_they_work_again_with_space(tmp_path: Path) -> None:
    mount = tmp_path / "disk"
    with disk_faults.tmpfs(mount, "256k"):
        directory = mount / "t-0"
        log = PartitionLog.open(directory, LogConfig(segment_bytes=64 * 1024), now_ms=NOW)
        values = fill(log, 40, size=300)  # ~37 KiB in one segment
        disk_faults.fill(mount)
        before = _files(directory)
        for _ in range(3):
            with pytest.raises(LogStorageError) as failed:
                log.append(make_batch([b"y" * 6000]))  # needs new pages
            assert "No space left on device" in str(failed.value)
        assert _files(directory) == before  # nothing partial anywhere
        assert [v for _, v in read_all(log)] == values
        disk_faults.free(mount)
        assert log.append(make_batch([b"y" * 6000])).base_offset == len(values)
        log.close()
        reopened = PartitionLog.open(directory, LogConfig(segment_bytes=64 * 1024), now_ms=NOW)
        assert [v for _, v in read_all(reopened)] == [*values, b"y" * 6000]
        reopened.close()


@needs_tmpfs
def test_a_roll_on_a_full_disk_keeps_the_active_segment_writable(tmp_path: Path) -> None:
    mount = tmp_path / "disk"
    with disk_faults.tmpfs(mount, "256k"):
        directory = mount / "t-0"
        config = LogConfig(segment_bytes=8000, index_interval_bytes=100)
        log = PartitionLog.open(directory, config, now_ms=NOW)
        values = fill(log, 6, size=400)  # ~7.4 KB: the next batch rolls; index entries pending
        assert len(log.segments) == 1
        disk_faults.fill(mount)
        with pytest.raises(LogStorageError):
            log.append(make_batch([b"z" * 5000]))
        assert len(log.segments) == 1 and log.segments[-1].writable
        assert sorted(p.name for p in directory.glob("0*")) == [
            "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
        ]  # fmt: skip
        assert os.path.getsize(log.segments[-1].index_path) % 8 == 0  # no half index entry
        disk_faults.free(mount)
        assert log.append(make_batch([b"z" * 5000])).base_offset == len(values)
        assert len(log.segments) == 2
        log.close()
        reopened = PartitionLog.open(directory, config, now_ms=NOW)
        assert [v for _, v in read_all(reopened)] == [*values, b"z" * 5000]
        reopened.close()


@needs_tmpfs
def test_a_failed_flush_or_epoch_checkpoint_is_not_a_failed_append(tmp_path: Path) -> None:
    mount = tmp_path / "disk"
    with disk_faults.tmpfs(mount, "256k"):
        directory = mount / "t-0"
        log = PartitionLog.open(directory, LogConfig(flush_messages=1), now_ms=NOW)
        log.append(make_batch([b"a" * 100]))
        recovery_point = log.recovery_point
        assert recovery_point == 1
        disk_faults.fill(mount)
        # The batch fits in the segment's last page; the checkpoint's new file does not.
        result = log.append(make_batch([b"b" * 100]))
        assert result.base_offset == 1 and log.recovery_point == recovery_point
        log.become_leader(3)  # the epoch checkpoint cannot be written: kept in memory
        assert log.leader_epochs.latest_epoch == 3 and log.leader_epochs.dirty
        disk_faults.free(mount)
        log.flush()  # writes the epoch cache before it moves the recovery point
        assert log.recovery_point == 2 and not log.leader_epochs.dirty
        assert (directory / "leader-epoch-checkpoint").read_text().splitlines()[-1] == "3 2"
        log.append(make_batch([b"c" * 100]))
        reopened = PartitionLog.open(directory, LogConfig(), now_ms=NOW)  # a crash: no close
        assert reopened.leader_epochs.latest_epoch == 3
        assert [v for _, v in read_all(reopened)] == [b"a" * 100, b"b" * 100, b"c" * 100]


@needs_tmpfs
def test_a_follower_append_on_a_full_disk_fails_whole(tmp_path: Path) -> None:
    leader = PartitionLog.open(tmp_path / "leader" / "t-0", LogConfig(), now_ms=NOW)
    fill(leader, 30, size=500)
    data = leader.read(0, 1 << 20).read_bytes()
    mount = tmp_path / "disk"
    with disk_faults.tmpfs(mount, "256k"):
        follower = PartitionLog.open(mount / "t-0", LogConfig(), now_ms=NOW, single_replica=False)
        cut = _first_batches(data, 5)
        follower.append_as_follower(data[:cut])
        disk_faults.fill(mount)
        with pytest.raises(LogStorageError):
            follower.append_as_follower(data[cut:], high_watermark=90)
        assert (follower.log_end_offset, _segment_bytes(follower)) == (15, data[:cut])
        disk_faults.free(mount)
        follower.append_as_follower(data[cut:], high_watermark=90)
        assert _segment_bytes(follower) == data and follower.high_watermark == 90


def _first_batches(data: bytes, count: int) -> int:
    """Byte length of the first ``count`` batches of ``data``."""
    pos = 0
    for _ in range(count):
        pos += read_batch_header(data, pos).size
    return pos


@needs_tmpfs
def test_a_follower_truncation_on_a_full_disk_completes(tmp_path: Path) -> None:
    mount = tmp_path / "disk"
    with disk_faults.tmpfs(mount, "256k"):
        directory = mount / "t-0"
        log = PartitionLog.open(directory, LogConfig(), now_ms=NOW, single_replica=False)
        fill(log, 10, size=50)
        log.become_leader(1)
        fill(log, 2, size=50)  # epoch 1 from offset 30
        log.flush()
        log.update_high_watermark(log.log_end_offset)
        assert log.recovery_point == 36
        disk_faults.fill(mount)
        # The cut frees no page; rewriting the checkpoints needs one.
        assert log.truncate_to(30)
        assert (log.log_end_offset, log.high_watermark, log.leader_epochs.latest_epoch) == (30, 30, 0)
        assert not (directory / "recovery-point-offset-checkpoint").exists()  # re-verify all after a crash
        disk_faults.free(mount)
        reopened = PartitionLog.open(directory, LogConfig(), now_ms=NOW, single_replica=False)  # a crash
        assert reopened.log_end_offset == 30 and reopened.leader_epochs.latest_epoch == 0
        assert len(read_all(reopened)) == 30
