"""Reading one offset range on an executor: ``Consumer.fetch_range``, Arrow batches out.

This is the source's ``read(partition)``. A task knows its exact range up
front, so it reads it with :meth:`kafkakit.Consumer.fetch_range` (straight from
the leader, the next Fetch on its way while this thread decodes) and turns
each response's records into Arrow with the columnar decoder of
:mod:`kafkakit.spark.arrow`, without a Python object per Kafka record. The
asyncio client runs on the worker's background loop (see
:mod:`kafkakit.spark.runtime`); one Consumer per worker process and settings
serves every task.

Gaps: offsets that no visible record carries (transaction markers, aborted
records under read_committed, compacted-away records) are skipped, and the
range's end may fall on such an offset; that is not data loss. Data loss is
only a start below the log start offset, which fails the task unless
``failOnDataLoss`` is false.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

import pyarrow as pa
from kafkakit import Consumer, FetchedRange
from kafkakit.errors import KafkaError, OffsetOutOfRangeError
from kafkakit.spark import runtime
from kafkakit.spark.arrow import columns_to_record_batch
from kafkakit.spark.fetch_settings import FetchSettings
from kafkakit.structs import TopicPartition

log = logging.getLogger(__name__)


class DataLossError(KafkaError):
    """Records of a planned range are gone (deleted by retention) and failOnDataLoss is true."""


# -- one Consumer per worker process and settings ----------------------------------------

_consumers: dict[tuple[int, str, str, tuple[tuple[str, Any], ...]], Consumer] = {}
_consumers_lock = threading.Lock()


def _new_consumer(settings: FetchSettings) -> Consumer:
    return Consumer(
        bootstrap_servers=settings.bootstrap_servers,
        isolation_level=settings.isolation_level,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        fetch_max_bytes=settings.fetch_max_bytes,
        max_partition_fetch_bytes=settings.max_partition_fetch_bytes,
        check_crcs=settings.check_crcs,
        enable_auto_commit=False,
        **settings.security.client_kwargs(),
        **settings.connection,
    )


async def _consumer_for(settings: FetchSettings) -> Consumer:
    """A started Consumer shared by every task this Python worker runs (workers are reused)."""
    key = (
        os.getpid(),
        settings.bootstrap_servers,
        settings.isolation_level,
        tuple(sorted(settings.connection.items())) + tuple(sorted(settings.security.settings.items())),
    )
    with _consumers_lock:
        consumer = _consumers.get(key)
        fresh = consumer is None
        if consumer is None:
            consumer = _consumers[key] = _new_consumer(settings)
    if fresh:
        try:
            await consumer.start()
        except BaseException:
            with _consumers_lock:
                _consumers.pop(key, None)
            raise
    return consumer


async def _open_range(
    settings: FetchSettings, tp: TopicPartition, start: int, end: int
) -> AsyncIterator[FetchedRange]:
    consumer = await _consumer_for(settings)
    return consumer.fetch_range(tp, start, end, wait_timeout_ms=settings.poll_timeout_ms)


async def _log_bounds(settings: FetchSettings, tp: TopicPartition) -> tuple[int, int]:
    """(log start offset, end offset) of ``tp`` (the end honours the isolation level)."""
    consumer = await _consumer_for(settings)
    first = await consumer.beginning_offsets([tp])
    last = await consumer.end_offsets([tp])
    return first[tp], last[tp]


# -- the range reader -----------------------------------------------------------------------


class RangeReader:
    """Reads ``[start, end)`` of one partition as Arrow record batches."""

    def __init__(self, settings: FetchSettings, tp: TopicPartition, start: int, end: int) -> None:
        self.settings = settings
        self.tp = tp
        self.start = start
        self.end = end
        self._where = f"{tp.topic}-{tp.partition}"

    def batches(self) -> Iterator[pa.RecordBatch]:
        position = self.start
        while position < self.end:
            pieces = runtime.run(_open_range(self.settings, self.tp, position, self.end))
            try:
                for piece in _pieces(pieces):
                    batch = columns_to_record_batch(
                        piece.columns(), self.tp.topic, self.tp.partition, self.settings.include_headers
                    )
                    if batch.num_rows:
                        yield batch
                return
            except OffsetOutOfRangeError:
                log_start, log_end = runtime.run(_log_bounds(self.settings, self.tp))
                position = self.after_out_of_range(position, log_start, log_end)

    def after_out_of_range(self, position: int, log_start: int, log_end: int) -> int:
        """Where to go on after OFFSET_OUT_OF_RANGE at ``position``, given the log's bounds now."""
        if position < log_start:
            message = (
                f"records {position}..{min(log_start, self.end) - 1} of {self._where} were deleted before "
                f"they were read (log start offset {log_start})"
            )
            if self.settings.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to skip them")
            log.warning("%s; skipping them (failOnDataLoss=false)", message)
            return log_start
        if position >= log_end:
            message = (
                f"offset {position} of {self._where} is past the end of the log ({log_end}): the topic was "
                "deleted and recreated or the log truncated"
            )
            if self.settings.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to skip the range")
            log.warning("%s; skipping the rest of the range (failOnDataLoss=false)", message)
            return self.end
        return position  # in range again (a leader change): read on


def _pieces(pieces: AsyncIterator[FetchedRange]) -> Iterator[FetchedRange]:
    """The async iterator's items, each awaited on the worker's loop (closed on the loop if we stop early)."""

    async def next_piece() -> FetchedRange:
        return await anext(pieces)

    async def close() -> None:
        if isinstance(pieces, AsyncGenerator):
            await pieces.aclose()

    try:
        while True:
            try:
                yield runtime.run(next_piece())
            except StopAsyncIteration:
                return
    finally:
        runtime.run(close())


def read_range(settings: FetchSettings, tp: TopicPartition, start: int, end: int) -> Iterator[pa.RecordBatch]:
    """``read(partition)``: the visible records of ``tp`` in ``[start, end)`` as Arrow batches."""
    return RangeReader(settings, tp, start, end).batches()
