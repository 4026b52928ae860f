"""The bulk path's queueing: ``Producer.send_batch``'s records routed to partitions,
encoded into batches of up to a request's size and queued behind earlier records."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import repeat

from kafkakit.errors import UnknownTopicOrPartitionError
from kafkakit.producer.accumulator import BATCH_HEADER_SIZE, Accumulator, PartitionQueue
from kafkakit.producer.bulk_input import BulkInput, cut_batches
from kafkakit.producer.partitioner import Partitioner, StickyPartitions, partitions_for_keys
from kafkakit.producer.record_input import encode_bulk_chunk
from kafkakit.producer.send_batch_result import SendBatchFuture
from kafkakit.producer.topic_state import TopicState

__all__ = ["BulkQueueing"]


class BulkQueueing:
    """Routes and queues ``send_batch`` records for one producer (its settings and sticky state)."""

    def __init__(
        self,
        acc: Accumulator,
        sticky: StickyPartitions,
        *,
        compression: int,
        limit: int,
        buffer_memory: int,
        partitioner: Partitioner | None,
        user_partition: Callable[[TopicState, bytes | None], int],
        sticky_limit: Callable[[PartitionQueue], int],
    ) -> None:
        self._acc = acc
        self._sticky = sticky
        self._compression = compression
        self._limit = limit  # records bytes of one encoded batch: what a request carries
        self._buffer_memory = buffer_memory
        self._partitioner = partitioner
        self._user_partition = user_partition
        self._sticky_limit = sticky_limit

    async def enqueue(
        self, topic: str, state: TopicState, bulk: BulkInput, partition: int | None, result: SendBatchFuture
    ) -> None:
        """Queue every record of ``bulk`` (``result`` collects their batches)."""
        for pq, positions in self._routes(topic, state, bulk.keys, partition, len(bulk.values)):
            await self._enqueue_chunks(topic, state, pq, positions, bulk, result)

    def _routes(
        self,
        topic: str,
        state: TopicState,
        keys: list[bytes | None] | None,
        partition: int | None,
        count: int,
    ) -> Iterator[tuple[PartitionQueue | None, range | list[int]]]:
        """(partition queue, record positions) pairs; a None queue means "one sticky partition per batch"."""
        if partition is not None:
            pq = state.queues.get(partition)
            if pq is None:
                raise UnknownTopicOrPartitionError(
                    f"partition {partition} of topic {topic!r} does not exist (partitions: {state.all_partitions})"
                )
            yield pq, range(count)
            return
        if keys is None and self._partitioner is None:
            yield None, range(count)
            return
        groups: dict[int, list[int]] = {}
        for i, p in enumerate(self._partitions(topic, state, keys, count)):
            group = groups.get(p)
            if group is None:
                groups[p] = [i]
            else:
                group.append(i)
        for p, positions in groups.items():
            yield state.queues[p], positions

    def _partitions(self, topic: str, state: TopicState, keys: list[bytes | None] | None, count: int) -> list[int]:
        """Each record's partition: the user partitioner's, or Java's for keys (hashed together,
        see partitions_for_keys) and the sticky partition for the others."""
        if self._partitioner is not None:
            return [self._user_partition(state, key) for key in (keys if keys is not None else repeat(None, count))]
        sticky = state.sticky if state.sticky >= 0 else self._sticky.get(topic, state.all_partitions, state.available)
        partitions = [sticky] * count
        if keys is not None:
            keyed = [i for i, key in enumerate(keys) if key is not None]
            numbers = state.all_partitions
            placed = partitions_for_keys([keys[i] for i in keyed], len(numbers))  # type: ignore[misc]  # not None
            for i, index in zip(keyed, placed, strict=True):
                partitions[i] = numbers[index]
        return partitions

    async def _enqueue_chunks(
        self,
        topic: str,
        state: TopicState,
        pq: PartitionQueue | None,
        positions: range | list[int],
        bulk: BulkInput,
        result: SendBatchFuture,
    ) -> None:
        """Cut ``positions`` into batches of at most a request's size and queue them."""
        for index, records_size in cut_batches(positions, bulk.sizes, self._limit):
            data = encode_bulk_chunk(
                index, bulk.values, bulk.keys, bulk.header_lists, bulk.timestamp_ms, self._compression
            )
            size = records_size + BATCH_HEADER_SIZE
            reserved = min(size, self._buffer_memory)
            await self._acc.reserve(reserved)
            target = pq if pq is not None else self._next_sticky_queue(topic, state)
            batch = self._acc.append_encoded(target, data, len(index), bulk.timestamp_ms, size, reserved)
            result.add(batch, index)

    def _next_sticky_queue(self, topic: str, state: TopicState) -> PartitionQueue:
        pq = state.stick_to(self._sticky.next(topic, state.all_partitions, state.available, state.sticky))
        state.sticky_limit = self._sticky_limit(pq)
        return pq
