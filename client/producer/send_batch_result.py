"""What ``Producer.send_batch`` returns: an awaitable of where each record of the call landed."""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Awaitable, Generator, Sequence
from typing import Any, overload

from kafkakit.producer.accumulator import BatchResult, ProducerBatch
from kafkakit.structs import RecordMetadata, TopicPartition

__all__ = ["SendBatchFuture", "SendBatchResult"]


class SendBatchResult(Sequence[RecordMetadata]):
    """Where a ``send_batch`` call's records landed.

    A lazy sequence: ``result[i]`` is the RecordMetadata of ``values[i]`` (built on
    access), ``len(result)`` the record count, and ``ranges`` lists each batch as
    ``(TopicPartition, base_offset, record_count)`` in the order they were queued.
    """

    def __init__(
        self,
        topic: str,
        count: int,
        timestamp_ms: int,
        parts: list[tuple[ProducerBatch, range | list[int], BatchResult]],
    ) -> None:
        self.topic = topic
        self._count = count
        self._timestamp = timestamp_ms
        self._parts = parts
        self._where: tuple[list[int], list[int]] | None = None  # position -> (part, delta)
        self._starts: list[int] | None = None

    @property
    def ranges(self) -> list[tuple[TopicPartition, int, int]]:
        return [(batch.tp, result[0], len(index)) for batch, index, result in self._parts]

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> RecordMetadata: ...
    @overload
    def __getitem__(self, i: slice) -> list[RecordMetadata]: ...
    def __getitem__(self, i: int | slice) -> RecordMetadata | list[RecordMetadata]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError("SendBatchResult index out of range")
        part, delta = self._locate(i)
        batch, _, (base_offset, log_append_time, log_start_offset) = self._parts[part]
        offset = base_offset + delta if base_offset >= 0 else -1
        if log_append_time >= 0:
            return RecordMetadata(
                batch.tp.topic, batch.tp.partition, offset, log_append_time, 1, log_start_offset
            )
        return RecordMetadata(
            batch.tp.topic, batch.tp.partition, offset, self._timestamp, 0, log_start_offset
        )

    def _locate(self, i: int) -> tuple[int, int]:
        if all(isinstance(index, range) for _, index, _ in self._parts):
            if self._starts is None:
                self._starts = [index.start for _, index, _ in self._parts]  # type: ignore[union-attr]
            part = bisect.bisect_right(self._starts, i) - 1
            return part, i - self._starts[part]
        if self._where is None:
            part_of, delta_of = [0] * self._count, [0] * self._count
            for part, (_, index, _) in enumerate(self._parts):
                for delta, position in enumerate(index):
                    part_of[position] = part
                    delta_of[position] = delta
            self._where = (part_of, delta_of)
        return self._where[0][i], self._where[1][i]

    def __repr__(self) -> str:
        return f"<SendBatchResult {self.topic} records={self._count} batches={len(self._parts)}>"


class SendBatchFuture(Awaitable[SendBatchResult]):
    """The awaitable ``send_batch`` returns; ``await`` it for a :class:`SendBatchResult`."""

    def __init__(self, topic: str, count: int, timestamp_ms: int) -> None:
        self.topic = topic
        self.count = count
        self.timestamp_ms = timestamp_ms
        self._batches: list[tuple[ProducerBatch, range | list[int]]] = []

    def add(self, batch: ProducerBatch, index: range | list[int]) -> None:
        self._batches.append((batch, index))

    def done(self) -> bool:
        return all(batch.future.done() for batch, _ in self._batches)

    def __await__(self) -> Generator[Any, None, SendBatchResult]:
        futures = [batch.future for batch, _ in self._batches]
        if futures:
            yield from asyncio.wait(futures).__await__()
        parts = []
        for batch, index in self._batches:
            parts.append((batch, index, batch.future.result()))  # raises a failed batch's error
        return SendBatchResult(self.topic, self.count, self.timestamp_ms, parts)
