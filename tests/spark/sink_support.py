"""Helpers for the sink tests: create topics, read a topic back, run coroutines from sync tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.structs import ConsumerRecord

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def _create(bootstrap: str, topics: dict[str, int]) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 1) for name, partitions in topics.items()])


def create_topics(bootstrap: str, **topics: int) -> None:
    """``create_topics(bootstrap, name=partitions, ...)`` (names with '-' via a dict: use create_topic_map)."""
    run(_create(bootstrap, topics))


def create_topic_map(bootstrap: str, topics: dict[str, int]) -> None:
    run(_create(bootstrap, topics))


async def _read(
    bootstrap: str, topic: str, isolation: str, settle_s: float
) -> list[ConsumerRecord[Any, Any]]:
    consumer = Consumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    async with consumer:
        async with Admin(bootstrap_servers=bootstrap) as admin:
            (description,) = await admin.describe_topics([topic])
        parts = [p.partition for p in description.partitions]
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await _stable_ends(bootstrap, consumer, tps)
        records: list[ConsumerRecord[Any, Any]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= ends[tp] for tp in tps):
                break
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
        else:
            raise AssertionError(f"could not read {topic} to its end {ends} within 30s")
        if settle_s:
            await asyncio.sleep(settle_s)
        return records


async def _stable_ends(
    bootstrap: str, consumer: Consumer, tps: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """End offsets; under read_committed, wait (up to 10 s) for pending transaction markers.

    EndTxn returns before the markers are written, so right after a commit the
    LSO may still be behind the high watermark for a moment.
    """
    async with Consumer(bootstrap_servers=bootstrap) as plain:
        deadline = time.monotonic() + 10
        while True:
            ends = await consumer.end_offsets(tps)
            if ends == await plain.end_offsets(tps) or time.monotonic() > deadline:
                return ends
            await asyncio.sleep(0.05)


def read_topic(
    bootstrap: str, topic: str, *, isolation: str = "read_committed"
) -> list[ConsumerRecord[Any, Any]]:
    """Every record of ``topic`` up to its end offset (the LSO under read_committed)."""
    return run(_read(bootstrap, topic, isolation, 0))


async def _produce(bootstrap: str, topic: str, values: Iterable[bytes], partitions: int) -> None:
    async with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as producer:
        futures = [
            await producer.send(topic, value, key=value, partition=i % partitions)
            for i, value in enumerate(values)
        ]
        await asyncio.gather(*futures)


def produce(bootstrap: str, topic: str, values: Iterable[bytes], partitions: int = 1) -> None:
    run(_produce(bootstrap, topic, values, partitions))
