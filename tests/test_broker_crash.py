"""broker_min killed with SIGKILL keeps every acknowledged record, and recovers a torn tail."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition

from tests.brokers import BrokerMinProcess


async def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    async with Producer(bootstrap_servers=bootstrap, acks="all", compression_type="lz4") as producer:
        futures = [await producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2) for i in range(start, start + count)]
        await asyncio.gather(*futures)


async def _read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    values: list[bytes] = []
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        while len(values) < expected:
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            if not batches:
                break
            for records in batches.values():
                values.extend(r.value for r in records)
    return values


async def test_acknowledged_records_survive_sigkill(broker_min_process: BrokerMinProcess) -> None:
    bootstrap = broker_min_process.bootstrap_servers
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic("crash", num_partitions=2)])
    await _produce(bootstrap, "crash", 0, 2000)
    broker_min_process.kill()
    broker_min_process.restart()
    await _produce(bootstrap, "crash", 2000, 1000)
    values = await _read_all(bootstrap, "crash", 3000)
    assert sorted(values, key=lambda v: int(v[1:])) == [f"v{i}".encode() for i in range(3000)]


async def test_torn_tail_is_truncated_and_intact_records_kept(broker_min_process: BrokerMinProcess) -> None:
    bootstrap = broker_min_process.bootstrap_servers
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic("torn", num_partitions=2)])
    await _produce(bootstrap, "torn", 0, 500)
    broker_min_process.kill()
    # A crash in the middle of a write leaves half a batch at the end of the active segment.
    data_dir = Path(broker_min_process.data_dir)
    for partition in (0, 1):
        segment = sorted((data_dir / f"torn-{partition}").glob("*.log"))[-1]
        with segment.open("ab") as f:
            f.write(b"\x00\x00\x00\x00\x00\x00\x01\xf4\x00\x00\x10\x00" + b"\xab" * 40)
    broker_min_process.restart()
    values = await _read_all(bootstrap, "torn", 500)
    assert sorted(values, key=lambda v: int(v[1:])) == [f"v{i}".encode() for i in range(500)]
    # The log accepts appends right after the truncated tail.
    await _produce(bootstrap, "torn", 500, 10)
    values = await _read_all(bootstrap, "torn", 510)
    assert len(values) == 510
