"""The consumer against real brokers; test data is written with confluent-kafka."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, TypeAlias

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafkakit.consumer import Consumer, NoOffsetForPartitionError
from kafkakit.errors import ConsumerStoppedError, IllegalStateError, OffsetOutOfRangeError
from kafkakit.structs import ConsumerRecord, OffsetAndTimestamp, TopicPartition

Record: TypeAlias = ConsumerRecord[Any, Any]


# -- helpers -------------------------------------------------------------------


def create_topic(
    bootstrap: str, topic: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})], operation_timeout=30)
    for future in futures.values():
        future.result(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until every partition has a leader
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions:
            if all(p.leader >= 0 for p in meta.partitions.values()):
                return
        time.sleep(0.05)
    raise AssertionError(f"topic {topic} did not become ready")


def produce(
    bootstrap: str,
    topic: str,
    values: Sequence[bytes | None],
    *,
    partition: int = 0,
    keys: Sequence[bytes | None] | None = None,
    timestamps: Sequence[int] | None = None,
    headers: Sequence[list[tuple[str, bytes | None]]] | None = None,
    compression: str = "none",
    extra: dict[str, Any] | None = None,
) -> None:
    """Write ``values`` to one partition with confluent-kafka and wait for the acks."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 5, **(extra or {})}
    )
    errors: list[Any] = []
    for i, value in enumerate(values):
        kwargs: dict[str, Any] = {"partition": partition, "value": value}
        if keys is not None:
            kwargs["key"] = keys[i]
        if timestamps is not None:
            kwargs["timestamp"] = timestamps[i]
        if headers is not None:
            kwargs["headers"] = headers[i]
        producer.produce(topic, on_delivery=lambda err, _msg: errors.append(err) if err else None, **kwargs)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors


async def setup_topic(bootstrap: str, topic: str, partitions: int = 1, **config: str) -> None:
    await asyncio.to_thread(create_topic, bootstrap, topic, partitions, config)


async def write(bootstrap: str, topic: str, values: Sequence[bytes | None], **kwargs: Any) -> None:
    await asyncio.to_thread(produce, bootstrap, topic, values, **kwargs)


async def read(consumer: Consumer, count: int, *tps: TopicPartition, timeout: float = 20) -> list[Record]:
    """getmany until ``count`` records arrived (fails on timeout or on more)."""
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(records) < count:
        assert time.monotonic() < deadline, f"got {len(records)} of {count} records"
        for batch in (await consumer.getmany(*tps, timeout_ms=200)).values():
            records.extend(batch)
    assert len(records) == count
    return records


def values(n: int, prefix: bytes = b"v") -> list[bytes | None]:
    return [prefix + b"%d" % i for i in range(n)]


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap_servers)


def consumer_for(bootstrap: str, **kwargs: Any) -> Consumer:
    kwargs.setdefault("auto_offset_reset", "earliest")
    kwargs.setdefault("fetch_max_wait_ms", 100)
    return Consumer(bootstrap_servers=bootstrap, **kwargs)


# -- reading -------------------------------------------------------------------


async def test_assign_and_getmany_read_every_record(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(500), keys=[b"k%d" % i for i in range(500)])
    tp = TopicPartition(topic, 0)
    async with consumer_for(bootstrap) as consumer:
        consumer.assign([tp])
        assert consumer.assignment() == {tp}
        records = await read(consumer, 500)
        assert [r.offset for r in records] == list(range(500))
        assert [r.value for r in records] == values(500)
        assert [r.key for r in records] == [b"k%d" % i for i in range(500)]
        assert {(r.topic, r.partition) for r in records} == {(topic, 0)}
        assert records[0].serialized_value_size == 2 and records[0].serialized_key_size == 2
        assert await consumer.position(tp) == 500
        assert consumer.highwater(tp) == 500
        assert consumer.last_stable_offset(tp) == 500
        assert await consumer.getmany(timeout_ms=100) == {}


async def test_getmany_max_records_and_getone(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(30))
    tp = TopicPartition(topic, 0)
    async with consumer_for(bootstrap, max_poll_records=7) as consumer:
        consumer.assign([tp])
        first = await consumer.getone()
        assert (first.offset, first.value) == (0, b"v0")
        seen = [first]
        limit = 7
        while len(seen) < 30:
            batch = await consumer.getmany(timeout_ms=5000, max_records=None if limit == 7 else limit)
            assert 1 <= len(batch[tp]) <= limit
            seen.extend(batch[tp])
            assert await consumer.position(tp) == seen[-1].offset + 1
            limit = 2 if limit == 7 else 7
        assert [r.offset for r in seen] == list(range(30))


async def test_async_for_iterates_until_stopped(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(5))
    consumer = consumer_for(bootstrap)
    await consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    got = []
    async for record in consumer:
        got.append(record.value)
        if len(got) == 5:
            break
    assert got == values(5)

    async def stop_soon() -> None:
        await asyncio.sleep(0.3)
        await consumer.stop()

    stopper = asyncio.create_task(stop_soon())
    async for _record in consumer:  # nothing more to read: ends when the consumer stops
        raise AssertionError("no record expected")
    await stopper
    with pytest.raises(ConsumerStoppedError):
        await consumer.getmany()


async def test_stop_wakes_a_waiting_getmany(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    consumer = consumer_for(bootstrap)
    await consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    waiter = asyncio.create_task(consumer.getmany(timeout_ms=30000))
    await asyncio.sleep(0.3)
    await consumer.stop()
    with pytest.raises(ConsumerStoppedError):
        await asyncio.wait_for(waiter, 5)


async def test_empty_topic_returns_nothing_within_the_timeout(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    async with consumer_for(bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.getmany(timeout_ms=500)  # first call also resolves the position
        start = time.monotonic()
        assert await consumer.getmany(timeout_ms=400) == {}
        elapsed = time.monotonic() - start
        assert 0.35 <= elapsed < 2.0


async def test_multi_partition_topic(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, partitions=3)
    for p in range(3):
        await write(bootstrap, topic, values(20 + p, prefix=b"p%d-" % p), partition=p)
    tps = [TopicPartition(topic, p) for p in range(3)]
    async with consumer_for(bootstrap) as consumer:
        consumer.assign(tps)
        records = await read(consumer, 20 + 21 + 22)
        for p in range(3):
            mine = [r for r in records if r.partition == p]
            assert [r.offset for r in mine] == list(range(20 + p))
            assert [r.value for r in mine] == values(20 + p, prefix=b"p%d-" % p)
        # getmany restricted to one partition returns only that one
        consumer.seek(tps[0], 0)
        consumer.seek(tps[1], 0)
        only = await read(consumer, 21, tps[1])
        assert {r.partition for r in only} == {1}
        assert await consumer.end_offsets(tps) == {tps[0]: 20, tps[1]: 21, tps[2]: 22}


# -- positions -----------------------------------------------------------------


async def test_seek_position_and_seek_to_beginning_end(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(100))
    tp = TopicPartition(topic, 0)
    async with consumer_for(bootstrap) as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 0
        consumer.seek(tp, 60)
        assert await consumer.position(tp) == 60
        records = await read(consumer, 40)
        assert [r.offset for r in records] == list(range(60, 100))

        await consumer.seek_to_beginning(tp)
        assert await consumer.position(tp) == 0
        assert (await consumer.getone()).offset == 0

        await consumer.seek_to_end()
        assert await consumer.position(tp) == 100
        await write(bootstrap, topic, [b"after-end"])
        assert (await consumer.getone()).value == b"after-end"

        consumer.seek(tp, 42)  # mid-batch: records before 42 in the same batch are dropped
        assert (await consumer.getone()).offset == 42

        with pytest.raises(IllegalStateError):
            await consumer.position(TopicPartition(topic, 9))


async def test_seek_discards_buffered_records(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(50))
    tp = TopicPartition(topic, 0)
    async with consumer_for(bootstrap) as consumer:
        consumer.assign([tp])
        assert (await consumer.getone()).offset == 0
        await asyncio.sleep(0.3)  # let the prefetch buffer the rest
        consumer.seek(tp, 10)
        records = await read(consumer, 40)
        assert [r.offset for r in records] == list(range(10, 50))


async def test_reassigned_partition_ignores_the_fetch_of_its_previous_assignment(
    bootstrap: str, topic: str
) -> None:
    """A Fetch sent for a partition's previous assignment is dropped when it answers, even though
    the new assignment's state has seeked as often (each state counts its seeks from 0).

    As a group member whose partition is lost (a coordinator failover) and assigned back: its long
    poll at the end of the log (offset 100) is out, the partition is unassigned and assigned again,
    and the new assignment starts at 50 (the committed offset). That old Fetch answering with
    offset 100 was taken for the new state's (both had seeked once), and 50..99 were skipped: a
    group of chaos-test consumers once left 68 records unread so.
    """
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(100))
    tp = TopicPartition(topic, 0)
    async with consumer_for(bootstrap, fetch_max_wait_ms=10000) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)  # the state's first seek
        assert [r.offset for r in await read(consumer, 100)] == list(range(100))
        fetcher = consumer._fetcher  # white box: the long poll at offset 100 must be out now
        deadline = time.monotonic() + 10
        while not fetcher.has_in_flight():
            assert time.monotonic() < deadline, "no Fetch in flight at the end of the log"
            await asyncio.sleep(0.01)
        consumer.assign([])
        consumer.assign([tp])  # a new state ...
        consumer.seek(tp, 50)  # ... whose first seek too, while the old Fetch still waits
        await write(bootstrap, topic, [b"v100"])  # the old Fetch answers with offset 100
        records = await read(consumer, 51)
        assert [r.offset for r in records] == list(range(50, 101))


async def test_beginning_and_end_offsets(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, partitions=2)
    await write(bootstrap, topic, values(7), partition=1)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    async with consumer_for(bootstrap) as consumer:  # no assignment needed
        assert await consumer.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
        assert await consumer.end_offsets(tps) == {tps[0]: 0, tps[1]: 7}


async def test_offsets_for_times(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    base = 1_700_000_000_000
    stamps = [base + 1000 * i for i in range(10)]
    await write(bootstrap, topic, values(10), timestamps=stamps)
    tp = TopicPartition(topic, 0)
    async with consumer_for(bootstrap) as consumer:
        found = await consumer.offsets_for_times({tp: base + 3500})
        assert found == {tp: OffsetAndTimestamp(4, base + 4000)}
        assert await consumer.offsets_for_times({tp: 0}) == {tp: OffsetAndTimestamp(0, base)}
        assert await consumer.offsets_for_times({tp: base + 60_000}) == {tp: None}
        with pytest.raises(ValueError):
            await consumer.offsets_for_times({tp: -1})


async def test_pause_and_resume(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, partitions=2)
    await write(bootstrap, topic, values(5), partition=0)
    await write(bootstrap, topic, values(6), partition=1)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with consumer_for(bootstrap) as consumer:
        consumer.assign([tp0, tp1])
        consumer.pause(tp0)
        assert consumer.paused() == {tp0}
        records = await read(consumer, 6)
        assert {r.partition for r in records} == {1}
        assert await consumer.getmany(timeout_ms=300) == {}
        consumer.resume(tp0)
        assert consumer.paused() == set()
        records = await read(consumer, 5)
        assert [(r.partition, r.offset) for r in records] == [(0, i) for i in range(5)]


# -- offset reset policies -------------------------------------------------------


async def test_auto_offset_reset_latest_reads_only_new_records(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(10))
    tp = TopicPartition(topic, 0)
    async with consumer_for(bootstrap, auto_offset_reset="latest") as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 10
        assert await consumer.getmany(timeout_ms=300) == {}
        await write(bootstrap, topic, values(3, prefix=b"new"))
        records = await read(consumer, 3)
        assert [(r.offset, r.value) for r in records] == [(10, b"new0"), (11, b"new1"), (12, b"new2")]


async def test_auto_offset_reset_none_raises(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(3))
    tp = TopicPartition(topic, 0)
    async with consumer_for(bootstrap, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        with pytest.raises(NoOffsetForPartitionError):
            await consumer.getmany(timeout_ms=2000)
        with pytest.raises(OffsetOutOfRangeError):  # NoOffsetForPartitionError is one
            await consumer.position(tp)
        consumer.seek(tp, 1)
        records = await read(consumer, 2)
        assert [r.offset for r in records] == [1, 2]
        # Out of range with "none": the application hears about it.
        consumer.seek(tp, 1000)
        with pytest.raises(OffsetOutOfRangeError):
            await consumer.getmany(timeout_ms=5000)


@pytest.mark.parametrize(("policy", "expected"), [("earliest", 0), ("latest", 10)])
async def test_out_of_range_position_is_reset(bootstrap: str, topic: str, policy: str, expected: int) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(10))
    tp = TopicPartition(topic, 0)
    async with consumer_for(bootstrap, auto_offset_reset=policy) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)  # past the end
        if policy == "earliest":
            records = await read(consumer, 10)
            assert [r.offset for r in records] == list(range(10))
            return
        deadline = time.monotonic() + 10
        while await consumer.position(tp) != expected:
            assert time.monotonic() < deadline, "position was not reset"
            assert await consumer.getmany(timeout_ms=100) == {}
        await write(bootstrap, topic, [b"later"])
        assert [(r.offset, r.value) for r in await read(consumer, 1)] == [(10, b"later")]


# -- record contents ---------------------------------------------------------------


async def test_deserializers(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, [b"1", b"2", None], keys=[b"a", None, b"c"])
    async with consumer_for(
        bootstrap,
        key_deserializer=lambda k: k.decode() if k is not None else None,
        value_deserializer=lambda v: int(v) if v is not None else None,
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        records = await read(consumer, 3)
        assert [(r.key, r.value) for r in records] == [("a", 1), (None, 2), ("c", None)]
        assert records[2].serialized_value_size == -1


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_every_codec_confluent_produces_decodes(bootstrap: str, topic: str, codec: str) -> None:
    await setup_topic(bootstrap, topic)
    payload = [b"%d-" % i + b"compressible " * 20 for i in range(300)]
    await write(bootstrap, topic, payload, compression=codec, extra={"linger.ms": 50})
    async with consumer_for(bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        records = await read(consumer, 300)
        assert [r.value for r in records] == payload
        assert [r.offset for r in records] == list(range(300))


async def test_headers_and_timestamps_round_trip(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    stamps = [1_600_000_000_000 + i * 7 for i in range(3)]
    headers: list[list[tuple[str, bytes | None]]] = [
        [("trace", b"abc"), ("empty", b"")],
        [],
        [("null", None), ("trace", b"\x00\xff"), ("ünï", b"x")],
    ]
    await write(bootstrap, topic, values(3), timestamps=stamps, headers=headers)
    async with consumer_for(bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        records = await read(consumer, 3)
        assert [r.timestamp for r in records] == stamps
        assert [r.timestamp_type for r in records] == [0, 0, 0]
        assert [list(r.headers) for r in records] == headers


async def test_large_records(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 1, **{"max.message.bytes": str(4 << 20)})
    big = [bytes([i]) * (1 << 20) for i in range(3)]
    await write(bootstrap, topic, big, extra={"message.max.bytes": 4 << 20, "linger.ms": 0})
    async with consumer_for(bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        records = await read(consumer, 3, timeout=30)
        assert [r.value for r in records] == big
    # A batch larger than max_partition_fetch_bytes still comes through (KIP-74).
    async with consumer_for(bootstrap, max_partition_fetch_bytes=64 * 1024) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        records = await read(consumer, 3, timeout=30)
        assert [len(r.value) for r in records] == [1 << 20] * 3


async def test_read_committed_reads_plain_records(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(4))
    tp = TopicPartition(topic, 0)
    async with consumer_for(bootstrap, isolation_level="read_committed") as consumer:
        consumer.assign([tp])
        records = await read(consumer, 4)
        assert [r.offset for r in records] == [0, 1, 2, 3]
        assert consumer.last_stable_offset(tp) == 4
        assert await consumer.end_offsets([tp]) == {tp: 4}


async def test_unassigned_partitions_are_rejected(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    async with consumer_for(bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        with pytest.raises(IllegalStateError):
            await consumer.getmany(TopicPartition(topic, 1))
        with pytest.raises(IllegalStateError):
            await consumer.seek_to_end(TopicPartition("other", 0))


def produce_transactions(bootstrap: str, topic: str) -> None:
    """committed: c0 c1, aborted: a0 a1, committed: c2 (each transaction ends with a marker)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "linger.ms": 0})
    producer.init_transactions(30)
    for vals, commit in (([b"c0", b"c1"], True), ([b"a0", b"a1"], False), ([b"c2"], True)):
        producer.begin_transaction()
        for v in vals:
            producer.produce(topic, value=v, partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


async def test_transactions_read_committed_and_uncommitted(
    bootstrap: str, topic: str, broker: Any, request: pytest.FixtureRequest
) -> None:
    await setup_topic(bootstrap, topic)
    await asyncio.to_thread(produce_transactions, bootstrap, topic)
    tp = TopicPartition(topic, 0)
    async with consumer_for(bootstrap, isolation_level="read_committed") as consumer:
        consumer.assign([tp])
        records = await read(consumer, 3)
        assert [r.value for r in records] == [b"c0", b"c1", b"c2"]
        assert await consumer.getmany(timeout_ms=300) == {}
        end = (await consumer.end_offsets([tp]))[tp]
        assert await consumer.position(tp) == end == 8  # 5 records + 3 markers
    async with consumer_for(bootstrap, isolation_level="read_uncommitted") as consumer:
        consumer.assign([tp])
        records = await read(consumer, 5)  # markers never reach the application
        assert [r.value for r in records] == [b"c0", b"c1", b"a0", b"a1", b"c2"]


async def test_topic_created_after_assign_is_picked_up(bootstrap: str, topic: str) -> None:
    tp = TopicPartition(topic, 0)
    async with consumer_for(bootstrap, allow_auto_create_topics=False, retry_backoff_ms=50) as consumer:
        consumer.assign([tp])
        assert await consumer.getmany(timeout_ms=300) == {}  # unknown topic: no leader yet, no error
        await setup_topic(bootstrap, topic)
        await write(bootstrap, topic, values(3))
        records = await read(consumer, 3)
        assert [r.value for r in records] == values(3)


async def test_topics_lists_the_cluster_and_fills_partitions_for_topic(bootstrap: str, topic: str) -> None:
    """topics() reads every topic's metadata; partitions_for_topic() then knows this one (as aiokafka)."""
    await setup_topic(bootstrap, topic, partitions=3)
    async with consumer_for(bootstrap) as consumer:
        assert consumer.partitions_for_topic(topic) is None  # nothing asked about it yet
        assert topic in await consumer.topics()
        assert consumer.partitions_for_topic(topic) == {0, 1, 2}
