"""broker_min's leader epochs (leader-epoch-checkpoint, OffsetForLeaderEpoch) and high watermark.

The protocol tests run on both brokers (the ``broker`` fixture) and compare
the answers for the same inputs; the file and restart tests run on broker_min's
log directly or on a BrokerMinProcess killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kafkakit import Admin, NewTopic, Producer
from kafkakit.broker.log import LogConfig, LogManager, PartitionLog, read_batch_header
from kafkakit.broker.log.cleaner_task import LogCleaner
from kafkakit.broker.log.leader_epochs import LEADER_EPOCH_CHECKPOINT_FILE, EpochEntry, LeaderEpochCache
from kafkakit.records import encode_batch
from kio.schema.errors import ErrorCode
from test_log import NOW, make_batch

from tests.brokers import BrokerMinProcess, KafkaServer
from tests.raw_protocol import RawClient, req, sub

OFFSET_FOR_LEADER_EPOCH = 23
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3


# ---- the cache on its own ---------------------------------------------------------------------


def test_end_offsets_follow_kafkas_rules(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)
    assert cache.end_offset_for(0, 10) == (-1, -1)  # nothing known yet
    cache.assign(2, 5)
    cache.assign(4, 20)
    cache.assign(7, 30)
    assert cache.end_offset_for(7, 42) == (7, 42)  # the current epoch ends at the log end
    assert cache.end_offset_for(4, 42) == (4, 30)
    assert cache.end_offset_for(5, 42) == (4, 30)  # largest epoch <= 5 is 4, ended where 7 began
    assert cache.end_offset_for(3, 42) == (2, 20)
    assert cache.end_offset_for(1, 42) == (1, 5)  # older than every entry: the first start
    assert cache.end_offset_for(8, 42) == (-1, -1)  # newer than every entry
    assert cache.end_offset_for(-1, 42) == (-1, -1)
    assert cache.epoch_for_offset(4) == -1
    assert cache.epoch_for_offset(25) == 4


def test_assign_and_truncation_keep_entries_monotonic(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    cache = LeaderEpochCache(path)
    assert cache.assign(0, 0)
    assert not cache.assign(0, 10)  # same epoch, later offset: nothing new
    cache.assign(3, 10)
    cache.assign(5, 20)
    assert path.read_text() == "0\n3\n0 0\n3 10\n5 20\n"  # Kafka's format: version, count, "epoch start"
    cache.assign(4, 15)  # a lower epoch (a new leader after a truncation) drops the later entries
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(3, 10), EpochEntry(4, 15))
    assert cache.truncate_from_end(15)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(3, 10))
    assert path.read_text() == "0\n2\n0 0\n3 10\n"
    assert cache.truncate_from_start(12)  # the start moved into epoch 3
    assert cache.entries == (EpochEntry(3, 12),)
    loaded = LeaderEpochCache.load(path)
    assert loaded is not None and loaded.entries == (EpochEntry(0, 0), EpochEntry(3, 10))  # start: unwritten
    path.write_text("0\n2\n3 10\n1 20\n")  # not monotonic: rejected, the log rebuilds it
    assert LeaderEpochCache.load(path) is None


# ---- the partition log -----------------------------------------------------------------------


def _stored_epochs(directory: Path) -> list[tuple[int, int]]:
    """(base offset, partitionLeaderEpoch) of every batch in the segment files."""
    out = []
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            header = read_batch_header(data, pos)
            out.append((header.base_offset, header.partition_leader_epoch))
            pos += header.size
    return out


def test_appends_are_stamped_with_the_leader_epoch(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig(), now_ms=NOW)
    assert (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n1\n0 0\n"  # epoch 0 from creation
    assert struct.unpack_from(">i", make_batch([b"a"]), 12) == (-1,)  # the producer sends -1
    log.append(make_batch([b"a", b"b"]), now_ms=NOW)
    log.become_leader(3)
    log.append(make_batch([b"c"]), now_ms=NOW)
    log.append(make_batch([b"d"]), now_ms=NOW)
    assert log.leader_epochs.entries == (EpochEntry(0, 0), EpochEntry(3, 2))
    assert log.end_offset_for_epoch(0) == (0, 2)
    assert log.end_offset_for_epoch(3) == (3, 4)
    log.close()
    assert _stored_epochs(directory) == [(0, 0), (2, 3), (3, 3)]
    reopened = PartitionLog.open(directory, LogConfig(), now_ms=NOW)
    assert reopened.leader_epoch == 3
    assert reopened.leader_epochs.entries == (EpochEntry(0, 0), EpochEntry(3, 2))
    reopened.close()


def test_recovery_cuts_the_epochs_of_a_torn_tail(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig(), now_ms=NOW)
    log.append(make_batch([b"a", b"b"]), now_ms=NOW)
    log.flush()
    log.become_leader(1)
    log.append(make_batch([b"c"]), now_ms=NOW)  # epoch 1 starts at 2 ... and is torn by the crash
    segment = next(directory.glob("*.log"))
    size = segment.stat().st_size
    # A crash: no close; the last batch is cut in half.
    with open(segment, "r+b") as f:
        f.truncate(size - 10)
    del log
    recovered = PartitionLog.open(directory, LogConfig(), now_ms=NOW)
    assert recovered.log_end_offset == 2
    assert recovered.leader_epochs.entries == (EpochEntry(0, 0),)
    assert (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n1\n0 0\n"
    assert recovered.leader_epoch == 1  # still this node's epoch: the next append starts it again
    recovered.append(make_batch([b"c2"]), now_ms=NOW)
    assert recovered.leader_epochs.entries == (EpochEntry(0, 0), EpochEntry(1, 2))
    assert recovered.high_watermark == recovered.log_end_offset == 3
    recovered.close()


def test_a_missing_checkpoint_is_rebuilt_from_the_batches(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig(segment_bytes=1024), now_ms=NOW)
    for i in range(5):
        log.append(make_batch([f"v{i}".encode() * 100]), now_ms=NOW)
        if i == 2:
            log.become_leader(2)
    log.close()
    (directory / LEADER_EPOCH_CHECKPOINT_FILE).unlink()
    reopened = PartitionLog.open(directory, LogConfig(segment_bytes=1024), now_ms=NOW)
    assert reopened.leader_epochs.entries == (EpochEntry(0, 0), EpochEntry(2, 3))
    assert (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n2\n0 0\n2 3\n"
    reopened.delete_records_before(4)  # the start moves into epoch 2
    assert reopened.leader_epochs.entries == (EpochEntry(2, 4),)
    assert reopened.end_offset_for_epoch(0) == (0, 4)  # older than the first entry: where it starts
    reopened.close()
    assert (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n1\n2 4\n"


def test_high_watermark_is_kept_apart_from_the_log_end(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig(), now_ms=NOW, single_replica=False, high_watermark=0)
    log.append(make_batch([b"a", b"b", b"c"]), now_ms=NOW)
    assert (log.high_watermark, log.log_end_offset) == (0, 3)  # replicated: nothing committed yet
    assert log.read(0, 1 << 20, max_offset=log.high_watermark).length == 0
    assert log.update_high_watermark(99) == 3  # clamped to the log end
    assert log.read(0, 1 << 20, max_offset=log.high_watermark).length > 0
    log.close()
    single = PartitionLog.open(directory, LogConfig(), now_ms=NOW, high_watermark=1)
    assert single.high_watermark == 3  # a single replica commits everything it has
    single.close()


def test_compaction_keeps_the_epochs(tmp_path: Path) -> None:
    """Cleaning rewrites segments but keeps offsets and partitionLeaderEpoch: the cache is untouched."""
    manager = LogManager(tmp_path / "data", LogConfig())
    config = LogConfig.from_topic_configs(
        {"cleanup.policy": "compact", "segment.bytes": "1000", "min.cleanable.dirty.ratio": "0.01"}
    )
    log = manager.create("t", 0, config)
    for i in range(60):
        if i == 30:
            log.become_leader(4)
        log.append(encode_batch([(f"k{i % 5}".encode(), f"v{i}".encode(), NOW, ())]))
    before = _stored_epochs(log.directory)
    assert LogCleaner(manager).clean_log_now(log) is not None
    after = _stored_epochs(log.directory)
    assert len(after) < len(before) and set(after) <= set(before)  # fewer batches, same (offset, epoch)
    assert log.leader_epochs.entries == (EpochEntry(0, 0), EpochEntry(4, 30))
    assert log.end_offset_for_epoch(0) == (0, 30)
    manager.close()
    reopened = LogManager(tmp_path / "data", LogConfig()).get("t", 0)
    assert reopened is not None and reopened.leader_epochs.entries == (EpochEntry(0, 0), EpochEntry(4, 30))
    reopened.close()


# ---- over the wire, both brokers -------------------------------------------------------------


async def _setup(bootstrap: str, topic: str, count: int) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    async with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        futures = [await producer.send(topic, f"v{i}".encode(), partition=0) for i in range(count)]
        await asyncio.gather(*futures)


async def _epoch_ends(
    bootstrap: str, topic: str, queries: list[tuple[int, int, int]], version: int = 4
) -> list[tuple[int, int, int]]:
    """(error, leader epoch, end offset) for each (partition, leader_epoch, current_leader_epoch)."""
    client = await RawClient.connect(bootstrap)
    try:
        parts = tuple(
            sub(OFFSET_FOR_LEADER_EPOCH, version, "OffsetForLeaderPartition", partition=p, leader_epoch=e,
                current_leader_epoch=c)
            for p, e, c in queries
        )  # fmt: skip
        topics = (
            sub(OFFSET_FOR_LEADER_EPOCH, version, "OffsetForLeaderTopic", topic=topic, partitions=parts),
        )
        response = await client.call(req(OFFSET_FOR_LEADER_EPOCH, version, replica_id=-1, topics=topics))
    finally:
        client.close()
    (result,) = response.topics
    return [(int(p.error_code), int(p.leader_epoch), int(p.end_offset)) for p in result.partitions]


@pytest.mark.parametrize("version", [2, 3, 4])
async def test_offset_for_leader_epoch_answers_as_kafka_does(broker: Any, topic: str, version: int) -> None:
    bootstrap = broker.bootstrap_servers
    await _setup(bootstrap, topic, 7)
    answers = await _epoch_ends(
        bootstrap, topic,
        [(0, 0, -1), (0, 0, 0), (0, 5, -1), (0, -1, -1), (0, 0, 3), (9, 0, -1)],
        version,
    )  # fmt: skip
    assert answers == [
        (0, 0, 7),  # the current epoch ends at the log end
        (0, 0, 7),  # the right current epoch passes the check
        (0, -1, -1),  # an epoch the leader never had: undefined, no error
        (0, -1, -1),
        (ErrorCode.unknown_leader_epoch.value, -1, -1),  # the client knows a newer leader
        (ErrorCode.unknown_topic_or_partition.value, -1, -1),
    ]
    unknown = await _epoch_ends(bootstrap, f"{topic}-missing", [(0, 0, -1)], version)
    assert unknown == [(ErrorCode.unknown_topic_or_partition.value, -1, -1)]


async def test_fetch_and_list_offsets_check_and_report_the_epoch(broker: Any, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    await _setup(bootstrap, topic, 4)
    client = await RawClient.connect(bootstrap)
    try:
        answers = []
        for ts, current in ((-1, -1), (-2, 0), (-1, 2)):  # one partition per request: Kafka refuses repeats
            part = sub(LIST_OFFSETS, 7, "ListOffsetsPartition", partition_index=0, timestamp=ts,
                       current_leader_epoch=current)  # fmt: skip
            listed = await client.call(
                req(LIST_OFFSETS, 7, replica_id=-1, isolation_level=0,
                    topics=(sub(LIST_OFFSETS, 7, "ListOffsetsTopic", name=topic, partitions=(part,)),))
            )  # fmt: skip
            (p,) = listed.topics[0].partitions
            answers.append((int(p.error_code), int(p.offset), int(p.leader_epoch)))
        assert answers == [(0, 4, 0), (0, 0, 0), (ErrorCode.unknown_leader_epoch.value, -1, -1)]
        hw = []
        for current in (0, 1):
            fetch_part = sub(FETCH, 12, "FetchPartition", partition=0, current_leader_epoch=current,
                             fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                             partition_max_bytes=1 << 20)  # fmt: skip
            fetched = await client.call(
                req(FETCH, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                    session_id=0, session_epoch=-1,
                    topics=(sub(FETCH, 12, "FetchTopic", topic=topic, partitions=(fetch_part,)),),
                    forgotten_topics_data=(), rack_id="")
            )  # fmt: skip
            (p,) = fetched.responses[0].partitions
            hw.append((int(p.error_code), int(p.high_watermark), bool(p.records)))
        assert hw == [(0, 4, True), (ErrorCode.unknown_leader_epoch.value, -1, False)]
    finally:
        client.close()


# ---- a broker_min process: restarts and crashes -----------------------------------------------


async def _fetch_high_watermark(bootstrap: str, topic: str) -> tuple[int, int, int]:
    """(error, high watermark, last stable offset) of partition 0 by a v12 Fetch at offset 0."""
    client = await RawClient.connect(bootstrap)
    try:
        part = sub(FETCH, 12, "FetchPartition", partition=0, current_leader_epoch=-1, fetch_offset=0,
                   last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)  # fmt: skip
        fetched = await client.call(
            req(FETCH, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=1,
                session_id=0, session_epoch=-1,
                topics=(sub(FETCH, 12, "FetchTopic", topic=topic, partitions=(part,)),),
                forgotten_topics_data=(), rack_id="")
        )  # fmt: skip
    finally:
        client.close()
    (p,) = fetched.responses[0].partitions
    return int(p.error_code), int(p.high_watermark), int(p.last_stable_offset)


async def test_epochs_and_high_watermark_survive_sigkill_and_restart(
    broker_min_process: BrokerMinProcess,
) -> None:
    bootstrap = broker_min_process.bootstrap_servers
    await _setup(bootstrap, "epochs", 100)
    directory = Path(broker_min_process.data_dir) / "epochs-0"
    assert (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n1\n0 0\n"
    assert await _fetch_high_watermark(bootstrap, "epochs") == (0, 100, 100)
    broker_min_process.kill()
    broker_min_process.start()
    assert await _fetch_high_watermark(bootstrap, "epochs") == (0, 100, 100)  # HW = LEO after recovery
    assert await _epoch_ends(bootstrap, "epochs", [(0, 0, 0)]) == [(0, 0, 100)]
    assert {epoch for _, epoch in _stored_epochs(directory)} == {0}
    broker_min_process.stop()
    checkpoint = (Path(broker_min_process.data_dir) / "replication-offset-checkpoint").read_text()
    assert "epochs 0 100\n" in checkpoint and checkpoint.startswith("0\n")
    # A later leader epoch in the checkpoint (as a leader change will leave it) is what every API
    # then reports: Metadata, OffsetForLeaderEpoch, and fencing of clients with the old epoch.
    (directory / LEADER_EPOCH_CHECKPOINT_FILE).write_text("0\n2\n0 0\n1 100\n")
    broker_min_process.start()
    await _setup_more(bootstrap, "epochs", 5)
    assert await _epoch_ends(bootstrap, "epochs", [(0, 0, -1), (0, 1, 1), (0, 1, 0)]) == [
        (0, 0, 100),
        (0, 1, 105),
        (ErrorCode.fenced_leader_epoch.value, -1, -1),
    ]
    async with Admin(bootstrap_servers=bootstrap) as admin:
        (description,) = await admin.describe_topics(["epochs"])
    assert description.partitions[0].leader_epoch == 1
    assert _stored_epochs(directory)[-1][1] == 1


async def _setup_more(bootstrap: str, topic: str, count: int) -> None:
    async with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        futures = [await producer.send(topic, f"w{i}".encode(), partition=0) for i in range(count)]
        await asyncio.gather(*futures)


# ---- a second leader epoch: Kafka after a restart, broker_min with the same epoch history ------


class _RestartableKafka(KafkaServer):
    """A KafkaServer that restarts on its data: a single KRaft node's controlled shutdown leaves its
    partitions leaderless and the restart elects it again, each step bumping the leader epoch."""

    def restart(self) -> None:
        assert self._proc is not None and self.lib_dir is not None
        self._proc.terminate()
        self._proc.wait(timeout=30)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self._java_command("kafka.Kafka", str(self.config_path)),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.work_dir,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self._is_ready():
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError("Kafka did not come back")


async def _leader_epoch_of(bootstrap: str, topic: str) -> int:
    for _ in range(100):
        async with Admin(bootstrap_servers=bootstrap) as admin:
            (description,) = await admin.describe_topics([topic])
        partition = description.partitions[0]
        if partition.leader >= 0:
            return int(partition.leader_epoch)
        await asyncio.sleep(0.2)
    raise AssertionError(f"{topic} has no leader")


async def _answers_after_a_second_epoch(bootstrap: str, topic: str, epoch: int) -> dict[str, Any]:
    """What both brokers must answer once ``epoch`` started at offset 3 and 2 records followed."""
    await _setup_more(bootstrap, topic, 2)
    client = await RawClient.connect(bootstrap)
    try:
        listed = []
        for ts in (-2, -1):
            part = sub(LIST_OFFSETS, 7, "ListOffsetsPartition", partition_index=0, timestamp=ts,
                       current_leader_epoch=epoch)  # fmt: skip
            response = await client.call(
                req(LIST_OFFSETS, 7, replica_id=-1, isolation_level=0,
                    topics=(sub(LIST_OFFSETS, 7, "ListOffsetsTopic", name=topic, partitions=(part,)),))
            )  # fmt: skip
            (p,) = response.topics[0].partitions
            listed.append((int(p.error_code), int(p.offset), int(p.leader_epoch)))
    finally:
        client.close()
    queries = [
        (0, 0, -1),
        (0, epoch - 1, -1),
        (0, epoch, epoch),
        (0, epoch + 3, -1),
        (0, 0, 0),
        (0, 0, epoch + 1),
    ]
    return {"epoch_ends": await _epoch_ends(bootstrap, topic, queries), "list_offsets": listed}


def _expected(epoch: int) -> dict[str, Any]:
    return {
        "epoch_ends": [
            (0, 0, 3),  # epoch 0 ended where the new leader's epoch began
            (0, 0, 3),  # an epoch between them never led: the largest earlier one answers
            (0, epoch, 5),  # the current epoch ends at the log end
            (0, -1, -1),  # a future epoch
            (ErrorCode.fenced_leader_epoch.value, -1, -1),  # the client still believes in epoch 0
            (ErrorCode.unknown_leader_epoch.value, -1, -1),
        ],
        "list_offsets": [(0, 0, 0), (0, 5, epoch)],  # earliest: epoch 0's offset; latest: the current epoch
    }


async def test_a_second_leader_epoch_on_kafka_after_a_restart(tmp_path: Path) -> None:
    kafka = _RestartableKafka(tmp_path / "kafka")
    kafka.start()
    try:
        bootstrap = kafka.bootstrap_servers
        await _setup(bootstrap, "epochs", 3)
        kafka.restart()
        epoch = await _leader_epoch_of(bootstrap, "epochs")
        assert epoch > 1  # leaderless at the shutdown, elected at the restart
        assert await _answers_after_a_second_epoch(bootstrap, "epochs", epoch) == _expected(epoch)
        directory = tmp_path / "kafka" / "data" / "epochs-0"
        assert (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == f"0\n2\n0 0\n{epoch} 3\n"
        assert [e for _, e in _stored_epochs(directory)] == [0, epoch]
    finally:
        kafka.stop()


async def test_a_second_leader_epoch_on_broker_min_answers_as_kafka_does(
    broker_min_process: BrokerMinProcess,
) -> None:
    bootstrap = broker_min_process.bootstrap_servers
    await _setup(bootstrap, "epochs", 3)
    broker_min_process.stop()
    epoch = 2  # what Kafka's single node reaches after one restart
    directory = Path(broker_min_process.data_dir) / "epochs-0"
    (directory / LEADER_EPOCH_CHECKPOINT_FILE).write_text(f"0\n2\n0 0\n{epoch} 3\n")
    broker_min_process.start()
    assert await _leader_epoch_of(bootstrap, "epochs") == epoch
    assert await _answers_after_a_second_epoch(bootstrap, "epochs", epoch) == _expected(epoch)
    assert (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == f"0\n2\n0 0\n{epoch} 3\n"
    assert [e for _, e in _stored_epochs(directory)] == [0, epoch]
