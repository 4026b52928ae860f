"""The end-to-end suite: kafkakit's producer and consumer against each broker.

Runs against every broker the `broker` fixture yields (broker_min and Apache
Kafka by default), over real sockets, with nothing mocked.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.errors import OffsetOutOfRangeError

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def _create(bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(name, num_partitions=partitions, configs=configs or {})])


async def _consume(bootstrap: str, tps: list[TopicPartition], count: int, *, timeout: float = 30.0, **kwargs: object) -> list:
    records: list = []
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **kwargs) as consumer:  # type: ignore[arg-type]
        consumer.assign(tps)
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(batch)
    return records


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
async def test_roundtrip_every_codec(broker, codec: str | None) -> None:
    topic = _name(f"codec-{codec or 'none'}")
    await _create(broker.bootstrap_servers, topic)
    sent = []
    now = int(time.time() * 1000)
    async with Producer(bootstrap_servers=broker.bootstrap_servers, compression_type=codec, linger_ms=5) as producer:
        futures = []
        for i in range(500):
            key = None if i % 7 == 0 else f"k{i}".encode()
            value = None if i % 11 == 0 else (f"v{i}-" * (i % 5 + 1)).encode()
            headers = [("h", str(i).encode()), ("none", None)] if i % 3 == 0 else []
            sent.append((key, value, now - i, headers))
            futures.append(await producer.send(topic, value, key=key, partition=0, timestamp_ms=now - i, headers=headers))
        metadata = await asyncio.gather(*futures)
    assert [m.offset for m in metadata] == list(range(500))
    got = await _consume(broker.bootstrap_servers, [TopicPartition(topic, 0)], 500)
    assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in got] == sent
    assert [r.offset for r in got] == list(range(500))


async def test_keyed_records_spread_over_partitions_like_java(broker, monkeypatch) -> None:
    """Each key lands where Java puts it, also when the producer's memory of recent keys (made
    small here) is cleared while the keys come round again."""
    from kafkakit.producer import topic_state

    monkeypatch.setattr(topic_state, "KEYS_REMEMBERED", 16)
    topic = _name("keyed")
    await _create(broker.bootstrap_servers, topic, partitions=6)
    keys = [f"key-{i % 120}".encode() for i in range(300)]  # 120 keys, most sent 2-3 times
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        futures = [await producer.send(topic, b"v", key=key) for key in keys]
        metadata = await asyncio.gather(*futures)
    from kafkakit.producer.partitioner import (
        partition_for_key as murmur2_partition,  # the Java-compatible choice
    )

    for key, md in zip(keys, metadata, strict=True):
        assert md.partition == murmur2_partition(key, 6)
    tps = [TopicPartition(topic, p) for p in range(6)]
    got = await _consume(broker.bootstrap_servers, tps, 300)
    assert len(got) == 300
    assert {r.partition for r in got} == set(range(6))
    for r in got:
        assert r.partition == murmur2_partition(r.key, 6)


async def test_large_records_1mb(broker) -> None:
    topic = _name("large")
    await _create(broker.bootstrap_servers, topic, configs={"max.message.bytes": str(2 << 20)})
    big = bytes(range(256)) * 4096  # 1 MiB
    async with Producer(bootstrap_servers=broker.bootstrap_servers, max_request_size=3 << 20) as producer:
        for i in range(3):
            await producer.send_and_wait(topic, big + bytes([i]), partition=0)
    got = await _consume(broker.bootstrap_servers, [TopicPartition(topic, 0)], 3, max_partition_fetch_bytes=1 << 20)
    assert [r.value for r in got] == [big + bytes([i]) for i in range(3)]


async def test_empty_topic_returns_nothing(broker) -> None:
    topic = _name("empty")
    await _create(broker.bootstrap_servers, topic)
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        started = time.monotonic()
        assert await consumer.getmany(timeout_ms=700) == {}
        assert time.monotonic() - started >= 0.6
        assert (await consumer.end_offsets([tp]))[tp] == 0
        assert (await consumer.beginning_offsets([tp]))[tp] == 0


async def test_seek_offsets_for_times_and_positions(broker) -> None:
    topic = _name("seek")
    await _create(broker.bootstrap_servers, topic)
    tp = TopicPartition(topic, 0)
    base = int(time.time() * 1000) - 100_000
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        for i in range(100):
            await producer.send(topic, f"v{i}".encode(), partition=0, timestamp_ms=base + i * 10)
        await producer.flush()
    async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 42)
        first = await consumer.getone()
        assert (first.offset, first.value) == (42, b"v42")
        found = await consumer.offsets_for_times({tp: base + 555})
        assert found[tp] is not None and found[tp].offset == 56 and found[tp].timestamp == base + 560
        assert (await consumer.offsets_for_times({tp: base + 10_000_000}))[tp] is None
        await consumer.seek_to_end(tp)
        assert await consumer.position(tp) == 100
        await consumer.seek_to_beginning(tp)
        assert await consumer.position(tp) == 0
        assert (await consumer.getone()).offset == 0


async def test_auto_offset_reset_none_raises(broker) -> None:
    topic = _name("reset")
    await _create(broker.bootstrap_servers, topic)
    tp = TopicPartition(topic, 0)
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        await producer.send_and_wait(topic, b"x", partition=0)
    async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        with pytest.raises(OffsetOutOfRangeError):
            await consumer.getmany(timeout_ms=3000)
    async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)  # out of range: reset to earliest
        assert (await consumer.getone()).value == b"x"


async def test_latest_reset_sees_only_new_records(broker) -> None:
    topic = _name("latest")
    await _create(broker.bootstrap_servers, topic)
    tp = TopicPartition(topic, 0)
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        await producer.send_and_wait(topic, b"old", partition=0)
        async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="latest") as consumer:
            consumer.assign([tp])
            assert await consumer.position(tp) == 1
            await producer.send_and_wait(topic, b"new", partition=0)
            record = await asyncio.wait_for(consumer.getone(), 10)
            assert record.value == b"new"


async def test_async_iteration_and_pause_resume(broker) -> None:
    topic = _name("iter")
    await _create(broker.bootstrap_servers, topic, partitions=2)
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        for i in range(20):
            await producer.send(topic, str(i).encode(), partition=i % 2)
        await producer.flush()
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp0, tp1])
        consumer.pause(tp1)
        got = await consumer.getmany(timeout_ms=2000)
        assert set(got) == {tp0}
        consumer.resume(tp1)
        values = [r.value for records in got.values() for r in records]
        assert len(values) == 10
        async for record in consumer:
            assert record.partition == 1
            values.append(record.value)
            if len(values) == 20:
                break
        assert sorted(values, key=int) == [str(i).encode() for i in range(20)]


async def test_client_restart_resumes_from_position(broker) -> None:
    """A fresh producer and consumer pick up where the previous ones left off."""
    topic = _name("restart")
    await _create(broker.bootstrap_servers, topic)
    tp = TopicPartition(topic, 0)
    for round_ in range(3):
        async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
            for i in range(10):
                await producer.send(topic, f"{round_}-{i}".encode(), partition=0)
    got = await _consume(broker.bootstrap_servers, [tp], 30)
    assert [r.value for r in got] == [f"{r}-{i}".encode() for r in range(3) for i in range(10)]
