"""The partition log's follower operations (cluster mode): append_as_follower, truncate_to,
truncate_fully_and_start_at, and replicated high watermarks in the LogManager."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from kafkakit.broker.log import InvalidBatchError, LogConfig, LogManager, PartitionLog, read_batch_header
from kafkakit.broker.log.checkpoint import REPLICATION_OFFSET_CHECKPOINT_FILE, write_offsets_checkpoint
from kafkakit.broker.log.leader_epochs import EpochEntry
from test_log import NOW, make_batch, read_all


def _leader(tmp_path: Path, **config: object) -> PartitionLog:
    return PartitionLog.open(tmp_path / "leader" / "t-0", LogConfig(**config), now_ms=NOW)  # type: ignore[arg-type]


def _follower(tmp_path: Path, name: str = "follower", **config: object) -> PartitionLog:
    return PartitionLog.open(
        tmp_path / name / "t-0", LogConfig(**config), now_ms=NOW, single_replica=False  # type: ignore[arg-type]
    )


def _fill(log: PartitionLog, epochs: list[int], per_epoch: int = 3) -> None:
    """Batches of two records under each leader epoch in turn."""
    for epoch in epochs:
        log.become_leader(epoch)
        for i in range(per_epoch):
            log.append(make_batch([f"e{epoch}-{i}-a".encode(), f"e{epoch}-{i}-b".encode()]), now_ms=NOW)


def _all_bytes(log: PartitionLog) -> bytes:
    out = b""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        out += data
        pos = 0
        while pos < len(data):
            header = read_batch_header(data, pos)
            offset = header.last_offset + 1
            pos += header.size
    return out


def _replicate(follower: PartitionLog, data: bytes, high_watermark: int) -> None:
    """Append the leader's batches one Fetch answer per batch (a follower with small fetch sizes)."""
    pos = 0
    while pos < len(data):
        size = read_batch_header(data, pos).size
        follower.append_as_follower(data[pos : pos + size], high_watermark=high_watermark)
        pos += size


def _with_offset(batch: bytes, base_offset: int, epoch: int = 0) -> bytes:
    return struct.pack(">q", base_offset) + batch[8:12] + struct.pack(">i", epoch) + batch[16:]


def test_append_as_follower_keeps_the_leaders_offsets_and_epochs(tmp_path: Path) -> None:
    leader = _leader(tmp_path)
    _fill(leader, [0, 2, 5])
    follower = _follower(tmp_path)
    data = _all_bytes(leader)
    result = follower.append_as_follower(data, high_watermark=10)
    assert result is not None and (result.base_offset, result.last_offset) == (0, 17)
    assert _all_bytes(follower) == data  # byte for byte, offsets and partitionLeaderEpoch included
    assert follower.leader_epochs.entries == leader.leader_epochs.entries == (
        EpochEntry(0, 0), EpochEntry(2, 6), EpochEntry(5, 12),
    )  # fmt: skip
    assert (follower.log_end_offset, follower.high_watermark) == (18, 10)
    assert follower.append_as_follower(b"", high_watermark=50) is None
    assert follower.high_watermark == 18  # never beyond the log end
    # Appends do not move a replicated log's HW by themselves.
    leader.become_leader(6)
    leader.append(make_batch([b"more"]), now_ms=NOW)
    follower.append_as_follower(_all_bytes(leader)[len(data):])
    assert follower.high_watermark == 18 and follower.log_end_offset == 19
    assert follower.leader_epochs.entries[-1] == EpochEntry(6, 18)


def test_a_partial_last_batch_is_left_for_the_next_fetch(tmp_path: Path) -> None:
    leader = _leader(tmp_path)
    _fill(leader, [0], per_epoch=2)
    data = _all_bytes(leader)
    first_size = read_batch_header(data, 0).size
    follower = _follower(tmp_path)
    follower.append_as_follower(data[: first_size + 30])
    assert follower.log_end_offset == 2
    follower.append_as_follower(data[first_size:])
    assert _all_bytes(follower) == data


def test_bad_fetched_batches_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    follower = _follower(tmp_path)
    follower.append_as_follower(_with_offset(make_batch([b"a", b"b"]), 0))
    corrupt = bytearray(_with_offset(make_batch([b"c"]), 2))
    corrupt[-1] ^= 0xFF
    with pytest.raises(InvalidBatchError, match="CRC"):
        follower.append_as_follower(bytes(corrupt))
    with pytest.raises(InvalidBatchError, match="does not follow"):
        follower.append_as_follower(_with_offset(make_batch([b"c"]), 1))  # overlaps offset 1
    assert follower.log_end_offset == 2
    # A compacted leader's batches may skip offsets and hold fewer records than their span.
    gap = make_batch([b"x", b"y", b"z"])
    after_crc = bytearray(gap[21:])
    struct.pack_into(">i", after_crc, 36, 1)  # recordCount 1 of a 3-offset span
    compacted = gap[:17] + struct.pack(">I", crc32c(bytes(after_crc))) + bytes(after_crc)
    follower.append_as_follower(_with_offset(compacted, 7, epoch=3))
    assert follower.log_end_offset == 10
    assert follower.leader_epochs.entries[-1] == EpochEntry(3, 7)


def test_truncate_to_cuts_segments_indexes_epochs_and_the_hw(tmp_path: Path) -> None:
    config = {"segment_bytes": 200, "index_interval_bytes": 1}
    leader = _leader(tmp_path, **config)
    _fill(leader, [0, 1, 3], per_epoch=4)
    follower = _follower(tmp_path, **config)
    _replicate(follower, _all_bytes(leader), 22)
    assert len(follower.segments) > 3
    assert follower.truncate_to(11)  # inside the batch 10-11: the whole batch goes
    assert follower.log_end_offset == 10
    assert follower.high_watermark == 10
    assert follower.leader_epochs.entries == (EpochEntry(0, 0), EpochEntry(1, 8))
    assert [o for o, _ in read_all(follower)] == list(range(10))
    assert not follower.truncate_to(10) and not follower.truncate_to(99)
    # The follower carries on from the new end (the leader's data from 10 on).
    rest = leader.read(10, 1 << 20).read_bytes()
    follower.append_as_follower(rest)
    assert read_all(follower)[:12] == read_all(leader)[:12]
    assert follower.epoch_for_offset(10) == 1


@pytest.mark.parametrize("clean", [True, False])
def test_a_truncation_survives_a_reopen(tmp_path: Path, clean: bool) -> None:
    config = {"segment_bytes": 300, "index_interval_bytes": 1}
    leader = _leader(tmp_path, **config)
    _fill(leader, [0, 2], per_epoch=5)
    follower = _follower(tmp_path, **config)
    _replicate(follower, _all_bytes(leader), 20)
    follower.flush()
    follower.truncate_to(8)
    expected = read_all(follower)
    directory = follower.directory
    if clean:
        follower.close()
    else:
        crashed = tmp_path / "crashed" / "t-0"
        shutil.copytree(directory, crashed)  # no clean-shutdown marker: recovery runs
        directory = crashed
    reopened = PartitionLog.open(directory, LogConfig(**config), now_ms=NOW, high_watermark=20)  # type: ignore[arg-type]
    assert reopened.log_end_offset == 8
    assert read_all(reopened) == expected
    assert reopened.leader_epochs.entries == (EpochEntry(0, 0),)
    reopened.append(make_batch([b"next"]), now_ms=NOW)
    assert reopened.log_end_offset == 9


def test_truncate_fully_and_start_at_restarts_an_empty_log(tmp_path: Path) -> None:
    follower = _follower(tmp_path)
    follower.append_as_follower(_with_offset(make_batch([b"a", b"b", b"c"]), 0), high_watermark=3)
    follower.truncate_fully_and_start_at(40)
    assert (follower.log_start_offset, follower.log_end_offset, follower.high_watermark) == (40, 40, 40)
    assert follower.leader_epochs.entries == ()
    follower.append_as_follower(_with_offset(make_batch([b"d"]), 40, epoch=4))
    follower.close()
    reopened = PartitionLog.open(follower.directory, LogConfig(), now_ms=NOW, single_replica=False)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (40, 41)
    assert reopened.leader_epochs.entries == (EpochEntry(4, 40),)
    assert reopened.truncate_to(3)  # below the log start: empty again, starting there
    assert (reopened.log_start_offset, reopened.log_end_offset) == (3, 3)


def test_log_manager_opens_replicated_logs_at_the_checkpointed_hw(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig())
    log = manager.create("r", 0)
    for i in range(5):
        log.append(make_batch([f"v{i}".encode()]), now_ms=NOW)
    log.append(make_batch([b"uncommitted"]), now_ms=NOW)
    manager.close()
    # As a replicated partition's leader would have left it: HW 5, one record not committed.
    write_offsets_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE, {("r", 0): 5})
    reopened = LogManager(tmp_path, LogConfig())
    single = reopened.get("r", 0)
    assert single is not None and single.high_watermark == 6  # single replica: HW = LEO
    replicated = reopened.create("r", 0, single_replica=False)
    assert replicated is single and replicated.high_watermark == 5 and not replicated.single_replica
    replicated.append(make_batch([b"x"]), now_ms=NOW)
    assert replicated.high_watermark == 5
    fresh = reopened.create("r", 1, single_replica=False)
    assert (fresh.high_watermark, fresh.single_replica) == (0, False)
    assert reopened.delete_partition("r", 1) and not (tmp_path / "r-1").exists()
    assert not reopened.delete_partition("r", 1)
    reopened.close()
