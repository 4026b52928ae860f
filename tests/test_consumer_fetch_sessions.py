"""The consumer's KIP-227 fetch sessions, against every broker kind.

A consumer of many partitions must read everything exactly once while
partitions are paused, resumed, seeked and reassigned, with most Fetch
requests incremental and carrying far fewer partitions than it owns; a session
the broker dropped (evicted) is restarted without losing or repeating records.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.broker import Broker

TOPICS = 4
PARTITIONS = 50  # 200 partitions in all


async def _fill(bootstrap: str, prefix: str, per_partition: int) -> list[TopicPartition]:
    names = [f"{prefix}-{i}" for i in range(TOPICS)]
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(name, PARTITIONS, 1) for name in names])
    tps = [TopicPartition(name, p) for name in names for p in range(PARTITIONS)]
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for tp in tps:
            for i in range(per_partition):
                await producer.send(tp.topic, b"%s-%d-%d" % (tp.topic.encode(), tp.partition, i), partition=tp.partition)
    return tps


async def _read(consumer: Consumer, want: int, seen: dict[TopicPartition, list[int]]) -> None:
    got = sum(map(len, seen.values()))
    while got < want:
        for tp, records in (await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)).items():
            seen.setdefault(tp, []).extend(r.offset for r in records)
            got += len(records)


async def test_many_partitions_read_exactly_once_with_incremental_fetches(broker: Any, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    tps = await _fill(bootstrap, topic, 20)
    seen: dict[TopicPartition, list[int]] = {}
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign(tps)
        await _read(consumer, 1000, seen)
        paused = tps[:50]
        consumer.pause(*paused)
        await _read(consumer, 2000, seen)
        consumer.resume(*paused)
        kept = tps[:150] + [tps[-1]]
        consumer.assign(kept)  # 49 partitions leave
        consumer.seek(tps[-1], 0)  # and one is read again from the start
        seen = {tp: offsets for tp, offsets in seen.items() if tp in kept and tp != tps[-1]}
        await _read(consumer, len(kept) * 20, seen)
        before = consumer.fetch_session_stats()
        for _ in range(10):  # all caught up: the fetches go on, with nothing to say
            assert await consumer.getmany(timeout_ms=100) == {}
        stats = consumer.fetch_session_stats()
    for tp in kept:
        assert sorted(seen[tp]) == list(range(20)), tp  # every record once
    # Incremental requests after the first full one per broker carry only what changed.
    assert stats["incremental_requests"] > stats["full_requests"] >= 1
    idle_requests = stats["requests"] - before["requests"]
    assert idle_requests >= 3 and stats["partitions_sent"] == before["partitions_sent"], (before, stats)


async def test_an_evicted_session_restarts_without_loss(tmp_path: Path) -> None:
    async with Broker(tmp_path / "data", max_incremental_fetch_session_cache_slots=1) as broker:
        bootstrap = broker.bootstrap_servers
        tps = await _fill(bootstrap, "evict", 10)
        consumers = [
            Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50,
                     max_partition_fetch_bytes=300)  # fmt: skip
            for _ in range(2)
        ]
        seen: list[dict[TopicPartition, list[int]]] = [{}, {}]
        try:
            for consumer in consumers:
                await consumer.start()
                consumer.assign(tps)
            # One slot, two consumers: each new session evicts the other's, again and again.
            await asyncio.gather(*(_read(c, len(tps) * 10, s) for c, s in zip(consumers, seen, strict=True)))
            async with Producer(bootstrap_servers=bootstrap) as producer:  # more records, read on evicted sessions
                for tp in tps:
                    await producer.send(tp.topic, b"late", partition=tp.partition)
            await asyncio.gather(*(_read(c, len(tps) * 11, s) for c, s in zip(consumers, seen, strict=True)))
            for _ in range(5):
                await asyncio.gather(*(c.getmany(timeout_ms=100) for c in consumers))
            resets = sum(c.fetch_session_stats()["session_resets"] for c in consumers)
            evictions = broker.state.fetch_sessions.evictions
        finally:
            for consumer in consumers:
                await consumer.stop()
    for per_consumer in seen:
        assert all(sorted(per_consumer[tp]) == list(range(11)) for tp in tps)
    assert resets >= 1 and evictions >= 1
