"""kafkakit.broker.raft's log and quorum-state file, on a real disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafkakit.broker.raft import ElectionState, QuorumStateStore, RaftLog
from kafkakit.broker.raft.log import LEADER_CHANGE_KEY, decode_entries
from kafkakit.records import decode_raw_records, iter_batch_headers, verify_crc


def _values(log: RaftLog) -> list[tuple[int, int, bytes]]:
    return [(e.offset, e.epoch, e.value) for e in log.entries(0)]


def test_the_log_is_kafka_record_batches_with_the_epoch_in_each_batch(tmp_path: Path) -> None:
    log = RaftLog(tmp_path)
    log.append_values(1, [b""], control=True)
    log.append_values(1, [b"a", b"b"])
    log.append_values(2, [b"c"])
    log.close()
    segment = tmp_path / "__cluster_metadata-0" / "00000000000000000000.log"
    data = segment.read_bytes()
    headers = list(iter_batch_headers(data))
    assert [(h.base_offset, h.partition_leader_epoch, h.record_count) for _, h in headers] == [
        (0, 1, 1),
        (1, 1, 2),
        (3, 2, 1),
    ]
    assert all(verify_crc(data, pos, h) for pos, h in headers)
    pos, control = headers[0]
    assert control.is_control and decode_raw_records(data, pos, control)[0][2] == LEADER_CHANGE_KEY
    assert not headers[1][1].is_control


def test_a_torn_tail_is_dropped_on_open_and_the_epoch_cache_rebuilt(tmp_path: Path) -> None:
    log = RaftLog(tmp_path)
    log.append_values(1, [b"a", b"b"])
    log.append_values(3, [b"c"])
    log.close()
    segment = tmp_path / "__cluster_metadata-0" / "00000000000000000000.log"
    size = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x01\x00partial")  # a crash mid-append
    log = RaftLog(tmp_path)
    assert _values(log) == [(0, 1, b"a"), (1, 1, b"b"), (2, 3, b"c")]
    assert segment.stat().st_size == size
    assert (log.last_epoch, log.end_offset) == (3, 3)
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)  # no epoch 2 here: epoch 1 ends where 3 starts
    assert log.end_offset_for_epoch(0) == (-1, 0)
    log.close()


def test_truncation_inside_a_batch_keeps_its_head_on_disk(tmp_path: Path) -> None:
    log = RaftLog(tmp_path)
    log.append_values(1, [b"a", b"b", b"c", b"d"])
    log.append_values(2, [b"e"])
    log.truncate_to(2)
    assert _values(log) == [(0, 1, b"a"), (1, 1, b"b")]
    log.append_values(4, [b"x"])
    log.close()
    reopened = RaftLog(tmp_path)
    assert _values(reopened) == [(0, 1, b"a"), (1, 1, b"b"), (2, 4, b"x")]
    assert reopened.epoch_start_offset(2) is None and reopened.epoch_start_offset(4) == 2
    reopened.close()


def test_diverging_epoch_follows_kafkas_end_offset_for_epoch(tmp_path: Path) -> None:
    leader = RaftLog(tmp_path / "leader")
    leader.append_values(1, [b"a", b"b"])
    leader.append_values(3, [b"c", b"d"])
    # A follower that has [a, b] of epoch 1 then an entry of epoch 2 that the leader never had.
    assert leader.diverging(3, 2) == (1, 2)
    assert leader.diverging(2, 1) is None  # a prefix
    assert leader.diverging(4, 3) is None
    assert leader.diverging(5, 3) == (3, 4)  # ahead of the leader in its own epoch
    assert leader.diverging(0, 0) is None
    with pytest.raises(ValueError):
        leader.append_values(2, [b"older epoch"])
    leader.close()


def test_decode_entries_stops_at_a_corrupt_batch(tmp_path: Path) -> None:
    log = RaftLog(tmp_path)
    log.append_values(1, [b"a"])
    log.append_values(2, [b"b"])
    data = bytearray(log.read(0, 1 << 20))
    entries, size = decode_entries(bytes(data))
    assert [(e.offset, e.value) for e in entries] == [(0, b"a"), (1, b"b")] and size == len(data)
    data[-1] ^= 0xFF  # flip a byte of the second batch: its CRC no longer matches
    entries, size = decode_entries(bytes(data))
    assert [(e.offset, e.value) for e in entries] == [(0, b"a")] and size < len(data)
    log.close()


def test_quorum_state_is_kafkas_json_and_replaced_atomically(tmp_path: Path) -> None:
    store = QuorumStateStore(tmp_path, [3, 1, 2])
    assert store.read() == ElectionState()
    store.write(ElectionState(epoch=7, leader_id=-1, voted_id=2))
    data = json.loads((tmp_path / "quorum-state").read_text())
    assert data == {
        "clusterId": "",
        "leaderId": -1,
        "leaderEpoch": 7,
        "votedId": 2,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}],
        "data_version": 0,
    }
    assert not (tmp_path / "quorum-state.tmp").exists()
    assert QuorumStateStore(tmp_path, [1, 2, 3]).read() == ElectionState(7, -1, 2)
