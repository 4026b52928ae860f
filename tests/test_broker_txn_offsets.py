"""Durable transactional offsets, transaction version 2 (KIP-890), KIP-360 epoch recovery and
transaction-marker retries, over raw protocol frames.

The behaviour tests that take the ``broker`` fixture run against broker_min and Apache
Kafka alike: the expectations are Kafka 4.3.1's observed answers.  Crash tests SIGKILL a
broker_min subprocess; the on-disk format of ``__consumer_offsets`` is checked with Apache
Kafka's own reader (``tests/java/DumpOffsetsLog.java`` on the Kafka jars).
"""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kafkakit.broker import Broker
from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.coordinators.transactions import TxnState
from kafkakit.broker.coordinators.txn_records import TxnLogValue, encode_txn_key, encode_txn_value
from kafkakit.broker.log import LogConfig, LogManager, LogStorageError
from kafkakit.errors import KafkaConfigError
from kafkakit.records import (
    CONTROL_COMMIT,
    decode_batches,
    encode_batch,
    iter_batch_headers,
    read_control_type,
)
from kio.schema.errors import ErrorCode

from tests.brokers import BrokerMinProcess, RunningBroker, ensure_kafka_jars, missing_kafka_tools
from tests.raw_protocol import RawClient, req, sub

MS = datetime.timedelta(milliseconds=1)
READ_COMMITTED = 1
TXN_KEY, GROUP_KEY = 1, 0
DUMP_TOOL = Path(__file__).parent / "java" / "DumpOffsetsLog.java"
# Kafka writes markers after answering EndTxn; these answers mean "not yet, retry".
# A topic Kafka has just created may not have its leader yet either.
_RETRIABLE = (
    ErrorCode.concurrent_transactions,
    ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_topic_or_partition,
)


class Raw(RawClient):
    """A raw connection that waits longer: these tests restart brokers."""

    timeout = 30.0


def txn_batch(pid: int, epoch: int, seq: int, count: int = 2, tag: str = "v") -> bytes:
    now = time.time_ns() // 1_000_000
    records = [(None, f"{tag}-{seq + i}".encode(), now + i, ()) for i in range(count)]
    encoded: bytes = encode_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True
    )
    return encoded


class Txn:
    """Raw transactional calls for one topic (partition 0) and one group."""

    def __init__(self, client: Raw, topic: str, tid: str, group: str) -> None:
        self.c, self.topic, self.tid, self.group = client, topic, tid, group

    async def setup(self) -> None:
        """Create the topic and wait until both coordinators answer (Kafka loads them lazily)."""
        topic = sub(19, 5, "CreatableTopic", name=self.topic, num_partitions=1, replication_factor=1,
                    assignments=(), configs=())  # fmt: skip
        created = await self.c.call(req(19, 5, topics=(topic,), timeout=10_000 * MS, validate_only=False))
        assert created.topics[0].error_code in (ErrorCode.none, ErrorCode.topic_already_exists)
        for key, key_type in ((self.tid, TXN_KEY), (self.group, GROUP_KEY)):
            for _ in range(100):
                found = await self.c.call(req(10, 4, key_type=key_type, coordinator_keys=(key,)))
                if found.coordinators[0].error_code == ErrorCode.none:
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError(f"no coordinator for {key}")

    async def init(
        self, pid: int = -1, epoch: int = -1, version: int = 5, timeout_ms: int = 60_000
    ) -> tuple[ErrorCode, int, int]:
        async def once() -> Any:
            return await self.c.call(req(22, version, transactional_id=self.tid, transaction_timeout=timeout_ms * MS,
                                         producer_id=pid, producer_epoch=epoch))  # fmt: skip

        r = await _retrying(once, lambda r: r.error_code)
        return r.error_code, r.producer_id, r.producer_epoch

    async def produce(self, records: bytes, version: int = 12, retry: bool = True) -> tuple[ErrorCode, int]:
        async def once() -> Any:
            p = sub(0, version, "PartitionProduceData", index=0, records=records)
            t = sub(0, version, "TopicProduceData", name=self.topic, partition_data=(p,))
            r = await self.c.call(req(0, version, transactional_id=self.tid, acks=-1, timeout=5000 * MS,
                                      topic_data=(t,)))  # fmt: skip
            return r.responses[0].partition_responses[0]

        pr = await (_retrying(once, lambda pr: pr.error_code) if retry else once())
        return pr.error_code, pr.base_offset

    async def add_partition(self, pid: int, epoch: int) -> ErrorCode:
        async def once() -> Any:
            t = sub(24, 3, "AddPartitionsToTxnTopic", name=self.topic, partitions=(0,))
            r = await self.c.call(req(24, 3, v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=pid,
                                      v3_and_below_producer_epoch=epoch, v3_and_below_topics=(t,)))  # fmt: skip
            return r.results_by_topic_v3_and_below[0].results_by_partition[0]

        code: ErrorCode = (await _retrying(once, lambda p: p.partition_error_code)).partition_error_code
        return code

    async def add_offsets(self, pid: int, epoch: int) -> ErrorCode:
        r = await self.c.call(req(25, 3, transactional_id=self.tid, producer_id=pid, producer_epoch=epoch,
                                  group_id=self.group))  # fmt: skip
        code: ErrorCode = r.error_code
        return code

    async def end(
        self, pid: int, epoch: int, commit: bool, version: int = 5, retry: bool = True
    ) -> tuple[ErrorCode, int, int]:
        async def once() -> Any:
            return await self.c.call(req(26, version, transactional_id=self.tid, producer_id=pid,
                                         producer_epoch=epoch, committed=commit))  # fmt: skip

        if not retry:
            r = await once()
        else:
            r = await _retrying(once, lambda r: r.error_code)
            await self.settle()
        return r.error_code, getattr(r, "producer_id", -1), getattr(r, "producer_epoch", -1)

    async def settle(self) -> None:
        """Wait until the coordinator is done with the last transaction (Kafka writes markers later)."""
        for _ in range(100):
            listed = await self.c.call(
                req(66, 1, state_filters=(), producer_id_filters=(), duration_filter=-1)
            )
            states = {s.transactional_id: s.transaction_state for s in listed.transaction_states}
            if not states.get(self.tid, "").startswith("Prepare"):
                return
            await asyncio.sleep(0.05)

    async def commit_offset(self, pid: int, epoch: int, offset: int, version: int = 5) -> ErrorCode:
        async def once() -> Any:
            p = sub(28, version, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=offset,
                    committed_leader_epoch=-1, committed_metadata="m")  # fmt: skip
            t = sub(28, version, "TxnOffsetCommitRequestTopic", name=self.topic, partitions=(p,))
            r = await self.c.call(req(28, version, transactional_id=self.tid, group_id=self.group, producer_id=pid,
                                      producer_epoch=epoch, generation_id=-1, member_id="", group_instance_id=None,
                                      topics=(t,)))  # fmt: skip
            return r.topics[0].partitions[0]

        code: ErrorCode = (await _retrying(once, lambda p: p.error_code)).error_code
        return code

    async def fetch_offset(self) -> tuple[ErrorCode, int]:
        t = sub(9, 7, "OffsetFetchRequestTopic", name=self.topic, partition_indexes=(0,))
        r = await self.c.call(req(9, 7, group_id=self.group, topics=(t,), require_stable=True))
        p = r.topics[0].partitions[0]
        return p.error_code, p.committed_offset

    async def read_committed(self) -> tuple[list[bytes], list[tuple[int, int, bool]]]:
        """Committed data values, and every marker as (producer id, epoch, is commit)."""
        part = sub(1, 11, "FetchPartition", partition=0, current_leader_epoch=-1, fetch_offset=0,
                   last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)  # fmt: skip
        topic = sub(1, 11, "FetchTopic", topic=self.topic, partitions=(part,))
        r = await self.c.call(req(1, 11, replica_id=-1, max_wait=0 * MS, min_bytes=1, max_bytes=1 << 20,
                                  isolation_level=READ_COMMITTED, session_id=0, session_epoch=-1, topics=(topic,),
                                  forgotten_topics_data=(), rack_id=""))  # fmt: skip
        data = r.responses[0].partitions[0]
        raw = bytes(data.records or b"")
        aborted = {a.producer_id for a in data.aborted_transactions or ()}
        markers, kept = [], []
        for pos, header in iter_batch_headers(raw):
            batch = raw[pos : pos + header.batch_length + 12]
            if header.is_control:
                commit = read_control_type(batch, 0, header) == CONTROL_COMMIT
                markers.append((header.producer_id, header.producer_epoch, commit))
            elif not (header.is_transactional and header.producer_id in aborted):
                kept += [rec.value for rec in decode_batches(batch, self.topic, 0) if rec.value]
        return kept, markers


async def _retrying(call: Any, code_of: Any, attempts: int = 100) -> Any:
    for _ in range(attempts):
        answer = await call()
        if code_of(answer) not in _RETRIABLE:
            return answer
        await asyncio.sleep(0.05)
    return answer


@pytest.fixture
async def txn(broker: RunningBroker) -> AsyncIterator[Txn]:
    client = await Raw.connect(broker.bootstrap_servers)
    suffix = uuid.uuid4().hex[:8]
    t = Txn(client, f"txo-{suffix}", f"tid-{suffix}", f"grp-{suffix}")
    await t.setup()
    yield t
    client.close()


# -- ApiVersions features ---------------------------------------------------------------------


async def _api_versions(bootstrap: str, version: int) -> Any:
    client = await Raw.connect(bootstrap)
    try:
        return await client.call(req(18, version, client_software_name="t", client_software_version="1"))
    finally:
        client.close()


async def test_transaction_version_feature_is_advertised_as_kafka_does(broker: RunningBroker) -> None:
    v4 = await _api_versions(broker.bootstrap_servers, 4)
    supported = {f.name: (f.min_version, f.max_version) for f in v4.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in v4.finalized_features}
    assert supported["transaction.version"] == (0, 2)
    assert finalized["transaction.version"] == (2, 2)
    assert v4.finalized_features_epoch >= 0
    v3 = await _api_versions(broker.bootstrap_servers, 3)
    # v3 omits supported features whose minimum is 0, but lists the finalized level.
    assert "transaction.version" not in {f.name for f in v3.supported_features}
    assert {f.name: f.max_version_level for f in v3.finalized_features}["transaction.version"] == 2
    ranges = {k.api_key: (k.min_version, k.max_version) for k in v4.api_keys}
    assert ranges[0][1] >= 12 and ranges[26][1] >= 5 and ranges[28][1] >= 5


async def test_transaction_version_1_is_configurable(tmp_path: Path) -> None:
    async with Broker(tmp_path / "data", transaction_version=1) as broker:
        v4 = await _api_versions(broker.bootstrap_servers, 4)
        assert [(f.name, f.max_version_level) for f in v4.finalized_features] == [("transaction.version", 1)]
    with pytest.raises(KafkaConfigError, match="transaction_version"):
        BrokerConfig(transaction_version=3)


# -- transaction version 2 (KIP-890) ------------------------------------------------------------


async def test_tv2_produce_and_end_txn_bump_the_epoch(txn: Txn) -> None:
    code, pid, e = await txn.init()
    assert code == ErrorCode.none
    # Produce v12 adds the partition itself; v11 would not.
    assert (await txn.produce(txn_batch(pid, e, 0, tag="a")))[0] == ErrorCode.none
    assert await txn.end(pid, e, commit=True) == (ErrorCode.none, pid, e + 1)
    # A retry with the previous epoch succeeds; the other outcome or the new epoch is refused.
    assert await txn.end(pid, e, commit=True) == (ErrorCode.none, pid, e + 1)
    assert (await txn.end(pid, e, commit=False))[0] == ErrorCode.invalid_txn_state
    assert (await txn.end(pid, e + 1, commit=True))[0] == ErrorCode.invalid_txn_state
    # The markers carry the bumped epoch, so the old epoch is fenced everywhere.
    kept, markers = await txn.read_committed()
    assert kept == [b"a-0", b"a-1"] and markers == [(pid, e + 1, True)]
    assert (await txn.produce(txn_batch(pid, e, 2, tag="z")))[0] == ErrorCode.invalid_producer_epoch
    # A partition not in the transaction: TRANSACTION_ABORTABLE for Produce v11.
    assert (await txn.produce(txn_batch(pid, e + 1, 0, tag="q"), version=11))[
        0
    ] == ErrorCode.transaction_abortable
    # An abort without a transaction bumps the epoch too; a commit is refused.
    assert await txn.end(pid, e + 1, commit=False) == (ErrorCode.none, pid, e + 2)
    assert (await txn.end(pid, e + 2, commit=True))[0] == ErrorCode.invalid_txn_state
    assert await txn.end(pid, e + 2, commit=False) == (ErrorCode.none, pid, e + 3)


async def test_tv2_txn_offset_commit_adds_the_offsets_partition(txn: Txn) -> None:
    _, pid, e = await txn.init()
    assert await txn.commit_offset(pid, e, 7, version=4) == ErrorCode.transaction_abortable
    assert await txn.commit_offset(pid, e, 7, version=3) == ErrorCode.invalid_txn_state
    assert await txn.commit_offset(pid, e, 7, version=5) == ErrorCode.none
    assert await txn.fetch_offset() == (ErrorCode.unstable_offset_commit, -1)
    assert await txn.end(pid, e, commit=True) == (ErrorCode.none, pid, e + 1)
    assert await txn.fetch_offset() == (ErrorCode.none, 7)


async def test_tv1_requests_keep_tv1_semantics(txn: Txn) -> None:
    _, pid, e = await txn.init()
    assert await txn.add_partition(pid, e) == ErrorCode.none
    assert (await txn.produce(txn_batch(pid, e, 0, tag="b"), version=11))[0] == ErrorCode.none
    assert (await txn.end(pid, e, commit=True, version=4))[0] == ErrorCode.none
    assert (await txn.end(pid, e, commit=True, version=4))[0] == ErrorCode.none  # a retry
    kept, markers = await txn.read_committed()
    assert kept == [b"b-0", b"b-1"] and markers == [(pid, e, True)]  # no epoch bump
    # The next transaction may use transaction version 2 with the same epoch.
    assert (await txn.produce(txn_batch(pid, e, 2, tag="c")))[0] == ErrorCode.none
    assert await txn.end(pid, e, commit=True) == (ErrorCode.none, pid, e + 1)


# -- KIP-360 / KIP-588: a producer whose transaction timed out --------------------------------


async def test_a_timed_out_producer_recovers_its_epoch(txn: Txn, broker: RunningBroker) -> None:
    _, pid, e = await txn.init(timeout_ms=1000)
    assert await txn.add_partition(pid, e) == ErrorCode.none
    assert (await txn.produce(txn_batch(pid, e, 0, tag="t"), version=11))[0] == ErrorCode.none
    # broker_min checks every second, Kafka every 10 s (transaction.abort.timed.out.transaction.cleanup.interval.ms).
    deadline = time.monotonic() + 30
    while (await txn.produce(txn_batch(pid, e, 2, tag="t"), version=11))[0] == ErrorCode.none:
        assert time.monotonic() < deadline, "the transaction was not aborted"
        await asyncio.sleep(0.5)
    # What the fenced producer hears, request by request (Kafka 4.3.1's answers).
    assert (await txn.produce(txn_batch(pid, e, 4, tag="t"), version=11))[
        0
    ] == ErrorCode.invalid_producer_epoch
    assert await txn.add_partition(pid, e) == ErrorCode.producer_fenced
    assert (await txn.end(pid, e, commit=True, version=4))[0] == ErrorCode.producer_fenced
    assert await txn.commit_offset(pid, e, 1, version=3) == ErrorCode.invalid_producer_epoch
    # InitProducerId with the fenced (id, epoch): the epoch the abort moved to, not PRODUCER_FENCED.
    assert await txn.init(pid, e, version=4) == (ErrorCode.none, pid, e + 1)
    assert await txn.init(pid, e, version=3) == (ErrorCode.none, pid, e + 1)  # a retry
    assert await txn.init(pid, e + 1, version=4) == (ErrorCode.none, pid, e + 2)
    assert await txn.init(pid, e + 1, version=4) == (ErrorCode.none, pid, e + 2)  # a retry
    assert (await txn.init(pid, e, version=4))[0] == ErrorCode.producer_fenced
    # A new instance (no id presented) forgets the previous epoch.
    assert await txn.init() == (ErrorCode.none, pid, e + 3)
    assert (await txn.init(pid, e + 2, version=4))[0] == ErrorCode.producer_fenced
    kept, markers = await txn.read_committed()
    assert kept == [] and [m[2] for m in markers] == [False]


# -- durable transactional offsets: crashes ---------------------------------------------------


def _dump_offsets_log(segment: Path) -> str:
    reason = missing_kafka_tools()
    if reason is not None:
        pytest.skip(reason)
    lib = ensure_kafka_jars()
    result = subprocess.run(
        ["java", "-cp", f"{lib}/*", str(DUMP_TOOL), str(segment)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


async def _open_transaction_with_offsets(bootstrap: str, topic: str, tid: str, group: str) -> tuple[int, int]:
    client = await Raw.connect(bootstrap)
    t = Txn(client, topic, tid, group)
    await t.setup()
    _, pid, e = await t.init()
    assert await t.add_partition(pid, e) == ErrorCode.none
    assert (await t.produce(txn_batch(pid, e, 0, tag="o"), version=11))[0] == ErrorCode.none
    assert await t.add_offsets(pid, e) == ErrorCode.none
    assert await t.commit_offset(pid, e, 5, version=3) == ErrorCode.none
    assert await t.fetch_offset() == (ErrorCode.unstable_offset_commit, -1)
    client.close()
    return pid, e


async def test_open_transaction_with_offsets_survives_sigkill(broker_min_process: BrokerMinProcess) -> None:
    bootstrap = broker_min_process.bootstrap_servers
    pid, e = await _open_transaction_with_offsets(bootstrap, "src", "crash-tid", "crash-group")
    await asyncio.to_thread(broker_min_process.restart, crash=True)
    client = await Raw.connect(bootstrap)
    t = Txn(client, "src", "crash-tid", "crash-group")
    assert await t.fetch_offset() == (ErrorCode.unstable_offset_commit, -1)
    assert (await t.end(pid, e, commit=True, version=4))[0] == ErrorCode.none
    assert await t.fetch_offset() == (ErrorCode.none, 5)
    kept, _ = await t.read_committed()
    assert kept == [b"o-0", b"o-1"]
    client.close()
    await asyncio.to_thread(broker_min_process.restart, crash=True)
    client = await Raw.connect(bootstrap)
    assert await Txn(client, "src", "crash-tid", "crash-group").fetch_offset() == (ErrorCode.none, 5)
    client.close()
    await asyncio.to_thread(broker_min_process.stop)
    # Kafka's own reader sees the offset commit in the producer's transactional batch, then its COMMIT marker.
    dump = _dump_offsets_log(
        broker_min_process.data_dir / "__consumer_offsets-0" / "00000000000000000000.log"
    )
    lines = [
        line for line in dump.splitlines() if f"producerId={pid} " in line or "group='crash-group'" in line
    ]
    assert "batch baseOffset=" in lines[0] and "isTransactional=true isControl=false" in lines[0], dump
    assert "OffsetCommitKey(group='crash-group', topic='src', partition=0)" in lines[1], dump
    assert "OffsetCommitValue(offset=5, leaderEpoch=-1, metadata='m'" in lines[1], dump
    assert f"producerEpoch={e} isTransactional=true isControl=true" in lines[2], dump
    assert "type=COMMIT" in dump.split(lines[2])[1].splitlines()[1], dump


def _log_prepare_commit(
    data_dir: Path, tid: str, pid: int, epoch: int, partitions: tuple[tuple[str, int], ...]
) -> None:
    """Append what the coordinator logs before writing markers, as a crash right after it leaves the log."""
    logs = LogManager(data_dir, LogConfig())
    try:
        txn_log = logs.get("__transaction_state", 0)
        assert txn_log is not None
        now = time.time_ns() // 1_000_000
        value = TxnLogValue(pid, epoch, 60_000, int(TxnState.PREPARE_COMMIT), partitions, now, now - 1000)
        txn_log.append(encode_batch([(encode_txn_key(tid), encode_txn_value(value), now, ())]))
    finally:
        logs.close()


async def test_prepare_commit_logged_before_sigkill_completes_with_its_offsets(
    broker_min_process: BrokerMinProcess,
) -> None:
    bootstrap = broker_min_process.bootstrap_servers
    pid, e = await _open_transaction_with_offsets(bootstrap, "src", "prep-tid", "prep-group")
    await asyncio.to_thread(broker_min_process.kill)
    _log_prepare_commit(
        broker_min_process.data_dir, "prep-tid", pid, e, (("__consumer_offsets", 0), ("src", 0))
    )
    await asyncio.to_thread(broker_min_process.start)
    client = await Raw.connect(bootstrap)
    t = Txn(client, "src", "prep-tid", "prep-group")
    assert await t.fetch_offset() == (ErrorCode.none, 5)
    kept, markers = await t.read_committed()
    assert kept == [b"o-0", b"o-1"] and markers == [(pid, e, True)]
    # The EndTxn the crash cut short, retried by the producer, is a harmless repeat.
    assert (await t.end(pid, e, commit=True, version=4))[0] == ErrorCode.none
    client.close()


# -- markers that fail are retried ------------------------------------------------------------


async def test_a_failed_marker_is_retried_and_holds_the_transaction(tmp_path: Path) -> None:
    async with Broker(tmp_path / "data") as broker:
        broker.state.create_topic("src", 1)
        client = await Raw.connect(broker.bootstrap_servers)
        t = Txn(client, "src", "retry-tid", "retry-group")
        _, pid, e = await t.init()
        assert (await t.produce(txn_batch(pid, e, 0, tag="r")))[0] == ErrorCode.none
        assert await t.commit_offset(pid, e, 3) == ErrorCode.none
        # The group's offsets partition refuses the marker three times (the data partition takes it).
        offsets_log = broker.state.partition_log("__consumer_offsets", 0)
        assert offsets_log is not None
        failures = 3
        real_append = offsets_log.append

        def flaky_append(data: Any, **kwargs: Any) -> Any:
            nonlocal failures
            if failures > 0:
                failures -= 1
                raise LogStorageError("injected: disk full")
            return real_append(data, **kwargs)

        offsets_log.append = flaky_append  # type: ignore[method-assign]
        # EndTxn is answered once PrepareCommit is logged, with the new epoch (TV2).
        assert await t.end(pid, e, commit=True, retry=False) == (ErrorCode.none, pid, e + 1)
        meta = broker.state.transactions.transactions["retry-tid"]
        assert meta.state == TxnState.PREPARE_COMMIT and failures < 3
        # Until that marker is written the offsets stay pending and a retried EndTxn waits.
        assert await t.fetch_offset() == (ErrorCode.unstable_offset_commit, -1)
        assert (await t.end(pid, e, commit=True, retry=False))[0] == ErrorCode.concurrent_transactions
        refused = await t.produce(txn_batch(pid, e + 1, 0, tag="n"), retry=False)
        assert refused[0] == ErrorCode.not_enough_replicas
        for _ in range(100):
            if meta.state == TxnState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.05)
        assert meta.state == TxnState.COMPLETE_COMMIT and failures == 0
        assert await t.fetch_offset() == (ErrorCode.none, 3)
        kept, markers = await t.read_committed()
        assert kept == [b"r-0", b"r-1"] and markers == [(pid, e + 1, True)]
        client.close()


# -- transaction version 2: epoch overflow, and its durability -----------------------------------


async def test_tv2_epoch_overflow_rolls_the_producer_id_over_across_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    exhausted = 2**15 - 2  # Kafka never hands out 32767: the coordinator keeps it to fence with
    async with Broker(data_dir) as first:
        first.state.create_topic("src", 1)
        client = await Raw.connect(first.bootstrap_servers)
        t = Txn(client, "src", "overflow-tid", "overflow-group")
        _, pid, _ = await t.init()
        first.state.transactions.transactions["overflow-tid"].producer_epoch = exhausted
        assert (await t.produce(txn_batch(pid, exhausted, 0, tag="x")))[0] == ErrorCode.none
        code, new_pid, new_epoch = await t.end(pid, exhausted, commit=True)
        assert code == ErrorCode.none and new_pid != pid and new_epoch == 0
        kept, markers = await t.read_committed()
        assert kept == [b"x-0", b"x-1"] and markers == [(pid, exhausted + 1, True)]
        assert await t.end(pid, exhausted, commit=True) == (ErrorCode.none, new_pid, 0)  # a retry
        # The next transaction overflows while its marker cannot be written: PrepareCommit is
        # logged (TransactionLogValue v1, with the next producer id) and the broker stops.
        first.state.transactions.transactions["overflow-tid"].producer_epoch = exhausted
        assert (await t.produce(txn_batch(new_pid, exhausted, 0, tag="y")))[0] == ErrorCode.none
        src = first.state.partition_log("src", 0)
        assert src is not None

        def broken(data: Any, **kwargs: Any) -> Any:
            raise LogStorageError("injected: disk gone")

        src.append = broken  # type: ignore[method-assign]
        code, third_pid, third_epoch = await t.end(new_pid, exhausted, commit=True, retry=False)
        assert code == ErrorCode.none and third_pid not in (pid, new_pid) and third_epoch == 0
        assert first.state.transactions.transactions["overflow-tid"].state == TxnState.PREPARE_COMMIT
        client.close()
    async with Broker(data_dir) as second:
        meta = second.state.transactions.transactions["overflow-tid"]
        assert (meta.state, meta.producer_id, meta.producer_epoch) == (TxnState.COMPLETE_COMMIT, third_pid, 0)
        assert meta.previous_producer_id == new_pid
        client = await Raw.connect(second.bootstrap_servers)
        t = Txn(client, "src", "overflow-tid", "overflow-group")
        kept, markers = await t.read_committed()
        assert kept == [b"x-0", b"x-1", b"y-0", b"y-1"]
        assert markers == [(pid, exhausted + 1, True), (new_pid, exhausted + 1, True)]
        assert await t.end(new_pid, exhausted, commit=True) == (ErrorCode.none, third_pid, 0)  # a retry
        client.close()
