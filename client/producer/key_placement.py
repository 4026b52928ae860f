"""Keyed records whose partition is chosen later, for many keys at once.

Java's default partitioner puts a key on ``murmur2(key) % partitions``. Hashing one key
in Python costs about 3.5 us, three times the rest of ``send()``, so an application
that sends every record with a new key (a user id, an order id, a UUID) ran at a
quarter of librdkafka's rate. ``send()`` therefore parks a keyed record whose key's
partition it does not remember here, with its future, and the records are placed in
one go (:func:`~kafkakit.producer.partitioner.partition_array_for_keys`, vectorised) before
anything could observe the order of a partition's records:

- before the sender drains (``Accumulator.place_unplaced``), and before a flush, an
  abort or a failure of everything queued;
- before any other record of the same topic is queued: while records wait here, the
  topic's :class:`~kafkakit.producer.topic_state.TopicState` sends every keyed record
  here too, and the keyless and explicit-partition paths to a slow path that places
  them first (see ``TopicState.park``);
- before the topic's metadata is forgotten.

Until then a record's :class:`RecordFuture` points at a placeholder batch that never
completes; placing moves it (and any callbacks waiting on it) to the record's real
batch, so a failure stays with its partition.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np
from kafkakit.errors import KafkaError
from kafkakit.producer.accumulator import (
    HEADERS_MEMORY_OVERHEAD,
    KEY_MEMORY_OVERHEAD,
    RECORD_MEMORY_OVERHEAD,
    Accumulator,
    ProducerBatch,
)
from kafkakit.producer.partitioner import partition_array_for_keys
from kafkakit.producer.record_future import RecordFuture
from kafkakit.structs import Header, TopicPartition

if TYPE_CHECKING:
    from kafkakit.producer.topic_state import TopicState

__all__ = ["GROUPED_RECORDS_PER_PARTITION", "UnplacedKeys"]

#: Records per partition from which placing goes a partition at a time (slices of the
#: columns) rather than record by record: a partition's turn costs a few numpy calls.
GROUPED_RECORDS_PER_PARTITION = 16
#: Records placed at a time (see UnplacedKeys._place_all).
PLACING_WINDOW = 32768


class UnplacedKeys:
    """One topic's keyed records waiting for their partition, in send order (as columns).

    ``Producer.send`` appends to the columns itself (a method call cost a tenth of its
    path). It also hands a parked record the future of the send before last when nothing
    else holds it, as on its batch path, and sets that future's entry here to None: parked
    futures all live until placed, and building a new one for each record cost 15% in the
    young-generation collections they went through.
    """

    __slots__ = ("state", "acc", "placeholder", "keys", "values", "stamps", "sizes", "headers", "futures")

    def __init__(self, topic: str, state: TopicState, acc: Accumulator) -> None:
        self.state = state
        self.acc = acc
        # What the records' futures point at until placed: its future never completes.
        self.placeholder = ProducerBatch(
            TopicPartition(topic, -1), -1, time.monotonic(), asyncio.get_running_loop().create_future()
        )
        self._empty()

    def _empty(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[Any] = []
        self.stamps: array[int] = array("q")  # nanoseconds, as in the batches (STAMPS_PER_MS)
        self.sizes: list[int] = []  # each record's estimated size in a batch (send()'s ``size``)
        self.headers: dict[int, Sequence[Header]] = {}  # by index, only the records that have them
        self.futures: list[RecordFuture | None] = []  # None: nothing holds the record's future

    def place(self) -> None:
        """Append every parked record to its partition's open batch, in send order."""
        state = self.state
        state.unpark(self)
        self.acc.unplaced.remove(self)
        self._place_all()
        self._move_waiters()
        if self.placeholder.waiters is None:  # no callback ever waited on the placeholder's future
            self._empty()
            state.spare_unplaced = self  # the next park takes it: a trickle of keys parks one at a time

    def _place_all(self) -> None:
        """In windows of PLACING_WINDOW records, in send order: the temporary arrays and
        lists of a window (about 100 B a record) stay a constant, not a share of the buffer."""
        state = self.state
        queues = state.ordered_queues
        for first in range(0, len(self.keys), PLACING_WINDOW):
            keys = self.keys[first : first + PLACING_WINDOW]
            by_partition = partition_array_for_keys(keys, len(queues))  # (a one-partition topic never parks)
            state.remember(keys, by_partition)
            if len(keys) < GROUPED_RECORDS_PER_PARTITION:  # a trickle: numpy's set-up would cost more
                self._place_one_by_one(first, by_partition.tolist())
                continue
            counts = np.bincount(by_partition, minlength=len(queues))
            used = np.flatnonzero(counts)
            if len(keys) >= GROUPED_RECORDS_PER_PARTITION * len(used):
                self._place_grouped(first, by_partition, counts, used.tolist())
            else:
                self._place_one_by_one(first, by_partition.tolist())

    def _place_one_by_one(self, first: int, partitions: list[int]) -> None:
        """Each record of the window from ``first`` in turn (few records per partition:
        grouping costs more)."""
        queues = self.state.ordered_queues
        limit = self.acc.batch_limit
        new_batch = self.acc.new_batch
        keys, values, stamps, sizes = self.keys, self.values, self.stamps, self.sizes
        futures, headers = self.futures, self.headers
        index = first
        try:
            for index, partition in enumerate(partitions, first):
                pq = queues[partition]
                batch = pq.open
                size = sizes[index]
                if batch is None or batch.size + size > limit:
                    batch = new_batch(pq)
                batch_values = batch.values
                delta = len(batch_values)
                batch_values.append(values[index])
                batch.stamps.append(stamps[index])
                if headers and index in headers:
                    batch.add_key_and_headers(delta, keys[index], headers[index])
                else:  # ProducerBatch.add_key_and_headers, inlined
                    batch_keys = batch.keys
                    if batch_keys is None:
                        batch_keys = batch.keys = []
                    if len(batch_keys) != delta:
                        batch.pad_keys(delta)
                    batch_keys.append(keys[index])
                batch.size += size
                future = futures[index]
                if future is not None:
                    future._batch = batch
                    future._delta = delta
        except BaseException as exc:
            self._fail(range(index, len(keys)), exc)
            raise

    def _place_grouped(self, first: int, partitions: Any, counts: Any, used: list[int]) -> None:
        """The window from ``first`` a partition's records at a time, each batch's share
        appended by slices of the columns."""
        order = np.argsort(partitions, kind="stable")  # send order within a partition
        ends = np.cumsum(counts).tolist()
        counts = counts.tolist()
        sizes = np.array(self.sizes[first : first + len(order)], dtype=np.int64)
        cumulative = np.cumsum(sizes[order])  # bytes up to each record, in order
        # The stamps in placing order, gathered by numpy (a copy: no view of the column stays).
        stamps = np.frombuffer(self.stamps, dtype=np.int64)[first : first + len(order)][order]
        order = (order + first).tolist()  # indexes into the columns
        done = 0  # records of ``order`` placed
        try:
            for partition in used:
                start, end = ends[partition] - counts[partition], ends[partition]
                while start < end:
                    start = done = self._place_chunk(partition, order, stamps, cumulative, start, end)
        except BaseException as exc:
            self._fail(chain(order[done:], range(first + len(order), len(self.keys))), exc)
            raise

    def _place_chunk(self, partition: int, order: list[int], stamps: Any, cumulative: Any, start: int, end: int) -> int:
        """Append records ``order[start:end]`` (one partition's; ``stamps``: the window's in
        the order of ``order``) to its open batch while they fit, opening one when needed;
        returns where the next chunk starts."""
        pq = self.state.ordered_queues[partition]
        limit = self.acc.batch_limit
        before = int(cumulative[start - 1]) if start else 0
        batch = pq.open
        if batch is None or batch.size + int(cumulative[start]) - before > limit:
            batch = self.acc.new_batch(pq)
        # Records up to the last whose running size still fits (at least one: an oversized record opens its own batch).
        stop = int(np.searchsorted(cumulative[start:end], before + limit - batch.size, side="right")) + start
        stop = max(stop, start + 1)
        chunk = order[start:stop]
        take = itemgetter(*chunk) if len(chunk) > 1 else _one(chunk[0])
        first = len(batch.values)
        batch.values.extend(take(self.values))
        batch.stamps.frombytes(stamps[start:stop].tobytes())
        deltas = range(first, first + len(chunk))
        batch_keys = batch.keys
        if batch_keys is None:
            batch_keys = batch.keys = []
        if len(batch_keys) != first:
            batch.pad_keys(first)
        batch_keys += take(self.keys)
        headers = self.headers
        if headers:
            for delta, index in zip(deltas, chunk, strict=True):
                if index in headers:
                    batch.add_key_and_headers(delta, None, headers[index])
        batch.size += int(cumulative[stop - 1]) - before
        futures = take(self.futures)
        if futures.count(None) < len(futures):  # most are None when the application drops them (see Producer.send)
            for future, delta in zip(futures, deltas, strict=True):
                if future is not None:
                    future._batch = batch
                    future._delta = delta
        return stop

    def _fail(self, unplaced: Iterable[int], exc: BaseException) -> None:
        """Placing failed (a bug, or no memory): the records not placed fail, and give back
        their buffer memory."""
        sizes, headers = self.sizes, self.headers
        unplaced = list(unplaced)
        held = sum(sizes[index] for index in unplaced) + len(unplaced) * (RECORD_MEMORY_OVERHEAD + KEY_MEMORY_OVERHEAD)
        held += sum(HEADERS_MEMORY_OVERHEAD for index in unplaced if index in headers)
        self.acc.release(held)
        self._move_waiters()
        self.placeholder.future.set_exception(KafkaError(f"placing keyed records by partition failed: {exc!r}"))

    def _move_waiters(self) -> None:
        """Futures that got callbacks while parked now wait on their real batch (those not
        placed stay, for the placeholder's failure)."""
        placeholder = self.placeholder
        waiters = placeholder.waiters
        if not waiters:
            return
        kept = []
        for future in waiters:
            if future._batch is placeholder:
                kept.append(future)
            else:
                future._batch.add_waiter(future)
        placeholder.waiters = kept

    def __len__(self) -> int:
        return len(self.values)


def _one(index: int) -> Callable[[Sequence[Any]], tuple[Any]]:
    """``itemgetter`` of one index, as a 1-tuple (``itemgetter(i)`` returns the item itself)."""
    return lambda column: (column[index],)
