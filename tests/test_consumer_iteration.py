"""``async for record in consumer``: records handed out one by one from the decoded piece.

The fast path skips getone() while the piece lasts, so these tests pin what it
must keep: order, the position after every record, seek/pause/unassign taking
effect on the very next record, and the group still seeing a live member.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafkakit import Consumer, Producer, TopicPartition

from tests.test_consumer import setup_topic


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap_servers)


async def _fill(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    await setup_topic(bootstrap, topic, partitions)
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(count):
            await producer.send(topic, b"%d" % i, partition=i % partitions)


async def test_positions_follow_every_record(bootstrap: str, topic: str) -> None:
    await _fill(bootstrap, topic, 3000)
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        seen = 0
        async for record in consumer:
            assert record.offset == seen and record.value == b"%d" % seen
            seen += 1
            assert await consumer.position(tp) == seen  # never ahead of what the application has
            if seen == 3000:
                break


async def test_seek_and_pause_apply_to_the_next_record(bootstrap: str, topic: str) -> None:
    await _fill(bootstrap, topic, 2000, partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp0, tp1])
        first = await anext(consumer)
        consumer.seek(TopicPartition(first.topic, first.partition), 500)
        after_seek = await anext(consumer)
        if (after_seek.topic, after_seek.partition) == (first.topic, first.partition):
            assert after_seek.offset == 500  # the rest of the old piece was dropped
        consumer.pause(tp0)
        for _ in range(300):
            record = await anext(consumer)
            assert record.partition == 1  # nothing of a paused partition, not even its decoded piece
        consumer.resume(tp0)
        consumer.assign([tp0])  # tp1 unassigned: its decoded piece must not leak out
        for _ in range(50):
            assert (await anext(consumer)).partition == 0


async def test_a_group_member_reading_with_async_for_stays_in_the_group(bootstrap: str, topic: str) -> None:
    await _fill(bootstrap, topic, 1000)
    async with Consumer(
        topic, bootstrap_servers=bootstrap, group_id=f"{topic}-g", auto_offset_reset="earliest",
        max_poll_interval_ms=3000, session_timeout_ms=6000, heartbeat_interval_ms=500,
    ) as consumer:  # fmt: skip
        values = []
        async for record in consumer:
            values.append(record.value)
            if len(values) <= 400:
                await asyncio.sleep(0.01)  # 4 s of slow processing inside one decoded piece > max_poll_interval_ms
            if len(values) == 1000:
                break
        assert values == [b"%d" % i for i in range(1000)]
        await consumer.commit()
        assert await consumer.committed(TopicPartition(topic, 0)) == 1000
