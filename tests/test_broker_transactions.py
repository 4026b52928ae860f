"""broker_min's transaction coordinator over real sockets: raw-frame tests of every transactional
API and error code, the LSO and aborted-transaction index in read_committed Fetch and ListOffsets,
restarts and timeouts; then confluent-kafka's and kafka-python's transactional producers and
read_committed consumers end to end."""

from __future__ import annotations

import asyncio
import datetime
import struct
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kafkakit.broker import Broker
from kafkakit.broker.coordinators.transactions import TxnState
from kafkakit.broker.coordinators.txn_records import (
    TxnLogValue,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)
from kafkakit.broker.handlers import HANDLERS
from kafkakit.protocol import encode_request
from kafkakit.records import decode_batches, encode_batch, iter_batch_headers
from kio.schema.errors import ErrorCode

from tests.brokers import BrokerMinProcess
from tests.raw_protocol import RawClient, req, sub

MS = datetime.timedelta(milliseconds=1)
TOPIC = "txn"
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def txn_batch(pid: int, epoch: int, seq: int, count: int = 2, tag: str = "v") -> bytes:
    # Current timestamps: old ones would roll a segment at the next (current-time) marker.
    now = time.time_ns() // 1_000_000
    records = [(None, f"{tag}-{seq + i}".encode(), now + i, ()) for i in range(count)]
    encoded: bytes = encode_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True
    )
    return encoded


async def init_pid(client: RawClient, tid: str, timeout_ms: int = 60_000, version: int = 4) -> Any:
    return await client.call(
        req(
            22,
            version,
            transactional_id=tid,
            transaction_timeout=timeout_ms * MS,
            producer_id=-1,
            producer_epoch=-1,
        )  # fmt: skip
    )


async def add_partitions(
    client: RawClient, tid: str, pid: int, epoch: int, partitions: tuple[int, ...] = (0,), version: int = 3
) -> list[ErrorCode]:
    topic = sub(24, version, "AddPartitionsToTxnTopic", name=TOPIC, partitions=partitions)
    response = await client.call(
        req(
            24,
            version,
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(topic,),
        )  # fmt: skip
    )
    return [
        p.partition_error_code for t in response.results_by_topic_v3_and_below for p in t.results_by_partition
    ]


async def end_txn(
    client: RawClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 3
) -> ErrorCode:
    response = await client.call(
        req(26, version, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
    )
    code: ErrorCode = response.error_code
    return code


async def produce(client: RawClient, records: bytes, partition: int = 0, tid: str | None = None) -> Any:
    pdata = sub(0, 9, "PartitionProduceData", index=partition, records=records)
    tdata = sub(0, 9, "TopicProduceData", name=TOPIC, partition_data=(pdata,))
    response = await client.call(
        req(0, 9, transactional_id=tid, acks=-1, timeout=5000 * MS, topic_data=(tdata,))
    )
    return response.responses[0].partition_responses[0]


async def fetch(client: RawClient, isolation: int, partition: int = 0, offset: int = 0) -> Any:
    part = sub(1, 11, "FetchPartition", partition=partition, current_leader_epoch=-1, fetch_offset=offset,
               last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)  # fmt: skip
    topic = sub(1, 11, "FetchTopic", topic=TOPIC, partitions=(part,))
    request = req(1, 11, replica_id=-1, max_wait=0 * MS, min_bytes=1, max_bytes=1 << 20,
                  isolation_level=isolation, session_id=0, session_epoch=-1, topics=(topic,),
                  forgotten_topics_data=(), rack_id="")  # fmt: skip
    data = (await client.call(request)).responses[0].partitions[0]
    assert data.error_code == ErrorCode.none
    return data


def values(data: Any, partition: int = 0) -> list[bytes]:
    """Data record values of a fetched partition (control records excluded)."""
    raw = bytes(data.records or b"")
    control = {h.base_offset for _, h in iter_batch_headers(raw) if h.is_control}
    return [r.value for r in decode_batches(raw, TOPIC, partition) if r.offset not in control and r.value]


def committed_values(data: Any, partition: int = 0) -> list[bytes]:
    """What a read_committed client keeps: drops the aborted transactions' batches."""
    raw = bytes(data.records or b"")
    aborted = sorted((a.first_offset, a.producer_id) for a in data.aborted_transactions or ())
    keep: list[bytes] = []
    aborting: set[int] = set()
    for pos, header in iter_batch_headers(raw):
        while aborted and aborted[0][0] <= header.base_offset + header.last_offset_delta:
            aborting.add(aborted.pop(0)[1])
        if header.is_control:
            aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        batch_bytes = raw[pos : pos + header.batch_length + 12]
        keep += [r.value for r in decode_batches(batch_bytes, TOPIC, partition) if r.value]
    return keep


async def list_latest(client: RawClient, isolation: int, partition: int = 0) -> int:
    part = sub(2, 5, "ListOffsetsPartition", partition_index=partition, current_leader_epoch=-1, timestamp=-1)
    topic = sub(2, 5, "ListOffsetsTopic", name=TOPIC, partitions=(part,))
    response = await client.call(req(2, 5, replica_id=-1, isolation_level=isolation, topics=(topic,)))
    offset: int = response.topics[0].partitions[0].offset
    return offset


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with Broker(tmp_path / "data") as running:
        running.state.create_topic(TOPIC, 2)
        yield running


@pytest.fixture
async def client(broker: Broker) -> AsyncIterator[RawClient]:
    raw = await RawClient.connect(broker)
    yield raw
    raw.close()


# -- record formats ---------------------------------------------------------------------------


def test_transaction_log_records_round_trip() -> None:
    value = TxnLogValue(7, 3, 60_000, 1, (("a", 0), ("a", 2), ("b", 1)), 1_700_000_000_000, 1_699_999_999_000)
    assert decode_txn_value(encode_txn_value(value)) == value
    assert decode_txn_key(encode_txn_key("my-tx")) == "my-tx"
    # Kafka's layout: version 0, producer id, epoch, timeout, status, then the partitions array.
    assert encode_txn_value(value)[:17] == struct.pack(">hqhib", 0, 7, 3, 60_000, 1)
    # v1 (flexible) adds tagged fields; defaults are left out, as Kafka's serializer does.
    tagged = TxnLogValue(7, 3, 60_000, 2, (("a", 0),), 1_700_000_000_000, 1_699_999_999_000, 5, 9, 2)
    for v in (value, tagged):
        encoded = encode_txn_value(v, 1)
        assert encoded[:17] == struct.pack(">hqhib", 1, 7, 3, 60_000, v.status)
        assert decode_txn_value(encoded) == v
    assert encode_txn_value(value, 1).endswith(b"\x00")  # no tagged fields
    assert encode_txn_value(tagged, 1).endswith(b"\x03\x00\x08" + struct.pack(">q", 5) + b"\x01\x08"
                                                + struct.pack(">q", 9) + b"\x02\x02" + struct.pack(">h", 2))  # fmt: skip


def test_advertised_ranges() -> None:
    keys = (22, 24, 25, 26, 28, 61, 65, 66)
    ranges = {k: (HANDLERS[k].min_version, HANDLERS[k].max_version) for k in keys}
    # As Apache Kafka 4.x (AddPartitionsToTxn v4-5 is the broker-to-broker batch form).
    assert ranges == {
        22: (0, 5),
        24: (0, 5),
        25: (0, 4),
        26: (0, 5),
        28: (0, 5),
        61: (0, 0),
        65: (0, 0),
        66: (0, 1),
    }


# -- InitProducerId ---------------------------------------------------------------------------


async def test_init_producer_id_validates_and_bumps_the_epoch(client: RawClient) -> None:
    assert (await init_pid(client, "")).error_code == ErrorCode.invalid_request
    for timeout_ms in (0, -1, 15 * 60_000 + 1):
        assert (await init_pid(client, "t", timeout_ms)).error_code == ErrorCode.invalid_transaction_timeout
    first = await init_pid(client, "t")
    second = await init_pid(client, "t")
    assert first.error_code == second.error_code == ErrorCode.none
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
    other = await init_pid(client, "u")
    assert other.producer_id != first.producer_id and other.producer_epoch == 0


# -- a transaction, raw -----------------------------------------------------------------------


async def test_commit_and_abort_with_lso_and_aborted_index(client: RawClient) -> None:
    init = await init_pid(client, "t")
    pid, epoch = init.producer_id, init.producer_epoch
    assert await add_partitions(client, "t", pid, epoch) == [ErrorCode.none]
    assert (await produce(client, txn_batch(pid, epoch, 0, tag="c"), tid="t")).base_offset == 0
    open_data = await fetch(client, READ_COMMITTED)
    assert (open_data.high_watermark, open_data.last_stable_offset, values(open_data)) == (2, 0, [])
    assert values(await fetch(client, READ_UNCOMMITTED)) == [b"c-0", b"c-1"]
    assert await list_latest(client, READ_COMMITTED) == 0
    assert await list_latest(client, READ_UNCOMMITTED) == 2
    assert await end_txn(client, "t", pid, epoch, commit=True) == ErrorCode.none
    assert await end_txn(client, "t", pid, epoch, commit=True) == ErrorCode.none  # a retry
    assert await end_txn(client, "t", pid, epoch, commit=False) == ErrorCode.invalid_txn_state
    committed = await fetch(client, READ_COMMITTED)
    assert (committed.last_stable_offset, committed.high_watermark) == (3, 3)  # the marker is offset 2
    assert values(committed) == [b"c-0", b"c-1"] and not committed.aborted_transactions
    # An aborted transaction: listed in aborted_transactions, filtered by a read_committed reader.
    assert await add_partitions(client, "t", pid, epoch) == [ErrorCode.none]
    assert (await produce(client, txn_batch(pid, epoch, 2, tag="a"), tid="t")).base_offset == 3
    assert await end_txn(client, "t", pid, epoch, commit=False) == ErrorCode.none
    after = await fetch(client, READ_COMMITTED)
    assert [(a.producer_id, a.first_offset) for a in after.aborted_transactions] == [(pid, 3)]
    assert committed_values(after) == [b"c-0", b"c-1"]
    assert values(await fetch(client, READ_UNCOMMITTED)) == [b"c-0", b"c-1", b"a-2", b"a-3"]
    assert (await fetch(client, READ_COMMITTED, offset=6)).aborted_transactions == ()


async def test_produce_outside_the_transaction_is_refused(client: RawClient) -> None:
    init = await init_pid(client, "t")
    pid, epoch = init.producer_id, init.producer_epoch
    refused = await produce(client, txn_batch(pid, epoch, 0), tid="t")
    assert refused.error_code == ErrorCode.invalid_txn_state
    assert await add_partitions(client, "t", pid, epoch, (0,)) == [ErrorCode.none]
    assert (await produce(client, txn_batch(pid, epoch, 0), partition=1, tid="t")).error_code == (
        ErrorCode.invalid_txn_state
    )
    from kafkakit.records import build_control_batch

    forged = await produce(client, build_control_batch(pid, epoch, True, 0, 1_700_000_000_000))
    assert forged.error_code == ErrorCode.invalid_record


async def test_add_partitions_errors(client: RawClient) -> None:
    init = await init_pid(client, "t")
    pid, epoch = init.producer_id, init.producer_epoch
    assert await add_partitions(client, "t", pid, epoch, (0, 7)) == [
        ErrorCode.operation_not_attempted,
        ErrorCode.unknown_topic_or_partition,
    ]
    assert await add_partitions(client, "t", pid + 1, epoch) == [ErrorCode.invalid_producer_id_mapping]
    assert await add_partitions(client, "nope", pid, epoch) == [ErrorCode.invalid_producer_id_mapping]
    assert await add_partitions(client, "t", pid, epoch + 1) == [ErrorCode.producer_fenced]
    assert await add_partitions(client, "t", pid, epoch + 1, version=1) == [ErrorCode.invalid_producer_epoch]


async def test_end_txn_errors(client: RawClient) -> None:
    init = await init_pid(client, "t")
    pid, epoch = init.producer_id, init.producer_epoch
    assert await end_txn(client, "t", pid, epoch, commit=True) == ErrorCode.invalid_txn_state  # Empty
    assert await end_txn(client, "t", pid + 1, epoch, commit=True) == ErrorCode.invalid_producer_id_mapping
    assert await end_txn(client, "t", pid, epoch + 1, commit=True) == ErrorCode.producer_fenced
    assert await end_txn(client, "t", pid, epoch + 1, True, version=1) == ErrorCode.invalid_producer_epoch


async def test_a_new_instance_aborts_and_fences_the_old_one(client: RawClient) -> None:
    old = await init_pid(client, "t")
    pid, epoch = old.producer_id, old.producer_epoch
    await add_partitions(client, "t", pid, epoch, (0, 1))
    assert (await produce(client, txn_batch(pid, epoch, 0, tag="z"), tid="t")).error_code == ErrorCode.none
    new = await init_pid(client, "t")
    # Kafka fences (epoch + 1, the abort markers' epoch) and bumps again for the new instance.
    assert (new.producer_id, new.producer_epoch) == (pid, epoch + 2)
    # The zombie's transaction was aborted with markers, and everything it sends is refused.
    data = await fetch(client, READ_COMMITTED)
    assert data.last_stable_offset == data.high_watermark == 3 and committed_values(data) == []
    late = await produce(client, txn_batch(pid, epoch, 2, tag="z"), tid="t")
    assert late.error_code == ErrorCode.invalid_producer_epoch
    assert await end_txn(client, "t", pid, epoch, commit=True) == ErrorCode.producer_fenced
    assert await add_partitions(client, "t", pid, epoch) == [ErrorCode.producer_fenced]
    stale = await client.call(
        req(
            22,
            4,
            transactional_id="t",
            transaction_timeout=60_000 * MS,
            producer_id=pid,
            producer_epoch=epoch,
        )
    )
    assert stale.error_code == ErrorCode.producer_fenced
    # The new instance works, starting its sequences at 0.
    await add_partitions(client, "t", pid, epoch + 2)
    assert (
        await produce(client, txn_batch(pid, epoch + 2, 0, tag="n"), tid="t")
    ).error_code == ErrorCode.none
    assert await end_txn(client, "t", pid, epoch + 2, commit=True) == ErrorCode.none
    assert committed_values(await fetch(client, READ_COMMITTED)) == [b"n-0", b"n-1"]


async def test_a_transaction_past_its_timeout_is_aborted(broker: Broker, client: RawClient) -> None:
    init = await init_pid(client, "t", timeout_ms=500)
    pid, epoch = init.producer_id, init.producer_epoch
    await add_partitions(client, "t", pid, epoch)
    await produce(client, txn_batch(pid, epoch, 0), tid="t")
    for _ in range(40):
        await asyncio.sleep(0.1)
        if broker.state.transactions.transactions["t"].state == TxnState.COMPLETE_ABORT:
            break
    meta = broker.state.transactions.transactions["t"]
    assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
    assert await end_txn(client, "t", pid, epoch, commit=True) == ErrorCode.producer_fenced
    data = await fetch(client, READ_COMMITTED)
    assert data.last_stable_offset == 3 and committed_values(data) == []


# -- transactional offsets --------------------------------------------------------------------


async def txn_offset_commit(
    client: RawClient, tid: str, pid: int, epoch: int, group: str, offset: int
) -> Any:
    part = sub(28, 3, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=offset,
               committed_leader_epoch=-1, committed_metadata="m")  # fmt: skip
    topic = sub(28, 3, "TxnOffsetCommitRequestTopic", name=TOPIC, partitions=(part,))
    response = await client.call(
        req(
            28,
            3,
            transactional_id=tid,
            group_id=group,
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=(topic,),
        )  # fmt: skip
    )
    return response.topics[0].partitions[0].error_code


async def offset_fetch(client: RawClient, group: str, require_stable: bool) -> tuple[ErrorCode, int]:
    topic = sub(9, 7, "OffsetFetchRequestTopic", name=TOPIC, partition_indexes=(0,))
    response = await client.call(req(9, 7, group_id=group, topics=(topic,), require_stable=require_stable))
    p = response.topics[0].partitions[0]
    return p.error_code, p.committed_offset


async def test_transactional_offsets_apply_on_commit_only(client: RawClient) -> None:
    init = await init_pid(client, "t")
    pid, epoch = init.producer_id, init.producer_epoch
    assert await txn_offset_commit(client, "t", pid, epoch, "g", 5) == ErrorCode.invalid_txn_state
    add = await client.call(
        req(25, 3, transactional_id="t", producer_id=pid, producer_epoch=epoch, group_id="g")
    )
    assert add.error_code == ErrorCode.none
    assert await txn_offset_commit(client, "t", pid, epoch + 1, "g", 5) == ErrorCode.invalid_producer_epoch
    assert await txn_offset_commit(client, "t", pid, epoch, "g", 5) == ErrorCode.none
    assert await offset_fetch(client, "g", require_stable=True) == (ErrorCode.unstable_offset_commit, -1)
    assert await offset_fetch(client, "g", require_stable=False) == (ErrorCode.none, -1)
    assert await end_txn(client, "t", pid, epoch, commit=False) == ErrorCode.none
    assert await offset_fetch(client, "g", require_stable=True) == (ErrorCode.none, -1)
    await client.call(req(25, 3, transactional_id="t", producer_id=pid, producer_epoch=epoch, group_id="g"))
    assert await txn_offset_commit(client, "t", pid, epoch, "g", 9) == ErrorCode.none
    assert await end_txn(client, "t", pid, epoch, commit=True) == ErrorCode.none
    assert await offset_fetch(client, "g", require_stable=True) == (ErrorCode.none, 9)


# -- restarts ---------------------------------------------------------------------------------


async def test_transactions_survive_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with Broker(data_dir) as first:
        first.state.create_topic(TOPIC, 2)
        client = await RawClient.connect(first)
        init = await init_pid(client, "t")
        pid, epoch = init.producer_id, init.producer_epoch
        for tag, commit in (("c", True), ("a", False)):
            await add_partitions(client, "t", pid, epoch)
            await produce(client, txn_batch(pid, epoch, 0 if commit else 2, tag=tag), tid="t")
            assert await end_txn(client, "t", pid, epoch, commit) == ErrorCode.none
        await add_partitions(client, "t", pid, epoch)
        await produce(client, txn_batch(pid, epoch, 4, tag="o"), tid="t")  # left open
        client.close()
    async with Broker(data_dir) as second:
        client = await RawClient.connect(second)
        data = await fetch(client, READ_COMMITTED)
        assert (data.last_stable_offset, committed_values(data)) == (6, [b"c-0", b"c-1"])
        assert [(a.producer_id, a.first_offset) for a in data.aborted_transactions] == [(pid, 3)]
        assert await end_txn(client, "t", pid, epoch, commit=True) == ErrorCode.none
        data = await fetch(client, READ_COMMITTED)
        assert committed_values(data) == [b"c-0", b"c-1", b"o-4", b"o-5"]
        client.close()


async def test_a_transaction_in_prepare_commit_completes_after_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with Broker(data_dir) as first:
        first.state.create_topic(TOPIC, 2)
        client = await RawClient.connect(first)
        init = await init_pid(client, "t")
        pid, epoch = init.producer_id, init.producer_epoch
        await add_partitions(client, "t", pid, epoch, (0, 1))
        await produce(client, txn_batch(pid, epoch, 0, tag="p"), tid="t")
        # What a crash right after logging PrepareCommit leaves: the state logged, no markers.
        meta = first.state.transactions.transactions["t"]
        meta.state = TxnState.PREPARE_COMMIT
        first.state.transactions._persist(meta)
        client.close()
    async with Broker(data_dir) as second:
        assert second.state.transactions.transactions["t"].state == TxnState.COMPLETE_COMMIT
        client = await RawClient.connect(second)
        assert committed_values(await fetch(client, READ_COMMITTED)) == [b"p-0", b"p-1"]
        assert (await fetch(client, READ_COMMITTED, partition=1)).last_stable_offset == 1  # a marker alone
        client.close()


async def test_an_open_transaction_with_offsets_survives_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with Broker(data_dir) as first:
        first.state.create_topic(TOPIC, 2)
        client = await RawClient.connect(first)
        init = await init_pid(client, "t")
        pid, epoch = init.producer_id, init.producer_epoch
        await add_partitions(client, "t", pid, epoch)
        await produce(client, txn_batch(pid, epoch, 0), tid="t")
        add = await client.call(
            req(25, 3, transactional_id="t", producer_id=pid, producer_epoch=epoch, group_id="g")
        )
        assert add.error_code == ErrorCode.none
        assert await txn_offset_commit(client, "t", pid, epoch, "g", 5) == ErrorCode.none
        client.close()
    # The offsets were logged in the transaction: still pending after the restart, committed with it.
    async with Broker(data_dir) as second:
        meta = second.state.transactions.transactions["t"]
        assert (meta.state, meta.producer_epoch) == (TxnState.ONGOING, epoch)
        client = await RawClient.connect(second)
        assert await offset_fetch(client, "g", require_stable=True) == (ErrorCode.unstable_offset_commit, -1)
        assert await end_txn(client, "t", pid, epoch, commit=True) == ErrorCode.none
        assert await offset_fetch(client, "g", require_stable=True) == (ErrorCode.none, 5)
        assert committed_values(await fetch(client, READ_COMMITTED)) == [b"v-0", b"v-1"]
        client.close()
    async with Broker(data_dir) as third:  # and the commit itself is durable
        client = await RawClient.connect(third)
        assert await offset_fetch(client, "g", require_stable=True) == (ErrorCode.none, 5)
        client.close()


# -- third-party transactional clients ----------------------------------------------------------


def _confluent_transactions(bootstrap: str, topic: str, tid: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5})
    producer.init_transactions(30)
    for n, commit in ((0, True), (1, False), (2, True)):
        producer.begin_transaction()
        for i in range(50):
            producer.produce(topic, f"{'c' if commit else 'a'}{n}-{i}".encode(), partition=i % 2)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)


def _confluent_consume(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "isolation.level": isolation,
                         "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        # Until ``expected`` records arrived, then half a second more to catch any extra one.
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                value = msg.value()
                assert value is not None
                seen.append(value)
            if len(seen) >= expected:
                deadline = min(deadline, time.monotonic() + 0.5)
    finally:
        consumer.close()
    return seen


async def test_confluent_transactions_and_isolation(broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    await asyncio.to_thread(_confluent_transactions, bootstrap, TOPIC, "ck-tx")
    committed = await asyncio.to_thread(_confluent_consume, bootstrap, TOPIC, "read_committed", 100)
    everything = await asyncio.to_thread(_confluent_consume, bootstrap, TOPIC, "read_uncommitted", 150)
    want = {f"c{n}-{i}".encode() for n in (0, 2) for i in range(50)}
    assert sorted(committed) == sorted(want)
    assert sorted(everything) == sorted(want | {f"a1-{i}".encode() for i in range(50)})


def _confluent_zombie(bootstrap: str, topic: str) -> str:
    from confluent_kafka import KafkaException, Producer

    zombie = Producer({"bootstrap.servers": bootstrap, "transactional.id": "zombie-tx"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(30)
    successor = Producer({"bootstrap.servers": bootstrap, "transactional.id": "zombie-tx"})
    successor.init_transactions(30)
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=0)
    successor.commit_transaction(30)
    try:
        zombie.produce(topic, b"zombie-2", partition=0)
        zombie.commit_transaction(30)
    except KafkaException as exc:
        err = exc.args[0]
        return f"{err.name()} fatal={err.fatal()}"
    return "not fenced"


async def test_confluent_zombie_is_fenced(broker: Broker) -> None:
    outcome = await asyncio.to_thread(_confluent_zombie, broker.bootstrap_servers, TOPIC)
    assert "fatal=True" in outcome and "FENCED" in outcome, outcome
    seen = await asyncio.to_thread(_confluent_consume, broker.bootstrap_servers, TOPIC, "read_committed", 1)
    assert seen == [b"successor"]


def _confluent_consume_transform_produce(bootstrap: str, source: str, sink: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ctp-tx"})
    producer.init_transactions(30)
    consumer.subscribe([source])
    try:
        done = 0
        for _ in range(200):
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            value, topic, partition, offset = msg.value(), msg.topic(), msg.partition(), msg.offset()
            assert value is not None and topic is not None and partition is not None and offset is not None
            producer.begin_transaction()
            producer.produce(sink, value.upper(), partition=0)
            offsets = [TopicPartition(topic, partition, offset + 1)]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            done += 1
            if done == 10:
                break
        assert done == 10
    finally:
        consumer.close()


async def test_confluent_send_offsets_to_transaction(broker: Broker, client: RawClient) -> None:
    broker.state.create_topic("src", 1)
    broker.state.create_topic("sink", 1)
    src = broker.state.partition_log("src", 0)
    assert src is not None
    src.append(encode_batch([(None, f"r{i}".encode(), time.time_ns() // 1_000_000, ()) for i in range(10)]))
    await asyncio.to_thread(_confluent_consume_transform_produce, broker.bootstrap_servers, "src", "sink")
    topic = sub(9, 7, "OffsetFetchRequestTopic", name="src", partition_indexes=(0,))
    response = await client.call(req(9, 7, group_id="ctp", topics=(topic,), require_stable=True))
    p = response.topics[0].partitions[0]
    assert (p.error_code, p.committed_offset) == (ErrorCode.none, 10)
    sink = broker.state.partition_log("sink", 0)
    assert sink is not None and sink.high_watermark == 20  # 10 records + 10 commit markers


def _confluent_timed_out(bootstrap: str, topic: str) -> str:
    from confluent_kafka import KafkaException, Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "slow-tx", "transaction.timeout.ms": 1000}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"too-slow", partition=0)
    producer.flush(30)
    time.sleep(3)  # the broker checks every second
    try:
        producer.commit_transaction(30)
    except KafkaException as exc:
        return str(exc.args[0].name())
    return "committed"


async def test_confluent_transaction_past_its_timeout_is_aborted(broker: Broker) -> None:
    outcome = await asyncio.to_thread(_confluent_timed_out, broker.bootstrap_servers, TOPIC)
    assert outcome != "committed"
    assert broker.state.transactions.transactions["slow-tx"].state == TxnState.COMPLETE_ABORT
    everything = await asyncio.to_thread(
        _confluent_consume, broker.bootstrap_servers, TOPIC, "read_uncommitted", 1
    )
    assert everything == [b"too-slow"]
    committed = await asyncio.to_thread(
        _confluent_consume, broker.bootstrap_servers, TOPIC, "read_committed", 0
    )
    assert committed == []


def _kafka_python_transactions(bootstrap: str, topic: str) -> None:
    from kafka import KafkaProducer  # type: ignore[attr-defined]

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-tx")
    try:
        producer.init_transactions()
        for commit in (True, False):
            producer.begin_transaction()
            for i in range(20):
                producer.send(topic, f"{'kc' if commit else 'ka'}-{i}".encode(), partition=i % 2)
            if commit:
                producer.commit_transaction()
            else:
                producer.flush()
                producer.abort_transaction()
    finally:
        producer.close(timeout=10)


async def test_kafka_python_transactional_producer(broker: Broker) -> None:
    await asyncio.to_thread(_kafka_python_transactions, broker.bootstrap_servers, TOPIC)
    seen = await asyncio.to_thread(_confluent_consume, broker.bootstrap_servers, TOPIC, "read_committed", 20)
    assert sorted(seen) == sorted(f"kc-{i}".encode() for i in range(20))


async def test_aiokafka_transactional_producer_with_offsets(broker: Broker, client: RawClient) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka import TopicPartition as AioTopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id="aio-tx")
    await producer.start()
    try:
        for commit, offset in ((True, 4), (False, 9)):
            await producer.begin_transaction()
            for i in range(10):
                await producer.send(TOPIC, f"{'ac' if commit else 'aa'}-{i}".encode(), partition=i % 2)
            await producer.send_offsets_to_transaction({AioTopicPartition(TOPIC, 0): offset}, "aio-group")
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    finally:
        await producer.stop()
    seen = await asyncio.to_thread(_confluent_consume, broker.bootstrap_servers, TOPIC, "read_committed", 10)
    assert sorted(seen) == sorted(f"ac-{i}".encode() for i in range(10))
    topic = sub(9, 7, "OffsetFetchRequestTopic", name=TOPIC, partition_indexes=(0,))
    response = await client.call(req(9, 7, group_id="aio-group", topics=(topic,), require_stable=True))
    p = response.topics[0].partitions[0]
    assert (p.error_code, p.committed_offset) == (ErrorCode.none, 4)


# -- admin APIs -------------------------------------------------------------------------------


async def test_list_describe_transactions_and_producers(client: RawClient) -> None:
    init = await init_pid(client, "t")
    pid, epoch = init.producer_id, init.producer_epoch
    await init_pid(client, "idle")
    await add_partitions(client, "t", pid, epoch, (0, 1))
    await produce(client, txn_batch(pid, epoch, 0), tid="t")
    listed = await client.call(req(66, 1, state_filters=(), producer_id_filters=(), duration_filter=-1))
    assert sorted((s.transactional_id, s.transaction_state) for s in listed.transaction_states) == [
        ("idle", "Empty"),
        ("t", "Ongoing"),
    ]
    ongoing = await client.call(req(66, 1, state_filters=("Ongoing", "Bogus"), producer_id_filters=(),
                                    duration_filter=-1))  # fmt: skip
    assert [s.transactional_id for s in ongoing.transaction_states] == ["t"]
    assert ongoing.unknown_state_filters == ("Bogus",)
    described = await client.call(req(65, 0, transactional_ids=("t",)))
    (found,) = described.transaction_states
    assert (found.error_code, found.transaction_state, found.producer_id, found.producer_epoch) == (
        ErrorCode.none, "Ongoing", pid, epoch)  # fmt: skip
    assert found.transaction_timeout == 60_000 * MS
    assert [(t.topic, t.partitions) for t in found.topics] == [(TOPIC, (0, 1))]
    # An unknown id: start time -1 as Kafka sends it, which kio refuses to decode, so check the bytes:
    # error code 105 (TRANSACTIONAL_ID_NOT_FOUND) then the compact string "missing".
    client.writer.write(encode_request(99, "txn-test", req(65, 0, transactional_ids=("missing",))))
    (size,) = struct.unpack(">i", await client.reader.readexactly(4))
    body = await client.reader.readexactly(size)
    assert struct.pack(">h", ErrorCode.transactional_id_not_found.value) + b"\x08missing" in body
    topic = sub(61, 0, "TopicRequest", name=TOPIC, partition_indexes=(0, 1, 9))
    producers = (await client.call(req(61, 0, topics=(topic,)))).topics[0].partitions
    assert [(p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset)
            for p in producers[0].active_producers] == [(pid, epoch, 1, 0)]  # fmt: skip
    assert producers[1].active_producers == ()
    assert producers[2].error_code == ErrorCode.unknown_topic_or_partition


# -- a crash (SIGKILL) in the middle of a transaction -----------------------------------------


def test_sigkill_mid_transaction_keeps_exactly_the_committed_data(
    broker_min_process: BrokerMinProcess,
) -> None:
    from confluent_kafka import Producer

    bootstrap = broker_min_process.bootstrap_servers
    first = Producer({"bootstrap.servers": bootstrap, "transactional.id": "crash-tx", "linger.ms": 5})
    first.init_transactions(30)
    for tag, commit in (("kept", True), ("dropped", False), ("open", None)):
        first.begin_transaction()
        for i in range(20):
            first.produce("crash", f"{tag}-{i}".encode())
        first.flush(30)
        if commit is True:
            first.commit_transaction(30)
        elif commit is False:
            first.abort_transaction(30)
    broker_min_process.restart(crash=True)  # SIGKILL with the third transaction open
    second = Producer({"bootstrap.servers": bootstrap, "transactional.id": "crash-tx"})
    second.init_transactions(30)  # aborts the open transaction left by the crash
    second.begin_transaction()
    second.produce("crash", b"after-0")
    second.commit_transaction(30)
    committed = _confluent_consume(bootstrap, "crash", "read_committed", 21)
    assert sorted(committed) == sorted([f"kept-{i}".encode() for i in range(20)] + [b"after-0"])
    everything = _confluent_consume(bootstrap, "crash", "read_uncommitted", 61)
    assert len(everything) == 61
