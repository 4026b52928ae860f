"""Real third-party clients against broker_min running in this process.

confluent-kafka is synchronous (librdkafka threads), so its calls run in a
worker thread while the broker keeps serving on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kafkakit.broker import Broker

N = 1000


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with Broker(tmp_path) as b:
        yield b


Received = tuple[bytes, bytes, list[tuple[str, bytes]], int]


def _confluent_round_trip(bootstrap: str, topic: str) -> list[Received]:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    futures[topic].result(10)

    # Note: librdkafka only really compresses with lz4 once the broker advertises
    # FindCoordinator (its "LZ4" feature check); until the coordinators land it sends
    # these batches uncompressed (tests/interop checks the stored codec).
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 5, "acks": "all"}
    )
    errors: list[object] = []
    for i in range(N):
        producer.produce(
            topic,
            key=f"key-{i % 17}".encode(),
            value=f"value-{i}".encode(),
            headers=[("seq", str(i).encode())],
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(15) == 0
    assert errors == []

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    out: list[Received] = []
    deadline = 200
    while len(out) < N and deadline:
        deadline -= 1
        for msg in consumer.consume(500, timeout=0.1):
            assert msg.error() is None, msg.error()
            out.append((msg.key(), msg.value(), msg.headers(), msg.partition()))  # type: ignore[arg-type]
    consumer.close()
    return out


@pytest.mark.interop
async def test_confluent_kafka_produce_and_consume(broker: Broker) -> None:
    received = await asyncio.to_thread(_confluent_round_trip, broker.bootstrap_servers, "confluent-smoke")
    assert len(received) == N
    assert sorted(int(v.decode().split("-")[1]) for _, v, _, _ in received) == list(range(N))
    by_key: dict[bytes, set[int]] = {}
    for key, value, headers, partition in received:
        assert headers == [("seq", value.split(b"-")[1])]
        by_key.setdefault(key, set()).add(partition)
    assert all(len(parts) == 1 for parts in by_key.values())  # keyed records stay on one partition
    seqs_per_partition: dict[int, list[int]] = {}
    for _, value, _, partition in received:
        seqs_per_partition.setdefault(partition, []).append(int(value.split(b"-")[1]))
    assert all(s == sorted(s) for s in seqs_per_partition.values())  # order kept within a partition


@pytest.mark.interop
async def test_aiokafka_produce_and_consume(broker: Broker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = "aiokafka-smoke"
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap_servers, compression_type="lz4", linger_ms=5
    )
    await producer.start()
    try:
        sends = [
            await producer.send(
                topic, key=f"k{i % 7}".encode(), value=f"v{i}".encode(), headers=[("seq", str(i).encode())]
            )
            for i in range(N)
        ]
        metadata = await asyncio.gather(*sends)
    finally:
        await producer.stop()
    assert {m.topic for m in metadata} == {topic}  # auto-created by Metadata

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    try:
        out: list[Any] = []
        while len(out) < N:
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 10)
            for records in batches.values():
                out.extend(records)
    finally:
        await consumer.stop()
    assert [r.value for r in out] == [f"v{i}".encode() for i in range(N)]
    assert all(r.headers == (("seq", str(i).encode()),) for i, r in enumerate(out))
    assert [r.offset for r in out] == list(range(N))


@pytest.mark.interop
async def test_aiokafka_survives_restart(tmp_path: Path) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async with Broker(tmp_path, port=0) as broker:
        port = broker.port
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        await producer.start()
        for i in range(50):
            await producer.send_and_wait("restart", f"r{i}".encode())
        await producer.stop()
    async with Broker(tmp_path, port=port) as broker:
        consumer = AIOKafkaConsumer(
            "restart", bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            out: list[bytes | None] = []
            while len(out) < 50:
                for records in (await asyncio.wait_for(consumer.getmany(timeout_ms=500), 10)).values():
                    out.extend(r.value for r in records)
        finally:
            await consumer.stop()
    assert out == [f"r{i}".encode() for i in range(50)]
