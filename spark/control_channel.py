"""A compacted topic's live records, read incrementally by clients a worker keeps between calls.

The exactly-once sink reads its control topic at the start of every task and
twice per micro-batch on the driver side, and writes it twice per batch.  With
a fresh Consumer or Producer each time, every one of those paid a connection,
metadata, ListOffsets and (for the producer) InitProducerId: about 4 ms a read
and 3 ms a write on a local Apache Kafka, and several times that inside a busy
Spark worker.  A :class:`ControlChannel` keeps one started Consumer and one
idempotent Producer for the life of the worker's event loop
(:mod:`kafkakit.spark.runtime`), and remembers the latest value of each key, so
a read fetches only what was appended since the last one.

Why the incremental view equals a full re-read of the compacted topic: records
are applied in offset order, the latest value per key wins, and a tombstone
removes its key.  Compaction only drops records that a later record of the same
key supersedes, so a reader that already passed them loses nothing; the one
thing it could miss is a tombstone removed (after ``delete.retention.ms``, 24 h
by default) before this reader got to it.  A channel whose last read is older
than :data:`FULL_READ_AFTER_S` therefore reads the topic from the beginning
again, as it does when the topic's end moved backwards (deleted and re-created)
or after any error (the channel is closed and a new one made).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from kafkakit import Consumer, Producer, TopicPartition

#: A view older than this is rebuilt from the beginning of the topic (well inside the
#: default delete.retention.ms of 24 h, so no tombstone can have been missed).
FULL_READ_AFTER_S = 600.0


class ControlChannel:
    """Reads and writes one single-partition compacted topic with clients kept between calls.

    ``new_consumer`` should make a consumer with ``fetch_max_wait_ms=0``: the channel reads
    only up to an end it just looked up, so a fetch never has to wait for new records.
    """

    def __init__(
        self,
        topic: str,
        new_consumer: Callable[[], Consumer],
        new_producer: Callable[[], Producer],
    ) -> None:
        self.topic = topic
        self._tp = TopicPartition(topic, 0)
        self._new_consumer = new_consumer
        self._new_producer = new_producer
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._latest: dict[str, bytes] = {}
        self._position = 0
        self._read_at = 0.0
        self._lock = asyncio.Lock()

    async def snapshot(self) -> dict[str, bytes]:
        """The latest value of every live key, reading up to the topic's current end."""
        async with self._lock:
            consumer = self._consumer
            if consumer is None:
                consumer = self._new_consumer()
                await consumer.start()
                self._consumer = consumer
                consumer.assign([self._tp])
                self._position, self._read_at = -1, 0.0
            end = (await consumer.end_offsets([self._tp]))[self._tp]
            stale = time.monotonic() - self._read_at > FULL_READ_AFTER_S
            if self._position < 0 or stale or end < self._position:
                self._latest.clear()
                await consumer.seek_to_beginning(self._tp)
                self._position = await consumer.position(self._tp)
            elif self._position < end:
                consumer.seek(self._tp, self._position)
            if self._position < end:
                consumer.resume(self._tp)
            while self._position < end:
                batches = await consumer.getmany(self._tp, timeout_ms=500)
                for record in batches.get(self._tp, ()):
                    if record.key is not None:
                        key = bytes(record.key).decode()
                        if record.value is None:
                            self._latest.pop(key, None)
                        else:
                            self._latest[key] = bytes(record.value)
                self._position = await consumer.position(self._tp)
            # No fetching between reads: a fetch left waiting at the end of the topic would hold
            # the next read up for the consumer's fetch_max_wait_ms.
            consumer.pause(self._tp)
            self._read_at = time.monotonic()
            return dict(self._latest)

    async def write(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Write ``records`` (key, value or None for a tombstone) and wait for every acknowledgement."""
        producer = self._producer
        if producer is None:
            producer = self._new_producer()
            await producer.start()
            self._producer = producer
        futures = [await producer.send(self.topic, value, key=key, partition=0) for key, value in records]
        await asyncio.gather(*futures)

    async def close(self) -> None:
        """Stop both clients (a closed channel starts new ones if used again)."""
        consumer, self._consumer = self._consumer, None
        producer, self._producer = self._producer, None
        try:
            if consumer is not None:
                await consumer.stop()
        finally:
            if producer is not None:
                await producer.stop()


class ChannelCache:
    """The channels of one event loop, by settings; a channel that failed is closed and forgotten."""

    def __init__(self) -> None:
        self._channels: dict[Any, ControlChannel] = {}

    def get(self, key: Any, make: Callable[[], ControlChannel]) -> ControlChannel:
        channel = self._channels.get(key)
        if channel is None:
            channel = self._channels[key] = make()
        return channel

    async def close_all(self) -> None:
        """Close every channel (the worker is exiting)."""
        while self._channels:
            await self._channels.pop(next(iter(self._channels))).close()

    async def discard(self, key: Any) -> None:
        channel = self._channels.pop(key, None)
        if channel is not None:
            await channel.close()


__all__ = ["FULL_READ_AFTER_S", "ChannelCache", "ControlChannel"]
