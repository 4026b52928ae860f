"""Consumer.fetch_range: a known offset range of one partition, as records or as numpy columns.

Runs against every broker kind. The Spark source reads through this API, so
its guarantees are checked here directly: exactly the visible records of the
range, read_committed filtering, gaps skipped, the range's end honoured, and
clear errors for a range outside the log or records that never become visible.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafkakit import Consumer, FetchedRange, Producer, TopicPartition
from kafkakit.errors import KafkaTimeoutError, OffsetOutOfRangeError

from tests.test_consumer import setup_topic


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap_servers)


async def _collect(pieces: Any) -> list[FetchedRange]:
    return [piece async for piece in pieces]


def _flatten(pieces: list[FetchedRange]) -> list[tuple[int, bytes | None, bytes | None, tuple[Any, ...]]]:
    return [(r.offset, r.key, r.value, tuple(r.headers)) for piece in pieces for r in piece.records()]


def _flatten_columns(pieces: list[FetchedRange]) -> list[tuple[int, bytes | None, bytes | None, tuple[Any, ...]]]:
    out = []
    for piece in pieces:
        columns = piece.columns()
        headers = columns.headers or [()] * len(columns)
        out.extend(zip(columns.offsets.tolist(), columns.keys(), columns.values(), map(tuple, headers), strict=True))
    return out


@pytest.mark.parametrize("compression", [None, "lz4"])
async def test_a_range_as_records_and_as_columns(bootstrap: str, topic: str, compression: str | None) -> None:
    await setup_topic(bootstrap, topic)
    sent = []
    async with Producer(bootstrap_servers=bootstrap, compression_type=compression, max_batch_size=4096) as producer:
        for i in range(3000):
            key = None if i % 3 else b"k%d" % i
            value = None if i % 97 == 0 else b"v%d" % i * (1 + i % 4)
            headers = [("h", b"%d" % i)] if i % 50 == 0 else None
            sent.append((i, key, value, tuple(headers or ())))
            await producer.send(topic, value, key=key, partition=0, headers=headers)
            if i % 300 == 299:
                await producer.flush()  # batches of 300 records: a 16 KiB fetch holds a few of them
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=bootstrap, max_partition_fetch_bytes=16384) as consumer:
        pieces = await _collect(consumer.fetch_range(tp, 123, 2877))
        assert len(pieces) > 1  # small fetches: the range comes in several responses
        assert _flatten(pieces) == sent[123:2877]
        assert _flatten_columns(pieces) == sent[123:2877]
        assert pieces[0].start == 123 and pieces[-1].next_offset == 2877
        assert all(p.high_watermark == 3000 for p in pieces)
        assert await _collect(consumer.fetch_range(tp, 10, 10)) == []


async def test_read_committed_ranges_skip_aborted_records_and_markers(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    async with Producer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-txn") as producer:
        await producer.init_transactions()
        for round_ in range(6):
            async with producer.transaction() if round_ % 2 == 0 else _aborting(producer):
                for i in range(50):
                    await producer.send(topic, b"%d-%d" % (round_, i), partition=0)
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed") as consumer:
        (end,) = (await consumer.end_offsets([tp])).values()
        pieces = await _collect(consumer.fetch_range(tp, 0, end))
    values = [r[2] for r in _flatten(pieces)]
    assert values == [b"%d-%d" % (r, i) for r in (0, 2, 4) for i in range(50)]
    assert [r[2] for r in _flatten_columns(pieces)] == values
    async with Consumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted") as consumer:
        everything = _flatten(await _collect(consumer.fetch_range(tp, 0, end)))
    assert len(everything) == 300  # aborted records too, never the markers


class _aborting:
    """``async with``: a transaction that is aborted at the end."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer

    async def __aenter__(self) -> None:
        self.producer.begin_transaction()

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.flush()
        await self.producer.abort_transaction()


async def test_a_range_outside_the_log_and_records_that_never_come(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(10):
            await producer.send(topic, b"%d" % i, partition=0)
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=100) as consumer:
        with pytest.raises(OffsetOutOfRangeError):
            await _collect(consumer.fetch_range(tp, 50, 60))
        with pytest.raises(KafkaTimeoutError, match="no records of .* at offset 10"):
            await _collect(consumer.fetch_range(tp, 5, 15, wait_timeout_ms=800))
        with pytest.raises(ValueError):
            consumer.fetch_range(tp, 5, 4)


async def test_a_range_waits_for_records_still_being_written(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    tp = TopicPartition(topic, 0)
    async with Producer(bootstrap_servers=bootstrap) as producer, Consumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=100) as consumer:
        reading = asyncio.create_task(_collect(consumer.fetch_range(tp, 0, 40)))
        for i in range(40):
            await producer.send_and_wait(topic, b"%d" % i, partition=0)
            await asyncio.sleep(0.005)
        pieces = await asyncio.wait_for(reading, 30)
    assert [r[2] for r in _flatten(pieces)] == [b"%d" % i for i in range(40)]
