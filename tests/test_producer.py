"""The Producer against real brokers; records are read back with confluent-kafka's consumer."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafkakit.errors import (
    KafkaConfigError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from kafkakit.producer import Producer, partition_for_key
from kafkakit.structs import RecordMetadata

from tests.brokers import BrokerMinProcess, RunningBroker


@dataclass
class Consumed:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int


def _consume(bootstrap: str, topic: str, partitions: list[int], count: int, timeout: float) -> list[Consumed]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
            "fetch.message.max.bytes": 2_000_000,
        }
    )
    try:
        consumer.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: list[Consumed] = []
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                if message.error() is not None:
                    continue  # e.g. partition EOF notices
                records.append(
                    Consumed(
                        message.partition(),
                        message.offset(),
                        message.key(),
                        message.value(),
                        list(message.headers() or []),
                        message.timestamp()[1],
                    )
                )
        return records
    finally:
        consumer.close()


async def consume(
    bootstrap: str, topic: str, count: int, partitions: list[int] | None = None, timeout: float = 30
) -> list[Consumed]:
    """Read ``count`` records of ``topic`` from the beginning (sorted by partition, offset)."""
    records = await asyncio.to_thread(_consume, bootstrap, topic, partitions or [0], count, timeout)
    assert len(records) == count, f"expected {count} records in {topic}, read {len(records)}"
    return sorted(records, key=lambda r: (r.partition, r.offset))


def _create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config)],
        operation_timeout=10,
    )
    futures[topic].result(timeout=30)


async def create_topic(
    bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None
) -> None:
    await asyncio.to_thread(_create_topic, bootstrap, topic, partitions, config or {})


def producer_for(broker: RunningBroker, **settings: Any) -> Producer:
    return Producer(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=15000, **settings)


# -- round trips ---------------------------------------------------------------------------


async def test_records_round_trip_with_keys_headers_timestamps_partitions(
    broker: RunningBroker, topic: str
) -> None:
    await create_topic(broker.bootstrap_servers, topic, 3)
    sent: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = []
    futures = []
    async with producer_for(broker) as producer:
        assert await producer.partitions_for(topic) == {0, 1, 2}
        for i in range(30):
            partition = i % 3
            key = None if i % 5 == 0 else f"key-{i}".encode()
            value = None if i == 7 else f"value-{i}".encode() * (i + 1)
            headers = [("n", str(i).encode()), ("empty", None)] if i % 2 else []
            timestamp = 1_700_000_000_000 + i
            futures.append(
                await producer.send(
                    topic, value, key=key, partition=partition, timestamp_ms=timestamp, headers=headers
                )
            )
            sent.append((partition, key, value, headers, timestamp))
        metadata: list[RecordMetadata] = [await f for f in futures]
    records = await consume(broker.bootstrap_servers, topic, 30, [0, 1, 2])
    by_position = {(r.partition, r.offset): r for r in records}
    for (partition, key, value, headers, timestamp), meta in zip(sent, metadata, strict=True):
        assert (meta.topic, meta.partition, meta.timestamp) == (topic, partition, timestamp)
        record = by_position[(meta.partition, meta.offset)]
        assert (record.key, record.value, record.timestamp) == (key, value, timestamp)
        assert list(record.headers) == headers


async def test_a_timestamp_before_1970_or_after_2262_is_refused_and_queues_nothing(
    broker: RunningBroker, topic: str
) -> None:
    """Batches keep timestamps as int64 nanoseconds: send() and send_batch() refuse what does
    not fit (and, as Java's producer, negative ones) with ValueError before queueing anything."""
    from kafkakit.producer.record_future import MAX_TIMESTAMP_MS

    await create_topic(broker.bootstrap_servers, topic, 1)
    async with producer_for(broker) as producer:
        for bad in (-1, MAX_TIMESTAMP_MS + 1, 2**64):
            with pytest.raises(ValueError, match="timestamp_ms"):
                await producer.send(topic, b"refused", timestamp_ms=bad)
            with pytest.raises(ValueError, match="timestamp_ms"):
                await producer.send(topic, b"refused", key=b"k", timestamp_ms=bad)
            with pytest.raises(ValueError, match="timestamp_ms"):
                await producer.send_batch(topic, [b"refused"], partition=0, timestamp_ms=bad)
        for wrong_type in (1.5, True, "1700000000000"):  # not an int of milliseconds
            with pytest.raises(TypeError, match="timestamp_ms must be an int"):
                await producer.send(topic, b"refused", timestamp_ms=wrong_type)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="timestamp_ms must be an int"):
                await producer.send_batch(topic, [b"refused"], partition=0, timestamp_ms=wrong_type)  # type: ignore[arg-type]
        first = await producer.send(topic, b"kept", timestamp_ms=0)
        last = await producer.send(topic, b"kept too", key=b"k", timestamp_ms=1_700_000_000_000)
        assert [(m.offset, m.timestamp) for m in await asyncio.gather(first, last)] == [(0, 0), (1, 1_700_000_000_000)]
        assert producer._acc.free == producer._acc.buffer_memory
    records = await consume(broker.bootstrap_servers, topic, 2, [0])
    assert [(r.value, r.timestamp) for r in records] == [(b"kept", 0), (b"kept too", 1_700_000_000_000)]


@pytest.mark.parametrize("values", ["one length", "many lengths"])
async def test_keyless_and_keyed_records_share_batches(broker: RunningBroker, topic: str, values: str) -> None:
    """Runs of keyless and keyed records in one partition's batches (a batch's keys are a list
    from its first keyed record on, None for the keyless records among them): each record
    comes back with its own key or none, through the numpy encoders (600 records) and the
    loop (a batch of 5), and every byte of buffer memory is given back."""
    await create_topic(broker.bootstrap_servers, topic, 1)
    sent: list[tuple[bytes | None, bytes]] = []
    async with producer_for(broker, linger_ms=50) as producer:
        for count in (600, 5):
            futures = []
            for i in range(count):
                key = None if (i // 7) % 3 == 0 else b"key-%d" % (i % 11)  # runs of each, and repeated keys
                value = b"v%05d" % i if values == "one length" else b"v" * (i % 97)
                futures.append(await producer.send(topic, value, key=key))
                sent.append((key, value))
            await asyncio.gather(*futures)
        assert producer._acc.free == producer._acc.buffer_memory  # a keyed record's overhead, and only theirs
    records = await consume(broker.bootstrap_servers, topic, len(sent), [0])
    assert [(r.key, r.value) for r in records] == sent


async def test_keyed_records_land_where_java_puts_them(broker: RunningBroker, topic: str) -> None:
    await create_topic(broker.bootstrap_servers, topic, 6)
    async with producer_for(broker) as producer:
        for i in range(40):
            key = f"user-{i}".encode()
            meta = await producer.send_and_wait(topic, b"v", key=key)
            assert meta.partition == partition_for_key(key, 6)


async def test_a_user_partitioner_places_send_and_send_batch_records(broker: RunningBroker, topic: str) -> None:
    """``partitioner=`` decides for every record of send() and send_batch(), keyed or not; a
    choice outside the topic's partitions is a KafkaConfigError naming the setting."""
    await create_topic(broker.bootstrap_servers, topic, 4)

    def by_last_digit(key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]) -> int:
        return 3 if key is None else int(key[-1:]) % len(all_partitions)

    async with producer_for(broker, partitioner=by_last_digit) as producer:
        sent = [await producer.send_and_wait(topic, b"v", key=f"k{i}".encode()) for i in range(8)]
        keyless = await producer.send_and_wait(topic, b"v")
        bulk = await (await producer.send_batch(topic, [b"b"] * 8, keys=[f"b{i}".encode() for i in range(8)]))
    assert [m.partition for m in sent] == [i % 4 for i in range(8)]
    assert keyless.partition == 3
    assert [m.partition for m in bulk] == [i % 4 for i in range(8)]
    async with producer_for(broker, partitioner=lambda key, all_partitions, available: 99) as producer:
        with pytest.raises(KafkaConfigError, match="partitioner"):
            await producer.send(topic, b"v", key=b"k")


async def test_keyless_records_stick_to_one_partition_per_batch(broker: RunningBroker, topic: str) -> None:
    await create_topic(broker.bootstrap_servers, topic, 4)
    async with producer_for(broker) as producer:
        await producer.partitions_for(topic)
        futures = [await producer.send(topic, b"small") for _ in range(20)]
        partitions = {(await f).partition for f in futures}
    assert len(partitions) == 1  # KIP-480: one batch, one partition


async def test_keyless_records_move_on_when_their_batch_is_full(broker: RunningBroker, topic: str) -> None:
    """KIP-480: keyless records fill one partition's batch, then go on to another partition."""
    await create_topic(broker.bootstrap_servers, topic, 4)
    value = b"v" * 100  # 114 B a record: 8 fit in a 1,024-byte batch with its 61-byte header
    async with producer_for(broker, max_batch_size=1024, linger_ms=50) as producer:
        await producer.partitions_for(topic)
        futures = [await producer.send(topic, value) for _ in range(200)]
        # The sender has not run: records coming back to a partition joined its open batch.
        assert [len(pq.batches) for pq in producer._acc.queues[topic].values()] == [1, 1, 1, 1]
        partitions = [(await f).partition for f in futures]
    runs = [len(list(run)) for _, run in itertools.groupby(partitions)]
    assert all(run == 8 for run in runs[:-1]) and 1 <= runs[-1] <= 8, runs
    assert len(set(partitions)) > 1
    assert len(await consume(broker.bootstrap_servers, topic, 200, partitions=[0, 1, 2, 3])) == 200


async def test_keyless_records_of_one_partition_grow_its_batch_to_the_request_size(broker: RunningBroker, topic: str) -> None:
    """With nowhere else to go, keyless records keep joining the partition's batch until the
    sender takes it, up to what one request carries; then they open a new batch."""
    value = b"v" * 100
    async with producer_for(broker, max_batch_size=1024, max_request_size=20_000, linger_ms=50) as producer:
        await producer.partitions_for(topic)
        futures = [await producer.send(topic, value) for _ in range(300)]  # 34 KB, the sender idle
        sizes = [batch.size for batch in producer._acc.queues[topic][0].batches]
        assert len(sizes) == 2 and all(size <= 20_000 - 512 for size in sizes), sizes
        assert [(await f).offset for f in futures] == list(range(300))


async def test_serializers(broker: RunningBroker, topic: str) -> None:
    async with producer_for(
        broker, key_serializer=str.encode, value_serializer=lambda v: repr(v).encode()
    ) as producer:
        await producer.send_and_wait(topic, {"a": 1}, key="k")
    [record] = await consume(broker.bootstrap_servers, topic, 1)
    assert (record.key, record.value) == (b"k", b"{'a': 1}")


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd", None])
async def test_every_codec(broker: RunningBroker, topic: str, codec: str | None) -> None:
    values = [f"{codec}-{i}-".encode() * (i % 50 + 1) for i in range(300)]
    async with producer_for(broker, compression_type=codec) as producer:
        futures = [await producer.send(topic, v, key=str(i).encode()) for i, v in enumerate(values[:150])]
        bulk = await (await producer.send_batch(topic, values[150:]))
        offsets = [(await f).offset for f in futures] + [m.offset for m in bulk]
    records = await consume(broker.bootstrap_servers, topic, 300)
    assert [r.value for r in records] == values
    assert [r.offset for r in records] == offsets
    assert [r.key for r in records[:150]] == [str(i).encode() for i in range(150)]


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_acks(broker: RunningBroker, topic: str, acks: int | str) -> None:
    async with producer_for(broker, acks=acks) as producer:
        futures = [await producer.send(topic, f"m{i}".encode()) for i in range(100)]
        metadata = [await f for f in futures]
    if acks == 0:
        assert all(m.offset == -1 for m in metadata)  # no response, so no offsets
    else:
        assert [m.offset for m in metadata] == list(range(100))
    records = await consume(broker.bootstrap_servers, topic, 100)
    assert [r.value for r in records] == [f"m{i}".encode() for i in range(100)]


# -- bulk path ------------------------------------------------------------------------------


async def test_send_batch_with_keys_and_headers(broker: RunningBroker, topic: str) -> None:
    await create_topic(broker.bootstrap_servers, topic, 3)
    values = [f"v{i}".encode() for i in range(1000)]
    keys = [f"k{i % 17}".encode() for i in range(1000)]
    headers = [[("i", str(i).encode())] if i % 3 == 0 else None for i in range(1000)]
    async with producer_for(broker) as producer:
        result = await (
            await producer.send_batch(
                topic, values, keys=keys, headers=headers, timestamp_ms=1_600_000_000_000
            )
        )
    assert len(result) == 1000
    assert sum(count for _, _, count in result.ranges) == 1000
    records = await consume(broker.bootstrap_servers, topic, 1000, [0, 1, 2])
    by_position = {(r.partition, r.offset): r for r in records}
    for i, meta in enumerate(result):
        assert meta.partition == partition_for_key(keys[i], 3)
        record = by_position[(meta.partition, meta.offset)]
        assert (record.key, record.value, record.timestamp) == (keys[i], values[i], 1_600_000_000_000)
        assert list(record.headers) == (headers[i] or [])


async def test_send_batch_large_list_is_split_and_ordered(broker: RunningBroker, topic: str) -> None:
    values = [i.to_bytes(4, "big") * 25 for i in range(30_000)]  # 3 MB: several batches
    async with producer_for(broker, max_request_size=1_000_000) as producer:
        await producer.send(topic, b"before")
        pending = await producer.send_batch(topic, values, partition=0)
        await producer.send(topic, b"after")
        result = await pending
    assert len(result.ranges) >= 3
    assert [m.offset for m in result[:3]] == [1, 2, 3]
    assert result[-1].offset == 30_000
    records = await consume(broker.bootstrap_servers, topic, 30_002)
    assert [r.value for r in records] == [b"before", *values, b"after"]


async def test_send_batch_without_keys_spreads_batches(broker: RunningBroker, topic: str) -> None:
    await create_topic(broker.bootstrap_servers, topic, 3)
    values = [b"x" * 1000] * 5000  # 5 MB: about five request-sized batches
    async with producer_for(broker) as producer:
        result = await (await producer.send_batch(topic, values))
    partitions_per_batch = [tp.partition for tp, _, _ in result.ranges]
    assert all(a != b for a, b in itertools.pairwise(partitions_per_batch))  # sticky switches per batch
    records = await consume(broker.bootstrap_servers, topic, 5000, [0, 1, 2])
    assert len(records) == 5000


# -- sizes and memory ------------------------------------------------------------------------


async def test_one_megabyte_records(broker: RunningBroker, topic: str) -> None:
    values = [bytes([i]) * 1_000_000 for i in range(3)]
    async with producer_for(broker) as producer:
        futures = [await producer.send(topic, v) for v in values]
        assert [(await f).offset for f in futures] == [0, 1, 2]
    records = await consume(broker.bootstrap_servers, topic, 3)
    assert [r.value for r in records] == values


async def test_record_over_max_request_size_fails_at_send(broker: RunningBroker, topic: str) -> None:
    async with producer_for(broker, max_request_size=10_000) as producer:
        with pytest.raises(RecordTooLargeError, match="max_request_size"):
            await producer.send(topic, b"x" * 20_000)
        with pytest.raises(RecordTooLargeError, match="max_request_size"):
            await producer.send_batch(topic, [b"ok", b"x" * 20_000])
        meta = await producer.send_and_wait(topic, b"x" * 5_000)  # the producer is still usable
    assert meta.offset == 0


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"max_request_size": 10_000}, "max_request_size"),
        ({"max_request_size": 10_000, "max_batch_size": 50_000}, "max_request_size"),  # batches above requests
        ({"buffer_memory": 12_000, "max_batch_size": 4_000}, "buffer_memory"),
    ],
)
async def test_a_record_too_large_is_refused_on_every_send_path(
    broker: RunningBroker, topic: str, settings: dict[str, int], named: str
) -> None:
    """Also into an open batch with room by its size limit (the sticky path checks the size
    only when a record does not fit its batch): keyless, keyed and with a partition."""
    async with producer_for(broker, linger_ms=500, **settings) as producer:
        first = await producer.send(topic, b"small")
        for shape in ({}, {"key": b"k"}, {"partition": 0}, {}):
            with pytest.raises(RecordTooLargeError, match=named):
                await producer.send(topic, b"x" * 20_000, **shape)  # type: ignore[arg-type]
        last = await producer.send(topic, b"x" * 3_000)
        assert [(await first).offset, (await last).offset] == [0, 1]


async def test_broker_size_limit_fails_with_typed_error(broker: RunningBroker, topic: str) -> None:
    await create_topic(broker.bootstrap_servers, topic, 1, {"max.message.bytes": "3000"})
    async with producer_for(broker, max_batch_size=2000) as producer:
        too_big = await producer.send(topic, b"x" * 5000)
        with pytest.raises(MessageSizeTooLargeError, match=topic):
            await too_big
        # Small records sent in one go exceed the limit only once coalesced: they must still arrive.
        futures = [await producer.send(topic, f"{i:04d}".encode() * 100) for i in range(40)]
        offsets = [(await f).offset for f in futures]
    assert offsets == sorted(offsets) and len(set(offsets)) == 40
    records = await consume(broker.bootstrap_servers, topic, 40)
    assert [r.value for r in records] == [f"{i:04d}".encode() * 100 for i in range(40)]


async def test_a_grown_batch_the_broker_refuses_is_resent_in_parts(broker: RunningBroker, topic: str) -> None:
    """Records join a full batch until the sender takes it; a broker that refuses the grown
    batch as too large gets it again in max_batch_size parts, and each record's metadata
    names its own offset, key and headers intact."""
    await create_topic(broker.bootstrap_servers, topic, 1, {"max.message.bytes": "3000"})
    values = [b"%04d" % i * 100 for i in range(40)]
    keys = [b"k%d" % i if i % 3 else None for i in range(40)]
    headers = [[("h", b"%d" % i)] if i % 5 == 0 else [] for i in range(40)]
    async with producer_for(broker, max_batch_size=2000) as producer:
        await producer.partitions_for(topic)
        futures = [await producer.send(topic, v, key=k, headers=h) for v, k, h in zip(values, keys, headers, strict=True)]
        [grown] = producer._acc.queues[topic][0].batches  # the sender has not run: one 17 KB batch
        assert grown.size > 8 * 2000
        metadata = [await f for f in futures]
    records = await consume(broker.bootstrap_servers, topic, 40)
    assert [(r.value, r.key, r.headers) for r in records] == list(zip(values, keys, headers, strict=True))
    assert [m.offset for m in metadata] == [r.offset for r in records] == list(range(40))
    assert [m.timestamp for m in metadata] == [r.timestamp for r in records]


async def test_idempotent_batches_stay_within_max_batch_size(broker: RunningBroker, topic: str) -> None:
    """An idempotent batch's sequence numbers are fixed when it is sent, so it cannot be resent
    in parts: its batches never grow past max_batch_size."""
    async with producer_for(broker, max_batch_size=2000, acks="all", enable_idempotence=True) as producer:
        await producer.partitions_for(topic)
        futures = [await producer.send(topic, b"%04d" % i * 100) for i in range(40)]
        batches = list(producer._acc.queues[topic][0].batches)
        assert len(batches) == 10 and all(b.size <= 2000 for b in batches)
        assert [(await f).offset for f in futures] == list(range(40))


async def test_buffer_memory_backpressure(broker: RunningBroker, topic: str) -> None:
    async with producer_for(broker, buffer_memory=50_000, max_batch_size=20_000) as producer:
        await producer.partitions_for(topic)
        futures = [await producer.send(topic, b"x" * 9_000) for _ in range(5)]  # 45 KB: fits
        blocked = asyncio.ensure_future(producer.send(topic, b"y" * 9_000))
        await asyncio.sleep(0)
        assert not blocked.done()  # waits for memory until earlier records are delivered
        assert producer._acc.buffered <= 50_000
        futures.append(await blocked)
        for _ in range(30):
            futures.append(await producer.send(topic, b"z" * 9_000))
            assert producer._acc.buffered <= 50_000
        offsets = [(await f).offset for f in futures]
    assert offsets == list(range(36))
    records = await consume(broker.bootstrap_servers, topic, 36)
    assert [len(r.value or b"") for r in records] == [9_000] * 36


async def test_sends_waiting_for_memory_keep_their_order(broker: RunningBroker, topic: str) -> None:
    """Sends started together, large and small, land in the order they were called.

    The third 400 KB record waits for buffer memory; the 2-byte records started after
    it would fit at once, but must wait their turn rather than join the open batch first.
    """
    async with producer_for(broker, buffer_memory=1_000_000, max_batch_size=500_000, linger_ms=1000) as producer:
        await producer.partitions_for(topic)
        values = [(b"%04d" % i) * 100_000 if i % 3 == 0 else b"%02d" % i for i in range(30)]
        futures = await asyncio.gather(*(producer.send(topic, value) for value in values))
        assert producer._acc.buffered <= 1_000_000
        offsets = [(await f).offset for f in futures]
    assert offsets == sorted(offsets)
    records = await consume(broker.bootstrap_servers, topic, len(values))
    assert [r.value for r in records] == values


async def test_linger_holds_a_lone_record(broker: RunningBroker, topic: str) -> None:
    async with producer_for(broker, linger_ms=300) as producer:
        await producer.send_and_wait(topic, b"warm-up")  # metadata and connection in place
        started = time.monotonic()
        first = await producer.send(topic, b"a")
        second = await producer.send(topic, b"b")
        assert (await first).offset + 1 == (await second).offset
        assert 0.29 <= time.monotonic() - started < 5


# -- flush, stop, metadata --------------------------------------------------------------------


async def test_flush_and_stop_deliver_everything(broker: RunningBroker, topic: str) -> None:
    producer = producer_for(broker, linger_ms=1000)
    await producer.start()
    first = [await producer.send(topic, f"a{i}".encode()) for i in range(5000)]
    started = time.monotonic()
    await producer.flush()
    assert time.monotonic() - started < 1.0  # flush does not wait for the linger
    assert all(f.done() for f in first)
    second = [await producer.send(topic, f"b{i}".encode()) for i in range(5000)]
    await producer.stop()
    assert all(f.done() and f.exception() is None for f in second)
    records = await consume(broker.bootstrap_servers, topic, 10_000)
    assert [r.value for r in records] == [f"a{i}".encode() for i in range(5000)] + [
        f"b{i}".encode() for i in range(5000)
    ]


async def test_metadata_refresh_after_topic_creation(
    broker: RunningBroker, topic_factory: Callable[[], str]
) -> None:
    topic = topic_factory()
    async with producer_for(broker) as producer:
        await producer.send_and_wait(topic_factory(), b"warm-up")  # metadata loaded before the topic exists
        await create_topic(broker.bootstrap_servers, topic, 4)
        meta = await producer.send_and_wait(topic, b"late", partition=3)
        assert (meta.partition, meta.offset) == (3, 0)
        with pytest.raises(UnknownTopicOrPartitionError, match="partition 9"):
            await producer.send(topic, b"nowhere", partition=9)


# -- failures ---------------------------------------------------------------------------------


async def test_retries_across_a_broker_restart(broker_min_process: BrokerMinProcess, topic: str) -> None:
    settings = {"request_timeout_ms": 3000, "delivery_timeout_ms": 30_000, "retry_backoff_ms": 50}
    async with Producer(bootstrap_servers=broker_min_process.bootstrap_servers, **settings) as producer:
        assert (await producer.send_and_wait(topic, b"before")).offset == 0
        broker_min_process.kill()
        pending = [await producer.send(topic, f"during-{i}".encode()) for i in range(10)]
        await asyncio.sleep(0.5)
        assert not any(f.done() for f in pending)
        await asyncio.to_thread(broker_min_process.restart)
        offsets = [(await f).offset for f in pending]
    assert offsets == list(range(1, 11))
    records = await consume(broker_min_process.bootstrap_servers, topic, 11)
    assert [r.value for r in records] == [b"before"] + [f"during-{i}".encode() for i in range(10)]


async def test_records_sent_during_an_outage_keep_their_own_delivery_timeout(
    broker_min_process: BrokerMinProcess, topic: str
) -> None:
    """A full batch keeps growing until the sender takes it, but not one the sender cannot send:
    a record sent a while into an outage starts a batch (and a delivery timeout) of its own."""
    settings = {"request_timeout_ms": 500, "delivery_timeout_ms": 2000, "retry_backoff_ms": 50}
    producer = Producer(bootstrap_servers=broker_min_process.bootstrap_servers, **settings)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"before")
        broker_min_process.kill()
        await asyncio.sleep(0.5)  # the connection is seen closed: the next batch waits, unsent
        first = await producer.send(topic, b"early")
        await asyncio.sleep(1.2)
        second = await producer.send(topic, b"late")
        with pytest.raises(KafkaTimeoutError):
            await first
        failed_at = time.monotonic()
        assert not second.done()  # not expired with the first one's batch
        with pytest.raises(KafkaTimeoutError):
            await second
        assert time.monotonic() - failed_at > 0.8
    finally:
        await producer.stop()


async def test_delivery_timeout_fails_records(broker_min_process: BrokerMinProcess, topic: str) -> None:
    settings = {"request_timeout_ms": 500, "delivery_timeout_ms": 1500, "retry_backoff_ms": 50}
    producer = Producer(bootstrap_servers=broker_min_process.bootstrap_servers, **settings)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"before")
        broker_min_process.kill()
        started = time.monotonic()
        future = await producer.send(topic, b"lost")
        with pytest.raises(KafkaTimeoutError):
            await future
        assert 1.0 < time.monotonic() - started < 10
    finally:
        await producer.stop()


_FIRST_SEND_SCRIPT = """
import asyncio, sys
from kafkakit.producer import Producer
from kafkakit.protocol.framing import ApiKey

async def main(bootstrap, topic):
    async with Producer(bootstrap_servers=bootstrap) as producer:
        conn = await producer._cluster.any_connection()
        loaded_at_start = f"kio.schema.produce.v{conn.version(ApiKey.PRODUCE)}.request" in sys.modules
        await producer.partitions_for(topic)
        metadata = await (await producer.send(topic, b"first", partition=0))
        print(loaded_at_start, metadata.offset)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_start_builds_the_produce_request_classes(broker: RunningBroker, topic: str) -> None:
    """kio builds a message's classes on first use (20-50 ms for Produce): start() does it, so
    that the first send does not wait for it. A fresh interpreter, where nothing loaded them."""
    import subprocess
    import sys

    await create_topic(broker.bootstrap_servers, topic, 1)
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _FIRST_SEND_SCRIPT, broker.bootstrap_servers, topic],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["True", "0"]  # loaded by start(); then the record is delivered
